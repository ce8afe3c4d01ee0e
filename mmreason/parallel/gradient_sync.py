"""One gradient reduction per optimizer step, not one per micro-batch.

A DDP or FSDP2 model reduces its gradients in every backward: with k micro-batches per optimizer step that is
k all-reduces (DDP) or reduce-scatters (FSDP2) of the whole gradient where one would do (8x the traffic at
8 micro-batches). The update turns the reduction off for every micro-batch but the last of an optimizer step:
the gradients accumulate locally (DDP in ``.grad``, FSDP2 unsharded, in the parameters' gradient dtype) and
the last backward reduces their sum, which is the same average up to float summation order. Every process
runs as many micro-batches (``agree.equal_minibatches``), so they all reduce in the same backward.

FSDP2's local accumulation keeps each unit's unsharded gradient between micro-batches: per process the memory
of a whole gradient (in the gradient dtype) instead of its shard. A model neither wrapper holds (one process,
the shared-prefix update's unwrapped model, which ``gradients.average_gradients`` reduces once by hand) is
left alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import torch

from mmreason.parallel.gradients import is_ddp
from mmreason.parallel.sharding import is_sharded

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule


def sync_gradients(model: torch.nn.Module, enabled: bool) -> None:
    """Set whether the next backward of ``model`` reduces gradients over processes (DDP's ``no_sync`` state, FSDP2's
    ``set_requires_gradient_sync``); set before the micro-batch's forward, as DDP reads it there."""
    if is_ddp(model):
        model.require_backward_grad_sync = enabled
    elif is_sharded(model):
        cast("FSDPModule", model).set_requires_gradient_sync(enabled)
