"""Answer-accuracy rewards for free-form answers: numbers, chart values, document text, VQA words, yes/no.

Every reward here reads the final answer with ``parsing.final_answer`` (the last ``<answer>`` body,
DocSeeker's ``{"answer": ...}`` value, else the last ``\\boxed{}``, else the completion; kwarg
``extract``: "auto" | "answer_tag" | "boxed" | "none") and compares it with the ``answer`` column: a
string, a number, or a list of acceptable references. A sample without a usable reference scores None.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mmreason.parsing import final_answer, last_number, parse_number
from mmreason.rewarding import column, per_sample, reward
from mmreason.rewards.choice import extract_choice, gold_letter
from mmreason.rewards.textmatch import anls_score, token_recall, vqa_normalize


def references(value: Any) -> list[str]:
    """The ``answer`` column as a list of reference strings ([] when there is none)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    return [str(value)]


# ---- numbers -----------------------------------------------------------------------------------


def number_of(text: str) -> float | None:
    """The answer's number: the whole text if it is one, else the last number written in it."""
    value = parse_number(text)
    return value if value is not None else last_number(text)


def typed_answer_correct(pred: str, ref: Any, kind: str | None, choices: Any = None, rel_tol: float = 1e-4) -> bool:
    """Exact match of an extracted answer by kind: ``mcq`` compares option letters (``choices`` as
    ``gold_letter`` takes them), ``numeric`` numbers within ``rel_tol``, anything else VQA-normalised text."""
    ref = str(ref)
    if kind == "mcq":
        gold = gold_letter(ref, choices)
        return gold is not None and extract_choice(pred, choices) == gold
    if kind == "numeric":
        gold_n, said = parse_number(ref), number_of(pred)
        return gold_n is not None and said is not None and math.isclose(said, gold_n, rel_tol=rel_tol, abs_tol=1e-9)
    return vqa_normalize(pred) == vqa_normalize(ref)


@reward("numeric")
@per_sample
def numeric(sample, trajectory, *, rel_tol: float = 1e-4, abs_tol: float = 1e-9, extract: str = "auto"):
    """1 if the answer's number equals the reference within a relative tolerance (rel_tol=1e-4).

    Columns: ``answer`` (number or numeric string, or a list). Thousands separators, '$' and '%' are
    ignored ('12%' reads as 12). None when no reference is numeric; 0 when the answer has no number.
    """
    refs = [v for v in (parse_number(r) for r in references(column(sample, "answer"))) if v is not None]
    if not refs:
        return None
    pred = number_of(final_answer(trajectory.completion_text, extract))
    if pred is None:
        return 0.0
    return float(any(math.isclose(pred, r, rel_tol=rel_tol, abs_tol=abs_tol) for r in refs))


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05) -> bool:
    """ChartQA's relaxed accuracy: numbers within 5 % relative of the target, else exact (case-insensitive).

    A transcription of lmms-eval ``lmms_eval/tasks/chartqa/utils.py::relaxed_correctness`` (itself from
    Qwen-VL ``eval_mm/evaluate_vqa.py``), including its edge cases: '%' divides by 100, ``float()``
    accepts whatever Python accepts, and a target of 0 falls back to the string comparison.
    """

    def to_float(text: str) -> float | None:
        try:
            if text.endswith("%"):
                return float(text.rstrip("%")) / 100.0
            return float(text)
        except ValueError:
            return None

    prediction_float = to_float(prediction)
    target_float = to_float(target)
    if prediction_float is not None and target_float:
        relative_change = abs(prediction_float - target_float) / abs(target_float)
        return relative_change <= max_relative_change
    return prediction.lower() == target.lower()


@reward("relaxed_accuracy")
@per_sample
def relaxed_accuracy(sample, trajectory, *, max_relative_change: float = 0.05, extract: str = "auto"):
    """ChartQA relaxed accuracy: 1 if within 5 % of a numeric reference, else exact string match.

    Columns: ``answer`` (string or list; the best reference counts). As lmms-eval's chartqa task.
    """
    refs = references(column(sample, "answer"))
    if not refs:
        return None
    pred = final_answer(trajectory.completion_text, extract, max_chars=256)
    return float(any(relaxed_correctness(pred, ref, max_relative_change) for ref in refs))


