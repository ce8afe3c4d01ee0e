"""Mixed precision as on GPUs: bf16 (or fp16) parameters and activations, fp32 master weights and optimizer state.

``model.dtype: bfloat16`` loads the policy in bf16, so every forward, backward and generation runs its matmuls
in bf16. Updates of a bf16 weight smaller than its last bit (2^-8 of its size) would be lost, so the optimizer
keeps an fp32 copy of every low-precision trainable parameter (``MasterWeightAdamW``): at each step the
gradients (accumulated in the parameter's dtype over the step's mini-batches, as DDP reduces them) are
cast to fp32, AdamW updates the fp32 copy and its fp32 moments, and the copy is rounded into the bf16
parameter. Log-softmax, log-probs, advantages and the loss are fp32 in every precision
(``mmreason.rl.logits``); sampling turns the bf16 logits into fp32 before temperature, top-p and the
per-row draw (``rollout.row_sampling``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW over fp32 master copies of the low-precision parameters it is given (fp32 ones are stepped in
    place, as plain AdamW does). The live parameters stay the model's: ``step`` reads their gradients and
    writes the rounded master weights back; ``zero_grad`` clears both."""

    def __init__(self, params: Iterable[Any], **kwargs: Any) -> None:
        groups: list[Any] = list(params)
        if groups and not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (live low-precision parameter, fp32 master)
        master_groups: list[dict[str, Any]] = []
        for group in groups:
            masters: list[torch.Tensor] = []
            for p in group["params"]:
                if p.dtype in LOW_PRECISION:
                    m = p.detach().float().clone().requires_grad_(True)
                    self._pairs.append((p, m))
                    masters.append(m)
                else:
                    masters.append(p)
            master_groups.append({**group, "params": masters})
        super().__init__(master_groups, **kwargs)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        # the masters' fp32 gradient buffers are kept from step to step
        for p, m in self._pairs:
            if p.grad is None:
                m.grad = None
            elif m.grad is None:
                m.grad = p.grad.float()
            else:
                m.grad.copy_(p.grad)
        loss = super().step(closure)
        for p, m in self._pairs:
            p.copy_(m)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the live parameters' gradients (and those of fp32 parameters stepped in place); the masters' buffers
        are overwritten at the next step."""
        masters = {id(m) for _, m in self._pairs}
        for group in self.param_groups:
            for q in group["params"]:
                if id(q) not in masters and q.grad is not None:
                    if set_to_none:
                        q.grad = None
                    else:
                        q.grad.zero_()
        for p, _ in self._pairs:
            p.grad = None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load moments and step counts from ``state_dict``; the master weights from the live parameters (a checkpoint
        stores the model in its own dtype, so a resumed run restarts from the bf16 weights)."""
        super().load_state_dict(state_dict)
        self.refresh_masters()

    @torch.no_grad()
    def refresh_masters(self) -> None:
        """Copy the live parameters into the fp32 masters (after weights were loaded into the model)."""
        for p, m in self._pairs:
            m.copy_(p)

    @property
    def master_bytes(self) -> int:
        return sum(m.numel() * m.element_size() for _, m in self._pairs)


def needs_master_weights(params: Iterable[torch.Tensor]) -> bool:
    """Tell whether any trainable parameter is bf16 / fp16."""
    return any(p.requires_grad and p.dtype in LOW_PRECISION for p in params)
