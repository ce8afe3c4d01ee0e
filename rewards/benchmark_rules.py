"""Scoring rules more than one published-benchmark pack uses (``mathvista``, ``mmmu``, ``docvqa``, ...).

``rule_answer``: the answer of a free-text response by rule, in this order (the first that finds one wins):

1. the body of the last ``<answer>...</answer>`` (how this project's models answer; also how a saved
   extraction is handed in under ``--use_extraction``);
2. the body of the last ``\\boxed{...}``;
3. the text after the last "answer is" / "answer:" (e.g. "The answer is "text".", "Final answer: 12"), to the
   end of its line, without surrounding quotes, ``**`` or a final period;
4. with options: the option letter the response picks (``rewards.choice.extract_choice``);
5. the last number written in the response;
6. the whole response, stripped.

An answer found is at most its last 4,000 characters (as ``parsing.final_answer``), which bounds the edit
distances a multiple-choice answer is compared by.

It stands in for the LLM extraction of benchmarks that extract with GPT-4 (MathVista's ``extract_answer.py``);
the results header says so.

``docvqa_anls``: ANLS as DocVQA defines it (Biten et al., "Scene Text Visual Question Answering", ICCV 2019;
the RRC evaluation): for each reference NL = lev(ref, pred) / max(len), the score is 1 - min NL, and 0 when
min NL >= 0.5. It is ``textmatch.anls_score`` (the shared edit distance, lower-cased, whitespace-collapsed
strings) with the threshold applied the DocVQA way: a score of exactly 0.5 is 0.

``option_list``: an options column written as a list or as the string of a Python list (MMMU's parquet); an
option that is itself a list (one MMMU-Pro row holds ``[['A', 'B', 'Not enough information']]``) is one option
whose text is that list as Python writes it, as the benchmark's own ``literal_eval`` + ``str`` reads it.
"""

from __future__ import annotations

import re
from typing import Any

from mmreason.parsing import clip, last_boxed, last_number, last_tag_body, parse_literal
from mmreason.rewards.choice import extract_choice
from mmreason.rewards.textmatch import anls_score

MAX_ANSWER_CHARS = 4_000  # an answer is at most this long (its tail), as ``parsing.final_answer`` keeps
_ANSWER_PHRASE = re.compile(r"(?i)\banswer\s*(?:is|:|=)\s*:?[ \t]*([^\n]+)")
_STRIP = " \t\"'`*"


def _phrase_answer(text: str) -> str | None:
    found = None
    for m in _ANSWER_PHRASE.finditer(text):
        found = m.group(1)
    if found is None:
        return None
    found = found.strip(_STRIP)
    if found.endswith(".") and not re.search(r"\d\.$", found[-2:]):
        found = found[:-1].strip(_STRIP)
    return found or None


def number_text(value: float) -> str:
    """A number as text: integers without ".0" (``12``), others as Python writes them (``1.25``)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def rule_answer(response: Any, choices: list[str] | None = None) -> str:
    """The answer of ``response`` by the rules of the module doc (a string; "" for an empty response)."""
    text = clip(response if isinstance(response, str) else str(response or ""), 20_000)
    for found in (last_tag_body(text, "answer"), last_boxed(text), _phrase_answer(text)):
        if found is not None:
            return clip(found.strip(), MAX_ANSWER_CHARS)
    if choices:
        letter = extract_choice(text, choices)
        if letter is not None:
            return letter
    number = last_number(text)
    return number_text(number) if number is not None else clip(text.strip(), MAX_ANSWER_CHARS)


def docvqa_anls(prediction: str, references: list[str], threshold: float = 0.5) -> float:
    """DocVQA's ANLS of one prediction: the best reference's 1 - NL, 0 when NL >= ``threshold``."""
    if not references:
        return 0.0
    score = anls_score(prediction, references, threshold=0.0)
    return score if score > 1.0 - threshold else 0.0


def option_list(value: Any, where: str, field: str = "options") -> list[str]:
    """An options column as a list of strings: a list as is, or a string holding a JSON / Python list literal
    (parsed, never evaluated); ValueError naming ``where`` and the field otherwise."""
    parsed = value
    if isinstance(value, str):
        parsed = parse_literal(value)
    if isinstance(parsed, tuple):
        parsed = list(parsed)
    if not isinstance(parsed, list) or not all(isinstance(o, (str, int, float, list, tuple)) for o in parsed):
        shown = value if len(str(value)) <= 80 else str(value)[:77] + "..."
        raise ValueError(f"{where}: {field} {shown!r} does not parse as a list of options")
    return [str(o) if not isinstance(o, tuple) else str(list(o)) for o in parsed]  # a nested list: its text
