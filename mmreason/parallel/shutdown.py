"""The end of a finished multi-process run, in order, so that every rank exits 0.

Left to the interpreter's exit, the gloo process group was torn down by garbage collection and static destructors
while the other rank could still be talking to it, and one rank now and then died after the run had finished
(``terminate called without an active exception``, SIGABRT), failing a run whose checkpoint was written. The
order here:

1. every rank reaches the end (a barrier), so no rank tears its side down while another still uses it;
2. the run's worker threads (reward and environment calls under a deadline, named ``mmreason-*``) are joined,
   each for at most ``thread_timeout_s``;
3. the process group is destroyed (the trackers were finished by the run's logger before);
4. if a worker thread is still running (a reward call past its timeout, still computing), the process ends with
   ``os._exit`` after flushing its output: interpreter finalization would stop that thread by unwinding its
   C++ frames, which calls std::terminate (the SIGABRT above).

Steps 1-3 are the run's (``finish_processes``, called by ``train`` and ``sft``); step 4 belongs to the process
entry points only (``end_process``, called by ``python -m mmreason`` and the ``mmreason`` script), so a caller
that runs ``mmreason.cli.main`` in its own process (a test, a notebook) is never ended by it.
Outside a launcher (no process group) only the threads are joined.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelerate import Accelerator

log = logging.getLogger(__name__)
WORKER_PREFIX = "mmreason-"


def join_workers(timeout_s: float = 5.0) -> list[str]:
    """Join the live ``mmreason-*`` threads, ``timeout_s`` in all; the names of those still running."""
    deadline = time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.name.startswith(WORKER_PREFIX):
            thread.join(max(0.0, deadline - time.monotonic()))
    return running_workers()


def running_workers() -> list[str]:
    """Return the names of the live ``mmreason-*`` threads."""
    return [t.name for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t.is_alive()]


def finish_processes(accelerator: Accelerator, thread_timeout_s: float = 5.0) -> list[str]:
    """Pass a barrier, join the worker threads, destroy the process group (module doc, steps 1-3); return the names of
    the worker threads still running."""
    import torch.distributed as dist

    # the run's group only: one process alone has none of its own (a group there is a colocated vLLM engine's)
    distributed = accelerator.num_processes > 1 and dist.is_available() and dist.is_initialized()
    if distributed:
        accelerator.wait_for_everyone()
    running = join_workers(thread_timeout_s)
    if distributed:
        dist.destroy_process_group()
    if running:
        log.warning("worker threads still running at the end of the run: %s", ", ".join(running))
    return running


def end_process(code: int) -> None:
    """Exit the process with ``code`` (module doc, step 4): through ``os._exit`` when a worker thread is still
    running, since finalization would stop it by unwinding its C++ frames (std::terminate, SIGABRT), else
    through ``sys.exit``. Only for process entry points."""
    running = running_workers()
    if running:
        log.warning("exiting without finalization: worker threads still running: %s", ", ".join(running))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
