"""A run asked to stop by a signal: SIGTERM (what ``timeout``, SLURM and Kubernetes send before they kill).

The first SIGTERM is noted (one line on stderr) and the step in progress runs to its end; before the next step
every process agrees (``any_rank``: a signal sent to one rank stops all of them at the same step), the last
finished step is saved, and the run stops with one line naming the checkpoint and exits ``128 + 15`` (143, the
code of a process ended by SIGTERM: schedulers read it as "terminated"). The run's lock is given back on the way
out. A second SIGTERM ends the process at once, the default way (no checkpoint; the lock is taken over by the
next run). Ctrl-C (SIGINT) is left as it is: it stops at once.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType

from mmreason.train.faults import RunStopped

STOP_SIGNALS = (signal.SIGTERM,)


class Interrupted(RunStopped):
    """The run stopped because a signal asked it to (after saving its last finished step)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum  # what the mmreason command exits with


@dataclass
class StopRequest:
    """The first stop signal received while the run loop runs (None: none yet)."""

    signum: int | None = None
    previous: dict = field(default_factory=dict)  # signal -> the handler before ``install``

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "a stop signal"

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """Handle a signal: the first signal is noted and said; a second ends the process at once, by that signal."""
        if self.signum is not None:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        # os.write, not print: the handler may run while the progress bar is inside a write to stderr
        os.write(
            2,
            (
                f"\nmmreason: {self.name} received: finishing the step in progress, then saving a checkpoint and "
                f"stopping (send {self.name} again to stop at once, without a checkpoint)\n"
            ).encode(),
        )

    def install(self) -> StopRequest:
        """Note the stop signals here from now on, instead of ending the process (``uninstall`` puts the handlers before
        back). Off the main thread (a run started from a thread) signals cannot be caught: they act as they did."""
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self.handle) for s in STOP_SIGNALS}
        return self

    def uninstall(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        self.previous = {}
