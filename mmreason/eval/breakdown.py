"""Accuracy per group, the way published benchmarks' scores files break their accuracy down: metrics a pack
builds from its loaded docs (``TaskPack.breakdowns``).

``group_metrics(samples, fields, score, prefix)`` builds one metric per (field, value) found in the docs'
``meta``: ``{prefix}_{field}_{value}`` is the doc's score when the doc is in that group and NaN elsewhere, so the
harness's mean over the docs where it applies is that group's accuracy and its ``_n`` the group's size. A field
whose value is a list (MathVista's ``skills``, DocVQA's ``question_types``) puts the doc in each of its groups,
as MathVista's ``calculate_score.py`` counts skills. Values are named by a slug (lower case, ``_`` for anything
else); two values with one slug get ``_2``, ``_3``, ... in sorted order.

``score(sample, completion)`` runs once per doc and completion however many groups the doc is in (the last
result is kept).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from mmreason.types import Sample

Metric = Callable[[Sample, str], float]


def slug(value: Any) -> str:
    return re.sub(r"[^0-9a-z]+", "_", str(value).lower()).strip("_") or "none"


def group_values(sample: Sample, field: str) -> list[str]:
    """The groups of ``sample`` under ``field`` (a list field: each entry; None / absent: none)."""
    value = sample.meta.get(field)
    if value is None or value == "":
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    return [str(v) for v in items if v is not None and str(v) != ""]


def once_per_doc(score: Metric) -> Metric:
    """``score`` remembering its last (sample, completion): every group metric of a doc reuses one result."""
    last: dict[str, Any] = {}

    def cached(sample: Sample, completion: str) -> float:
        # the sample object itself is held (not its id()), so a freed sample's address can never match
        if last.get("sample") is not sample or last.get("completion") != completion:
            last.update(sample=sample, completion=completion, value=score(sample, completion))
        return last["value"]

    cached.__name__ = cached.__qualname__ = getattr(score, "__name__", "score")
    cached.__doc__ = score.__doc__
    cached.__module__ = getattr(score, "__module__", __name__)
    return cached


def in_group(sample: Sample, field: str, value: str) -> bool:
    """Whether ``sample`` is in the group ``value`` of ``field`` (``group_values`` without building the list)."""
    found = sample.meta.get(field)
    if isinstance(found, (list, tuple)):
        return any(item == value or (item is not None and str(item) == value) for item in found)
    return found is not None and (found == value or str(found) == value)


def _group_metric(score: Metric, field: str, value: str, name: str) -> Metric:
    def metric(sample: Sample, completion: str) -> float:
        return score(sample, completion) if in_group(sample, field, value) else math.nan

    metric.__name__ = metric.__qualname__ = name
    metric.__module__ = getattr(score, "__module__", __name__)
    metric.__doc__ = f"Accuracy on the docs whose {field} is {value!r} (NaN elsewhere)."
    return metric


def group_metrics(
    samples: Sequence[Sample], fields: Sequence[str], score: Metric, prefix: str = "accuracy"
) -> dict[str, Metric]:
    """``{prefix}_{field}_{slug(value)}`` for every value of every field in ``samples`` (see the module doc)."""
    out: dict[str, Metric] = {}
    for field in fields:
        values: list[str] = []
        for sample in samples:
            values += [v for v in group_values(sample, field) if v not in values]
        for value in sorted(values):
            base = name = f"{prefix}_{field}_{slug(value)}"
            k = 1
            while name in out:
                k += 1
                name = f"{base}_{k}"
            out[name] = _group_metric(score, field, value, name)
    return out
