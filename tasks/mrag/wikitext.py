"""Wikipedia markup to passage text: inline templates that carry facts are written out before gensim's
``filter_wiki`` (which drops every template), and leftover markup is tidied.

``filter_wiki`` alone loses the facts set inside templates and glues what they separated:
``{{OldStyleDate|February 2|1905|January 20}}`` (a birth date) vanished, ``(1775{{ndash}}1783)`` became
"(17751783)", ``At {{convert|1300|mi|km}}, Alabama ...`` became "At , Alabama ...". ``expand_templates``
rewrites the innermost templates it knows (dashes, dates, conversions, wrappers such as ``nowrap``) as their
text; the others are left for ``filter_wiki`` to drop. Only the template's own arguments are used (nothing is
looked up or evaluated), so a malformed template is either written out from what it holds or left alone.
"""

from __future__ import annotations

import re

MONTHS = ("January February March April May June July August September October November December").split()
_INNERMOST = re.compile(r"\{\{([^{}]*)\}\}")
DASHES = {
    "ndash": "–",
    "snd": " – ",
    "snds": " – ",
    "spnd": " – ",
    "spaced ndash": " – ",
    "en dash": "–",
    "mdash": "—",
    "spaced mdash": " — ",
    "dash": "–",
    "–": "–",
    "=": "=",
}
DATES = {
    "birth date",
    "death date",
    "birth date and age",
    "death date and age",
    "start date",
    "end date",
    "start date and age",
    "end date and age",
    "dts",
    "film date",
    "birth-date",
    "death-date",
}
WRAPPERS = {
    "nowrap",
    "small",
    "smaller",
    "big",
    "nobr",
    "nts",
    "nihongo",
    "abbr",
    "sic",
    "em",
    "strong",
    "vanchor",
    "lang",
    "transl",
    "angbr",
}
RANGE_WORDS = {"to", "-", "–", "and", "or", "by", "x", "+/-", "±"}
UNITS = {"sqmi": "sq mi", "km2": "km2", "C": "°C", "F": "°F", "nmi": "nautical miles"}


def _positional(args: list[str]) -> list[str]:
    return [a.strip() for a in args if "=" not in a]


def _date(args: list[str]) -> str | None:
    """``{{birth date|1879|3|14|df=y}}`` -> "14 March 1879" (day first with ``df``), else "March 14, 1879"."""
    numbers = [a for a in _positional(args) if a.isdigit()][:3]
    if not numbers:
        return None
    year = numbers[0]
    if len(numbers) < 2 or not 1 <= int(numbers[1]) <= 12:
        return year
    month = MONTHS[int(numbers[1]) - 1]
    if len(numbers) < 3 or not 1 <= int(numbers[2]) <= 31:
        return f"{month} {year}"
    day = int(numbers[2])
    day_first = any(a.replace(" ", "").lower() in ("df=y", "df=yes") for a in args)
    return f"{day} {month} {year}" if day_first else f"{month} {day}, {year}"


def _convert(args: list[str]) -> str | None:
    """``{{convert|7|–|10|kg|lb}}`` -> "7–10 kg"; ``{{convert|1300|mi|km}}`` -> "1300 mi" (the source unit)."""
    values = _positional(args)
    if len(values) < 2:
        return None
    if len(values) >= 4 and values[1] in RANGE_WORDS:
        joiner = values[1] if values[1] in ("-", "–") else f" {values[1]} "
        return f"{values[0]}{joiner}{values[2]} {UNITS.get(values[3], values[3])}"
    return f"{values[0]} {UNITS.get(values[1], values[1])}"


def _template_text(body: str) -> str | None:
    """The text of one innermost template, or None to leave it (for ``filter_wiki`` to drop)."""
    name, *args = body.split("|")
    key = name.strip().lower().replace("_", " ")
    if key in DASHES:
        return DASHES[key]
    if key in DATES:
        return _date(args)
    if key == "oldstyledate" and len(args) >= 2:  # {{OldStyleDate|February 2|1905|January 20}}
        return f"{args[0].strip()}, {args[1].strip()}"
    if key == "convert":
        return _convert(args)
    if key in ("circa", "c."):
        return f"c. {args[0].strip()}" if args else "c."
    if key == "as of" and args:
        return f"As of {args[0].strip()}"
    if key == "frac" and len(_positional(args)) >= 2:
        return "/".join(_positional(args)[:3])
    if key in WRAPPERS:
        kept = _positional(args)
        if not kept:
            return ""
        return kept[-1] if key in ("lang", "transl") else kept[0]
    return None


def expand_templates(markup: str, rounds: int = 3) -> str:
    """Write out the innermost templates ``_template_text`` knows; repeated (at most ``rounds`` times) so a
    known wrapper around a known template (``{{nowrap|1 {{=}} 1}}``) is written out too."""
    for _ in range(rounds):
        changed = False

        def one(match: re.Match) -> str:
            nonlocal changed
            text = _template_text(match.group(1))
            if text is None:
                return match.group(0)
            changed = True
            return text

        markup = _INNERMOST.sub(one, markup)
        if not changed:
            break
    return markup


_EMPTY_PARENS = re.compile(r"\(\s*(?:[;,]\s*)*\)")
_LEADING_SEPARATORS = re.compile(r"\(\s*(?:[;,]\s*)+")


def tidy(text: str) -> str:
    """Drop bold / italic quote marks and the empty brackets and separators left by removed templates."""
    text = re.sub(r"'{2,}", "", text)
    text = _EMPTY_PARENS.sub("", text)
    text = _LEADING_SEPARATORS.sub("(", text)
    return re.sub(r"[ \t]{2,}", " ", text)


def clean_article(markup: str) -> str:
    from gensim.corpora.wikicorpus import filter_wiki

    return tidy(filter_wiki(expand_templates(markup)))
