"""Difficulty-aware augmentation inside a step: plan per group, rebuild the augmented prompts, regenerate.

The plan of each group is taken from its rewards before the group joins the FIFO (``DifficultyAugmenter.plan``
then ``observe``; mmreason/sampling/difficulty.py). An augmented group's G rollouts, samples and reward rows are
replaced by those of the augmented prompt, rolled out under the group's own seed; a prompt that cannot be
rebuilt (its media fail) keeps its original group. Each process keeps its own FIFO (of the groups it rolled
out) and best traces (of its prompts); a checkpoint holds every process's (``augment_by_rank``) and a resumed
process takes back its own.
"""

from __future__ import annotations

from mmreason.rewarding.records import RewardBatch
from mmreason.train.records import Drawn
from mmreason.types import Sample, Trajectory


def with_every_rank(accelerator, state: dict) -> dict:
    """``state`` plus ``augment_by_rank``: every process's augmentation state, gathered (``augment`` stays this
    process's, the main one's in the file). A collective when more than one process runs: all call it."""
    if "augment" not in state:
        return state
    if accelerator.num_processes == 1:
        return {**state, "augment_by_rank": [state["augment"]]}
    from accelerate.utils import gather_object

    return {**state, "augment_by_rank": gather_object([state["augment"]])}


def own_state(state: dict, process_index: int) -> dict | None:
    """This process's augmentation state in a checkpoint's trainer state (None: the checkpoint has none for it,
    e.g. a run resumed on more processes than saved it: that process starts with an empty FIFO)."""
    by_rank = state.get("augment_by_rank")
    if by_rank is None:  # a checkpoint written before states were kept per process
        return state.get("augment")
    return by_rank[process_index] if process_index < len(by_rank) else None


def augment_groups(
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
    """(prompts, trajectories, samples, batch, metrics) after regenerating the groups the augmenter picks.

    ``build_sample(run, sample) -> PromptInputs | None`` builds one augmented prompt (None: skipped, counted).
    """
    aug = run.augmenter
    total = batch.total(run.cfg.reward_missing)  # [N]
    plans, replaced = [], {}
    for d in prompts:
        rows = [i for i, t in enumerate(trajectories) if t.group_id == d.slot]
        rewards = [float(total[i]) for i in rows if total[i] == total[i]]
        plan = aug.plan(d.prompt.sample, rewards, step) if rewards else None
        if rewards:
            aug.observe(d.prompt.sample.id, rewards, [trajectories[i].completion_text for i in rows])
        plans.append(plan)
        if plan is not None:
            prompt = build_sample(run, aug.apply(d.prompt.sample, plan))
            if prompt is not None:
                replaced[d.slot] = Drawn(d.slot, d.index, prompt)
            else:
                plans[-1] = None
    metrics = aug.summary(plans)
    if not replaced:
        return prompts, trajectories, samples, batch, metrics
    new = list(replaced.values())
    new_trajs = roll_out(run, new, step)
    if not new_trajs:
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
