"""Bounded-time parsing of model output: tag schemas, answer extraction, JSON / dict literals, numbers.

Rewards, metrics and the evaluation harness read completions through these helpers (the engine owns them;
rewards import them from here), because model output is hostile input: a policy
early in training emits 10 MB of repeated tokens, unbalanced or nested tags, unicode junk and JSON
nested thousands deep. The rules that keep every call bounded and exception-free:

- text is clipped (``clip``) before any regex work; which end is kept depends on the use (the answer
  sits at the end of a completion, the format is judged on the whole);
- tags are found by one linear scan (``tag_tokens``), never by nested lazy quantifiers, whose
  backtracking is quadratic or worse on strings with many tag occurrences;
- JSON and dict literals are parsed only after a bracket-depth check (``parse_literal``), with
  ``json.loads`` first and ``ast.literal_eval`` (never ``eval``) for single-quoted Python dicts.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Sequence
from typing import Any

MAX_CHARS = 200_000  # completions longer than this are clipped before parsing (about 50k tokens)
MAX_LITERAL_CHARS = 20_000  # a JSON answer / tool call longer than this is not parsed
# ``ast.literal_eval`` walks its tree in Python (about 10 us a node, 0.1 s for 20,000 characters of tuples);
# the Python-syntax fallback is for short single-quoted dicts, so it stops at this many characters.
MAX_PYTHON_LITERAL_CHARS = 4_000
MAX_DEPTH = 32  # JSON / literal nesting deeper than this is rejected before parsing
# A backslash that starts no Python escape ("\d" in a model's regex) stays a backslash in a string literal but
# makes the compiler warn (SyntaxWarning from 3.12); doubling it first gives the same value without a warning.
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)  # a backslash and the character after it, left to right
_ESCAPE_CHARS = frozenset("\\'\"abfnrtv01234567xNuU\n")
_RAW_PREFIX = re.compile(r"(?<![\w])(?:[rR][bB]?|[bB][rR])['\"]")  # r'..' keeps every backslash as written


def _double_lone_backslashes(text: str) -> str:
    if "\\" not in text or _RAW_PREFIX.search(text):
        return text
    return _ESCAPE.sub(lambda m: m.group(0) if m.group(1) in _ESCAPE_CHARS and m.group(1) else "\\" + m.group(0), text)


def as_text(value: Any) -> str:
    """Any completion-like value as a string ('' for None; message lists give their last content)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value[: MAX_CHARS * 4]).decode("utf-8", errors="replace")
    if isinstance(value, list) and value and isinstance(value[-1], dict):  # [{"role":..., "content":...}]
        return as_text(value[-1].get("content"))
    return str(value)


def clip(text: Any, max_chars: int = MAX_CHARS, keep: str = "tail") -> str:
    """``text`` cut to ``max_chars`` characters, keeping the ``"head"`` or the ``"tail"``."""
    text = as_text(text)
    if len(text) <= max_chars:
        return text
    return text[:max_chars] if keep == "head" else text[-max_chars:]


# ---- tags --------------------------------------------------------------------------------------

_TAG_RES: dict[tuple[str, ...], re.Pattern] = {}


_SPACE_RUN = re.compile(r"\s+")


def squeeze_space(text: str) -> str:
    r"""Every whitespace run as one character (a newline if the run has one, else a space), in linear time.

    Patterns that chain whitespace quantifiers (``answer\s*[:=]?\s*...``) backtrack over every split of a
    long run; on squeezed text a run is one character, so each match attempt is short. Line structure is
    kept for ``^``/``$`` patterns.
    """
    return _SPACE_RUN.sub(lambda m: "\n" if "\n" in m.group() else " ", text)


