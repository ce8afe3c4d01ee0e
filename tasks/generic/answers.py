"""Which rule scores a row's answer, decided per row without being told.

First the row's own signal (Video-R1's ``problem_type``, an ``answer_type`` column, ``choices`` / ``options``),
else the answer's shape:

    an option letter ("B", "(c)")            -> mcq      (option-letter matching: reward ``mcq``)
    a number ("42", "-3.5", "1,200", "12%")  -> numeric  (equality within rel_tol 1e-4: ``numeric``); one written
                                                with leading zeros ("007") is a code: exact
    LaTeX or an expression ("\\frac{1}{2}", "x^2+1", "2\\pi")  -> math (``math``: math-verify)
    short text (at most 5 words)             -> exact    (VQA-normalised exact match: ``vqa_exact``)
    longer text, or an OCR row               -> anls     (ANLS, 0 below 0.5: ``anls``)
"""

from __future__ import annotations

import re
from typing import Any

from mmreason.parsing import parse_number

KINDS = ("mcq", "numeric", "math", "exact", "anls")
REWARD_OF_KIND = {"mcq": "mcq", "numeric": "numeric", "math": "math", "exact": "vqa_exact", "anls": "anls"}
SHORT_WORDS = 5
# what a row's own answer-type signal says (lower-cased); a signal not listed falls back to the answer's shape
SIGNALS = {
    "mcq": "mcq",
    "multiple choice": "mcq",
    "multiple-choice": "mcq",
    "multi_choice": "mcq",
    "choice": "mcq",
    "numeric": "numeric",
    "numerical": "numeric",
    "number": "numeric",
    "integer": "numeric",
    "float": "numeric",
    "regression": "numeric",
    "math": "math",
    "ocr": "anls",
    "yes/no": "exact",
    "exact": "exact",
    "anls": "anls",
}
_CODE = re.compile(r"^0\d")  # "007": a code written with its zeros, matched as text, not the number 7
_LETTER = re.compile(r"^\s*[\(\[]?[A-J][\)\]\.]?\s*$")
_MATH = re.compile(r"\\[A-Za-z]+|\^|\$|[A-Za-z0-9]\s*[=+*/]\s*[A-Za-z0-9(]|[A-Za-z]\s*-\s*\d|\d\s*[a-z]\b|[{}]")


def first_reference(answer: Any) -> str:
    if isinstance(answer, (list, tuple)):
        return str(answer[0]) if answer else ""
    return "" if answer is None else str(answer)


def kind_of(answer: Any, *, signal: Any = None, choices: Any = None) -> str:
    """The answer kind of one row (see the module doc)."""
    said = SIGNALS.get(str(signal).strip().lower()) if signal is not None else None
    if said is not None:
        return said
    if choices:
        return "mcq"
    text = first_reference(answer).strip()
    if _LETTER.match(text):
        return "mcq"
    if parse_number(text) is not None:
        return "exact" if _CODE.match(text) else "numeric"
    if _MATH.search(text) and len(text) <= 200:
        return "math"
    return "exact" if len(text.split()) <= SHORT_WORDS else "anls"
