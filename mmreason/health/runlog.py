"""A run's ``metrics.jsonl`` read once, row by row, into what the report draws: a bounded ``Curve`` per
charted metric and the ``Ranges`` each alarm held (the logged ``alarm/<name>`` metrics; for a run logged
without them, the alarms replayed with the default thresholds by a ``HealthMonitor``, whose state per row is
O(1) in the run's length). Memory is O(charts x buckets + alarms x ranges) whatever the number of rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, KeysView
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from mmreason.health.config import HealthConfig
from mmreason.health.downsample import Curve, Ranges
from mmreason.health.monitor import HealthMonitor
from mmreason.health.records import Malformed, iter_records, step_of

CURVES = (  # (title, metric-key predicate)
    ("training reward", lambda k: k == "reward/mean" or (k.startswith("rewards/") and k.endswith("/mean"))),
    ("held-out (in-training eval)", lambda k: k.startswith("eval/") and not k.endswith("/n_failed")),
    ("entropy", lambda k: k == "entropy"),
    ("KL", lambda k: k == "kl"),
    ("step time split (s)", lambda k: k.startswith("time/") and k not in ("time/video_decode",)),
    (
        "truncated / zero-spread groups",
        lambda k: k in ("completion/clipped_ratio", "frac_reward_zero_std", "episodes/cut_share"),
    ),
    ("answers", lambda k: k in ("answers/top_share", "answers/gold_top_share")),
)
MAX_SERIES = 64  # metric series drawn per run (a row of a thousand eval keys must not draw a thousand lines)
MAX_ALARMS = 32  # alarm names followed
MAX_KEYS = 10_000  # metric names remembered as charted or not


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass
class RunLog:
    curves: dict[str, Curve] = field(default_factory=dict)  # metric key -> its curve
    alarms: dict[str, Ranges] = field(default_factory=dict)  # alarm -> the steps it held
    reasons: dict[str, str] = field(default_factory=dict)  # alarm -> its first reason (replayed runs)
    first: int | None = None
    last: int | None = None
    rows: int = 0
    replayed: bool = False
    series_left_out: int = 0

    def charts(self, prefix: str = "") -> list[tuple[str, dict[str, list[tuple[float, float]]]]]:
        out = []
        for title, wanted in CURVES:
            out.append((title, {prefix + k: c.points() for k, c in sorted(self.curves.items()) if wanted(k)}))
        return out


class _Layout:
    """Pending rows that hold the same followed keys: their steps and values, read by one ``itemgetter``."""

    def __init__(self, cols: tuple[str, ...]) -> None:
        self.cols = cols
        self.get: Callable[[dict], Any] = (
            itemgetter(*cols) if len(cols) > 1 else ((lambda row: (row[cols[0]],)) if cols else (lambda row: ()))
        )
        self.steps: list[int] = []
        self.values: list[Any] = []


class _Columns:
    """Rows' charted and alarm values gathered ``CHUNK`` rows at a time, then handed to the curves and ranges
    in numpy (a Python call per value would cost more than reading the row)."""

    CHUNK = 8192
    MAX_LAYOUTS = 64

    def __init__(self, log: RunLog) -> None:
        self.log = log
        self.cols: list[str] = []
        self.kind: dict[str, str | None] = {}  # key -> "curve" / "alarm" / None
        self.layouts: dict[tuple[str, ...], _Layout] = {}
        self.layout = _Layout(())
        self.recent: list[tuple[Any, _Layout]] = []
        self.pending = 0

    def keys(self, keys: KeysView[str]) -> None:
        """Follow the keys of a row whose key set differs from the last row's."""
        for seen, layout in self.recent:
            if keys == seen:
                self.layout = layout
                return
        for k in [k for k in keys if k not in self.kind]:
            kind = "alarm" if k.startswith("alarm/") else "curve" if any(w(k) for _, w in CURVES) else None
            if kind == "curve" and sum(1 for v in self.kind.values() if v == "curve") >= MAX_SERIES:
                self.log.series_left_out, kind = self.log.series_left_out + 1, None
            if kind == "alarm" and sum(1 for v in self.kind.values() if v == "alarm") >= MAX_ALARMS:
                kind = None
            if len(self.kind) < MAX_KEYS or kind:
                self.kind[k] = kind
            if kind:
                self.cols.append(k)
        cols = tuple(k for k in self.cols if k in keys)
        if cols not in self.layouts:
            if len(self.layouts) >= self.MAX_LAYOUTS:
                self.flush()
                self.layouts.clear()
            self.layouts[cols] = _Layout(cols)
        self.layout = self.layouts[cols]
        self.recent = [(keys, self.layout), *self.recent[:3]]  # runs alternate a few key sets (eval rows)

    def add(self, step: int, row: dict[str, Any]) -> None:
        self.layout.steps.append(step)
        self.layout.values.append(self.layout.get(row))
        self.pending += 1
        if self.pending >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        held: dict[str, list[np.ndarray]] = {}  # alarm -> steps it held, from each layout
        for layout in self.layouts.values():
            if layout.steps:
                self._flush(layout, held)
        for name, parts in held.items():  # in step order across the layouts (eval rows hold other keys)
            self.log.alarms.setdefault(name, Ranges()).add_many(np.sort(np.concatenate(parts)))
        self.pending = 0

    def _flush(self, layout: _Layout, held: dict[str, list[np.ndarray]]) -> None:
        steps = np.asarray(layout.steps, dtype=np.float64)
        try:
            table = np.fromiter(
                chain.from_iterable(layout.values), dtype=np.float64, count=len(steps) * len(layout.cols)
            ).reshape(len(steps), len(layout.cols))
        except (TypeError, ValueError):  # a string, list or object among the values: the slow way
            table = np.array(
                [[_num(v) if _num(v) is not None else np.nan for v in r] for r in layout.values], dtype=np.float64
            ).reshape(len(steps), len(layout.cols))
        layout.steps, layout.values = [], []
        for j, key in enumerate(layout.cols):
            col = table[:, j]
            if self.kind[key] == "alarm":
                held.setdefault(key[len("alarm/") :], []).append(steps[np.isfinite(col) & (col != 0)])
            else:
                ok = np.isfinite(col)
                self.log.curves.setdefault(key, Curve()).add_many(steps[ok], col[ok])


def read_run_log(path: Path, bad: Malformed) -> RunLog:
    log = RunLog()
    columns = _Columns(log)
    replay: dict[str, Ranges] = {}
    monitor = HealthMonitor(HealthConfig(), lambda *a, **k: None, say=lambda _: None)
    logged = False  # a row held alarm/<name> metrics: no replay
    last_keys: Any = None
    for n, row in iter_records(path, bad):
        step = step_of(row)
        if step is None:
            bad.add(path, n, "step is not an integer in [0, 2**53]")
            continue
        log.rows += 1
        if log.first is None or step < log.first:
            log.first = step
        if log.last is None or step > log.last:
            log.last = step
        keys = row.keys()
        if keys != last_keys:
            columns.keys(keys)
            last_keys = keys
            logged = logged or any(k.startswith("alarm/") for k in keys)
        columns.add(step, row)
        if not logged:
            for name, on in monitor.check(step, {k: v for k, v in row.items() if k != "step"}).items():
                replay.setdefault(name[len("alarm/") :], Ranges())
                if on:
                    replay[name[len("alarm/") :]].add(step)
    columns.flush()
    if not logged:
        log.alarms, log.replayed = replay, bool(replay)
        log.reasons = dict(monitor.first_reasons)
    return log
