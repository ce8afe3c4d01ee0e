"""Eval metrics of the DocSeeker pack, per doc (the harness takes the mean; NaN = does not apply).

- ``accuracy``: 1 if the answer's ANLS >= 0.5 (the DocVQA rule), ``anls``: ANLS with that threshold;
- ``evidence_precision`` / ``evidence_recall`` / ``evidence_f1``: of the cited ``evidence_pages`` (the
  answer dict's, 1-based) against the gold pages; NaN for gold ``[-1]``; citing nothing scores 0;
- each again by document length: ``<metric>_len_le10`` (<= 10 pages), ``_len_11_30``, ``_len_gt30``
  (NaN for docs outside the bucket, so each bucket's mean is over its own docs).

The answer is read as the rewards read it (``parsing.final_answer``: the ``answer`` value of the
``<answer>`` dict, else the answer body, else the last ``\\boxed{}``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mmreason.parsing import final_answer
from mmreason.rewards.evidence import cited_pages
from mmreason.rewards.textmatch import anls_score
from mmreason.types import Sample

Metric = Callable[[Sample, str], float]
LENGTH_BUCKETS = {"le10": (1, 10), "11_30": (11, 30), "gt30": (31, math.inf)}


def _references(sample: Sample) -> list[str]:
    answer = sample.answer
    return [str(a) for a in answer] if isinstance(answer, (list, tuple)) else [str(answer)]


def docseeker_anls(sample: Sample, completion: str) -> float:
    """ANLS of the answer (threshold 0.5: below it scores 0)."""
    prediction = final_answer(completion)
    return anls_score(prediction, _references(sample), 0.5) if prediction else 0.0


def docseeker_accuracy(sample: Sample, completion: str) -> float:
    """1 if the answer's ANLS against the best reference is >= 0.5."""
    return float(docseeker_anls(sample, completion) >= 0.5)


def _page_counts(sample: Sample, completion: str) -> tuple[int, int, int] | None:
    """(|cited & gold|, |cited|, |gold|), or None when the gold is "no specific page"."""
    gold = {p for p in sample.meta.get("evidence_pages", []) if p > 0}
    if not gold:
        return None
    cited = cited_pages(completion) or set()
    return len(cited & gold), len(cited), len(gold)


def docseeker_evidence_precision(sample: Sample, completion: str) -> float:
    """|cited & gold| / |cited| (0 when nothing is cited; NaN for a [-1] gold)."""
    counts = _page_counts(sample, completion)
    if counts is None:
        return math.nan
    hits, cited, _ = counts
    return hits / cited if cited else 0.0


def docseeker_evidence_recall(sample: Sample, completion: str) -> float:
    """|cited & gold| / |gold| (NaN for a [-1] gold)."""
    counts = _page_counts(sample, completion)
    return math.nan if counts is None else counts[0] / counts[2]


def docseeker_evidence_f1(sample: Sample, completion: str) -> float:
    """F1 of the cited pages, 2pq / (p + q); 0 without a hit (NaN for a [-1] gold)."""
    counts = _page_counts(sample, completion)
    if counts is None:
        return math.nan
    hits, cited, gold = counts
    return 0.0 if hits == 0 else 2 * hits / (cited + gold)


def by_length(fn: Metric, bucket: str) -> Metric:
    """``fn`` on documents whose page count falls in ``bucket``, NaN elsewhere."""
    lo, hi = LENGTH_BUCKETS[bucket]

    def metric(sample: Sample, completion: str) -> float:
        pages = int(sample.meta.get("num_pages") or len(sample.pages))
        return fn(sample, completion) if lo <= pages <= hi else math.nan

    name = f"{fn.__name__}_len_{bucket}"
    metric.__name__ = metric.__qualname__ = name
    metric.__doc__ = f"{(fn.__doc__ or '').strip().splitlines()[0]} Only documents of {bucket} pages (else NaN)."
    return metric


BASE_METRICS: dict[str, Metric] = {
    "accuracy": docseeker_accuracy,
    "anls": docseeker_anls,
    "evidence_precision": docseeker_evidence_precision,
    "evidence_recall": docseeker_evidence_recall,
    "evidence_f1": docseeker_evidence_f1,
}


def docseeker_metrics() -> dict[str, Metric]:
    """Every metric of the pack: the base ones, then each split by document length."""
    metrics = dict(BASE_METRICS)
    for name in ("accuracy", "evidence_precision", "evidence_recall", "evidence_f1"):
        for bucket in LENGTH_BUCKETS:
            metrics[f"{name}_len_{bucket}"] = by_length(BASE_METRICS[name], bucket)
    return metrics
