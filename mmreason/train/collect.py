"""DAPO dynamic sampling's choice of the groups to keep over a step's rounds (``Rollouts``, sampling/records.py).

A round is one draw of prompts, rolled out and scored (``step.draw_round``). Without dynamic sampling a step is
one round of ``prompts_per_step`` prompts. With it (DAPO, arXiv 2503.14476 §3.2) groups whose total rewards are
all equal carry no gradient, so the step draws further rounds (at most ``algorithm.dynamic_sampling_max_draws``
extra draws; ``step.dynamic_sampling``) until it holds ``prompts_per_step`` groups with signal. It then keeps
exactly ``prompts_per_step`` groups per process (``keep_groups``): those with signal first, in draw order, then
zero-signal ones if the cap was reached (they stay in the batch with advantage 0 and leave the loss). Every
process draws the same global batches and the decision to draw again is taken by all processes together, so
ranks keep the same sampler state and batch shape.
"""

from __future__ import annotations

import torch

from mmreason import rl
from mmreason.rewarding.records import RewardBatch
from mmreason.sampling.records import Rollouts


def group_signal(got: Rollouts, missing: str) -> dict[int, bool]:
    """Map group id -> whether its total rewards vary (DAPO's filter, ``rl.dynamic_sampling_filter``)."""
    group_ids = torch.tensor([t.group_id for t in got.trajectories])
    keep = rl.dynamic_sampling_filter(got.batch.total(missing), group_ids).keep.tolist()
    return {t.group_id: k for t, k in zip(got.trajectories, keep)}


def signal_groups(rounds: list[Rollouts], missing: str) -> int:
    """Return the groups whose rewards vary, over the step's rounds."""
    return sum(sum(group_signal(r, missing).values()) for r in rounds)


def keep_groups(rounds: list[Rollouts], prompts_per_step: int, missing: str, extra: int) -> Rollouts:
    """Keep ``prompts_per_step`` groups: those with signal first, in draw order, then zero-signal ones."""
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
