"""ChartQA's relaxed accuracy (Methani et al., "PlotQA", WACV 2020, as ChartQA's paper uses it; the rule of
lmms-eval's ``chartqa`` task and Pix2Struct's ``relaxed_correctness``): a numeric answer is right within 5 %
of a numeric reference (``|p - t| / |t| <= 0.05``; "12%" reads as 0.12), anything else when equal to the
reference ignoring case. It is ``rewards.accuracy.relaxed_correctness``, shared with the ``relaxed_accuracy``
reward; the best of several references counts. Accuracy overall and per split (human, augmented).
"""

from __future__ import annotations

from typing import Any

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.parsing import final_answer
from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import references, relaxed_correctness
from mmreason.types import Sample


def _relaxed(sample: Sample, completion: str) -> float:
    """ChartQA's relaxed accuracy of the answer (5 % numeric tolerance, else exact ignoring case)."""
    prediction = final_answer(completion, max_chars=256)
    return float(any(relaxed_correctness(prediction, ref) for ref in references(sample.answer)))


chartqa_relaxed_accuracy = once_per_doc(_relaxed)
chartqa_relaxed_accuracy.__name__ = chartqa_relaxed_accuracy.__qualname__ = "chartqa_relaxed_accuracy"


def chartqa_breakdowns(samples: list[Sample]) -> dict[str, Any]:
    """Relaxed accuracy per split (``relaxed_accuracy_split_human`` / ``_augmented``)."""
    return group_metrics(samples, ("split",), chartqa_relaxed_accuracy, prefix="relaxed_accuracy")


@per_sample
def chartqa_reward(sample, trajectory) -> float:
    """1 when the answer is right by ChartQA's relaxed accuracy, else 0."""
    return _relaxed(sample, trajectory.completion_text)
