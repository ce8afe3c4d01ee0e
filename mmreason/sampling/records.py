"""The records of one step's draw (shape letters: N trajectories, K rewards): a drawn prompt (``Drawn``) and the
scored groups a draw gave (``Rollouts``). The trainer's step builds them (mmreason/train/step.py); the samplers'
feedback and the within-step methods of this room (``within_step.py``) read and return them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Sample, Trajectory


@dataclass
class Drawn:
    """One prompt of this step: its slot in the step's global batch (the group id: unique even when a
    sampler draws the same prompt twice), the dataset index the sampler drew, and its model inputs."""

    slot: int
    index: int
    prompt: PromptInputs

    @property
    def key(self) -> str:  # names the group's sampling seed; independent of how prompts split over ranks
        return f"{self.slot}:{self.prompt.sample.id}"


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
    metrics: dict[str, float] = field(default_factory=dict)  # the within-step method's, dynamic sampling's

    def group_rows(self) -> dict[int, list[int]]:
        """Group id (slot) -> its rows, in order (a group without trajectories is absent)."""
        rows: dict[int, list[int]] = {}
        for i, t in enumerate(self.trajectories):
            rows.setdefault(t.group_id, []).append(i)
        return rows

    def totals(self, missing: str) -> list[float]:
        """The rows' total rewards ``[N]`` under ``reward_missing`` (NaN: not scored)."""
        return self.batch.total(missing).tolist()

    def with_metrics(self, metrics: dict[str, float]) -> Rollouts:
        """A copy with ``metrics`` added to its own."""
        return dataclasses.replace(self, metrics={**self.metrics, **metrics})


def no_rewards() -> RewardBatch:
    """The reward batch of a round with no trajectories."""
    return RewardBatch(torch.zeros(0, 0), [], torch.zeros(0))


def merge_groups(got: Rollouts, new: Rollouts) -> Rollouts:
    """``got`` with each group of ``new`` (by slot) in place of its own: its prompt, trajectories, samples and
    reward rows. Groups keep ``got``'s order; reward columns are aligned by name (``new`` was scored last, so it
    names them all); each error record is kept once; ``got``'s counts and metrics are kept."""
    redone = {d.slot: d for d in new.prompts}
    old_rows, new_rows = got.group_rows(), new.group_rows()
    trajectories: list[Trajectory] = []
    samples: list[Sample] = []
    parts: list[RewardBatch] = []
    for d in got.prompts:
        source, rows = (new, new_rows.get(d.slot, [])) if d.slot in redone else (got, old_rows.get(d.slot, []))
        trajectories += [source.trajectories[i] for i in rows]
        samples += [source.samples[i] for i in rows]
        parts.append(source.batch.take(rows))
    merged = RewardBatch.concat([*parts, new.batch.take([])])
    batch = RewardBatch(merged.values, merged.names, merged.weights, [*got.batch.errors, *new.batch.errors])
    prompts = [redone.get(d.slot, d) for d in got.prompts]
    return dataclasses.replace(got, prompts=prompts, trajectories=trajectories, samples=samples, batch=batch)
