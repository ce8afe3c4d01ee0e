"""The prompt sampler interface: which dataset indices the next step trains on.

Samplers are deterministic given their state: ``state_dict()`` goes into every checkpoint so a resumed
run draws the same prompts. All processes hold the same sampler and draw the same global batch; each
process then takes its own slice (a prompt's whole group stays on one process).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class PromptSampler(Protocol):
    def next_indices(self, n: int) -> list[int]: ...

    def observe(self, indices: list[int], rewards: torch.Tensor, group_ids: torch.Tensor) -> None:
        """Training feedback (per-trajectory rewards of the step), for adaptive samplers."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...
