"""Scoring of the videoqa pack: one rule per answer type, used as the reward and as eval metrics.

    mcq      the extracted option letter equals the reference letter            (the ``mcq`` reward's parser)
    numeric  the answer's number equals the reference within rel_tol 1e-4       (the ``numeric`` reward's)
    free     VQA-normalised exact match                                          (``vqa_exact``'s)
    span     tIoU of the answered [start, end] with the gold span                (``temporal_iou``'s)

Every rule is exact or thresholded, never a string similarity a policy could collect partial credit from.
A span earns its tIoU only at ``span_threshold`` (0.5) or above, 0 below: an answer covering the whole
video never reaches 0.5 on the generated data (the square is visible for at most half of it), so it earns
nothing. Accuracy counts a span correct at tIoU >= 0.5; span metrics add mIoU and R@0.3 / 0.5 / 0.7 (the
fraction with tIoU at or above each threshold, as temporal-grounding papers report them).
"""

from __future__ import annotations

from mmreason.parsing import final_answer
from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import typed_answer_correct
from mmreason.rewards.evidence import span_tiou
from mmreason.types import Sample

ANSWER_TYPES = ("mcq", "numeric", "free", "span")
SPAN_THRESHOLD = 0.5
RECALL_THRESHOLDS = (0.3, 0.5, 0.7)


def span_iou(sample: Sample, completion: str) -> float:
    """tIoU of the completion's span with the sample's gold span (0 when none can be read)."""
    return span_tiou(sample.meta.get("span"), completion) or 0.0


def is_correct(sample: Sample, completion: str) -> float:
    """1.0 / 0.0 under the sample's answer_type rule (span: tIoU >= 0.5)."""
    kind = sample.meta.get("answer_type")
    if kind == "span":
        return float(span_iou(sample, completion) >= SPAN_THRESHOLD)
    return float(typed_answer_correct(final_answer(completion), sample.answer, kind, sample.meta.get("choices")))


@per_sample
def videoqa_accuracy(sample, trajectory, *, span_threshold: float = SPAN_THRESHOLD) -> float:
    """Answer accuracy by answer_type (mcq letter, numeric, free exact match): 1 or 0; a span earns its tIoU
    when that is at least ``span_threshold`` (0.5), else 0."""
    if sample.meta.get("answer_type") == "span":
        value = span_iou(sample, trajectory.completion_text)
        return value if value >= span_threshold else 0.0
    return is_correct(sample, trajectory.completion_text)


# ---- eval metrics: fn(sample, completion) -> float (NaN = does not apply, left out of the mean) ----


def videoqa_metric_accuracy(sample: Sample, completion: str) -> float:
    """Answer accuracy (rule by answer_type; span correct at tIoU >= 0.5)."""
    return is_correct(sample, completion)


def type_accuracy(kind: str):
    """Accuracy on ``kind`` questions only (NaN on others, so the mean is that type's accuracy)."""

    def metric(sample: Sample, completion: str) -> float:
        return is_correct(sample, completion) if sample.meta.get("answer_type") == kind else float("nan")

    metric.__name__ = metric.__qualname__ = f"videoqa_metric_accuracy_{kind}"
    metric.__doc__ = f"Answer accuracy on {kind} questions."
    return metric


def videoqa_metric_miou(sample: Sample, completion: str) -> float:
    """tIoU of the answered span (span questions only): its mean is mIoU."""
    return span_iou(sample, completion) if sample.meta.get("answer_type") == "span" else float("nan")


def recall_at(threshold: float):
    """1 if the span's tIoU >= ``threshold`` (span questions only): its mean is R@threshold."""

    def metric(sample: Sample, completion: str) -> float:
        if sample.meta.get("answer_type") != "span":
            return float("nan")
        return float(span_iou(sample, completion) >= threshold)

    metric.__name__ = metric.__qualname__ = f"videoqa_metric_recall_{threshold}"
    metric.__doc__ = f"R@{threshold}: tIoU of the answered span >= {threshold} (span questions)."
    return metric


METRICS = {
    "accuracy": videoqa_metric_accuracy,
    **{f"accuracy_{k}": type_accuracy(k) for k in ANSWER_TYPES},
    "miou": videoqa_metric_miou,
    **{f"r@{t}": recall_at(t) for t in RECALL_THRESHOLDS},
}
