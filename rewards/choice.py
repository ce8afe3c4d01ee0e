"""Multiple-choice answers: which option letter did the model pick?

``extract_choice`` tries ranked patterns and stops at the first that decides; within a rank the last
occurrence wins (models revise: "at first A ... so the answer is C"). The region searched is the last
``<answer>`` body, else the last ``\\boxed{}``, else the completion's last 20,000 characters.

1. the region is just a letter: ``C``, ``(C)``, ``**C**``, ``Option c.``;
2. the region opens with a lettered option: ``C. Paris``, ``(C) Paris``, ``C: Paris``;
3. an answer phrase: ``The answer is (C)``, ``Final answer: C``, ``the correct option is C``,
   ``I choose C``, ``Option C is correct``, ``it's C.``;
4. the text of exactly one option (``choices`` column), e.g. the model wrote ``Paris``;
5. parenthesised letters, if they all name the same option: ``... (C) ...``;
6. the last line that is only a letter.

A lower-case letter counts only where it cannot be a word ("the answer is a dog" is not A). Two
different letters where one answer belongs ("A and C", "A or C") leave the answer unparsed, as does a
letter outside the options. Unparsed answers score 0 and are counted in the ``unparsed`` sub-score;
there is no random fallback (lmms-eval's ``parse_multi_choice_response`` picks a random letter).
"""

from __future__ import annotations

import re
from typing import Any

from mmreason.parsing import as_text, clip, last_boxed, last_tag_body, squeeze_space
from mmreason.rewarding import column, per_sample, reward

LETTERS = "ABCDEFGHIJ"
_LET = "A-Ja-j"
_OPEN = r"[\(\[\*\s]*"
_END = r"(?![A-Za-z0-9])"

# rank 1: the whole region is a letter
_ONLY = re.compile(rf"^\W*(?:(?i:option|choice|answer)\s*[:\-]?\s*)?{_OPEN}([{_LET}]){_END}[\)\]\*\.:]*\W*$")
# rank 2: the region opens with a lettered option ("C. Paris")
_LEADING = re.compile(rf"^\W*?[\(\[]?([{_LET}])(?:[\)\]]|[.:](?=\s))\s*\S")
# rank 3: answer phrases (strong ones accept a letter followed by anything but a word character)
_PHRASES = [
    re.compile(
        rf"(?i:answer)(?:\s+(?i:is|would\s+be|should\s+be|will\s+be|must\s+be))?"
        rf"(?:\s+(?i:probably|likely|clearly|therefore|then|definitely))?\s*[:=\-]?\s*"
        rf"(?:(?i:option|choice)\s*)?{_OPEN}([{_LET}]){_END}"
    ),
    re.compile(
        rf"(?i:correct|right|best|final)\s+(?i:option|choice|answer|letter)\s*(?i:is|would\s+be|should\s+be)?"
        rf"\s*[:=\-]?\s*{_OPEN}([{_LET}]){_END}"
    ),
    re.compile(rf"(?i:choose|select|pick|go\s+with|opt\s+for)\s+(?:(?i:option|choice)\s+)?{_OPEN}([{_LET}]){_END}"),
    # the lookbehind starts a bracket run only at its first character: linear time on "((((..."
    re.compile(
        r"(?:(?i:option|choice)\s+)?(?<![\(\[\*])[\(\[\*]*([A-J])[\)\]\*]*\s+(?i:is\s+(?:the\s+)?(?:correct|right|best|answer))"
    ),
    re.compile(rf"(?i:it'?s|it\s+is|that'?s|that\s+is)\s+{_OPEN}([A-J])[\)\]\*]*(?=\s*(?:[.,;!?]|$))", re.MULTILINE),
]
_PAREN = re.compile(r"\(([A-J])\)")
_LINE = re.compile(r"^[ \t]*[\(\[\*]*([A-J])[\)\]\*]*[.:]?[ \t]*$", re.MULTILINE)
_CONFLICT = re.compile(rf"^[\)\]\*]*\s*(?:,|&|/|\band\b|\bor\b)\s*(?:(?i:option|choice)\s+)?[\(\[]?([A-J]){_END}")
_PREFIX = re.compile(r"^\s*[\(\[]?([A-Ja-j])[\)\]\.:]\s+")


