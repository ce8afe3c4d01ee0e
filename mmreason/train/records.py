"""Each trajectory's task, by name and as an index (the step's table and the update read them). The records of a
draw (``Drawn``, ``Rollouts``) are in mmreason/sampling/records.py."""

from __future__ import annotations

import torch

from mmreason.types import Sample


def task_names(samples: list[Sample], task_key: str | None, default: str) -> list[str]:
    """Name each trajectory's task (the ``task_key`` column, else the sample's task, else ``default``)."""
    return [str((s.meta.get(task_key) if task_key else None) or s.task or default) for s in samples]


def task_index(names: list[str]) -> torch.Tensor:
    order = {name: i for i, name in enumerate(sorted(set(names)))}
    return torch.tensor([order[n] for n in names], dtype=torch.long)
