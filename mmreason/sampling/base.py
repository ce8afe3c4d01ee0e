"""The prompt sampler interface: which dataset indices the next step trains on, and everything the step asks
of a sampler, declared here rather than probed.

Samplers are deterministic given their state: ``state_dict()`` goes into every checkpoint so a resumed
run draws the same prompts. All processes hold the same sampler and draw the same global batch; each
process then takes its own slice (a prompt's whole group stays on one process).

What the trainer asks every sampler (``BaseSampler`` gives the defaults of a sampler that does not adapt):

    next_indices(n)                       the next n dataset indices
    observe(indices, rewards, group_ids, completions=None)
                                          the step's feedback (rewards [N], the rows' dataset indices, texts)
    generations(indices, budget)          rollouts per drawn prompt, or None for ``budget`` each (Rollout-GDRO)
    sizes_groups                          whether ``generations`` may size groups (checked at start-up)
    refresh_due(step)                     whether to re-score prompts from fresh rollouts before ``step`` (VAS)
    refresh_indices() / refresh(scores)   those prompts, and their fresh scores
    state_dict() / load_state_dict(state)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class PromptSampler(Protocol):
    sizes_groups: bool

    def next_indices(self, n: int) -> list[int]: ...

    def observe(
        self,
        indices: list[int],
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        completions: Sequence[str] | None = None,
    ) -> None:
        """Training feedback (per-trajectory rewards of the step, and their texts), for adaptive samplers."""

    def generations(self, indices: list[int], budget: int) -> list[int] | None: ...

    def refresh_due(self, step: int) -> bool: ...

    def refresh_indices(self) -> list[int]: ...

    def refresh(self, scores: Mapping[int, tuple[Sequence[float], Sequence[str]]]) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class BaseSampler:
    """The answers of a sampler that does not adapt: it ignores feedback, sizes no group, never refreshes."""

    sizes_groups = False

    def observe(
        self,
        indices: list[int],
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        completions: Sequence[str] | None = None,
    ) -> None:
        return None

    def generations(self, indices: list[int], budget: int) -> list[int] | None:
        return None

    def refresh_due(self, step: int) -> bool:
        return False

    def refresh_indices(self) -> list[int]:
        return []

    def refresh(self, scores: Mapping[int, tuple[Sequence[float], Sequence[str]]]) -> None:
        return None
