"""Shared pieces of the vision tests."""

from __future__ import annotations

from mmreason.tasks.vision.ton import EMPTY_THOUGHT
from mmreason.types import Sample


def dropout_ratio(samples: list[Sample]) -> float:
    """Fraction of samples whose SFT target carries the empty thought."""
    if not samples:
        return 0.0
    return sum(str(s.meta.get("target", "")).startswith(EMPTY_THOUGHT) for s in samples) / len(samples)
