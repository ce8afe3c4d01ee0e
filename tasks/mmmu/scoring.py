"""MMMU's scoring, written from the rules of its ``mmmu/utils/eval_utils.py`` (Yue et al., "MMMU", CVPR 2024);
MMMU-Pro scores its multiple-choice questions the same way (``mmmu-pro/evaluate.py``).

``parse_multi_choice_response`` (the letter a response picks), as the function of that name:
strip ``, . ! ? ; : '`` from both ends (in that order), pad with spaces, then
1. letters in brackets ``(B)``; else 2. bare letters `` B `` between spaces; else 3. when the response has more
than 5 words, options whose text appears in it (case-insensitive);
several candidates -> the one found last in the response (by its bracket, its spaced letter or its text); none
-> a random letter. The benchmark seeds one generator once (``random.seed(42)``), so a fallback depends on the
order questions are scored in; here each question draws from its own generator seeded by (seed, question id):
the same letter in any order. The ``random_fallback`` metric counts the answers that fell back.

``parse_open_response`` and ``eval_open`` (open questions), as those functions: the response is lower-cased and
cut into sentences at newlines; in each, the text after the last of "could be ", "so ", "is ", "thus ",
"therefore ", "final ", "answer ", "result " (and "=" in the last sentence) -- the shortest such tail -- is a
key response (none found: the whole response); the numbers in the key responses are added (with commas,
scientific, plain); each is normalized (``normalize_str``: a number -> ``round(float, 2)``; text -> lower case,
a one-character text padded with a space). Right when a normalized number equals a normalized reference
number, or a reference text is contained in a predicted text. A multiple-choice answer is right when the letter
equals the reference letter (``eval_multi_choice``).

MMMU-Pro's ``evaluate.py`` parses multiple-choice answers with three changes, applied to MMMU-Pro rows (rows
without ``question_type``; ``--task_args benchmark=MMMU`` / ``MMMU-Pro`` to choose): first the one option letter
written after the last "Answer:" when there is exactly one; bare letters are found as "B " (a letter then a
space) rather than " B "; then as "B.".

The response given to the parsers is its ``<answer>`` or ``\\boxed{}`` body when it has one (this project's
answer format), else the whole response, as the benchmark parses it.
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.parsing import clip, final_answer
from mmreason.rewarding import per_sample
from mmreason.types import Sample

BREAKDOWN = ("subject", "discipline", "subfield", "topic_difficulty", "question_type")
KEY_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ")
# The number patterns of ``extract_numbers`` (with commas, scientific, plain), each ``\d+`` that opens a match
# kept from starting inside a run of digits ``(?<!\d)``: such a start matches only where the run's own start
# would have, so the matches are the same (checked on 300,000 random strings of digits, ".,eE-+" and letters)
# and the scan is linear, where the plain patterns take quadratic time on a long run of digits.
_COMMAS = re.compile(r"-?\b\d{1,3}(?:,\d{3})+\b")
_SCIENTIFIC = re.compile(r"-?(?<!\d)\d+(?:\.\d+)?[eE][+-]?\d+")
_SIMPLE = re.compile(r"-?(?:(?<!\d)\d+\.\d+|\.\d+|(?<!\d)\d+\b)(?![eE][+-]?\d+)(?![,\d])")
_SENTENCES = re.compile(r"\.\s(?=[A-Z])|\n")


def _after_answer_colon(response: str, letters: list[str]) -> str | None:
    """MMMU-Pro's first rule: the one option letter written after the last "Answer:" (None: none or several)."""
    position = response.rfind("Answer:")
    if position < 0:
        return None
    found = [c for c in letters if c in response[position + len("Answer:") :].strip()]
    return found[0] if len(found) == 1 else None


def parse_multi_choice_response(
    response: str, options: list[str], rng: random.Random, pro: bool = False
) -> tuple[str, bool]:
    """(the letter picked, whether it was drawn at random): the rules of the module doc; ``pro``: MMMU-Pro's."""
    letters = [chr(ord("A") + k) for k in range(len(options))]
    if pro:
        letter = _after_answer_colon(response, letters)
        if letter is not None:
            return letter, False
    for ch in (",", ".", "!", "?", ";", ":", "'"):
        response = response.strip(ch)
    response = f" {response} "
    candidates = [c for c in letters if f"({c})" in response]
    bracketed, by_letter = bool(candidates), True
    if not candidates:
        candidates = [c for c in letters if (f"{c} " if pro else f" {c} ") in response]
    if not candidates and pro:
        candidates = [c for c in letters if f"{c}." in response]
    if not candidates and len(response.split()) > 5:
        lower = response.lower()
        candidates = [c for c, text in zip(letters, options) if text.lower() in lower]
        by_letter = not candidates
    if not candidates:
        return rng.choice(letters), True
    if len(candidates) == 1:
        return candidates[0], False
    if not by_letter:
        positions = [response.lower().rfind(options[letters.index(c)].lower()) for c in candidates]
    else:
        positions = [response.rfind(f"({c})" if bracketed else f" {c} ") for c in candidates]
    return candidates[positions.index(max(positions))], False


