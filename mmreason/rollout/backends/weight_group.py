"""Weights through a process group to a ``mmreason vllm-serve`` (server mode, ``rollout.vllm_weight_sync:
collective``, docs/vllm.md). A colocated engine never joins one: it lives in the trainer's process and takes
the weights in-process (``vllm_engine.VLLMBackend.push_in_process``); NCCL refuses a communicator whose two
ranks share a GPU.

The trainer process and the server's engine workers join one process group built by vLLM's
``stateless_init_torch_distributed_process_group`` (gloo on CPU, NCCL on GPUs; it leaves torch's default
group, the trainer's own, alone), as TRL's ``vllm-serve`` does. The engine's W workers are ranks 0..W-1
(worker 0 holds the rendezvous store), the trainer is rank W.

A push goes in buckets of at most ``bucket_bytes`` (a tensor larger than that travels alone): both sides
know the layout beforehand (names, dtypes, shapes and byte offsets, ``plan_buckets``), the trainer packs a
bucket's tensors into one flat byte buffer and broadcasts it, and the workers hand each tensor, a view into
the bucket they received, to vLLM's in-place ``reload_weights`` (the loader CPU builds need: oneDNN repacks
linear weights, so ``load_weights`` on a running model does not work there) as they arrive. So neither side
ever holds more than one bucket on top of the model, and under FSDP2 each parameter is gathered, cast to the
engine's dtype, copied into the bucket and freed in turn, every process of the mesh gathering together (the
main process broadcasts, the others only gather: ``gather_along``), once per push however many servers take it.

``WeightReceiver`` is vLLM's ``worker_extension_cls``: its methods are mixed into every worker and reached
through ``collective_rpc``. The modules that call it import vLLM lazily: the trainer's side needs only torch.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch

# byte offset of every tensor in a bucket (so a view of any dtype is aligned)
ALIGN = 16
WORKER_EXTENSION = "mmreason.rollout.backends.weight_group.WeightReceiver"
SYNC_MODES = ("collective", "directory")


@dataclass(frozen=True)
class Entry:
    """One tensor of a bucket: its checkpoint name, dtype (torch's name without ``torch.``), shape and byte
    offset in the bucket."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return _numel(self.shape) * torch.empty((), dtype=_dtype(self.dtype)).element_size()

    def wire(self) -> list:
        return [self.name, self.dtype, list(self.shape), self.offset]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"weight bucket: unknown dtype {name!r}")
    return dtype


def bucket_size(bucket: list[Entry]) -> int:
    last = bucket[-1]
    return last.offset + last.nbytes


