"""Scoring a batch of trajectories with every configured reward: ``RewardRunner``.

    runner = RewardRunner([RewardSpec("think_answer_format", weight=0.2), RewardSpec("mcq")],
                          timeout_s=30, on_error="none", max_reward_errors=100)
    batch = runner(samples, trajectories)     # batch.values [N, K] fp32, NaN = does not apply

Columns: a reward that returns a list gives one column named after its spec; a dict-returning reward
gives one column per sub-score, ``<spec name>/<key>`` (logged as ``rewards/<spec name>/<key>``). The
column list only grows: a column seen once is part of every later batch (NaN where not produced), so K
is stable; rewards that declare their keys (``@reward(keys=...)``) fix their columns before the first call.

Weights live in the config: ``RewardSpec.weight`` is a number (applied to every column of the reward,
except the sub-scores it declares as diagnostics, which get 0) or a dict ``{key: weight}`` for a
dict-returning reward (unnamed keys get 0).

Isolation: each reward is called once for the whole batch, under ``timeout_s``: in a killable worker
process for rewards named by reference (``file.py:fn``, ``pkg.module:fn``), in a thread for built-in ones
(``RewardSpec.isolation`` overrides; see ``isolation.py``). If that call raises, times out or returns
malformed output, it is called again sample by sample (each call under ``timeout_s``, all of them within
two timeouts after a batch timeout; one after another for sync rewards, concurrently for async ones), so
that one bad sample costs only its own value. A failed sample's value is NaN (``on_error="none"``: left out of that
component's normalisation) or 0 (``on_error="zero"``); each failure is counted and logged with the
sample id and a short traceback, and past ``max_reward_errors`` failures in the run the runner raises
``RewardErrorLimitExceeded``.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from mmreason.rewarding.calling import (
    NATIVE,
    TRL_FORMATS,
    RewardConfigError,
    RewardOutputError,
    coerce_output,
    plan_call,
    trl_arguments,
)
from mmreason.rewarding.columns import (
    ISOLATIONS,
    Bound,
    check_weight_keys,
    column_name,
    column_weight,
    isolation,
)
from mmreason.rewarding.isolation import (
    RewardTimeout,
    call_async,
    call_async_many,
    call_in_process,
    call_sync,
)
from mmreason.rewarding.records import ErrorRecord, RewardBatch, RewardErrorLimitExceeded, RewardSpec, align
from mmreason.rewarding.registry import reward_info
from mmreason.rewarding.resolve import resolve_reward
from mmreason.types import Sample, Trajectory

logger = logging.getLogger("mmreason.rewards")

ON_ERROR = {"none": math.nan, "zero": 0.0}


_ENGINE_DIR = str(Path(__file__).resolve().parent)


def short_traceback(err: BaseException, frames: int = 3, max_chars: int = 1_500) -> str:
    """The message of ``err`` under its last ``frames`` frames outside this package (the runner's own
    calling and threading frames say nothing about the reward), at most ``max_chars`` characters."""
    if isinstance(err, RewardTimeout):
        return str(err)
    stack = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(_ENGINE_DIR)]
    text = "".join(traceback.format_list(stack[-frames:])) + "".join(traceback.format_exception_only(type(err), err))
    text = text.strip()
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def _kind(err: BaseException) -> str:
    if isinstance(err, RewardTimeout):
        return "timeout"
    if isinstance(err, RewardOutputError):
        return "output"
    return "exception"


class RewardRunner:
    """Calls every configured reward on a batch and stacks the results into a ``RewardBatch``.

    specs:             the rewards, in column order.
    timeout_s:         limit for one call (the whole batch, or one sample in the fallback); None = none.
    on_error:          "none" (a failed sample's value is NaN) or "zero".
    max_reward_errors: failed sample-calls allowed over the runner's life before it raises; None = no limit.
    base_dir:          folder that ``file.py:function`` references are relative to (the config's folder).
    """

    def __init__(
        self,
        specs: Sequence[RewardSpec],
        *,
        timeout_s: float | None = 60.0,
        on_error: str = "none",
        max_reward_errors: int | None = 100,
        base_dir: str | Path | None = None,
    ) -> None:
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {sorted(ON_ERROR)}, got {on_error!r}")
        if timeout_s is not None and timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive or None, got {timeout_s}")
        self.timeout_s = timeout_s
        self.on_error = on_error
        self.max_reward_errors = max_reward_errors
        self.error_counts: dict[str, int] = {}
        self.calls = 0
        self._bound = [self._bind(spec, base_dir) for spec in specs]
        seen: set[str] = set()
        for bound in self._bound:
            if bound.spec.name in seen:
                raise RewardConfigError(f"two rewards are named {bound.spec.name!r}; give one a different name")
            seen.add(bound.spec.name)
        self._columns: list[tuple[Bound, str | None]] = []
        for bound in self._bound:
            for key in bound.keys:
                self._columns.append((bound, key))

    # ---- set-up --------------------------------------------------------------------------------

    @staticmethod
    def _bind(spec: RewardSpec, base_dir: str | Path | None) -> Bound:
        if not spec.name or "/" in spec.name:
            raise RewardConfigError(f"a reward name must be non-empty and contain no '/', got {spec.name!r}")
        if spec.trl_format not in TRL_FORMATS:
            raise RewardConfigError(f"reward {spec.name!r}: trl_format must be one of {TRL_FORMATS}")
        weights = spec.weight.values() if isinstance(spec.weight, dict) else [spec.weight]
        if not all(isinstance(w, (int, float)) and math.isfinite(w) for w in weights):
            raise RewardConfigError(f"reward {spec.name!r}: weights must be finite numbers, got {spec.weight!r}")
        if spec.isolation not in ISOLATIONS:
            raise RewardConfigError(
                f"reward {spec.name!r}: isolation must be one of {ISOLATIONS}, got {spec.isolation!r}"
            )
        fn = resolve_reward(spec.ref if spec.ref is not None else spec.name, base_dir)
        plan = plan_call(fn, spec.kwargs, spec.name)
        info = reward_info(fn)
        bound = Bound(spec, fn, plan, info.diagnostics if info else (), [])
        if info:  # a registered reward returns a plain list unless it declares its sub-score keys
            bound.keys = list(info.keys) or [None]
            bound.provisional = not info.keys
            if info.keys:
                check_weight_keys(bound)
        return bound

    @property
    def names(self) -> list[str]:
        """Column names known so far (complete before the first call when every reward declares its keys)."""
        return [column_name(b, key) for b, key in self._columns]

    @property
    def announced_names(self) -> list[str]:
        """``names`` plus the sub-scores each reward's weight dict names: the columns a run will have,
        known at start-up even for a reward that has not declared its keys."""
        out = list(self.names)
        for bound in self._bound:
            if isinstance(bound.spec.weight, dict):
                out += [n for n in (f"{bound.spec.name}/{k}" for k in bound.spec.weight) if n not in out]
        return out

    @property
    def total_errors(self) -> int:
        return sum(self.error_counts.values())

    # ---- calling -------------------------------------------------------------------------------

    def _invoke(
        self, bound: Bound, samples: list[Sample], trajectories: list[Trajectory], timeout_s: float | None = None
    ) -> Any:
        spec = bound.spec
        if bound.plan.convention == NATIVE:
            args: tuple = (samples, trajectories)
            kwargs = dict(spec.kwargs)
        else:
            args = ()
            kwargs = trl_arguments(samples, trajectories, bound.plan, spec.kwargs, spec.trl_format, name=spec.name)
        if bound.plan.is_async:
            call = call_async
        else:
            call = call_in_process if isolation(bound) == "process" else call_sync
        return call(bound.fn, args, kwargs, self.timeout_s if timeout_s is None else timeout_s)

    def _per_sample(
        self, bound: Bound, samples: list[Sample], trajectories: list[Trajectory], budget_s: float | None = None
    ) -> list[dict[str | None, list[float]] | BaseException]:
        """Call the reward on each sample alone; each result is its coerced output or the exception.

        ``budget_s`` caps the time of all the calls together (after a batch call timed out, the retry costs
        at most two more timeouts, not N of them): samples not reached in time are recorded as timeouts."""
        if bound.plan.is_async and bound.plan.convention == NATIVE:
            calls = [(([s], [t]), dict(bound.spec.kwargs)) for s, t in zip(samples, trajectories)]
            raw = call_async_many(bound.fn, calls, self.timeout_s)
        else:
            raw = []
            deadline = None if budget_s is None else time.monotonic() + budget_s
            for s, t in zip(samples, trajectories):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raw.append(RewardTimeout("not retried: the batch call timed out and the retry budget is spent"))
                    continue
                timeout = self.timeout_s if left is None or self.timeout_s is None else min(self.timeout_s, left)
                try:
                    raw.append(self._invoke(bound, [s], [t], timeout))
                except RewardConfigError:
                    raise
                except Exception as err:
                    raw.append(err)
        results: list[dict[str | None, list[float]] | BaseException] = []
        for out in raw:
            if isinstance(out, BaseException):
                results.append(out)
                continue
            try:
                results.append(coerce_output(out, 1))
            except Exception as err:  # RewardOutputError, or a value whose __float__ raises
                results.append(err)
        return results

    def _score(
        self, bound: Bound, samples: list[Sample], trajectories: list[Trajectory], errors: list[ErrorRecord]
    ) -> tuple[dict[str | None, list[float]], bool]:
        """One reward's ``{key: [N] values}`` for the batch, failed samples filled per ``on_error``;
        and whether any sample produced output."""
        n = len(trajectories)
        try:
            return coerce_output(self._invoke(bound, samples, trajectories), n), True
        except RewardConfigError:
            raise
        except Exception as err:
            batch_error = err
        # After a batch timeout the retry gets two timeouts in all, not one per sample (N x timeout).
        budget = 2 * self.timeout_s if isinstance(batch_error, RewardTimeout) and self.timeout_s else None
        results = [batch_error] if n == 1 else self._per_sample(bound, samples, trajectories, budget)
        if n > 1 and not any(isinstance(r, BaseException) for r in results):
            logger.warning(
                "reward %r failed on the whole batch (%s) but on no single sample; kept the per-sample scores",
                bound.spec.name,
                short_traceback(batch_error, frames=1, max_chars=300),
            )
        keys: list[str | None] = [] if bound.provisional else list(bound.keys)
        for r in results:
            if not isinstance(r, BaseException):
                keys.extend(k for k in r if k not in keys)
        if not keys:
            keys = [None]  # every sample failed before the reward's shape was known
        fill = ON_ERROR[self.on_error]
        merged: dict[str | None, list[float]] = {key: [math.nan] * n for key in keys}
        for i, r in enumerate(results):
            if isinstance(r, BaseException):
                record = ErrorRecord(bound.spec.name, trajectories[i].sample_id, i, _kind(r), short_traceback(r))
                errors.append(record)
                logger.warning(
                    "reward %r failed on sample %r (%s):\n%s",
                    record.reward,
                    record.sample_id,
                    record.kind,
                    record.message,
                )
                for key in keys:
                    merged[key][i] = fill
            else:
                for key, values in r.items():
                    merged[key][i] = values[0]
        return merged, any(not isinstance(r, BaseException) for r in results)

    def _learn(self, bound: Bound, output: dict[str | None, list[float]], produced: bool) -> None:
        """Add columns for keys seen for the first time (the column list only grows, except that a
        registered reward's assumed plain column gives way to its sub-scores on its first output)."""
        if bound.provisional and produced:
            bound.provisional = False
            if None not in output:
                bound.keys.remove(None)
                self._columns = [(b, k) for b, k in self._columns if not (b is bound and k is None)]
            else:
                check_weight_keys(bound)  # a weight dict on a plain list is a config error
        new = [key for key in output if key not in bound.keys]
        if not new:
            return
        bound.keys.extend(new)
        index = max((i for i, (b, _) in enumerate(self._columns) if b is bound), default=None)
        if index is None:  # first columns of this reward: after those of the rewards before it
            order = self._bound.index(bound)
            index = max((i for i, (b, _) in enumerate(self._columns) if self._bound.index(b) < order), default=-1)
        for offset, key in enumerate(new, start=1):
            self._columns.insert(index + offset, (bound, key))
        check_weight_keys(bound)

    def __call__(self, samples: Sequence[Sample], trajectories: Sequence[Trajectory]) -> RewardBatch:
        """Score ``trajectories`` (N) against their ``samples`` (N aligned, or one per distinct sample id)."""
        trajectories = list(trajectories)
        samples = align(samples, trajectories)
        n = len(trajectories)
        if n == 0:
            weights = torch.tensor([column_weight(b, key) for b, key in self._columns], dtype=torch.float32)  # [K]
            return RewardBatch(torch.zeros(0, len(self._columns)), self.names, weights, [])
        errors: list[ErrorRecord] = []
        outputs: dict[str, dict[str | None, list[float]]] = {}
        for bound in self._bound:
            output, produced = self._score(bound, samples, trajectories, errors)
            self._learn(bound, output, produced)
            outputs[bound.spec.name] = output
        values = torch.full((n, len(self._columns)), math.nan, dtype=torch.float32)  # [N, K]
        for k, (bound, key) in enumerate(self._columns):
            column = outputs[bound.spec.name].get(key)
            if column is not None:
                values[:, k] = torch.tensor(column, dtype=torch.float32)
        weights = torch.tensor([column_weight(b, key) for b, key in self._columns], dtype=torch.float32)  # [K]
        self.calls += 1
        for record in errors:
            self.error_counts[record.reward] = self.error_counts.get(record.reward, 0) + 1
        batch = RewardBatch(values, self.names, weights, errors)
        self._check_limit(errors)
        return batch

    def _check_limit(self, errors: list[ErrorRecord]) -> None:
        limit = self.max_reward_errors
        if limit is None or self.total_errors <= limit:
            return
        counts = ", ".join(f"{name}: {count}" for name, count in sorted(self.error_counts.items()))
        last = errors[-1] if errors else None
        detail = (
            ""
            if last is None
            else f"\nlast failure: reward {last.reward!r} on sample {last.sample_id!r} ({last.kind}):\n{last.message}"
        )
        raise RewardErrorLimitExceeded(
            f"{self.total_errors} reward calls failed, more than max_reward_errors={limit} ({counts}). "
            f"Fix the reward (try it with `mmreason reward NAME --completion ...`) or raise max_reward_errors."
            + (detail if last else "")
        )
