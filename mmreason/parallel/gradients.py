"""Gradient averaging over processes for a backward whose forward bypassed the DDP wrapper.

The shared-prefix update runs the unwrapped model (its prompt pass and its completion pass are not one
``forward`` of the wrapper), so DDP's reducer never arms its hooks and syncs nothing. The trainer then
averages the gradients itself, once per optimizer step, in flat buckets as DDP would: the result is the
gradient DDP would have produced, up to float summation order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeGuard

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

if TYPE_CHECKING:
    from accelerate import Accelerator

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket size


def is_ddp(model: torch.nn.Module) -> TypeGuard[torch.nn.parallel.DistributedDataParallel]:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def average_gradients(accelerator: Accelerator, parameters: Iterable[torch.nn.Parameter]) -> None:
    """Average every trainable parameter's gradient over processes (a missing one counts as zeros)."""
    if accelerator.num_processes == 1:
        return
    import torch.distributed as dist

    grads = []
    for p in parameters:
        if p.requires_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    for bucket in _buckets(grads):
        flat = _flatten_dense_tensors(bucket)
        dist.all_reduce(flat)
        flat /= accelerator.num_processes
        for g, synced in zip(bucket, _unflatten_dense_tensors(flat, bucket)):
            g.copy_(synced)


def _buckets(grads: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Group consecutive gradients of one dtype and device, up to ``BUCKET_BYTES`` each (same order everywhere)."""
    out: list[list[torch.Tensor]] = []
    size = 0
    for g in grads:
        nbytes = g.numel() * g.element_size()
        if not out or size + nbytes > BUCKET_BYTES or (g.dtype, g.device) != (out[-1][0].dtype, out[-1][0].device):
            out.append([])
            size = 0
        out[-1].append(g)
        size += nbytes
    return out
