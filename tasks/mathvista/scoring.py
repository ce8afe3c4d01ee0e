"""MathVista's scoring, written from the rules of its ``evaluation/calculate_score.py`` (Lu et al., "MathVista",
ICLR 2024).

``normalize_extracted_answer`` follows the function of that name:

- ``multi_choice``: the extraction stripped; a parenthesised letter "(b)" anywhere in it -> "B"; a letter within
  the options -> that option's text; anything else -> the option closest to it by edit distance (the first of
  equally close ones; an empty extraction is closest to the shortest option), as its ``get_most_similar``;
- ``integer``: ``str(int(float(x)))`` ("3.7" -> "3"); ``float``: ``str(round(float(x), precision))``
  ("1.25", precision 1 -> "1.2", Python's rounding of the binary float); ``list``: ``str(x)``; anything that
  does not convert -> None (wrong).

A prediction is right when the normalized extraction equals the ``answer`` string exactly (``safe_equal``).
The accuracy and its breakdown by ``question_type``, ``answer_type``, ``language``, ``source``, ``category``,
``task``, ``context``, ``grade`` and ``skills`` (a question in each of its skills) are those of its scores
file: the mean of right answers over the questions of each group.

The extraction is ``rewards.benchmark_rules.rule_answer`` (the benchmark extracts with GPT-4; rule extraction by
default) or a judge model (``extractor=judge``); under ``mmreason eval score --use_extraction`` the file's own
``extraction`` field is normalized instead.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.rewarding import per_sample
from mmreason.rewards.benchmark_rules import rule_answer
from mmreason.rewards.textmatch import MAX_COMPARE_CHARS, levenshtein
from mmreason.tasks.mathvista.judge import judge_extract  # loads a model: only when asked for
from mmreason.types import Sample

BREAKDOWN = ("question_type", "answer_type", "language", "source", "category", "task", "context", "grade", "skills")
_PAREN_LETTER = re.compile(r"\(([a-zA-Z])\)")


def most_similar(prediction: str, choices: list[str]) -> str:
    """The option with the smallest edit distance to ``prediction`` (the first of ties): ``get_most_similar``.
    Both sides are clipped to ``MAX_COMPARE_CHARS`` first, so a doc costs O(options x clip x clip / 64) word
    operations whatever its file holds (samples made elsewhere than ``mathvista_row``, which caps options)."""
    clipped = prediction[:MAX_COMPARE_CHARS]
    distances = [levenshtein(clipped, c[:MAX_COMPARE_CHARS]) for c in choices]
    return choices[distances.index(min(distances))]


def normalize_extracted_answer(
    extraction: Any, *, choices: list[str] | None, question_type: str, answer_type: str, precision: int | None
) -> str | None:
    """The extraction as the benchmark compares it (the rules of the module doc)."""
    if question_type == "multi_choice":
        text = extraction.strip() if isinstance(extraction, str) else str(extraction)
        letters = _PAREN_LETTER.findall(text)
        if letters:
            text = letters[0].upper()
        options = list(choices or [])
        sequence = [chr(ord("A") + k) for k in range(len(options))]
        return options[sequence.index(text)] if text in sequence else most_similar(text, options)
    try:
        if answer_type == "integer":
            return str(int(float(extraction)))
        if answer_type == "float":
            return str(round(float(extraction), int(precision)))  # type: ignore[arg-type]
        if answer_type == "list":
            return str(extraction)
    except (TypeError, ValueError, OverflowError):
        return None
    return None


def extract(sample: Sample, completion: str) -> str:
    """The answer of a completion: by rule (or by the judge model, ``extractor=judge``)."""
    if sample.meta.get("extractor") == "judge":
        return judge_extract(sample, completion)
    return rule_answer(completion, sample.meta.get("choices"))


def prediction(sample: Sample, completion: str) -> str | None:
    """The normalized prediction of a completion."""
    m = sample.meta
    return normalize_extracted_answer(
        extract(sample, completion),
        choices=m.get("choices"),
        question_type=m["question_type"],
        answer_type=m["answer_type"],
        precision=m.get("precision"),
    )


def _accuracy(sample: Sample, completion: str) -> float:
    """1 when the normalized extraction equals the answer (MathVista's calculate_score.py), else 0."""
    return float(prediction(sample, completion) == str(sample.answer))


mathvista_accuracy = once_per_doc(_accuracy)
mathvista_accuracy.__name__ = mathvista_accuracy.__qualname__ = "mathvista_accuracy"


def mathvista_breakdowns(samples: list[Sample]) -> dict[str, Any]:
    """Accuracy per value of each field MathVista's scores file breaks down."""
    return group_metrics(samples, BREAKDOWN, mathvista_accuracy)


def parsed_answer(completion: str) -> str:
    """The answer the rules extract (shown in the samples file; options are mapped when scored)."""
    return rule_answer(completion)


@per_sample
def mathvista_reward(sample, trajectory) -> float:
    """1 when the answer is right by MathVista's rules (rule extraction, its normalization, exact match)."""
    value = _accuracy(sample, trajectory.completion_text)
    return 0.0 if math.isnan(value) else value
