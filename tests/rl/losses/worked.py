"""Call a registered loss on a hand-built micro-batch: the helper of the per-loss tests of worked examples."""

from __future__ import annotations

from typing import Any

import torch

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import POLICY_LOSSES


def run(
    name: str,
    logprobs: list[list[float]],
    advantages: list[float] | list[list[float]],
    *,
    old: list[list[float]] | None = None,
    mask: list[list[float]] | None = None,
    options: dict[str, Any] | None = None,
    **fields: Any,
) -> tuple[LossOutput, torch.Tensor]:
    """Return the loss ``name`` on these rows and its gradient with respect to ``logprobs`` ``[N, T]``.

    ``old`` defaults to zeros (so ``logprobs`` are the log-ratios), ``mask`` to ones; ``fields`` are further
    ``LossInputs`` fields (``group_ids``, ``entropy``, ``rewards`` ...), ``options`` the loss's own options.
    """
    lp = torch.tensor(logprobs, dtype=torch.float32, requires_grad=True)
    x = LossInputs(
        logprobs=lp,
        old_logprobs=torch.zeros_like(lp) if old is None else torch.tensor(old, dtype=torch.float32),
        advantages=torch.tensor(advantages, dtype=torch.float32),
        mask=torch.ones_like(lp) if mask is None else torch.tensor(mask, dtype=torch.float32),
        **fields,
    )
    out = POLICY_LOSSES.get(name)(x, **(options or {}))
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out, grad
