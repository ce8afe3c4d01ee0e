"""The trainer side of a loss's extra inputs: one small interface (``InputProvider``) for what a method computes
before the update, hands each mini-batch's ``LossInputs`` and keeps between steps (saved with the checkpoint).

A loss declares the extra fields it reads (``LossContract.reads``); the trainer builds the provider of each such
field (``mmreason/train/loss_extras.py``) and calls it at four points of the update:

    before_update(view)       once, without gradient: e.g. DCPO's tempered forward; returns metrics
    inputs(k)                 the fields of mini-batch k (``LossInputs`` field name -> value)
    after_minibatch(k, ...)   after mini-batch k's forward on the first pass: e.g. GEPO's group entropies
    after_update(entropy)     once the optimizer steps are done (not after a skipped update)

``state_dict`` / ``load_state_dict`` carry what it keeps across steps; its keys sit in the trainer state of every
checkpoint (``prev_entropy``, ``entropy_history``: the keys earlier checkpoints used).

A provider here stays pure tensor code: the trainer's ``view`` gives it the behaviour policy's log-probs of each
mini-batch (``view.logprobs(k, temperature=...)``) and nothing of the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

from torch import Tensor


class UpdateView(Protocol):
    """What the update shows a provider before it starts: its mini-batches' count and behaviour log-probs."""

    count: int  # mini-batches of the update, in the order ``inputs(k)`` is asked for

    def logprobs(self, k: int, *, temperature: float | None = None) -> Tensor:
        """Log-probs ``[n, T]`` of mini-batch ``k`` under the policy that sampled it, no gradient."""
        ...


class InputProvider(Protocol):
    """The trainer side of one or more extra ``LossInputs`` fields (``provides``)."""

    provides: ClassVar[tuple[str, ...]]

    def before_update(self, view: Any) -> dict[str, float]: ...

    def inputs(self, k: int) -> dict[str, Any]: ...

    def after_minibatch(self, k: int, entropy: Tensor, mask: Tensor, group_ids: Tensor) -> None: ...

    def after_update(self, entropy: float | None) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class Provider:
    """A provider that does nothing at any point: subclasses override the points they use."""

    provides: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def before_update(self, view: Any) -> dict[str, float]:
        return {}

    def inputs(self, k: int) -> dict[str, Any]:
        return {}

    def after_minibatch(self, k: int, entropy: Tensor, mask: Tensor, group_ids: Tensor) -> None:
        return None

    def after_update(self, entropy: float | None) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


class PreviousEntropy(Provider):
    """``prev_entropy``: the mean token entropy of the last update (0 before the first), kept across steps."""

    provides: ClassVar[tuple[str, ...]] = ("prev_entropy",)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.prev_entropy = 0.0

    def inputs(self, k: int) -> dict[str, Any]:
        return {"prev_entropy": self.prev_entropy}

    def after_update(self, entropy: float | None) -> None:
        if entropy is not None:
            self.prev_entropy = float(entropy)

    def state_dict(self) -> dict[str, Any]:
        return {"prev_entropy": self.prev_entropy}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.prev_entropy = float(state.get("prev_entropy", 0.0))
