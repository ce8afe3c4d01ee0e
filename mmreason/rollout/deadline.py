"""A time limit on one environment step, so that a hanging ``Environment.step`` ends its episode, not the run.

Why a thread and not the killable worker process that rewards use (``mmreason.rewarding.isolation``): an
environment is stateful (call counters, retrieved items, the image being cropped) and ``step`` changes it in
place; a forked child would change its own copy, and the parent would never see it. So the step runs in a
daemon thread joined with the timeout. When it overruns:

- the episode ends with ``StepTimeout`` (counted as an environment fault by the trainer, like an exception);
- the thread is asked to stop by raising ``StepTimeout`` inside it (``PyThreadState_SetAsyncExc``): a step
  spinning in Python code stops at its next bytecode; one sleeping or blocked in I/O stops when that call
  returns. Its environment is never used again (every episode gets a fresh one).

The bound that holds: the caller regains control within ``timeout_s`` whenever the step runs Python code or
waits (sleep, I/O, locks), since those release the interpreter lock. A step stuck inside one C call that
holds the lock (a catastrophic regex, say) delays the caller until that call returns; environments must
bound such work themselves (``mmreason.parsing`` for model output).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

# the trainer's rollout.env_step_timeout_s default; evaluation episodes use it too
DEFAULT_STEP_TIMEOUT_S = 60.0


class StepTimeout(TimeoutError):
    """An environment step ran past its time limit."""


def _raise_in(thread: threading.Thread, error: type[BaseException]) -> None:
    """Ask ``thread`` to raise ``error`` at its next Python bytecode (no effect on a finished thread)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(error))


def call_with_deadline(fn: Callable[..., Any], args: tuple, timeout_s: float | None, what: str = "step") -> Any:
    """Call ``fn(*args)``; raise ``StepTimeout`` after ``timeout_s`` seconds (None: no limit); exceptions pass
    through."""
    if timeout_s is None:
        return fn(*args)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn(*args)
        except StepTimeout:  # raised into this thread after the caller gave up on it
            pass
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, name=f"mmreason-env-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        _raise_in(thread, StepTimeout)
        raise StepTimeout(f"the environment's {what} ran past {timeout_s:g} s (rollout.env_step_timeout_s)")
    if "error" in box:
        raise box["error"]
    return box["result"]
