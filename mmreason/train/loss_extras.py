"""The providers of the run's loss: for each extra ``LossInputs`` field the loss reads, the method's own trainer
side (``mmreason/rl/providers.py``), found by the field's name here and nowhere else:

    prev_entropy        PreviousEntropy       rl/providers.py
    tempered_logprobs   DCPOInputs            rl/losses/dcpo.py   (also gives prev_entropy)
    entropy_history     EntropyHistory        rl/losses/gepo.py
    segment_progress    SegmentProgress       train/vps.py        (probe forwards: needs the tokenizer)

The update calls them through ``LossExtras`` (``update.py``); the loop saves ``state_dict`` with every checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from mmreason import rl
from mmreason.rl.losses.dcpo import DCPOInputs
from mmreason.rl.losses.gepo import EntropyHistory
from mmreason.rl.providers import InputProvider, PreviousEntropy
from mmreason.train.vps import SegmentProgress

# in order: a provider that gives several fields is built for the first
PROVIDERS: dict[str, type] = {
    "tempered_logprobs": DCPOInputs,
    "prev_entropy": PreviousEntropy,
    "entropy_history": EntropyHistory,
    "segment_progress": SegmentProgress,
}


@dataclass
class UpdateView:
    """What the update shows the providers before it starts (``rl.providers.UpdateView``, plus what the VPS
    probes need): the run, the mini-batches, the kept rows' samples, and the update's forward."""

    run: Any
    minibatches: list[Any]  # update.MiniBatch
    samples: list[Any]  # the kept rows' samples, by row
    # forward(batch, trajectories, temperature=None) -> log-probs [n, T]
    forward: Callable[..., Tensor]

    @property
    def count(self) -> int:
        return len(self.minibatches)

    def logprobs(self, k: int, *, temperature: float | None = None) -> Tensor:
        mb = self.minibatches[k]
        return self.forward(mb.inputs, mb.trajectories, temperature=temperature)


class LossExtras:
    """The providers of one loss's extra fields, called together at the update's four points."""

    def __init__(self, providers: list[InputProvider] | None = None) -> None:
        self.providers = list(providers or [])

    @classmethod
    def for_loss(cls, name: str, options: Mapping[str, Any]) -> LossExtras:
        """Build the providers of the fields the loss ``name`` takes, each once, with the loss's options."""
        takes = rl.contract_of(rl.POLICY_LOSSES.get(name)).takes
        providers: list[InputProvider] = []
        given: set[str] = set()
        for field_name, make in PROVIDERS.items():
            if field_name in takes and field_name not in given:
                provider = make(options)
                providers.append(provider)
                given.update(provider.provides)
        return cls(providers)

    def before_update(self, view: UpdateView) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in self.providers:
            out.update(p.before_update(view))
        return out

    def inputs(self, k: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.providers:
            out.update(p.inputs(k))
        return out

    def after_minibatch(self, k: int, entropy: Tensor, mask: Tensor, group_ids: Tensor) -> None:
        for p in self.providers:
            p.after_minibatch(k, entropy, mask, group_ids)

    def after_update(self, entropy: float | None) -> None:
        for p in self.providers:
            p.after_update(entropy)

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in self.providers:
            out.update(p.state_dict())
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for p in self.providers:
            p.load_state_dict(state)
