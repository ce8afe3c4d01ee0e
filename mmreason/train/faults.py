"""Faults inside a run: the stop a fault limit raises, a broken sample counted against its limit (and said on the
console, rate-limited), and the one guard every phase of a GRPO step runs under.

With more than one process a phase that raises must not leave the others waiting at a collective for this one:
``fault_guard`` holds the exception (``agree.hold``), this process then does no more work (the phases check
``agree.stopping``) and every process stops together at the step's agreement point (``agree.settle``). Alone, an
exception propagates as it is."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from mmreason.parallel.agree import hold

if TYPE_CHECKING:
    from mmreason.train.setup import Run


class RunStopped(RuntimeError):
    """A configured fault limit was passed; a checkpoint was saved first."""


@contextmanager
def fault_guard(run: Run) -> Iterator[None]:
    """Run the block; with more than one process, an exception inside is held and the block's results keep the
    values they had before it (no prompts, no trajectories, NaN rewards: a held stop follows)."""
    if run.accelerator.num_processes == 1:
        yield
        return
    try:
        yield
    # held, then raised on every process by settle
    except Exception as exc:  # noqa: BLE001
        hold(run, exc)


# skips of a kind said on the console one by one; after these the 8th, 16th, 32nd, ...
SHOWN_FIRST = 5


def reason_of(exc: BaseException) -> str:
    """Describe an exception as a skip's reason: its message, with its type when that is not a plain bad-input error."""
    return str(exc) if isinstance(exc, (ValueError, OSError)) else f"{type(exc).__name__}: {exc}"


def say_skip(run: Run, what: str, count: int, sample_id: str, reason: str) -> None:
    """Say one console line for the ``count``-th skip of a kind (rate-limited: ``SHOWN_FIRST``, then powers of two;
    ``events.log`` has every one). Each process says its own, prefixed with its rank when there are several."""
    if count > SHOWN_FIRST and count & (count - 1):
        return
    more = " (from now on every 8th, 16th, 32nd, ... is shown; events.log lists all)" if count == SHOWN_FIRST else ""
    short = reason if len(reason) <= 300 else reason[:297] + "..."
    line = f"step {run.step}: skipped sample {sample_id!r} ({what} #{count}): {short}{more}"
    acc = run.accelerator
    if acc.num_processes > 1:
        print(f"[rank {acc.process_index}] {line}", file=sys.stderr, flush=True)
    elif run.logger is not None:
        run.logger.say(line)
    else:
        print(line, file=sys.stderr, flush=True)


def bad_sample(run: Run, sample_id: str, exc: BaseException) -> None:
    """Count, log and say a sample that cannot be used; past ``max_bad_samples`` the run stops (``hold``)."""
    run.counters.bad_samples += 1
    run.event("bad_sample", sample_id=sample_id, reason=reason_of(exc))
    say_skip(
        run,
        f"bad sample, max_bad_samples={run.cfg.max_bad_samples}",
        run.counters.bad_samples,
        sample_id,
        reason_of(exc),
    )
    if run.counters.bad_samples > run.cfg.max_bad_samples:
        stop = RunStopped(
            f"{run.counters.bad_samples} broken samples (max_bad_samples="
            f"{run.cfg.max_bad_samples}); last: {sample_id!r}: {exc}"
        )
        stop.__cause__ = exc
        hold(run, stop)


def nothing_usable(run: Run, step: int) -> RunStopped:
    """Build the stop of a step none of whose drawn samples could be used (every one skipped): a run that went on would
    train on nothing and end as if it had trained. Names the counts so far (``events.log`` each skip)."""
    c = run.counters
    return RunStopped(
        f"no usable sample: every prompt drawn for step {step} was skipped (so far {c.bad_samples} broken, "
        f"{c.filtered_prompts} over data.max_prompt_length, {c.unseen_media} with media the model would not see; "
        f"each named in {run.cfg.output_dir}/events.log)"
    )
