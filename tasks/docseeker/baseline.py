"""The DocSeeker baseline rule (``mmreason eval baseline --task docseeker``): a position baseline.

It cites the most frequent gold evidence page of the training samples and gives their most frequent answer
(ties go to the smaller page, the alphabetically first answer), in the ALR format, so every metric of the pack
scores it as it scores a model. Compare it with a model doc by doc with ``mmreason eval paired --threshold 1``.

    mmreason eval baseline --task docseeker --train TRAIN.jsonl --data HELD_OUT.jsonl --samples baseline.jsonl
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from mmreason.tasks.docseeker.alr import alr_text
from mmreason.types import Sample


def position_baseline(train: list[Sample]) -> tuple[int, str]:
    """(the most frequent gold evidence page, the most frequent answer) of the training samples."""
    pages = Counter(p for s in train for p in (s.meta.get("evidence_pages") or []) if p > 0)
    answers = Counter(str(s.answer) for s in train)
    if not pages:
        raise ValueError("docseeker baseline: no training sample has a gold evidence page")
    page = min(pages, key=lambda p: (-pages[p], p))
    answer = min(answers, key=lambda a: (-answers[a], a))
    return page, answer


def baseline_rule(train: list[Sample]) -> Callable[[Sample], str]:
    """The same ALR completion for every held-out document (``position_baseline``)."""

    page, answer = position_baseline(train)
    text = alr_text("Position baseline.", f"Page {page}.", "The most frequent answer.", [page], answer)
    return lambda sample: text
