"""iGRPO inside a step (mmreason/sampling/refine.py): the scored groups are drafts; each prompt is rebuilt with
its best draft appended and rolled out again, and the refinements replace the drafts in the step.

A group whose draft rewards are all NaN, or whose refinement prompt cannot be built (too long, broken media),
keeps its drafts as they are (counted in ``refine/kept_drafts``). Refinements roll out under the group's own
seed, like the augmented groups of ``train/augment.py``.
"""

from __future__ import annotations

import math

from mmreason.rewarding.records import RewardBatch
from mmreason.sampling.refine import best_draft, refinement_sample
from mmreason.train.records import Drawn
from mmreason.types import Sample, Trajectory


def refine_groups(
    run,
    step: int,
    prompts: list[Drawn],
    trajectories: list[Trajectory],
    samples: list[Sample],
    batch: RewardBatch,
    build_sample,
    roll_out,
    score,
):
    """(prompts, trajectories, samples, batch, metrics) with every refinable group's drafts replaced by its
    refinements. ``build_sample(run, sample) -> PromptInputs | None`` builds one refinement prompt."""
    cfg = run.cfg.refine
    total = batch.total(run.cfg.reward_missing).tolist()  # [N]
    replaced: dict[int, Drawn] = {}
    best_rewards: list[float] = []
    for d in prompts:
        rows = [i for i, t in enumerate(trajectories) if t.group_id == d.slot]
        k = best_draft([total[i] for i in rows], [trajectories[i].completion_text for i in rows]) if rows else None
        if k is None:
            continue
        draft = trajectories[rows[k]]
        prompt = build_sample(
            run, refinement_sample(d.prompt.sample, draft.completion_text, cfg.template, cfg.max_draft_chars)
        )
        if prompt is not None:
            replaced[d.slot] = Drawn(d.slot, d.index, prompt)
            best_rewards.append(total[rows[k]])
    drafts = [x for x in total if not math.isnan(x)]
    metrics = {
        "refine/draft_reward_mean": math.fsum(drafts) / len(drafts) if drafts else 0.0,
        "refine/best_draft_reward_mean": math.fsum(best_rewards) / len(best_rewards) if best_rewards else 0.0,
        "refine/kept_drafts": float(len(prompts) - len(replaced)),
    }
    if not replaced:
        return prompts, trajectories, samples, batch, metrics
    new = list(replaced.values())
    new_trajs = roll_out(run, new, step)
    if not new_trajs:
        metrics["refine/kept_drafts"] = float(len(prompts))
        return prompts, trajectories, samples, batch, metrics
    new_samples, new_batch = score(run, new, new_trajs)
    keep = [i for i, t in enumerate(trajectories) if t.group_id not in replaced]
    out_prompts = [replaced.get(d.slot, d) for d in prompts]
    merged = RewardBatch.concat([batch.take(keep), new_batch])
    return (
        out_prompts,
        [trajectories[i] for i in keep] + new_trajs,
        [samples[i] for i in keep] + new_samples,
        merged,
        metrics,
    )
