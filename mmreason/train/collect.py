"""The records of one step's rollouts, and DAPO dynamic sampling's choice of the groups to keep.

A round is one draw of prompts, rolled out and scored (``grpo.draw_round``). Without dynamic sampling a step is
one round of ``prompts_per_step`` prompts. With it (DAPO, arXiv 2503.14476 §3.2) groups whose total rewards are
all equal carry no gradient, so the step draws further rounds (at most ``algorithm.dynamic_sampling_max_draws``
extra draws; ``grpo.dynamic_sampling``) until it holds ``prompts_per_step`` groups with signal. It then keeps
exactly ``prompts_per_step`` groups per process (``keep_groups``): those with signal first, in draw order, then
zero-signal ones if the cap was reached (they stay in the batch with advantage 0 and leave the loss). Every
process draws the same global batches and the decision to draw again is taken by all processes together, so
ranks keep the same sampler state and batch shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.train.records import Drawn
from mmreason.types import Sample, Trajectory


@dataclass
class Rollouts:
    """A step's scored rollouts (rows of ``batch`` = trajectories): one round (a draw of prompts, rolled out
    and scored), or the groups dynamic sampling kept from several."""

    prompts: list[Drawn]  # the groups' prompts
    trajectories: list[Trajectory]
    samples: list[Sample]  # one per trajectory
    batch: RewardBatch
    extra_draws: int = 0  # further prompt batches drawn by dynamic sampling
    discarded_groups: int = 0  # groups drawn, rolled out and scored, then not trained on
    metrics: dict[str, float] = field(default_factory=dict)  # difficulty-aware augmentation's, dynamic sampling's


def no_rewards() -> RewardBatch:
    """The reward batch of a round with no trajectories."""
    return RewardBatch(torch.zeros(0, 0), [], torch.zeros(0))


def group_signal(got: Rollouts, missing: str) -> dict[int, bool]:
    """Group id -> whether its total rewards vary (DAPO's filter, ``rl.dynamic_sampling_filter``)."""
    from mmreason import rl

    group_ids = torch.tensor([t.group_id for t in got.trajectories])
    keep = rl.dynamic_sampling_filter(got.batch.total(missing), group_ids).keep.tolist()
    return {t.group_id: k for t, k in zip(got.trajectories, keep)}


def signal_groups(rounds: list[Rollouts], missing: str) -> int:
    """Groups whose rewards vary, over the step's rounds."""
    return sum(sum(group_signal(r, missing).values()) for r in rounds)


def keep_groups(rounds: list[Rollouts], prompts_per_step: int, missing: str, extra: int) -> Rollouts:
    """``prompts_per_step`` groups: those with signal first, in draw order, then zero-signal ones."""
    flat = []
    for r in rounds:
        varies = group_signal(r, missing)
        for d in r.prompts:
            flat.append((d, varies.get(d.slot, False)))
    ordered = [d for d, v in flat if v] + [d for d, v in flat if not v]
    kept = {d.slot for d in ordered[:prompts_per_step]}
    batches, trajectories, samples = [], [], []
    for r in rounds:
        rows = [i for i, t in enumerate(r.trajectories) if t.group_id in kept]
        trajectories += [r.trajectories[i] for i in rows]
        samples += [r.samples[i] for i in rows]
        batches.append(r.batch.take(rows))
    prompts = [d for r in rounds for d in r.prompts if d.slot in kept]
    return Rollouts(prompts, trajectories, samples, RewardBatch.concat(batches), extra, len(flat) - len(kept))
