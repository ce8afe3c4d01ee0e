"""Bounded summaries of a run's step series for the report, built in one pass over the rows.

``Curve``: the (step, value) points of one metric, in at most ``buckets`` step buckets, each keeping its
lowest and highest point (a spike survives downsampling); the bucket width doubles whenever a step falls past
the last bucket, so memory stays O(buckets) however long the run. ``Ranges``: the steps an alarm held, as
merged [first, last] ranges; past ``limit`` ranges the closest ones are joined (gaps up to a doubling width).
"""

from __future__ import annotations

import numpy as np

BUCKETS = 400  # step buckets per curve: <= 800 points drawn, about twice the chart's width in pixels
MAX_RANGES = 200  # alarm ranges kept per alarm


class Curve:
    def __init__(self, buckets: int = BUCKETS) -> None:
        self.buckets, self.width = buckets, 1
        self.lo: dict[int, tuple[float, float]] = {}  # bucket -> (step, value) with the lowest value
        self.hi: dict[int, tuple[float, float]] = {}  # ... and the highest
        self.n = 0

    def add(self, step: float, value: float) -> None:
        self.n += 1
        b = int(step // self.width)
        while b >= self.buckets:
            self._coarsen()
            b = int(step // self.width)
        lo, hi = self.lo.get(b), self.hi.get(b)
        if lo is None or value < lo[1]:
            self.lo[b] = (step, value)
        if hi is None or value > hi[1]:
            self.hi[b] = (step, value)

    def add_many(self, steps: np.ndarray, values: np.ndarray) -> None:
        """``add`` of each (step, value) pair (finite values), a chunk at a time in numpy."""
        if not len(steps):
            return
        self.n += len(steps)
        while int(steps.max() // self.width) >= self.buckets:
            self._coarsen()
        b = (steps // self.width).astype(np.int64)
        order = np.lexsort((values, b))
        bs = b[order]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(bs)) + 1))
        ends = np.concatenate((starts[1:], [len(bs)])) - 1
        for s, e in zip(starts.tolist(), ends.tolist()):
            bucket, i, j = int(bs[s]), order[s], order[e]
            lo, hi = self.lo.get(bucket), self.hi.get(bucket)
            if lo is None or values[i] < lo[1]:
                self.lo[bucket] = (float(steps[i]), float(values[i]))
            if hi is None or values[j] > hi[1]:
                self.hi[bucket] = (float(steps[j]), float(values[j]))

    def _coarsen(self) -> None:
        self.width *= 2
        lo, hi = self.lo, self.hi
        self.lo, self.hi = {}, {}
        for b, p in lo.items():
            if b // 2 not in self.lo or p[1] < self.lo[b // 2][1]:
                self.lo[b // 2] = p
        for b, p in hi.items():
            if b // 2 not in self.hi or p[1] > self.hi[b // 2][1]:
                self.hi[b // 2] = p

    def points(self) -> list[tuple[float, float]]:
        """The kept points in step order (a bucket's low and high point both, when they differ)."""
        return sorted(set(self.lo.values()) | set(self.hi.values()))


def downsample(points: list[tuple[float, float]], buckets: int = BUCKETS) -> list[tuple[float, float]]:
    """``points`` through a ``Curve`` when there are more than twice ``buckets`` of them."""
    if len(points) <= 2 * buckets:
        return points
    curve = Curve(buckets)
    x0 = min(x for x, _ in points)
    for x, y in points:
        curve.add(x - x0, y)
    return [(x + x0, y) for x, y in curve.points()]


class Ranges:
    """The steps one alarm held, as merged ranges: ``add(step)`` in step order (a step at most one past the
    last range's end extends it); ``held`` counts every step added."""

    def __init__(self, limit: int = MAX_RANGES) -> None:
        self.limit, self.gap = limit, 1
        self.ranges: list[list[float]] = []
        self.held = 0

    def add_many(self, steps: np.ndarray) -> None:
        """``add`` of each step (in order), a chunk at a time: runs of consecutive steps added as one."""
        if not len(steps):
            return
        breaks = np.flatnonzero(np.diff(steps) != 1)
        starts = np.concatenate(([0], breaks + 1))
        ends = np.concatenate((breaks, [len(steps) - 1]))
        for s, e in zip(starts.tolist(), ends.tolist()):
            self.add(float(steps[s]), float(steps[e]), held=e - s + 1)

    def add(self, step: float, last: float | None = None, held: int = 1) -> None:
        """The alarm held at ``step`` (through ``last``: ``held`` steps)."""
        last = step if last is None else last
        self.held += held
        if self.ranges and self.ranges[-1][0] <= step <= self.ranges[-1][1] + self.gap:
            self.ranges[-1][1] = max(self.ranges[-1][1], last)
            return
        self.ranges.append([step, last])
        while len(self.ranges) > self.limit:
            self.gap *= 2
            merged = [self.ranges[0]]
            for r in self.ranges[1:]:
                if r[0] <= merged[-1][1] + self.gap:
                    merged[-1][1] = max(merged[-1][1], r[1])
                else:
                    merged.append(r)
            self.ranges = merged
