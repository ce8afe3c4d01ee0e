"""The shapes pack's eval metric: the exact colour word, as the ``vqa_exact`` reward scores it."""

from __future__ import annotations

from mmreason.rewards.textmatch import vqa_normalize
from mmreason.types import Sample


def shapes_metric_accuracy(sample: Sample, completion: str) -> float:
    """1 if the whole answer, VQA-normalised, is the colour (as the ``vqa_exact`` reward scores it)."""
    return float(vqa_normalize(completion) == vqa_normalize(str(sample.answer)))
