"""Every process makes the same vision calls in each forward, whatever its rows hold.

Under DDP and FSDP2 a forward and its backward are collectives that every process must call in the same order
(FSDP2 all-gathers each vision block it runs; DDP all-reduces each gradient it expects). Real data mixes
text-only, image and video rows, so in one mini-batch a process may have no image while another has one.
Before the update the processes agree, per mini-batch, on the vision calls any of them makes (one small
all-reduce over all mini-batches), and a mini-batch lacking one gets that call's stand-in row
(``rollout.stand_ins``), weighted 0. Under DDP a tower that no process runs would leave its gradients unset
and DDP waiting for them, so there the image call is made even when no process has an image.

One process, or a model whose forward is not a collective (the shared-prefix update's unwrapped model, the
reference model), needs none of this: ``needs_matching`` says when it applies.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from mmreason.parallel.agree import most_over_ranks
from mmreason.parallel.gradients import is_ddp
from mmreason.parallel.sharding import is_sharded
from mmreason.rollout.forward import ModelBatch
from mmreason.rollout.stand_ins import CALLS, calls, stand_in
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from accelerate import Accelerator

    from mmreason.train.setup import Run


def needs_matching(accelerator: Accelerator, model: torch.nn.Module) -> bool:
    """Tell whether ``model``'s forwards are collectives across several processes (DDP-wrapped or FSDP-sharded)."""
    return accelerator.num_processes > 1 and (is_ddp(model) or is_sharded(model))


def vision_trainable(model: torch.nn.Module) -> bool:
    """Tell whether any vision-tower parameter is trained (DDP then expects its gradient from every forward)."""
    return any(p.requires_grad and ("visual." in n or "vision_tower." in n) for n, p in model.named_parameters())


def match_vision_calls(run: Run, batches: list[tuple[list[Trajectory], ModelBatch]]) -> list[ModelBatch]:
    """Add to each ``(rows, batch)``'s batch the stand-ins that make its vision calls the union of every process's for
    that mini-batch (the i-th mini-batch of every process is run together). Every process calls this with as many
    mini-batches (``agree.equal_minibatches``)."""
    acc, model = run.accelerator, run.model
    if not needs_matching(acc, model):
        return [batch for _, batch in batches]
    flags = [int(call in calls(rows)) for rows, _ in batches for call in CALLS]
    agreed = most_over_ranks(acc, flags)
    always_image = is_ddp(model) and vision_trainable(model)
    pad = run.processor.tokenizer.pad_token_id
    out: list[ModelBatch] = []
    for i, (rows, batch) in enumerate(batches):
        wanted = {call for j, call in enumerate(CALLS) if agreed[i * len(CALLS) + j]}
        if not wanted and always_image:
            wanted = {"image"}
        missing = [stand_in(run.processor, c) for c in CALLS if c in wanted - calls(rows)]
        out.append(batch.with_stand_ins(missing, pad))
    return out


def without_stand_ins(batch: ModelBatch) -> ModelBatch:
    """Return ``batch`` as its own rows only (for a forward that is not a collective: no stand-in is needed)."""
    return batch if batch.forward_batch is None else replace(batch, forward_batch=None)
