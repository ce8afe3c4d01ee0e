"""The engines behind one ``mmreason vllm-serve`` (``--data_parallel_size K``) and how clients share them.

Each engine is a colocate-path ``VLLMBackend`` (its own vLLM engine-core process; on CPU bound to its own
group of cores, on GPUs to its own devices) driven from a thread of its own, so K engines sample at once.
A client's ``/generate`` call is cut into up to K contiguous chunks of prompts, each queued on the engine
with the fewest rows pending; an engine takes everything queued for it within ``batch_wait_s`` of its first
item as ONE ``generate_many`` call, so the calls of several clients share an engine batch. Every row keeps
its own settings and seed, so what a row samples does not depend on the engine or the calls it shared a
batch with (the rows of K engines are the rows of one).

Weight pushes (a directory reload, or a collective receive) take every engine at once: each engine's lock is
held while it takes the weights, so no batch runs on half-pushed weights, and a ``/generate`` that arrives
after a push has been answered samples the pushed weights on every engine.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends.vllm_placement import server_devices
from mmreason.rollout.deadline import StepTimeout, call_with_deadline


@dataclass
class _Work:
    call: tuple  # (requests, n, settings, seeds)
    rows: int
    future: asyncio.Future = field(repr=False)


def split_calls(requests: Sequence, n: int, seeds: Sequence[int], parts: int) -> list[tuple[list, list[int]]]:
    """Cut ``requests`` into at most ``parts`` contiguous non-empty chunks of near-equal size, each with its rows' seeds
    (``n`` per request), in order."""
    parts = max(1, min(parts, len(requests)))
    base, extra = divmod(len(requests), parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append((list(requests[start : start + size]), list(seeds[start * n : (start + size) * n])))
        start += size
    return out


class EnginePool:
    """K engines (``generate_many`` or ``generate_requests``; ``reload``), one worker thread each, and the
    queues that batch clients' calls into them. Create it, then ``await start()`` inside the server's loop."""

    def __init__(self, engines: Sequence, *, batch_wait_s: float = 0.005) -> None:
        if not engines:
            raise ValueError("an engine pool needs at least one engine")
        self.engines = list(engines)
        self.batch_wait_s = batch_wait_s
        self.executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"mmreason-engine-{i}") for i in range(len(engines))
        ]
        self.pending = [0] * len(engines)  # rows queued or running per engine
        self.batches = [0] * len(engines)  # engine calls made (the batching is visible in /health)
        self._queues: list[asyncio.Queue] = []
        self._locks: list[asyncio.Lock] = []
        self._tasks: list[asyncio.Task] = []

    def __len__(self) -> int:
        return len(self.engines)

    async def start(self) -> None:
        self._queues = [asyncio.Queue() for _ in self.engines]
        self._locks = [asyncio.Lock() for _ in self.engines]
        self._tasks = [asyncio.create_task(self._serve(i)) for i in range(len(self.engines))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for ex in self.executors:
            ex.shutdown(wait=False, cancel_futures=True)

    # ---- sampling ----------------------------------------------------------------------------------

    async def generate(self, requests: Sequence, n: int, settings: Any, seeds: Sequence[int]) -> list:
        """Generate the rows of one client's call (``generate_requests``' order), its prompts spread over the
        engines."""
        loop = asyncio.get_running_loop()
        works = []
        for chunk, chunk_seeds in split_calls(requests, n, seeds, len(self.engines)):
            i = min(range(len(self.engines)), key=lambda k: (self.pending[k], k))
            work = _Work((chunk, n, settings, chunk_seeds), len(chunk) * n, loop.create_future())
            self.pending[i] += work.rows
            self._queues[i].put_nowait(work)
            works.append(work)
        parts = await asyncio.gather(*(w.future for w in works))
        return [row for part in parts for row in part]

    async def _serve(self, i: int) -> None:
        """Run engine ``i``'s loop: its first queued call, whatever else is queued within ``batch_wait_s``, as one
        engine call (under the engine's lock, so never during a push)."""
        queue, loop = self._queues[i], asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            if self.batch_wait_s > 0:
                await asyncio.sleep(self.batch_wait_s)
            while not queue.empty():
                batch.append(queue.get_nowait())
            try:
                async with self._locks[i]:
                    self.batches[i] += 1
                    results = await loop.run_in_executor(self.executors[i], _generate_many, self.engines[i], batch)
            # every call of the batch gets the engine's error
            except Exception as exc:  # noqa: BLE001
                for work in batch:
                    if not work.future.done():
                        work.future.set_exception(exc)
            else:
                for work, rows in zip(batch, results):
                    if not work.future.done():
                        work.future.set_result(rows)
            finally:
                self.pending[i] -= sum(w.rows for w in batch)

    # ---- every engine at once (weight pushes) --------------------------------------------------------

    async def on_all(self, fn: Callable[[int, Any], object], *, locked: asyncio.Event | None = None) -> list:
        """Call ``fn(i, engine)`` for every engine at once, each in its engine's thread, while every engine's lock is
        held (no batch runs meanwhile). ``locked`` is set once every lock is held (a collective join or receive replies
        to its client then, and the work goes on). The first error is raised."""
        loop = asyncio.get_running_loop()
        for lock in self._locks:
            await lock.acquire()
        try:
            if locked is not None:
                locked.set()
            futures = [loop.run_in_executor(self.executors[i], fn, i, engine) for i, engine in enumerate(self.engines)]
            results = await asyncio.gather(*futures, return_exceptions=True)
        finally:
            for lock in self._locks:
                lock.release()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return list(results)


def _generate_many(engine: Any, batch: list[_Work]) -> list:
    calls = [w.call for w in batch]
    if hasattr(engine, "generate_many"):
        return engine.generate_many(calls)
    return [engine.generate_requests(*call) for call in calls]


def bounded(fn: Callable[[], object], limit: float | None, what: str, knob: str) -> object:
    """Call ``fn()``; raise ``EngineDied`` naming ``knob`` when it takes longer than ``limit`` seconds (the call is left
    behind in a daemon thread; the engine is never used again)."""
    try:
        return call_with_deadline(fn, (), limit, what=what)
    except StepTimeout:
        raise EngineDied(f"vLLM engine did not finish {what} within {limit:g} s ({knob}); taken as dead") from None


# ---- engines on core groups / devices ------------------------------------------------------------------


def core_groups(k: int, cores: Sequence[int] | None = None) -> list[list[int]]:
    """Cut this process's CPU cores into ``k`` contiguous groups of near-equal size (one per engine)."""
    cores = sorted(os.sched_getaffinity(0)) if cores is None else sorted(cores)
    if k > len(cores):
        raise SystemExit(f"vllm-serve: --data_parallel_size {k} > the {len(cores)} CPU cores this process may use")
    base, extra = divmod(len(cores), k)
    out, start = [], 0
    for j in range(k):
        size = base + (1 if j < extra else 0)
        out.append(list(cores[start : start + size]))
        start += size
    return out


def engine_env(
    j: int,
    k: int,
    *,
    on_cpu: bool,
    tensor_parallel_size: int = 1,
    visible: str | None = None,
    device_count: int = 0,
) -> dict[str, str]:
    """Return the environment engine ``j`` of ``k`` is started with (its engine-core process inherits it): on CPU its
    core group (``VLLM_CPU_OMP_THREADS_BIND``), on GPUs its ``tensor_parallel_size`` devices, taken from the server's
    own device list (``visible``: its ``CUDA_VISIBLE_DEVICES``; ``vllm_placement.server_devices``). One engine keeps
    vLLM's own placement."""
    if k == 1:
        return {}
    if on_cpu:
        return {"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, core_groups(k)[j]))}
    return {"CUDA_VISIBLE_DEVICES": server_devices(visible, device_count, j, tensor_parallel_size, k)}
