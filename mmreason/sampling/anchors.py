"""Anchors for all-fail groups: R³ replay of past successes (arXiv 2601.19620) or DaGRPO's reference (arXiv 2512.06337).

Sources (our readings of both abstracts, docs/methods/within-step.md#anchor):
"Replay, Reflection, and Ranking Rewards" (R³; Jiang et al., arXiv 2601.19620): when a group's advantages collapse,
good past trajectories of the same prompt are recalled into the group, their stored log-probs making an importance
weight possible. "Distinctiveness-Aware GRPO" (DaGRPO; Xie et al., arXiv 2512.06337): for hard prompts with no
positive sample, high-quality anchor responses are added (off-policy augmentation).

    all_fail(g)  = every total reward of group g <= threshold          (NaN rows ignored; an all-NaN group is not)
    source "replay":    the most recent stored success of the prompt (its completion tokens and, when the sampler
                        returned them, its log-probs: the trainer's truncated IS then weighs it, rollout_correction)
    source "reference": the pack's target text of the sample (as SFT trains on it), cut at max_completion_length
    the group's last rollout is replaced by the anchor (the group keeps its size); the anchor is scored like a rollout

``source: reflect`` is R³'s in-context reflection: an all-fail group is rolled out again with a past failure of the
prompt in its prompt (the failures are kept in the same buffer, under ``-1 - index``), and the new group replaces
it (on-policy: the step trains on the completions the reflective prompt produced).

Inside a step (``regenerate``) every step's successes go into the replay buffer. What is ours: replacing one
rollout rather than adding one, the threshold, the buffer (the last ``buffer_size`` successes per prompt, kept in
memory, not in checkpoints), single-turn groups only (an episode is skipped), and no IS weight for a reference
answer (it has no behaviour log-probs). R³'s entropy-ranking reward is the ``r3_rank`` loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.chat_turns import turn_end
from mmreason.sampling.records import Drawn, Rollouts, merge_groups
from mmreason.sampling.refine import refinement_sample
from mmreason.sampling.within_step import StepPhases
from mmreason.types import Sample, Trajectory

SOURCES = ("replay", "reference", "reflect")


@dataclass
class StoredSuccess:
    """A past successful completion of one prompt: its tokens, text and (when the sampler gave them) log-probs."""

    token_ids: torch.Tensor  # [L] the completion tokens
    text: str
    logprobs: torch.Tensor | None = None  # [L] the sampler's log-probs of those tokens


def all_fail(totals: Sequence[float], threshold: float) -> bool:
    """True when every scored total is <= threshold (at least one scored; NaN rows are not scored)."""
    scored = [t for t in totals if not math.isnan(t)]
    return bool(scored) and all(t <= threshold for t in scored)


class AnchorBuffer:
    """The last ``size`` successes of each prompt (dataset index), newest last."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"anchor.buffer_size must be >= 1, got {size}")
        self.size = size
        self.items: dict[int, list[StoredSuccess]] = {}

    def add(self, index: int, success: StoredSuccess) -> None:
        kept = self.items.setdefault(int(index), [])
        kept.append(success)
        del kept[: -self.size]

    def latest(self, index: int) -> StoredSuccess | None:
        kept = self.items.get(int(index))
        return kept[-1] if kept else None

    def __len__(self) -> int:
        return sum(len(v) for v in self.items.values())


# ---- inside a step ------------------------------------------------------------------------------------------


def regenerate(phases: StepPhases, got: Rollouts) -> Rollouts:
    """``got`` with an anchor in each all-fail group that has one (``source: reflect``: ``reflect``)."""
    run, cfg = phases.run, phases.run.cfg.anchor
    if run.anchor_buffer is None:
        run.anchor_buffer = AnchorBuffer(cfg.buffer_size)
    if cfg.source == "reflect":
        return reflect(phases, got)
    total, rows = got.totals(run.cfg.reward_missing), got.group_rows()
    multiturn = run.pack.make_environment is not None and run.cfg.rollout.max_turns > 1
    failing = [d for d in got.prompts if d.slot in rows and all_fail([total[i] for i in rows[d.slot]], cfg.threshold)]
    anchored = []
    for d in [] if multiturn else failing:
        anchor = anchor_trajectory(run, d, got.trajectories[rows[d.slot][-1]])
        if anchor is not None:
            anchored.append((d, anchor))
    out = merge_groups(got, _anchored_groups(phases, got, anchored)) if anchored else got
    remember_successes(run, out)
    return out.with_metrics(
        {
            "anchor/all_fail_groups": float(len(failing)),
            "anchor/added": float(len(anchored)),
            "anchor/buffer": float(len(run.anchor_buffer)),
        }
    )


