"""Eval metrics of the ``mmlongbench_doc`` pack: MMLongBench-Doc's scores (``rewards/mmlongbench.py``) per question, the
harness takes the mean over the questions where a metric applies (NaN elsewhere).

Rows in the DocSeeker loader's own shape score too (their lower-case ``answer_format`` read as the
benchmark's; the pack without a data file evaluates DocSeeker's generated documents this way).

- ``accuracy``: the benchmark's generalized accuracy (the mean of the per-format score);
- ``answerable_recall`` (answerable questions only) and ``answered_precision`` (questions the model did not
  call "Not answerable": the score when the reference is answerable, else 0); their means are the
  benchmark's recall and precision, and the derived ``f1`` = 2PR / (P + R) is its F1;
- ``accuracy_format_<f>`` per answer format, ``accuracy_source_<s>`` per evidence source (text, table,
  chart, image, layout; a question with two sources counts in both, as in the benchmark),
  ``accuracy_single_page`` (one evidence page), ``accuracy_cross_page`` (several, answerable),
  ``accuracy_unanswerable``, ``accuracy_len_<bucket>`` by the document's page count;
- ``evidence_precision`` / ``_recall`` / ``_f1`` of the cited pages (the docseeker pack's metrics, real page numbers);
- ``retrieval_recall``: the share of gold evidence pages among the pages page retrieval kept (recall@K of
  the retriever alone; NaN without retrieval or without gold pages).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mmreason.parsing import final_answer
from mmreason.rewards.mmlongbench import FORMATS, benchmark_format, is_not_answerable, score
from mmreason.tasks.mmlongbench_doc.data import DOCSEEKER
from mmreason.types import Sample

Metric = Callable[[Sample, str], float]
# The benchmark's evidence-source labels -> the names of the breakdown.
SOURCES = {
    "Pure-text (Plain-text)": "text",
    "Table": "table",
    "Chart": "chart",
    "Figure": "image",
    "Generalized-text (Layout)": "layout",
}
LENGTH_BUCKETS = {"le20": (1, 20), "21_50": (21, 50), "51_100": (51, 100), "gt100": (101, math.inf)}
RESULTS_NOTE = (
    "MMLongBench-Doc scoring by the benchmark's rules; the answer is taken from the model's "
    "<answer> by rule (parsing.final_answer), not extracted from free text by an LLM as in the "
    "paper's pipeline"
)


def question_score(sample: Sample, completion: str) -> float:
    """The benchmark's score of this completion's answer."""
    return score(sample.answer, final_answer(completion) or "", sample.meta["answer_format"])


def _gold_pages(sample: Sample) -> list[int]:
    return [p for p in sample.meta.get("evidence_pages", []) if p > 0]


def _published_pages(sample: Sample) -> list[int]:
    """The evidence pages as the benchmark lists them (a row whose pages are out of range keeps its list for
    the single- / cross-page breakdown, though the evidence-page metrics leave it out)."""
    published = sample.meta.get("published_evidence_pages")
    return list(published) if isinstance(published, list) else _gold_pages(sample)


def answerable(sample: Sample) -> bool:
    return not is_not_answerable(sample.answer)


def mmlb_accuracy(sample: Sample, completion: str) -> float:
    """Generalized accuracy: the per-format score of the answer."""
    return question_score(sample, completion)


def mmlb_answerable_recall(sample: Sample, completion: str) -> float:
    """The score on answerable questions (mean = the benchmark's recall; NaN for unanswerable ones)."""
    return question_score(sample, completion) if answerable(sample) else math.nan


def mmlb_answered_precision(sample: Sample, completion: str) -> float:
    """On questions answered with something other than "Not answerable": the score if the question is
    answerable, else 0 (mean = the benchmark's precision; NaN when the model said "Not answerable")."""
    if is_not_answerable(final_answer(completion) or ""):
        return math.nan
    return question_score(sample, completion) if answerable(sample) else 0.0


def mmlb_retrieval_recall(sample: Sample, completion: str) -> float:
    """|gold & retrieved pages| / |gold| (NaN without page retrieval or without gold pages)."""
    kept, gold = sample.meta.get("retrieved_pages"), _gold_pages(sample)
    if kept is None or not gold:
        return math.nan
    return len(set(kept) & set(gold)) / len(gold)


def where(name: str, doc: str, keep: Callable[[Sample], bool]) -> Metric:
    """Generalized accuracy on the questions ``keep`` selects, NaN elsewhere."""

    def metric(sample: Sample, completion: str) -> float:
        return question_score(sample, completion) if keep(sample) else math.nan

    metric.__name__ = metric.__qualname__ = f"mmlb_{name}"
    metric.__doc__ = f"Generalized accuracy on {doc} (NaN elsewhere)."
    return metric


def _length(sample: Sample) -> int:
    return int(sample.meta.get("document_pages") or sample.meta.get("num_pages") or len(sample.pages))


def mmlongbench_metrics() -> dict[str, Metric]:
    metrics: dict[str, Metric] = {
        "accuracy": mmlb_accuracy,
        "answerable_recall": mmlb_answerable_recall,
        "answered_precision": mmlb_answered_precision,
    }
    for fmt in FORMATS:
        metrics[f"accuracy_format_{fmt.lower()}"] = where(
            f"format_{fmt.lower()}",
            f"answer_format {fmt}",
            lambda s, f=fmt: benchmark_format(s.meta["answer_format"]) == f,
        )
    for label, short in SOURCES.items():
        metrics[f"accuracy_source_{short}"] = where(
            f"source_{short}",
            f"questions with evidence source {label!r}",
            lambda s, lab=label: lab in (s.meta.get("evidence_sources") or []),
        )
    metrics["accuracy_single_page"] = where(
        "single_page", "questions with one evidence page", lambda s: len(_published_pages(s)) == 1
    )
    metrics["accuracy_cross_page"] = where(
        "cross_page",
        "answerable questions with several evidence pages",
        lambda s: len(_published_pages(s)) != 1 and answerable(s),
    )
    metrics["accuracy_unanswerable"] = where("unanswerable", "unanswerable questions", lambda s: not answerable(s))
    for bucket, (lo, hi) in LENGTH_BUCKETS.items():
        metrics[f"accuracy_len_{bucket}"] = where(
            f"len_{bucket}", f"documents of {bucket} pages", lambda s, lo=lo, hi=hi: lo <= _length(s) <= hi
        )
    metrics.update({name: DOCSEEKER.metrics[name] for name in ("evidence_precision", "evidence_recall", "evidence_f1")})
    metrics["retrieval_recall"] = mmlb_retrieval_recall
    return metrics


def f1_of(means: dict[str, float | None]) -> float | None:
    """The benchmark's F1 from the means of ``answered_precision`` (P) and ``answerable_recall`` (R)."""
    p, r = means.get("answered_precision"), means.get("answerable_recall")
    if p is None or r is None:
        return None
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


DERIVED = {"f1": f1_of}