def option_map(choices: Any) -> dict[str, str]:
    """The ``choices`` column as ``{letter: option text}``.

    Accepts a dict keyed by letter, or a list of option texts (lettered A, B, ... in order), with or
    without a leading "A. " / "(A) " that repeats the letter.
    """
    if isinstance(choices, dict):
        return {str(k).strip().upper(): as_text(v) for k, v in choices.items() if str(k).strip()}
    if not isinstance(choices, (list, tuple)):
        return {}
    out = {}
    for letter, text in zip(LETTERS, choices):
        text = as_text(text)
        prefix = _PREFIX.match(text)
        if prefix and prefix.group(1).upper() == letter:
            text = text[prefix.end() :]
        out[letter] = text
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _word_letter_ok(text: str, m: re.Match) -> bool:
    """A lower-case letter must not read as a word: next non-space char is end or punctuation."""
    letter = m.group(1)
    if letter.isupper():
        return True
    before = text[m.start(1) - 1] if m.start(1) > 0 else " "
    after = text[m.end(1) : m.end(1) + 40].lstrip(" \t")
    return before in "([*" or not after or not after[0].isalpha()


def _conflicts(text: str, m: re.Match) -> bool:
    other = _CONFLICT.match(text[m.end(1) : m.end(1) + 40])
    return bool(other and other.group(1) != m.group(1).upper())


def _by_phrase(region: str, valid: str) -> str | None:
    best: re.Match | None = None
    for pattern in _PHRASES:
        for m in pattern.finditer(region):
            if (
                m.group(1).upper() in valid
                and _word_letter_ok(region, m)
                and (best is None or m.start() > best.start())
            ):
                best = m
    if best is None:
        return None
    return "" if _conflicts(region, best) else best.group(1).upper()


def _by_option_text(region: str, options: dict[str, str]) -> str | None:
    text = f" {_norm(region)} "
    hits = {letter: _norm(opt) for letter, opt in options.items() if _norm(opt) and f" {_norm(opt)} " in text}
    # an option whose text lies inside a longer matched option's text ("Paris" in "Paris Texas") is dropped
    kept = [k for k, v in hits.items() if not any(v != w and v in w for w in hits.values())]
    return kept[0] if len(kept) == 1 else None


def extract_choice(text: Any, choices: Any = None) -> str | None:
    """The option letter the completion picks, or None when it cannot be told (see the module doc)."""
    options = option_map(choices)
    valid = "".join(options) if options else LETTERS
    text = clip(text, 20_000)
    region = last_tag_body(text, "answer")
    if region is None:
        region = last_boxed(text)
    if region is None:
        region = text
    region = squeeze_space(region.strip())  # one char per whitespace run: the phrase patterns stay linear
    for pattern, span in ((_ONLY, 64), (_LEADING, 200)):  # a lone letter is short: bounds the backtracking
        if pattern is _ONLY and len(region) > span:
            continue
        m = pattern.match(region[:span])
        if m and m.group(1).upper() in valid and _word_letter_ok(region, m):
            return None if pattern is _LEADING and _conflicts(region, m) else m.group(1).upper()
    found = _by_phrase(region, valid)
    if found is not None:
        return found or None  # "" = two letters in one answer
    if options:
        found = _by_option_text(region, options)
        if found is not None:
            return found
    letters = {m.group(1) for m in _PAREN.finditer(region) if m.group(1) in valid}
    if len(letters) == 1:
        return letters.pop()
    if len(letters) > 1:
        return None
    lines = [m.group(1) for m in _LINE.finditer(region) if m.group(1) in valid]
    return lines[-1] if lines else None


def gold_letter(answer: Any, choices: Any = None) -> str | None:
    """The reference letter: a letter ('C', '(c)'), a 0-based index, or the text of one option."""
    options = option_map(choices)
    if isinstance(answer, bool) or answer is None:
        return None
    if isinstance(answer, int):
        return LETTERS[answer] if 0 <= answer < len(LETTERS) else None
    text = as_text(answer).strip()
    m = re.fullmatch(r"[\(\[]?([A-Ja-j])[\)\]\.]?", text)
    if m:
        return m.group(1).upper()
    for letter, opt in options.items():
        if _norm(opt) and _norm(opt) == _norm(text):
            return letter
    return None


@reward("mcq", keys=("accuracy", "unparsed"), diagnostics=("unparsed",))
@per_sample
def mcq(sample, trajectory) -> dict[str, float | None]:
    """Multiple choice: accuracy of the extracted option letter (unparsed counted separately, scored 0).

    Columns: ``answer`` (the letter, a 0-based index, or the option's text), ``choices`` (optional:
    list of option texts or {letter: text}; enables option-text matching and limits the letters).
    Sub-scores: ``accuracy`` (weighted) and ``unparsed`` (1 when no letter could be read; logged only).
    """
    choices = column(sample, "choices")
    gold = gold_letter(column(sample, "answer"), choices)
    pred = extract_choice(trajectory.completion_text, choices)
    accuracy = None if gold is None else float(pred == gold)
    return {"accuracy": accuracy, "unparsed": float(pred is None)}