def finite_number(value: Any) -> float | None:
    """``value`` as a finite float, or None: model output may hold a 400-digit integer, ``NaN`` or a string,
    which are invalid input, never an exception (``float(10**400)`` raises ``OverflowError``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _tag_re(names: Sequence[str]) -> re.Pattern:
    key = tuple(sorted(set(names)))
    if key not in _TAG_RES:
        _TAG_RES[key] = re.compile("<(/?)(" + "|".join(re.escape(n) for n in key) + ")>")
    return _TAG_RES[key]


def tag_tokens(text: str, names: Sequence[str]) -> list[tuple[int, int, str, bool]]:
    """Every ``<name>`` / ``</name>`` of the given names, in order: (start, end, name, is_closing)."""
    return [(m.start(), m.end(), m.group(2), m.group(1) == "/") for m in _tag_re(names).finditer(text)]


def parse_schema(
    text: str,
    schema: Sequence[str],
    *,
    known: Sequence[str] = (),
    gaps: str = "space",
    strip: bool = True,
) -> list[str] | None:
    """Bodies of ``<s0>..</s0><s1>..</s1>...`` if ``text`` is exactly that sequence, else None.

    Strict full-match semantics: every tag of ``schema`` (and of ``known``, other tag names that may
    not appear anywhere) occurs exactly where the schema puts it, once, unnested; nothing precedes the
    first tag or follows the last (after stripping the whole text when ``strip``); between consecutive
    elements only whitespace is allowed (``gaps="space"``) or any tag-free text (``gaps="any"``).
    Bodies are returned raw (TON's empty thought ``"\\n\\n"`` stays as it is). Linear time.
    """
    if strip:
        text = text.strip()
    names = tuple(schema) + tuple(n for n in known if n not in schema)
    tokens = tag_tokens(text, names)
    if len(tokens) != 2 * len(schema):
        return None
    bodies, cursor = [], 0
    for i, name in enumerate(schema):
        (o_start, o_end, o_name, o_close), (c_start, c_end, c_name, c_close) = (
            tokens[2 * i],
            tokens[2 * i + 1],
        )
        if o_name != name or o_close or c_name != name or not c_close:
            return None
        gap = text[cursor:o_start]
        if (i == 0 and gap) or (i > 0 and gaps == "space" and gap.strip()):
            return None
        bodies.append(text[o_end:c_start])
        cursor = c_end
    if text[cursor:]:
        return None
    return bodies


def last_tag_body(text: str, name: str) -> str | None:
    """Body of the last complete ``<name>...</name>`` in ``text`` (lenient extraction), or None."""
    close = text.rfind(f"</{name}>")
    if close < 0:
        return None
    open_ = text.rfind(f"<{name}>", 0, close)
    if open_ < 0:
        return None
    return text[open_ + len(name) + 2 : close]


def all_tag_bodies(text: str, name: str, limit: int = 64) -> list[str]:
    """Bodies of the first ``limit`` complete, unnested ``<name>...</name>`` pairs, in order."""
    bodies, open_at = [], None
    for start, end, _, closing in tag_tokens(text, (name,)):
        if not closing:
            open_at = end
        elif open_at is not None:
            bodies.append(text[open_at:start])
            open_at = None
            if len(bodies) >= limit:
                break
    return bodies


def last_boxed(text: str, max_chars: int = 2_000) -> str | None:
    r"""Content of the last ``\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    end = min(len(text), i + max_chars)
    for j in range(i, end):
        ch = text[j]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


# ---- literals ----------------------------------------------------------------------------------


def nesting_depth(text: str) -> int:
    """Maximum bracket depth of ``text``, counting ``[{(`` (a cheap upper bound, strings included)."""
    depth = best = 0
    for ch in text:
        if ch in "[{(":
            depth += 1
            if depth > best:
                best = depth
        elif ch in "]})":
            depth -= 1
    return best


def parse_literal(text: str, max_chars: int = MAX_LITERAL_CHARS, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON value or Python literal parsed from ``text``; None when it is not one (or too big/deep).

    ``json.loads`` is tried first, then ``ast.literal_eval`` for single-quoted dicts that models
    often write (DocSeeker's reward uses ``ast.literal_eval``), on texts of at most
    ``MAX_PYTHON_LITERAL_CHARS``. Neither evaluates code.
    """
    text = text.strip()
    if not text or len(text) > max_chars or nesting_depth(text) > max_depth:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    if len(text) > MAX_PYTHON_LITERAL_CHARS:
        return None
    try:
        return ast.literal_eval(_double_lone_backslashes(text))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def parse_dict(text: str | None) -> dict | None:
    """``parse_literal`` restricted to dicts."""
    if text is None:
        return None
    value = parse_literal(text)
    return value if isinstance(value, dict) else None


# ---- answers and numbers -----------------------------------------------------------------------


def final_answer(text: Any, mode: str = "auto", max_chars: int = 4_000) -> str:
    r"""The part of a completion that holds its final answer, stripped.

    ``mode="auto"``: the body of the last ``<answer>...</answer>``; if that body is a dict with an
    ``"answer"`` key (DocSeeker's JSON answer), that value. Without an answer tag, the last
    ``\boxed{}``; without either, the whole completion's tail. ``"answer_tag"`` / ``"boxed"`` use only
    that source (``''`` when absent); ``"answer_dict"`` only the ``"answer"`` value of a dict answer body
    (DocSeeker: a non-dict answer scores 0); ``"none"`` takes the completion as it is. At most
    ``max_chars`` characters come back (the tail).
    """
    text = clip(text)
    if mode == "none":
        return clip(text.strip(), max_chars)
    if mode == "answer_dict":
        parsed = parse_dict((last_tag_body(text, "answer") or "").strip())
        return clip(as_text(parsed["answer"]).strip(), max_chars) if parsed and "answer" in parsed else ""
    body = last_tag_body(text, "answer") if mode in ("auto", "answer_tag") else None
    if body is not None:
        body = body.strip()
        if body.startswith("{"):
            parsed = parse_dict(body)
            if parsed is not None and "answer" in parsed:
                return clip(as_text(parsed["answer"]).strip(), max_chars)
        return clip(body, max_chars)
    if mode == "answer_tag":
        return ""
    boxed = last_boxed(text) if mode in ("auto", "boxed") else None
    if boxed is not None:
        return clip(boxed.strip(), max_chars)
    if mode == "boxed":
        return ""
    return clip(text.strip(), max_chars)


_NUMBER_RE = re.compile(r"[-+−]?\$?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d{1,4})?\s?%?|[-+−]?\.\d+%?")


def parse_number(text: Any) -> float | None:
    """``text`` as a number if the whole (stripped) text is one: '1,234.5', '$3', '-2e3', '12%'->12.0.

    Percent signs are dropped (not divided by 100): ChartQA-style references mix '12' and '12%'.
    Returns None for anything else, including NaN and infinities.
    """
    text = as_text(text).strip().replace("−", "-")
    if not text or len(text) > 64:
        return None
    cleaned = text.rstrip("%").strip().replace(",", "").lstrip("+")
    if cleaned.startswith("$"):
        cleaned = cleaned[1:]
    elif cleaned.startswith("-$"):
        cleaned = "-" + cleaned[2:]
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,4})?", cleaned):
        return None
    value = float(cleaned)
    return value if math.isfinite(value) else None


def numbers_in(text: str, limit: int = 1_000) -> list[float]:
    """The numbers written in ``text``, in order (at most the last ``limit``). Candidates are parsed from the
    end and only until ``limit`` are found: 20,000 characters of "1," hold 10,000 of them."""
    found: list[float] = []
    for match in reversed(list(_NUMBER_RE.finditer(text))):
        if len(found) >= limit:
            break
        value = parse_number(match.group(0))
        if value is not None:
            found.append(value)
    return found[::-1]


def last_number(text: str) -> float | None:
    """The last number written in ``text``, or None."""
    values = numbers_in(clip(text, 20_000), limit=1)
    return values[-1] if values else None