def plan_buckets(specs: list[tuple[str, torch.dtype, tuple[int, ...]]], bucket_bytes: int) -> list[list[Entry]]:
    """Cut ``(name, dtype, shape)`` in order into buckets of at most ``bucket_bytes`` (a larger tensor is a bucket of
    its own), each tensor at an ``ALIGN``-byte offset."""
    buckets: list[list[Entry]] = []
    current: list[Entry] = []
    offset = 0
    for name, dtype, shape in specs:
        entry = Entry(name, str(dtype).removeprefix("torch."), tuple(int(s) for s in shape), 0)
        start = -(-offset // ALIGN) * ALIGN
        if current and start + entry.nbytes > bucket_bytes:
            buckets.append(current)
            current, start = [], 0
        current.append(Entry(entry.name, entry.dtype, entry.shape, start))
        offset = start + entry.nbytes
    if current:
        buckets.append(current)
    return buckets


def buckets_to_wire(buckets: list[list[Entry]]) -> list[list[list]]:
    return [[e.wire() for e in bucket] for bucket in buckets]


def buckets_from_wire(wire: list) -> list[list[Entry]]:
    """Read the layout as the trainer sent it (JSON or RPC lists); anything malformed is a ValueError."""
    out = []
    for bucket in wire:
        entries = []
        for name, dtype, shape, offset in bucket:
            _dtype(str(dtype))
            if not isinstance(offset, int) or offset < 0 or not all(isinstance(s, int) and s >= 0 for s in shape):
                raise ValueError(f"weight bucket: bad entry for {name!r}")
            entries.append(Entry(str(name), str(dtype), tuple(shape), offset))
        out.append(entries)
    return out


def broadcast(
    group: Any,
    tensor: torch.Tensor,
    src: int,
    peer_alive: Callable[[], bool] | None = None,
    *,
    peer_gone_grace_s: float = 5.0,
) -> None:
    """Broadcast ``tensor`` from group rank ``src`` to every rank of ``group`` (a stateless group: by its own ranks).
    ``peer_alive``: polled while the broadcast is pending; when it turns False (the receiving call ended, e.g. with an
    error) and the broadcast is still pending ``peer_gone_grace_s`` later, the wait stops with an error instead of
    lasting until the group's timeout. The grace is for a receiver that took every byte and answered before this side's
    send was marked complete (seen on a loaded machine)."""
    from torch.distributed import BroadcastOptions

    opts = BroadcastOptions()
    opts.rootRank = src
    opts.rootTensor = 0
    work = group.broadcast([tensor], opts)
    if peer_alive is not None:
        gone_at = None
        while not work.is_completed():
            if gone_at is None and not peer_alive():
                gone_at = time.monotonic()
            if gone_at is not None and time.monotonic() - gone_at > peer_gone_grace_s:
                raise RuntimeError("the engine stopped receiving the weights")
            time.sleep(0.0005)
    work.wait()


def join_group(host: str, port: int, rank: int, world_size: int, backend: str, *, timeout_s: float) -> Any:
    """Join this process's end of the weights group (vLLM's stateless helper; the default group is untouched)."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group  # heavy, optional

    # Under torchrun / accelerate launch this variable makes every rendezvous a client of the launcher's store;
    # this group's store is its own (held by the engine's worker 0), so it must not apply here.
    agent_store = os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    try:
        return stateless_init_torch_distributed_process_group(
            host, port, rank, world_size, backend, timeout=timedelta(seconds=timeout_s)
        )
    finally:
        if agent_store is not None:
            os.environ["TORCHELASTIC_USE_AGENT_STORE"] = agent_store


def group_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


# ---- the trainer's side ---------------------------------------------------------------------------------


@contextmanager
def policy_tensors(model: Any) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Yield the policy's tensors under the checkpoint's names, without copies: a PEFT LoRA model's adapters are merged
    in place for the duration of the block (and unmerged after). Under FSDP2 the tensors are the shards (DTensors);
    ``whole`` gathers one. Tied tensors appear once."""
    inner = getattr(model, "module", model)
    merged = hasattr(inner, "merge_adapter") and hasattr(inner, "get_base_model")
    if merged:
        inner.merge_adapter()
    try:
        source = inner.get_base_model() if merged else inner
        pairs = [
            (k.replace(".base_layer.", ".") if merged else k, v.detach())
            for k, v in source.state_dict().items()
            if not (merged and "lora_" in k)
        ]
        seen, unique = set(), []
        for name, v in pairs:
            local = v.to_local() if hasattr(v, "to_local") else v
            key = (local.data_ptr(), tuple(v.shape))
            if key not in seen:
                seen.add(key)
                unique.append((name, v))
        yield unique
    finally:
        if merged:
            inner.unmerge_adapter()


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """Gather a DTensor whole (every process of its mesh calls this together); return any other tensor as it is."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def tensor_specs(
    tensors: list[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None
) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """Return ``(name, dtype, shape)`` of each tensor as it travels: a floating tensor in ``dtype`` when given (the
    engine's; ``sent_dtype``), any other as it is."""
    return [(name, sent_dtype(t.dtype, dtype), tuple(t.shape)) for name, t in tensors]


def sent_dtype(own: torch.dtype, engine: torch.dtype | None) -> torch.dtype:
    """Return the dtype a tensor travels in: the engine's for floating tensors (the engine would cast them on load
    anyway, so casting first changes no loaded value and halves an fp32 policy's bytes for a bf16 engine), its own for
    any other (integer buffers) or when the engine's is unknown."""
    return engine if engine is not None and own.is_floating_point else own


def send_buckets(
    group: Any,
    src: int,
    buckets: list[list[Entry]],
    tensors: list[tuple[str, torch.Tensor]],
    device: torch.device,
    *,
    send: bool = True,
    peer_alive: Callable[[], bool] | None = None,
) -> BaseException | None:
    """Pack and broadcast every bucket to one group (``send_to_all`` with one target); returns the first error,
    or None. ``send=False``: only take part in the gathers."""
    targets = [Target(group, src, peer_alive)] if send else []
    return (send_to_all(targets, buckets, tensors, device) or [None])[0]


@dataclass
class Target:
    """One weights group a push broadcasts to: the group, this side's rank in it, and whether the receiving
    call still runs (``peer_alive``)."""

    group: object
    src: int
    peer_alive: Callable[[], bool] | None = None


def send_to_all(
    targets: list[Target], buckets: list[list[Entry]], tensors: list[tuple[str, torch.Tensor]], device: torch.device
) -> list[BaseException | None]:
    """Pack every bucket once and broadcast it to each target (``tensors`` in the layout's order, each
    gathered whole once, cast to its entry's dtype, copied in, freed: a sharded model's gathers happen once
    per push whatever the number of servers). A target whose broadcast failed gets nothing more; the rest is
    still gathered (under FSDP2 the other processes wait in those gathers). Returns each target's first
    error, or None. No targets: only take part in the gathers (``gather_along``)."""
    errors: list[BaseException | None] = [None] * len(targets)
    k = 0
    for bucket in buckets:
        live = any(e is None for e in errors)
        buffer = torch.empty(bucket_size(bucket), dtype=torch.uint8, device=device) if live else None
        for entry in bucket:
            _, t = tensors[k]
            k += 1
            full = whole(t)
            if buffer is not None:
                flat = full.detach().to(device=device, dtype=_dtype(entry.dtype)).contiguous().reshape(-1)
                buffer[entry.offset : entry.offset + entry.nbytes].copy_(flat.view(torch.uint8))
                del flat
            del full
        for i, target in enumerate(targets):
            if buffer is not None and errors[i] is None:
                try:
                    broadcast(target.group, buffer, target.src, target.peer_alive)
                except Exception as exc:  # noqa: BLE001 - a dead or hung peer; reported by the caller
                    errors[i] = exc
        del buffer
    return errors


def gather_along(model: Any) -> None:
    """Take a sharded policy's other processes' part of the main process's push: gather every tensor whole, in the
    push's order, and drop it (``full_tensor`` is a collective of the whole mesh)."""
    with policy_tensors(model) as tensors:
        for _, t in tensors:
            full = whole(t)
            del full


def receive_buckets(
    group: Any, src: int, buckets: list[list[Entry]], device: torch.device
) -> Iterator[tuple[str, torch.Tensor]]:
    """Receive, as the receiving end of ``send_buckets``, (name, tensor) in the layout's order, each a view into its
    bucket. Every bucket is a fresh buffer: a loader may keep views of a layer's first tensors until the layer is
    complete."""
    for bucket in buckets:
        buffer = torch.empty(bucket_size(bucket), dtype=torch.uint8, device=device)
        broadcast(group, buffer, src)
        for e in bucket:
            yield e.name, buffer[e.offset : e.offset + e.nbytes].view(_dtype(e.dtype)).view(e.shape)


def run_beside(fn: Callable[[], object]) -> tuple[threading.Thread, dict]:
    """Run ``fn()`` in a daemon thread (an engine's RPC that must run while this thread broadcasts); the box gets
    ``result`` or ``error``."""
    box: dict = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="mmreason-weight-rpc", daemon=True)
    thread.start()
    return thread, box


def broadcast_beside(
    model: Any,
    group: Any,
    src: int,
    bucket_bytes: int,
    receive: Callable[[list], object],
    *,
    dtype: torch.dtype | None = None,
) -> tuple[threading.Thread, dict, BaseException | None]:
    """Broadcast ``model``'s tensors from rank ``src`` of ``group`` while ``receive`` runs beside
    (``broadcast_to_all`` with one group); returns that call's thread, box and the broadcast's first error."""
    return broadcast_to_all(model, [(group, src, receive)], bucket_bytes, dtype)[0]


def broadcast_to_all(
    model: Any,
    ends: Sequence[tuple[object, int, Callable[[list], object]]],
    bucket_bytes: int,
    dtype: torch.dtype | None = None,
) -> list[tuple[threading.Thread, dict, BaseException | None]]:
    """Broadcast ``model``'s tensors, floating ones cast to ``dtype`` (the engines'; None: as they are), in
    buckets of at most ``bucket_bytes`` to every ``(group, src, receive)`` end: ``receive(wire buckets)`` (the
    receiving side's call: a server's HTTP request) runs beside in a thread of its own (``run_beside``) while
    this thread gathers each tensor once and broadcasts each bucket to every group (``send_to_all``). Returns,
    per end, the receiving call's thread and box, for ``finish_beside``, and its broadcast's first error."""
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    with policy_tensors(model) as tensors:
        buckets = plan_buckets(tensor_specs(tensors, dtype), bucket_bytes)
        wire = buckets_to_wire(buckets)
        calls = [run_beside(functools.partial(receive, wire)) for _, _, receive in ends]
        targets = [Target(group, src, thread.is_alive) for (group, src, _), (thread, _) in zip(ends, calls)]
        errors = send_to_all(targets, buckets, tensors, device)
    return [(thread, box, error) for (thread, box), error in zip(calls, errors)]


def finish_beside(thread: threading.Thread, box: dict, deadline: float | None, what: str) -> object:
    """Return the result of ``run_beside``'s call, waiting until ``deadline`` (monotonic; None: no limit)."""
    thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise TimeoutError(f"{what} did not return in time")
    if "error" in box:
        raise box["error"]
    return box.get("result")


# ---- the engine's side (mixed into vLLM's worker) ------------------------------------------------------


class WeightReceiver:
    """vLLM's ``worker_extension_cls``: the worker's end of the weights group and the bucketed reload."""

    def mm_join_weight_group(
        self, host: str, port: int, world_size: int, backend: str, timeout_s: float, *, rank_offset: int = 0
    ) -> int:
        """Join the weights group as this worker's rank plus ``rank_offset`` (a server's later engines follow
        the earlier ones' workers; the trainer is the last rank); returns the rank."""
        rank = int(getattr(self, "rank", 0)) + int(rank_offset)
        self._mm_weight_group = join_group(host, port, rank, world_size, backend, timeout_s=timeout_s)
        self._mm_trainer_rank = world_size - 1
        return rank

    def mm_receive_weights(self, wire: list) -> int:
        """Receive the buckets the trainer broadcasts and reload them in place (checkpoint format); return the number of
        tensors loaded."""
        buckets = buckets_from_wire(wire)
        stream = receive_buckets(self._mm_weight_group, self._mm_trainer_rank, buckets, _worker_device(self))
        self.reload_weights(weights_iterator=stream, is_checkpoint_format=True)  # type: ignore[attr-defined]
        return sum(len(b) for b in buckets)

    def mm_leave_weight_group(self) -> None:
        group = getattr(self, "_mm_weight_group", None)
        if group is not None:
            from vllm.distributed.utils import stateless_destroy_torch_distributed_process_group

            stateless_destroy_torch_distributed_process_group(group)
            self._mm_weight_group = None


def _worker_device(worker: Any) -> torch.device:
    device = getattr(worker, "device", None)
    if device is None:
        device = getattr(getattr(worker, "model_runner", None), "device", None)
    return torch.device(device) if device is not None else torch.device("cpu")
