"""Typed records passed between the GRPO loop's phases (shape letters: N trajectories, K rewards)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Sample


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


# ---- phases -------------------------------------------------------------------------------------


def task_names(samples: list[Sample], task_key: str | None, default: str) -> list[str]:
    """Each trajectory's task (the ``task_key`` column, else the sample's task, else ``default``)."""
    return [str((s.meta.get(task_key) if task_key else None) or s.task or default) for s in samples]


def task_index(names: list[str]) -> torch.Tensor:
    order = {name: i for i, name in enumerate(sorted(set(names)))}
    return torch.tensor([order[n] for n in names], dtype=torch.long)
