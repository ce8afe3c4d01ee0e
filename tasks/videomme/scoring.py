"""Video-MME's scoring, written from the rule of lmms-eval's ``videomme`` task (``extract_characters_regex``,
the benchmark's own evaluation script does the same): answer phrases ("The best answer is", "The correct
answer is", "The answer is", "The answer", and the two run-together strings "The best option isThe correct
option is" and "Best answer:Best option:" that its list holds) are removed from the stripped response; a
response of more than 10 words with no capital A-D is unanswered; otherwise the first capital A, B, C or D is the
answer. Right when it equals the reference letter (ignoring case). Accuracy overall and by ``duration``,
``domain``, ``sub_category`` and ``task_type``, the breakdowns of the paper's tables.
"""

from __future__ import annotations

import re
from typing import Any

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.parsing import clip, final_answer
from mmreason.rewarding import per_sample
from mmreason.types import Sample

BREAKDOWN = ("duration", "domain", "sub_category", "task_type")
PREFIXES = (
    "The best answer is",
    "The correct answer is",
    "The answer is",
    "The answer",
    "The best option isThe correct option is",
    "Best answer:Best option:",
)
_LETTER = re.compile(r"[ABCD]")


def option_letter(response: str) -> str:
    """The letter Video-MME's rule reads from a response ("" when none)."""
    text = clip(response, 20_000).strip()
    for prefix in PREFIXES:
        text = text.replace(prefix, "")
    found = _LETTER.search(text)  # (its "more than 10 words and no A-D" case is this one: no letter)
    return found.group(0) if found is not None else ""


def _accuracy(sample: Sample, completion: str) -> float:
    """1 when Video-MME's letter rule reads the reference letter from the answer, else 0."""
    return float(option_letter(final_answer(completion)).lower() == str(sample.answer).lower())


videomme_accuracy = once_per_doc(_accuracy)
videomme_accuracy.__name__ = videomme_accuracy.__qualname__ = "videomme_accuracy"


def videomme_breakdowns(samples: list[Sample]) -> dict[str, Any]:
    """Accuracy by duration, domain, sub-category and task type."""
    return group_metrics(samples, BREAKDOWN, videomme_accuracy)


def parsed_answer(completion: str) -> str:
    """The option letter the rule reads (shown in the samples file)."""
    return option_letter(final_answer(completion))


@per_sample
def videomme_reward(sample, trajectory) -> float:
    """1 when Video-MME's letter rule reads the reference letter, else 0."""
    return _accuracy(sample, trajectory.completion_text)