# ---- text --------------------------------------------------------------------------------------


@reward("anls")
@per_sample
def anls(sample, trajectory, *, threshold: float = 0.5, extract: str = "auto"):
    """ANLS of the answer against the references, 0 below ``threshold`` (0.5, the DocVQA rule).

    Keep the threshold for RL: without it every fragment earns partial credit (``rue`` scores 0.33 against
    "red" and 0.75 against "blue"), and a policy can max the reward with one string that half-matches every
    answer instead of reading the image.

    Columns: ``answer`` (string or list). ``1 - lev/max(len)``, the distance and the lengths both on the
    lower-cased, whitespace-collapsed strings (so padding cannot raise it), best reference, 0 below
    ``threshold`` (``textmatch.anls_score``).
    An empty answer scores 0 (DocSeeker's R_ans).
    """
    refs = references(column(sample, "answer"))
    if not refs:
        return None
    pred = final_answer(trajectory.completion_text, extract)
    if not pred:
        return 0.0
    return anls_score(pred, refs, threshold)


@reward("vqa_exact")
@per_sample
def vqa_exact(sample, trajectory, *, extract: str = "auto"):
    """1 if the VQA-normalised answer equals a normalised reference (case, punctuation, articles, numbers).

    Columns: ``answer`` (string or list).
    """
    refs = references(column(sample, "answer"))
    if not refs:
        return None
    pred = vqa_normalize(final_answer(trajectory.completion_text, extract))
    return float(any(pred == vqa_normalize(ref) for ref in refs))


def recall_score(prediction: str, refs: list[str], strict_words: int = 5) -> float:
    """R1-Router's answer rule on VQA-normalised tokens.

    One reference of at most ``strict_words`` words: 1 if all its tokens are in the prediction, else 0.
    One longer reference: the token recall. Several references: 1 if any is fully recalled, else 0.
    Source: R1-Router ``Easy-R1/verl/utils/reward_score/step.py``; docs/methods/packs.md#r1-router.
    """
    pred = vqa_normalize(prediction)
    norm = [vqa_normalize(r) for r in refs]
    if not norm:
        return 0.0
    if len(norm) > 1:
        return float(any(token_recall(pred, r) == 1.0 for r in norm))
    recall = token_recall(pred, norm[0])
    return float(recall == 1.0) if len(norm[0].split()) <= strict_words else recall


@reward("token_recall")
@per_sample
def token_recall_reward(sample, trajectory, *, strict_words: int = 5, extract: str = "auto"):
    """Token recall of the reference in the answer (R1-Router rule: short references need all tokens).

    Columns: ``answer`` (string or list). See ``recall_score``.
    """
    refs = references(column(sample, "answer"))
    if not refs:
        return None
    return recall_score(final_answer(trajectory.completion_text, extract), refs, strict_words)


_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def yes_no_of(text: str) -> str | None:
    """'yes' / 'no' if the answer starts with one of them or contains only one of the two words."""
    words = [m.lower() for m in _YES_NO.findall(text[:2_000])]
    if not words:
        return None
    head = text.strip().lower()
    for word in ("yes", "no"):
        if re.match(rf"{word}\b", head):
            return word
    return words[0] if len(set(words)) == 1 else None


@reward("yes_no")
@per_sample
def yes_no(sample, trajectory, *, extract: str = "auto"):
    """1 if the answer's yes/no matches the reference's; None when the reference is not yes/no.

    Columns: ``answer`` ("yes"/"no", any case, or a bool). An answer saying both (or neither) scores 0.
    """
    ref = column(sample, "answer")
    if isinstance(ref, bool):
        ref = "yes" if ref else "no"
    gold = yes_no_of(str(ref)) if ref is not None and str(ref).strip().lower() in ("yes", "no") else None
    if gold is None:
        return None
    return float(yes_no_of(final_answer(trajectory.completion_text, extract)) == gold)
