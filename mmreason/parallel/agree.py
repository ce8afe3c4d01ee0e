"""Decisions every process takes together.

A process that stops, skips an update or runs one mini-batch fewer than the others while they wait at a
collective (a gradient all-reduce, a gather, a barrier) leaves them waiting forever. So a fault never acts
on one process alone: it is recorded (``hold``), every process meets at the next agreement point, and the
decision taken there (``any_rank``, ``most_over_ranks``, ``settle``) is the same on all of them. With one
process each helper is the local decision, without a collective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
import torch.distributed as dist
from accelerate.utils import gather_object

if TYPE_CHECKING:
    from accelerate import Accelerator


class Stoppable(Protocol):
    """What the agreement helpers read and write on a run (``train.setup.Run``, which this room may not import):
    its accelerator and the fault it holds until the next ``settle``."""

    accelerator: Any
    pending_stop: BaseException | None


def any_rank(accelerator: Accelerator, flag: bool) -> bool:
    """Tell every process whether ``flag`` is true on any."""
    if accelerator.num_processes == 1:
        return bool(flag)
    value = torch.tensor([1.0 if flag else 0.0], device=accelerator.device)
    return bool(accelerator.reduce(value, reduction="sum").item() > 0)


def most_over_ranks(accelerator: Accelerator, counts: list[int]) -> list[int]:
    """Take the element-wise maximum of ``counts`` (same length on every process) over processes."""
    if accelerator.num_processes == 1:
        return list(counts)
    value = torch.tensor(counts, dtype=torch.int64, device=accelerator.device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return [int(v) for v in value.tolist()]


def hold(run: Stoppable, exc: BaseException) -> None:
    """Record a fault that stops the run; it acts at the next ``settle``, on every process together.
    The first one recorded is kept (later ones are its consequences)."""
    if run.pending_stop is None:
        run.pending_stop = exc


def stopping(run: Stoppable) -> bool:
    """Tell whether this process holds a fault (its later phases then do no work until ``settle``)."""
    return run.pending_stop is not None


def settle(run: Stoppable, error_type: type[Exception]) -> None:
    """Settle at the agreement point: when any process holds a fault, every process raises ``error_type`` (the one that
    holds it with its own message and cause, the others naming it)."""
    pending = run.pending_stop
    acc = run.accelerator
    if not any_rank(acc, pending is not None):
        return
    reasons = _gather_reasons(acc, None if pending is None else str(pending))
    run.pending_stop = None
    if pending is not None:
        raise error_type(str(pending)) from pending
    first = next((i, r) for i, r in enumerate(reasons) if r is not None)
    raise error_type(f"process {first[0]} stopped: {first[1]}")


def _gather_reasons(accelerator: Accelerator, reason: str | None) -> list[str | None]:
    if accelerator.num_processes == 1:
        return [reason]
    return gather_object([reason])


def equal_minibatches(
    accelerator: Accelerator, parts: list[list[int]], chunks: list[list[list[int]]], most_parts: int
) -> tuple[list[list[int]], list[list[list[int]]], list[list[float]]]:
    """Return (parts, chunks, weights) such that every process runs as many optimizer steps, and as many mini-batches in
    each, as the process with the most (each backward is a collective under DDP / FSDP).

    ``parts`` are the row shares of the optimizer steps (at most ``most_parts``), ``chunks[p]`` the
    mini-batches of share ``p``. A process with fewer repeats one of its own mini-batches with weight 0
    (its loss times 0: the collective happens, the gradient is unchanged); weights are 1.0 elsewhere.
    """
    counts = [len(cs) for cs in chunks] + [0] * (most_parts - len(chunks))
    agreed = most_over_ranks(accelerator, counts)
    parts, chunks = list(parts), [list(cs) for cs in chunks]
    weights = [[1.0] * len(cs) for cs in chunks]
    for p, n in enumerate(agreed):
        if n == 0:
            break
        if p >= len(chunks):
            parts.append(parts[0])
            chunks.append([])
            weights.append([])
        stand_in = chunks[p][-1] if chunks[p] else chunks[0][0]
        while len(chunks[p]) < n:
            chunks[p].append(stand_in)
            weights[p].append(0.0)
    return parts, chunks, weights
