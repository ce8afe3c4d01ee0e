"""Group metrics (``TaskPack.breakdowns``): one per value of a field, list fields in each group, one score per doc."""

from __future__ import annotations

import math

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.types import Sample


def _doc(i, **meta):
    return Sample(id=str(i), messages=[], answer="x", meta=meta)


def test_one_metric_per_value_list_fields_in_each_group_and_slug_collisions():
    docs = [
        _doc(0, skills=["a b", "c"], grade="High School"),
        _doc(1, skills=["c"], grade="high-school"),
        _doc(2, grade=None),
    ]
    calls = []

    def score(sample, completion):
        calls.append(sample.id)
        return 1.0 if completion == "right" else 0.0

    cached = once_per_doc(score)
    metrics = group_metrics(docs, ("skills", "grade"), cached)
    assert list(metrics) == [
        "accuracy_skills_a_b",
        "accuracy_skills_c",
        "accuracy_grade_high_school",
        "accuracy_grade_high_school_2",
    ]  # "High School" < "high-school": sorted, then _2
    values = {name: fn(docs[0], "right") for name, fn in metrics.items()}
    assert values["accuracy_skills_a_b"] == 1.0 and values["accuracy_skills_c"] == 1.0
    assert values["accuracy_grade_high_school"] == 1.0 and math.isnan(values["accuracy_grade_high_school_2"])
    assert calls == ["0"]  # four group metrics of one doc: one score
    assert all(math.isnan(fn(docs[2], "right")) for fn in metrics.values())  # no value: in no group


def test_a_new_sample_object_is_scored_again_even_with_the_same_id_and_completion():
    cached = once_per_doc(lambda sample, completion: float(sample.answer == completion))
    assert cached(Sample(id="1", messages=[], answer="a"), "a") == 1.0
    assert cached(Sample(id="1", messages=[], answer="b"), "a") == 0.0  # another file's doc 1: not the cached 1.0
