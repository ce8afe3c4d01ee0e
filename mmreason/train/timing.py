"""Seconds per phase of one step: ``with timed("generate"): ...`` adds the block's wall time to its phase."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class PhaseTimes:
    """The phases' seconds of one step, summed over their blocks (dynamic sampling runs a phase again), and
    ``time/other``: the step's wall time outside every block."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def metrics(self, phases: tuple[str, ...]) -> dict[str, float]:
        """Report ``time/<phase>`` for each of ``phases`` (0 when it did not run), ``time/step`` and ``time/other``."""
        step = time.perf_counter() - self.started
        times = {phase: self.seconds.get(phase, 0.0) for phase in phases}
        times["step"] = step
        times["other"] = step - sum(times[phase] for phase in phases)
        return {f"time/{k}": v for k, v in times.items()}
