"""Faults inside a run: the stop a fault limit raises, a broken sample counted against its limit, and the one
guard every phase of a GRPO step runs under.

With more than one process a phase that raises must not leave the others waiting at a collective for this one:
``fault_guard`` holds the exception (``agree.hold``), this process then does no more work (the phases check
``agree.stopping``) and every process stops together at the step's agreement point (``agree.settle``). Alone, an
exception propagates as it is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mmreason.parallel.agree import hold


class RunStopped(RuntimeError):
    """A configured fault limit was passed; a checkpoint was saved first."""


@contextmanager
def fault_guard(run) -> Iterator[None]:
    """Run the block; with more than one process, an exception inside is held and the block's results keep the
    values they had before it (no prompts, no trajectories, NaN rewards: a held stop follows)."""
    if run.accelerator.num_processes == 1:
        yield
        return
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - held, then raised on every process by settle
        hold(run, exc)


def bad_sample(run, sample_id: str, exc: BaseException) -> None:
    """Count and log a sample that cannot be used; past ``max_bad_samples`` the run stops (``hold``)."""
    run.counters.bad_samples += 1
    run.event("bad_sample", sample_id=sample_id, reason=str(exc))
    if run.counters.bad_samples > run.cfg.max_bad_samples:
        stop = RunStopped(
            f"{run.counters.bad_samples} broken samples (max_bad_samples="
            f"{run.cfg.max_bad_samples}); last: {sample_id!r}: {exc}"
        )
        stop.__cause__ = exc
        hold(run, stop)
