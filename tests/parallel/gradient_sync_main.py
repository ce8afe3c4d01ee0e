"""One of two gloo processes for tests/parallel/test_gradient_sync.py. Usage: RANK PORT OUT.

Accumulates 4 micro-batches of a small model's loss under DDP, then FSDP2, twice each: reducing in every backward (the
update before issue 48) and with ``sync_gradients`` off for all but the last micro-batch (the update now); writes
each run's reduction count and its averaged gradients to OUT/RANK.json, by mode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from mmreason.parallel.gradient_sync import sync_gradients

MICRO_BATCHES = 4
REDUCTIONS = [0]


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _wrap(mode: str, model: torch.nn.Module) -> torch.nn.Module:
    """DDP with a comm hook that counts its all-reduces, or FSDP2 (reduce-scatters counted by ``_count``)."""
    if mode == "ddp":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        ddp = torch.nn.parallel.DistributedDataParallel(model)

        def counted(state, bucket):
            REDUCTIONS[0] += 1
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, counted)
        return ddp
    from torch.distributed.fsdp import fully_shard

    for layer in (model[0], model[2]):
        fully_shard(layer)
    return fully_shard(model)


def _count(name: str) -> None:
    """Count every call of ``dist.<name>`` (what FSDP2 reduce-scatters its gradients with)."""
    original = getattr(dist, name, None)
    if original is None:
        return

    def counted(*args, **kwargs):
        REDUCTIONS[0] += 1
        return original(*args, **kwargs)

    setattr(dist, name, counted)


def _step(mode: str, rank: int, once: bool) -> tuple[int, dict[str, list]]:
    """One optimizer step's accumulated gradient (averaged over processes) and the reductions it took."""
    model = _wrap(mode, _model())
    g = torch.Generator().manual_seed(100 + rank)  # each process its own rows
    REDUCTIONS[0] = 0
    for k in range(MICRO_BATCHES):
        x, y = torch.randn(3, 8, generator=g), torch.randn(3, 4, generator=g)
        if once:
            sync_gradients(model, k == MICRO_BATCHES - 1)
        loss = ((model(x) - y) ** 2).mean() / MICRO_BATCHES
        loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        grads[name] = grad.flatten().tolist()
    return REDUCTIONS[0], grads


def main(rank: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    _count("reduce_scatter_single")
    _count("reduce_scatter_tensor")
    try:
        result = {}
        for mode in ("ddp", "fsdp"):
            every, every_grads = _step(mode, rank, once=False)
            once, once_grads = _step(mode, rank, once=True)
            result[mode] = {"every": every, "once": once, "every_grads": every_grads, "once_grads": once_grads}
        (out / f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
