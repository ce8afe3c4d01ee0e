"""Aggregation: means and standard errors on hand-worked values, and against the statistics module."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason.eval.metrics import aggregate, mean_stderr, sample_stddev, summarize


def test_known_values():
    # [1, 0, 1, 1]: mean 0.75; squared deviations 0.0625 * 3 + 0.5625 = 0.75; / (n - 1) = 0.25;
    # sample std 0.5; stderr 0.5 / sqrt(4) = 0.25.
    s = summarize([1.0, 0.0, 1.0, 1.0])
    assert s.value == 0.75 and s.n == 4
    assert s.stderr == pytest.approx(0.25, abs=1e-15)
    # [2, 4, 4, 4, 5, 5, 7, 9]: mean 5; squared deviations sum to 32; sample variance 32 / 7;
    # stderr sqrt(32 / 7) / sqrt(8) = sqrt(4 / 7) = 0.7559289...
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert sample_stddev(values) == pytest.approx(math.sqrt(32 / 7), rel=1e-15)
    assert mean_stderr(values) == pytest.approx(math.sqrt(4 / 7), rel=1e-15)


def test_undefined_stderr_and_missing_scores():
    assert summarize([0.5]).stderr is None  # n < 2: "N/A", as lmms-eval
    assert summarize([]).value is None and summarize([]).n == 0
    # None / NaN mean "does not apply": left out of the mean and of n.
    s = summarize([1.0, None, float("nan"), 0.0])
    assert (s.value, s.n) == (0.5, 2)
    assert s.stderr == pytest.approx(math.sqrt(0.5) / math.sqrt(2))


def test_aggregate_leaves_out_failed_docs():
    records = [
        {"doc_id": "a", "scores": {"acc": 1.0, "f1": 0.5}},
        {"doc_id": "b", "error": "MediaError: ..."},
        {"doc_id": "c", "scores": {"acc": 0.0, "f1": float("nan")}},
    ]
    out = aggregate(records, ["acc", "f1"])
    assert (out["acc"].value, out["acc"].n) == (0.5, 2)
    assert (out["f1"].value, out["f1"].n, out["f1"].stderr) == (0.5, 1, None)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(min_value=-1e3, max_value=1e3, allow_nan=False), min_size=2, max_size=40),
    st.randoms(use_true_random=False),
)
def test_matches_statistics_and_ignores_order(values, rng: random.Random):
    s = summarize(values)
    assert s.value == pytest.approx(statistics.fmean(values), abs=1e-9)
    assert s.stderr == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)), rel=1e-9, abs=1e-9)
    shuffled = list(values)
    rng.shuffle(shuffled)
    assert summarize(shuffled) == s  # exactly: a resumed run scores docs in another order
