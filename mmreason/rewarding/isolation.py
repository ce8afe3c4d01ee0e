"""Running one reward call under a time limit.

Two ways for sync rewards:

- ``process`` (``call_in_process``): the call runs in a forked child process, which is killed when it
  overruns, so a reward stuck in a loop (or in a regex holding the interpreter lock) costs its timeout and
  nothing more. The child sees the parent's memory (fork), so nothing but the result is pickled. Rewards a
  config names by reference (``file.py:fn``, ``pkg.module:fn``) run this way by default.
- ``thread`` (``call_sync``): a daemon thread joined with a timeout, for cheap built-in rewards and for
  rewards that hold a model (a forked child must not run torch). A thread that overruns cannot be killed;
  it is abandoned and keeps running in the background, and a reward holding the interpreter lock can
  overrun its join; the built-in rewards bound their own work (see ``mmreason.parsing``).

Async rewards get ``asyncio.wait_for``, which really cancels them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any


class RewardTimeout(TimeoutError):
    """A reward call ran past its time limit."""


def call_sync(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], timeout_s: float | None) -> Any:
    """``fn(*args, **kwargs)``; raises ``RewardTimeout`` after ``timeout_s`` seconds (None: no limit)."""
    if timeout_s is None:
        return fn(*args, **kwargs)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as err:  # re-raised in the caller's thread, traceback kept
            box["error"] = err

    thread = threading.Thread(target=target, name="mmreason-reward", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise RewardTimeout(f"timed out after {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["result"]


class RewardWorkerError(RuntimeError):
    """The reward raised inside its worker process (the message carries its traceback)."""


def call_in_process(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], timeout_s: float | None) -> Any:
    """``fn(*args, **kwargs)`` in a forked child, killed after ``timeout_s`` seconds (``RewardTimeout``)."""
    import multiprocessing
    import traceback

    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", fn(*args, **kwargs)))
        except BaseException as err:  # the parent re-raises it as RewardWorkerError
            send.send(("error", f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=5)}"))
        finally:
            send.close()

    proc = ctx.Process(target=child, name="mmreason-reward", daemon=True)
    proc.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise RewardTimeout(f"timed out after {timeout_s:g} s (worker process killed)")
        try:
            status, value = receive.recv()
        except EOFError:
            raise RewardWorkerError(f"the reward's worker process died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)
        receive.close()
    if status == "error":
        raise RewardWorkerError(value)
    return value


def run_coroutine(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coro`` to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(coro)
        except BaseException as err:
            box["error"] = err

    thread = threading.Thread(target=target, name="mmreason-reward-loop", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


async def _bounded(awaitable: Any, timeout_s: float | None) -> Any:
    if timeout_s is None:
        return await awaitable
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except asyncio.TimeoutError:
        raise RewardTimeout(f"timed out after {timeout_s:g} s") from None


def call_async(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], timeout_s: float | None) -> Any:
    """Await ``fn(*args, **kwargs)`` with ``asyncio.wait_for``; raises ``RewardTimeout``."""

    async def main() -> Any:
        return await _bounded(fn(*args, **kwargs), timeout_s)

    return run_coroutine(main())


def call_async_many(
    fn: Callable[..., Any], calls: list[tuple[tuple, dict[str, Any]]], timeout_s: float | None
) -> list[Any]:
    """Run several calls of an async reward concurrently; each result is a value or the exception raised."""

    async def one(args: tuple, kwargs: dict[str, Any]) -> Any:
        return await _bounded(fn(*args, **kwargs), timeout_s)

    async def main() -> list[Any]:
        return await asyncio.gather(*(one(a, k) for a, k in calls), return_exceptions=True)

    return run_coroutine(main())