def is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def normalize_str(text: str) -> list[Any]:
    """``normalize_str``: a number -> [round(float, 2)]; text -> [lower case] (one character: [" c", "c "])."""
    text = text.strip()
    if is_number(text):
        return [round(float(text.replace(",", "")), 2)]
    text = text.lower()
    return [" " + text, text + " "] if len(text) == 1 else [text]


def extract_numbers(text: str) -> list[str]:
    return _COMMAS.findall(text) + _SCIENTIFIC.findall(text) + _SIMPLE.findall(text)


def _key_responses(response: str) -> list[str]:
    response = response.strip().strip(".").lower()
    sentences = _SENTENCES.split(response)
    keys = []
    for k, sentence in enumerate(sentences):
        indicators = KEY_INDICATORS + (("=",) if k == len(sentences) - 1 else ())
        tails = [sentence.split(ind)[-1].strip() for ind in indicators if ind in sentence]
        shortest = min(tails, key=len) if tails else None  # the first of the shortest, as its loop keeps
        if shortest and shortest.strip() not in (":", ",", ".", "!", "?", ";", "'"):
            keys.append(shortest)
    return keys or [response]


def parse_open_response(response: str) -> list[Any]:
    """The normalized candidate answers of an open response (``parse_open_response``)."""
    keys = _key_responses(response)
    candidates = keys + [n for key in keys for n in extract_numbers(key)]
    out: list[Any] = []
    for item in candidates:
        for value in normalize_str(item):
            if value not in out:
                out.append(value)
    return out


def eval_open(gold: Any, predictions: list[Any]) -> bool:
    """``eval_open``: a predicted number equal to a reference number, or a reference text inside a predicted text."""
    golds = [v for g in (gold if isinstance(gold, list) else [gold]) for v in normalize_str(str(g))]
    for pred in predictions:
        if isinstance(pred, str):
            if any(isinstance(g, str) and g in pred for g in golds):
                return True
        elif pred in golds:
            return True
    return False


def judge(sample: Sample, completion: str) -> tuple[bool, bool]:
    """(right, fell back to a random letter) for one completion."""
    response = clip(final_answer(completion), 20_000)
    if sample.meta["question_type"] == "multiple-choice":
        rng = random.Random(f"{sample.meta.get('fallback_seed', 42)}:{sample.id}")
        letter, fell_back = parse_multi_choice_response(
            response, sample.meta["options"], rng, pro=sample.meta.get("benchmark") == "MMMU-Pro"
        )
        gold = sample.answer
        return (letter in gold if isinstance(gold, list) else letter == gold), fell_back
    return eval_open(sample.answer, parse_open_response(response)), False


def _accuracy(sample: Sample, completion: str) -> float:
    """1 when MMMU's parser and evaluation call the answer right (eval_utils.py), else 0."""
    return float(judge(sample, completion)[0])


mmmu_accuracy = once_per_doc(_accuracy)
mmmu_accuracy.__name__ = mmmu_accuracy.__qualname__ = "mmmu_accuracy"


def mmmu_random_fallback(sample: Sample, completion: str) -> float:
    """1 when no letter could be parsed and a seeded random letter stands in (multiple-choice only; NaN else)."""
    if sample.meta["question_type"] != "multiple-choice":
        return math.nan
    return float(judge(sample, completion)[1])


def mmmu_breakdowns(samples: list[Sample]) -> dict[str, Any]:
    """Accuracy by subject, discipline, subfield, difficulty and question type."""
    return group_metrics(samples, BREAKDOWN, mmmu_accuracy)


@per_sample
def mmmu_reward(sample, trajectory) -> float:
    """1 when the answer is right by MMMU's parser and evaluation rules (random fallback: 0, never a lucky draw)."""
    right, fell_back = judge(sample, trajectory.completion_text)
    return float(right and not fell_back)
