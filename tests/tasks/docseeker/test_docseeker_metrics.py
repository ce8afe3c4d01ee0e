"""Eval metrics of the DocSeeker pack on hand-worked examples."""

from __future__ import annotations

import math

import pytest
from docseeker_helpers import completion

from mmreason.taskpack import TASKS
from mmreason.types import Sample


def _sample(pages: list[int], num_pages: int, answer="Cedar") -> Sample:
    return Sample(id="m", messages=[], answer=answer, meta={"evidence_pages": pages, "num_pages": num_pages})


def test_evidence_precision_recall_f1_and_accuracy():
    m = TASKS.get("docseeker").metrics
    s, text = _sample([3, 4, 5], 8), completion([2, 3], "cedar")
    assert m["evidence_precision"](s, text) == pytest.approx(0.5)
    assert m["evidence_recall"](s, text) == pytest.approx(1 / 3)
    assert m["evidence_f1"](s, text) == pytest.approx(0.4)  # 2 * 1 / (2 + 3)
    assert m["accuracy"](s, text) == 1.0  # case is ignored
    # "Cedars" vs "Cedar": ANLS 1 - 1/6 >= 0.5; "Elm" vs "Cedar": 1 - 5/5 = 0 -> wrong
    assert m["anls"](s, completion([3], "Cedars")) == pytest.approx(5 / 6)
    assert m["accuracy"](s, completion([3], "Elm")) == 0.0
    assert m["evidence_precision"](s, "no answer at all") == 0.0


def test_no_specific_page_and_length_buckets_are_nan_outside():
    m = TASKS.get("docseeker").metrics
    assert math.isnan(m["evidence_f1"](_sample([-1], 5), completion([1], "x")))
    short, mid, long = _sample([2], 10), _sample([2], 11), _sample([2], 31)
    text = completion([2], "Cedar")
    assert m["accuracy_len_le10"](short, text) == 1.0 and math.isnan(m["accuracy_len_le10"](mid, text))
    assert m["evidence_f1_len_11_30"](mid, text) == 1.0 and math.isnan(m["evidence_f1_len_11_30"](long, text))
    assert m["evidence_recall_len_gt30"](long, text) == 1.0 and math.isnan(m["evidence_recall_len_gt30"](short, text))
