"""One optimizer step, shared by GRPO's update (``update.py``) and SFT (``sft.py``): the accumulated gradients
averaged by hand when the wrapper's reducer saw no forward, clipped, checked finite on every process together,
then the optimizer and the schedule stepped. A non-finite gradient on any process makes every process drop the
step (counted in ``count/nan_steps``, logged as ``nonfinite_grad``), so no process updates alone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

from mmreason.parallel.agree import any_rank
from mmreason.parallel.gradient_sync import sync_gradients
from mmreason.parallel.gradients import average_gradients

if TYPE_CHECKING:
    from mmreason.train.setup import Run


def optimizer_step(run: Run, *, by_hand: bool = False) -> float | None:
    """Step the optimizer on the accumulated gradients; return the gradient norm, or None when every process
    skipped the step because one of them saw a non-finite gradient (``skip_update`` has then run).

    The check comes after clipping, on the gradients themselves: a norm can be finite while clipping (or a
    gradient the norm did not see, such as another shard's) leaves NaN behind."""
    # the wrapper's reducer saw no forward: average as it would have
    if by_hand:
        average_gradients(run.accelerator, run.model.parameters())
    grad_norm = run.accelerator.clip_grad_norm_(run.model.parameters(), run.cfg.max_grad_norm)
    finite = bool(torch.isfinite(torch.as_tensor(grad_norm))) and gradients_finite(run.model.parameters())
    if any_rank(run.accelerator, not finite):  # every process decides alike
        skip_update(run, "nonfinite_grad")
        return None
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return float(grad_norm)


def skip_update(run: Run, kind: str) -> dict[str, float]:
    """Drop this step's update on this process (every process calls it together): count it, log ``kind``,
    clear the gradients; the step's metrics say so."""
    run.counters.nan_steps += 1
    # a micro-batch before the last may have turned the reduction off
    sync_gradients(run.model, True)
    run.event(kind, step=run.step)
    run.optimizer.zero_grad(set_to_none=True)
    return {"loss": float("nan"), "skipped_update": 1.0}


def gradients_finite(parameters: Iterable[torch.nn.Parameter]) -> bool:
    """Check that every gradient (this process's shard of it) is finite, in one device sync."""
    flags: list[torch.Tensor] = []
    for p in parameters:
        g = p.grad
        if g is not None:
            g = g.to_local() if hasattr(g, "to_local") else g  # a DTensor shard (FSDP2)
            flags.append(torch.isfinite(g).all())
    return bool(torch.stack(flags).all()) if flags else True
