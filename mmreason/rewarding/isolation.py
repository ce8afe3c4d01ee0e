"""Running one reward call under a time limit.

Sync rewards run in a fresh daemon thread joined with a timeout: a thread that overruns is abandoned
(Python cannot kill a thread), keeps running in the background and can no longer hold up the training
step or the interpreter's exit. So a reward that can loop for ever on some input should bound its own
work; the built-in rewards do (see ``mmreason.parsing``). Async rewards get
``asyncio.wait_for``, which really cancels them.
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
