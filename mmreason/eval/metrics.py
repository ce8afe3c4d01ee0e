"""Aggregation of per-doc scores: the mean and its standard error, as lmms-eval reports them.

For per-doc scores x_1..x_n of one metric:

    value  = mean(x) = (1/n) * sum_i x_i
    stderr = s / sqrt(n),   s = sqrt( sum_i (x_i - mean)^2 / (n - 1) )      (sample std, ddof = 1)

which is lmms-eval's ``mean_stderr`` (``lmms_eval/api/metrics.py``: ``sample_stddev(arr) / sqrt(len(arr))``).
With n < 2 the standard error is undefined and reported as None ("N/A" in the table), as lmms-eval does.
A score that is NaN means "does not apply to this doc" and is left out of that metric's n.
Sums use ``math.fsum``, so the result does not depend on the order the docs were scored in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricSummary:
    value: float | None  # None when no doc has a score
    stderr: float | None
    n: int


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def sample_stddev(values: Sequence[float]) -> float:
    """Standard deviation with Bessel's correction (ddof = 1); needs len(values) >= 2."""
    mu = mean(values)
    return math.sqrt(math.fsum((x - mu) ** 2 for x in values) / (len(values) - 1))


def mean_stderr(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    return sample_stddev(values) / math.sqrt(len(values))


def summarize(values: Iterable[float | None]) -> MetricSummary:
    """Mean, stderr and n of one metric's per-doc scores (None / NaN left out)."""
    kept = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not kept:
        return MetricSummary(None, None, 0)
    return MetricSummary(mean(kept), mean_stderr(kept), len(kept))


def aggregate(records: list[dict], metric_names: Sequence[str]) -> dict[str, MetricSummary]:
    """metric -> summary over the records that have scores (failed docs carry none)."""
    scored = [r for r in records if "scores" in r]
    return {name: summarize(r["scores"].get(name) for r in scored) for name in metric_names}
