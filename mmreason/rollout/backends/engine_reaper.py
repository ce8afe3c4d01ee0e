"""vLLM's engine processes end with the process that started them, however it ends (``kill -9`` included).

vLLM 0.32 starts each engine core (``VLLM::EngineCore``) as a child process with no watch on its parent, and
the engine core's workers watch only the engine core. A trainer or ``mmreason vllm-serve`` killed with
SIGKILL (or by the OOM killer) never runs its shutdown, so the engine core and its workers ran on, holding
their memory (0.7 + 1.9 GB) and 20-33 % of a core each. As vLLM's own open fixes do (its pull requests
#34816, #55846), each engine core and worker here watches its parent: once it has been reparented (its parent
died), it sends itself SIGTERM (vLLM's own shutdown handler, which ends its workers too), and ends for good
``GRACE_S`` seconds later if it is still there (an alarm whose default action ends the process: the engine
core's shutdown was seen to hang in interpreter finalization, where no Python thread runs any more). The watch polls ``os.getppid()`` rather than using
``PR_SET_PDEATHSIG``, which fires when the *thread* that started the child ends, not the process.

How it gets there: ``install`` is a vLLM general plugin (the ``vllm.general_plugins`` entry point in
``pyproject.toml``), which vLLM loads in the process that builds an engine before it starts the engine core.
It wraps ``EngineCoreProc.run_engine_core`` and ``WorkerProc.worker_main``, the targets vLLM starts those
processes with, so the watch starts first thing in the child, under ``fork`` (the child inherits the
wrapped target) and ``spawn`` (the target is pickled by name: this module's functions) alike.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from typing import Any

# seconds between the SIGTERM and the SIGKILL an orphaned engine process sends itself
GRACE_S = 10.0
EVERY_S = 0.5  # how often the parent is checked
_ORIGINALS: dict[str, object] = {}


def watch_parent(grace_s: float = GRACE_S, every_s: float = EVERY_S) -> threading.Thread:
    """Start a daemon thread that ends this process once its parent has died (module doc)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        # the last resort is the kernel's: SIGALRM's default action ends the process even when its shutdown
        # hangs in interpreter finalization, where this (daemon) thread no longer runs
        if signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            signal.alarm(max(1, math.ceil(grace_s)))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="vllm-parent-watch", daemon=True)
    thread.start()
    return thread


def _original(name: str) -> Any:
    """Return vLLM's own target: the one this process wrapped (under ``fork``), else the class's (a ``spawn`` child
    imports vLLM afresh, unwrapped)."""
    if name in _ORIGINALS:
        return _ORIGINALS[name]
    if name == "engine_core":
        from vllm.v1.engine.core import EngineCoreProc

        return EngineCoreProc.run_engine_core
    from vllm.v1.executor.multiproc_executor import WorkerProc

    return WorkerProc.worker_main


def watched_engine_core(*args: Any, **kwargs: Any) -> Any:
    """Run ``EngineCoreProc.run_engine_core`` with its parent watched."""
    watch_parent()
    return _original("engine_core")(*args, **kwargs)


def watched_worker(*args: Any, **kwargs: Any) -> Any:
    """Run ``WorkerProc.worker_main`` with its parent (the engine core) watched."""
    watch_parent()
    return _original("worker")(*args, **kwargs)


def install() -> None:
    """Wrap vLLM's engine-core and worker targets (once per process; a vLLM without them is left alone)."""
    try:
        from vllm.v1.engine.core import EngineCoreProc
        from vllm.v1.executor.multiproc_executor import WorkerProc
    except ImportError:
        return
    for name, cls, attr, wrapper in (
        ("engine_core", EngineCoreProc, "run_engine_core", watched_engine_core),
        ("worker", WorkerProc, "worker_main", watched_worker),
    ):
        current = getattr(cls, attr, None)
        if current is None or current is wrapper:
            continue
        _ORIGINALS[name] = current
        setattr(cls, attr, staticmethod(wrapper))