def _anchored_groups(phases: StepPhases, got: Rollouts, anchored: list[tuple[Drawn, Trajectory]]) -> Rollouts:
    """The anchored groups: each group's rows with its last rollout replaced by its anchor, which is scored."""
    drawn = [d for d, _ in anchored]
    anchor_samples, scored = phases.score(phases.run, drawn, [a for _, a in anchored])
    rows = got.group_rows()
    trajectories: list[Trajectory] = []
    samples: list[Sample] = []
    parts: list[RewardBatch] = []
    for k, (d, anchor) in enumerate(anchored):
        kept = rows[d.slot][:-1]
        trajectories += [*(got.trajectories[i] for i in kept), anchor]
        samples += [*(got.samples[i] for i in kept), anchor_samples[k]]
        parts += [got.batch.take(kept), scored.take([k])]
    merged = RewardBatch.concat([*parts, scored.take([])])
    batch = RewardBatch(merged.values, merged.names, merged.weights, list(scored.errors))
    return Rollouts(drawn, trajectories, samples, batch)


def anchor_trajectory(run: Any, d: Drawn, replaced: Trajectory) -> Trajectory | None:
    """The anchor of group ``d`` in the shape of a rollout of its prompt, or None when there is none."""
    cfg, prompt = run.cfg.anchor, d.prompt
    if cfg.source == "replay":
        stored = run.anchor_buffer.latest(d.index)
        if stored is None:
            return None
        completion, text, logprobs = stored.token_ids, stored.text, stored.logprobs
    else:
        text = run.pack.target_text(prompt.sample)  # what rewards score; the tokens end the turn, as SFT's
        ended = text + turn_end(run.processor).strip()
        completion = run.processor.tokenizer(ended, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        completion, logprobs = completion[: run.cfg.rollout.max_completion_length], None
    ids = torch.cat([prompt.input_ids, completion])
    mask = torch.zeros_like(ids)
    mask[prompt.length :] = 1
    rollout_lp = None
    if logprobs is not None:
        rollout_lp = torch.cat([torch.zeros(prompt.length), logprobs.float()])
    return Trajectory(
        replaced.sample_id,
        replaced.group_id,
        ids,
        mask,
        prompt.length,
        text,
        mm_token_type_ids=torch.cat([prompt.mm_token_type_ids, torch.zeros_like(completion)]),
        visual=replaced.visual,
        reward_info={"anchor": run.cfg.anchor.source},
        rollout_logprobs=rollout_lp,
    )


def remember_successes(run: Any, got: Rollouts) -> None:
    """Every rollout (not an anchor) with total reward above the threshold joins its prompt's replay buffer."""
    index_of = {d.slot: d.index for d in got.prompts}
    for t, r in zip(got.trajectories, got.totals(run.cfg.reward_missing)):
        if r > run.cfg.anchor.threshold and "anchor" not in t.reward_info:
            start = t.prompt_length
            lp = None if t.rollout_logprobs is None else t.rollout_logprobs[start:].clone()
            run.anchor_buffer.add(
                index_of[t.group_id], StoredSuccess(t.token_ids[start:].clone(), t.completion_text, lp)
            )


def reflect(phases: StepPhases, got: Rollouts) -> Rollouts:
    """R³'s in-context reflection: an all-fail group is rolled out again with a failed attempt of the prompt in
    its prompt (the most recent one kept from an earlier step, else this group's first)."""
    run, cfg = phases.run, phases.run.cfg.anchor
    total = got.totals(run.cfg.reward_missing)

    def with_failure(d: Drawn, rows: list[int]) -> Sample | None:
        if not rows or not all_fail([total[i] for i in rows], cfg.threshold):
            return None
        past = run.anchor_buffer.latest(-1 - d.index)  # failures are kept under -1 - index
        failure = past.text if past is not None else got.trajectories[rows[0]].completion_text
        return refinement_sample(d.prompt.sample, failure, cfg.reflect_template)

    built = phases.rebuilt(got, with_failure)
    index_of = {d.slot: d.index for d in got.prompts}
    for t, r in zip(got.trajectories, total):  # this step's failures are the next steps' reflections
        if r <= cfg.threshold:
            run.anchor_buffer.add(
                -1 - index_of[t.group_id], StoredSuccess(t.token_ids[t.prompt_length :].clone(), t.completion_text)
            )
    out = phases.redone(got, built)
    return (out if out is not None else got).with_metrics(
        {
            "anchor/all_fail_groups": float(len(built)),
            "anchor/added": 0.0,
            "anchor/reflected": float(len(built)) if out is not None else 0.0,
            "anchor/buffer": float(len(run.anchor_buffer)),
        }
    )
