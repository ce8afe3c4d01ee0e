"""MMLongBench-Doc's scoring rules, per ``answer_format``, written here from the benchmark's published rules
(``eval/eval_score.py`` of the MMLongBench-Doc repository; Ma et al., "MMLongBench-Doc", NeurIPS 2024 D&B). Two
packs use them: docseeker's loader (the answer formats of published rows) and ``mmlongbench_doc``'s metrics.

Both the reference and the prediction are first cleaned (``clean``): lower-cased, stripped, a parenthesised
part removed, one leading/trailing quote removed, a leading ``$`` and a trailing ``%`` removed. Then:

    Int     int(reference) == int(float(prediction))                         (1 or 0)
    Float   equal as floats, the reference also read as r/100 and r*100 (a percentage either way):
            |r - p| <= 0.01 * max(|r|, |p|) (``math.isclose(rel_tol=0.01)``), or
            round(p, d) == round(r, d), d = max(min(decimals(p), decimals(r)), 2)   (1 or 0)
    Str     exactly equal when the cleaned reference is an "exact" pattern (a URL with https://, a .py /
    None    ipynb file name, "page ...", a number or phone number, a.m./p.m. time, YYYY-MM(-DD), an
            e-mail address); otherwise ANLS = 1 - lev(r, p) / max(|r|, |p|), set to 0 when <= 0.5
    List    0 unless both lists have the same length; elements cleaned and sorted; if the first
            reference element is a number or an exact pattern, the lists must be equal; otherwise the
            minimum ANLS over the aligned pairs

A ``None`` question (not answerable) has the reference "Not answerable": only that answer scores.

Over a set: generalized accuracy = mean score; with A = the answerable questions (reference is not
"Not answerable") and P = the questions whose prediction is not "Not answerable",
recall = sum_A score / |A|, precision = sum_A score / |P|, F1 = 2 * precision * recall / (precision + recall).

Differences from the published script, each deliberate: the prediction comes from the model's answer in
the pack's format by rule (``parsing.final_answer``), not from free text through an LLM extractor; a
list is parsed as a JSON / Python literal (never evaluated); "Not answerable" is recognised after cleaning
(case-insensitive) when counting P.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from mmreason.rewards.textmatch import levenshtein

FORMATS = ("Int", "Float", "Str", "List", "None")
NOT_ANSWERABLE = "Not answerable"
MAX_LIST_CHARS = 20_000  # a longer "list" answer is read as one string (model output is untrusted)


def clean(text: Any) -> str:
    """The benchmark's ``get_clean_string``: lower, strip, drop "(...)", one outer quote, "$" prefix, "%" suffix.
    (The published function's mile/million branches discard their result, so they change nothing.)"""
    s = drop_parenthesised(str(text).lower().strip()).strip()
    if s[:1] in ("'", '"'):  # the published ``re.sub(r"^['\"]|['\"]$", "", s)``: one quote each end
        s = s[1:]
    if s[-1:] in ("'", '"'):
        s = s[:-1]
    return s.strip().lstrip("$").strip().rstrip("%").strip()


def drop_parenthesised(s: str) -> str:
    r"""``re.sub(r"\s*\([^)]*\)", "", s)`` in linear time: each "(" up to the next ")" goes, with the
    whitespace before it. (The regex retries ``\s*`` from every space of a long run that no "(" follows:
    quadratic, 17.8 s on "a" + 100,000 spaces + "a".)"""
    out, start = [], 0
    while (open_ := s.find("(", start)) >= 0 and (close := s.find(")", open_ + 1)) >= 0:
        out.append(s[start:open_].rstrip())  # str.rstrip strips what \s matches (str.isspace)
        start = close + 1
    out.append(s[start:])
    return "".join(out)


def is_exact_pattern(s: str) -> bool:
    """Strings the benchmark compares exactly instead of by ANLS (``is_exact_match``)."""
    return bool(
        "https://" in s
        or s.endswith(".py")
        or s.endswith("ipynb")
        or s.startswith("page")
        or re.fullmatch(r"\b\d+(-\d+|\s\d+)?\b", s)  # a number or telephone number
        or "a.m." in s
        or "p.m." in s
        or re.fullmatch(r"\b\d{4}[-\s]\d{2}[-\s]\d{2}\b", s)
        or re.fullmatch(r"\b\d{4}[-\s]\d{2}\b", s)
        or re.fullmatch(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}", s)
    )


def anls(reference: str, prediction: str, threshold: float = 0.5) -> float:
    """1 - lev / max length, 0 when <= ``threshold`` (the benchmark's ``anls_compute``), on the strings as
    given (no whitespace collapsing, no clipping, unlike ``textmatch.anls_score``). The edit distance is at
    least the difference of the lengths: when that alone puts the score at or under ``threshold`` it is 0
    without computing the distance (a 100 kB answer against a short reference costs nothing)."""
    length = max(len(reference), len(prediction))
    if length and 1.0 - abs(len(reference) - len(prediction)) / length <= threshold:
        return 0.0
    value = 1.0 - (levenshtein(reference, prediction) / length if length else 0.0)
    return 0.0 if value <= threshold else value


def _decimals(x: float) -> int:
    text = str(x)
    return len(text.split(".")[-1]) if "." in text else 3


def float_equal(reference: float, prediction: float) -> bool:
    """The benchmark's ``is_float_equal(include_percentage=True, is_close=True)``."""
    for item in (reference / 100, reference, reference * 100):
        if math.isclose(item, prediction, rel_tol=0.01):
            return True
        digits = max(min(_decimals(prediction), _decimals(item)), 2)
        if round(prediction, digits) == round(item, digits):
            return True
    return False


def _as_float(text: Any) -> float | None:
    try:
        value = float(clean(text))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_list(text: str, max_chars: int = MAX_LIST_CHARS) -> list | None:
    """``text`` parsed as a JSON or Python list literal; None when it is not one or is over ``max_chars``."""
    if len(text) > max_chars:
        return None
    for parse in (json.loads, ast.literal_eval):  # literal_eval reads literals only, never runs code
        try:
            parsed = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(parsed, list):
            return parsed
    return None


def as_list(value: Any) -> list:
    """A list answer: a list as is, a string that parses as a JSON / Python list literal, else [value]."""
    if isinstance(value, (list, tuple)):
        return list(value)
    text = str(value).strip()
    parsed = parse_list(text) if text.startswith("[") else None
    return [value] if parsed is None else parsed


def benchmark_format(answer_format: Any) -> str:
    """The benchmark's name of an answer format: its own names as they are, the DocSeeker loader's
    lower-case ones (``str``, ``int``, ``float``, ``list``, ``none``) capitalised."""
    text = str(answer_format)
    named = {f.lower(): f for f in FORMATS}.get(text.lower()) if text not in FORMATS else text
    if named is None:
        raise ValueError(f"unknown answer_format {answer_format!r} (one of {', '.join(FORMATS)})")
    return named


def score(reference: Any, prediction: Any, answer_format: str) -> float:
    """The score of one prediction under the rules above (0..1)."""
    answer_format = benchmark_format(answer_format)
    if answer_format == "Int":
        try:
            return float(int(str(reference).strip()) == int(float(str(prediction).strip())))
        except (ValueError, OverflowError):
            return 0.0
    if answer_format == "Float":
        ref, pred = _as_float(reference), _as_float(prediction)
        return float(ref is not None and pred is not None and float_equal(ref, pred))
    if answer_format in ("Str", "None"):
        ref, pred = clean(reference), clean(prediction)
        return float(ref == pred) if is_exact_pattern(ref) else anls(ref, pred)
    refs, preds = as_list(reference), as_list(prediction)
    if len(refs) != len(preds):
        return 0.0
    refs, preds = sorted(clean(r) for r in refs), sorted(clean(p) for p in preds)
    if not refs:
        return 1.0
    if _as_float(refs[0]) is not None or is_exact_pattern(refs[0]):
        return float("-".join(refs) == "-".join(preds))
    return min(anls(r, p) for r, p in zip(refs, preds))


def is_not_answerable(text: Any) -> bool:
    return clean(text) == NOT_ANSWERABLE.lower()
