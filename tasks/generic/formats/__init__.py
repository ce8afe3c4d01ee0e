"""The row formats the generic pack reads, as a registry other packs can add to.

A format names its columns by role (``prompt``, ``answer``, ``images``, ``videos``, ...), each role a list of
candidate column names (the first present wins), says which roles it needs, and turns one row into ``Parts``
(the user text with its ``<image>`` / ``<video>`` placeholders, the media as written, the reference answer and
the row's own answer-kind signal). Detection tries the formats in registration order and takes the first
whose required roles are all present (and its ``marks``, columns only it has, as named; and every role
``columns`` renames) and that leaves no column unread that another format reads as media, a media type, an
answer kind or options (``KEPT_ROLES``: a Video-R1 file whose ``solution`` is called ``answer`` must not be read
as EasyR1 without its clips); when every fitting format would, the error names the columns. ``format=NAME``
forces one (the columns it leaves unread are printed); ``columns={role: column}`` renames.

    register_format(Format(name="mine", roles={"prompt": ("question",), "answer": ("label",)},
                           required=("prompt", "answer"), to_parts=my_row_to_parts))
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

IMAGE, VIDEO = "<image>", "<video>"


@dataclass
class Parts:
    """One row as the pack needs it, nothing decoded.

    text:     the user text; ``<image>`` / ``<video>`` mark where each medium goes (none: media first)
    images:   image sources as written (path, {"bytes", "path"}, data URL, bytes)
    videos:   video paths
    answer:   the reference (text, a number, or a list of references)
    kind:     the row's own answer-kind signal (``mcq``, ``numeric``, ``math``, ``ocr``, ``free-form``) or None
    choices:  the option texts of a multiple-choice row, or None
    history:  earlier chat turns ({"role", "content"} with placeholders in the text) before the last user turn
    system:   a system prompt the row carries, or None
    target:   the assistant text SFT imitates (None: the answer in the prompt template's format)
    turns:    every assistant turn of a conversation with its context: [(history, user text, reply)] (multi-turn SFT)
    """

    text: str
    answer: Any
    images: list[Any] = field(default_factory=list)
    videos: list[Any] = field(default_factory=list)
    kind: str | None = None
    choices: list[str] | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    system: str | None = None
    target: str | None = None
    turns: list[tuple[list[dict[str, Any]], str, str]] = field(default_factory=list)


@dataclass
class Format:
    """A row format: ``roles`` maps a role to its candidate columns; ``to_parts(row, cols)`` reads one row,
    ``cols`` being the role -> column map resolved for the file (a missing optional role is absent)."""

    name: str
    roles: dict[str, tuple[str, ...]]
    required: tuple[str, ...]
    to_parts: Callable[[dict[str, Any], dict[str, str]], Parts]
    description: str = ""
    marks: tuple[str, ...] = ()  # columns a file must have, as named, to be detected as this format (not renamed)

    def resolve(self, columns: Iterable[str], renames: dict[str, str] | None = None) -> dict[str, str]:
        """role -> the file's column for each role present (``renames`` first, then the candidates)."""
        present, renames = set(columns), renames or {}
        out = {}
        for role, candidates in self.roles.items():
            names = (renames[role],) if role in renames else candidates
            found = next((c for c in names if c in present), None)
            if found is not None:
                out[role] = found
        return out

    def missing(self, columns: Iterable[str], renames: dict[str, str] | None = None) -> list[str]:
        cols = self.resolve(columns, renames)
        return [role for role in self.required if role not in cols]

    def expected(self, renames: dict[str, str] | None = None) -> list[str]:
        renames = renames or {}
        return [renames.get(role) or self.roles[role][0] for role in self.required]


FORMATS: dict[str, Format] = {}
KEPT_ROLES = ("images", "videos", "media", "media_type", "kind", "choices")  # never dropped without a word


def register_format(fmt: Format, *, before: str | None = None) -> Format:
    """Add ``fmt`` to the registry (detection order: registration order, or just before ``before``)."""
    if fmt.name in FORMATS:
        raise ValueError(f"row format {fmt.name!r} is registered twice")
    if before is None or before not in FORMATS:
        FORMATS[fmt.name] = fmt
        return fmt
    items = list(FORMATS.items())
    at = [name for name, _ in items].index(before)
    FORMATS.clear()
    FORMATS.update(items[:at] + [(fmt.name, fmt)] + items[at:])
    return fmt


def detect(
    columns: Iterable[str], *, label: str, forced: str | None = None, renames: dict[str, str] | None = None
) -> tuple[Format, dict[str, str]]:
    """The format of a file with ``columns`` and its role -> column map; ValueError naming the file, the
    expected columns and the closest present one when none fits."""
    columns = list(columns)
    if forced is not None:
        if forced not in FORMATS:
            raise ValueError(f"format={forced!r}: not a known row format ({', '.join(FORMATS)})")
        candidates = [FORMATS[forced]]
    else:
        candidates = list(FORMATS.values())
    fitting = [f for f in candidates if not f.missing(columns, renames) and (forced or fits(f, columns, renames))]
    for fmt in fitting:
        if forced or not unread(fmt, columns, renames):
            return fmt, fmt.resolve(columns, renames)
    if fitting:
        left = unread(fitting[0], columns, renames)
        raise ValueError(
            f"{label}: format {fitting[0].name!r} fits the columns but would leave "
            + ", ".join(f"{col!r} (read by {', '.join(who)} as {role})" for col, role, who in left)
            + f" unread, and no format reads them all; columns present: {', '.join(map(repr, columns))}; "
            "rename with data.task_args.columns={ROLE: COLUMN} or force one with data.task_args.format=NAME"
        )
    best = min(
        candidates,
        key=lambda f: (
            len(f.missing(columns, renames)),
            -len(f.resolve(columns, renames)),
            list(FORMATS).index(f.name),
        ),
    )
    raise ValueError(_missing_line(label, best, columns, renames, forced is not None))


def unread(
    fmt: Format, columns: Iterable[str], renames: dict[str, str] | None = None
) -> list[tuple[str, str, list[str]]]:
    """(column, role, the formats that read it so) for each present column that some format reads in a
    ``KEPT_ROLES`` role and ``fmt`` (with ``renames``) does not read at all."""
    columns = list(columns)
    used = set(fmt.resolve(columns, renames).values())
    out = []
    for col in columns:
        if col in used:
            continue
        readers = [(f.name, role) for f in FORMATS.values() for role in KEPT_ROLES if col in f.roles.get(role, ())]
        if readers:
            out.append((col, readers[0][1], list(dict.fromkeys(name for name, _ in readers))))
    return out


def fits(fmt: Format, columns: list[str], renames: dict[str, str] | None) -> bool:
    """Auto-detection only: the file has the format's marks as named, and the format has every renamed role."""
    return all(c in columns for c in fmt.marks) and set(renames or {}) <= set(fmt.roles)


def _missing_line(label: str, fmt: Format, columns: list[str], renames: dict[str, str] | None, forced: bool) -> str:
    lacking = fmt.missing(columns, renames)
    wanted = [(renames or {}).get(role) or fmt.roles[role][0] for role in lacking]
    close = [c for w in wanted for c in difflib.get_close_matches(w, columns, n=1, cutoff=0.5)]
    hint = f"; closest present: {close[0]!r}" if close else ""
    others = "" if forced else f" (no known format fits; formats: {', '.join(FORMATS)})"
    return (
        f"{label}: no {', '.join(repr(w) for w in wanted)} column for format {fmt.name!r}, which expects "
        f"{', '.join(repr(c) for c in fmt.expected(renames))}{others}; columns present: "
        f"{', '.join(repr(c) for c in columns) or '(none)'}{hint}; rename with "
        f"data.task_args.columns={{{lacking[0]}: COLUMN}} or force one with data.task_args.format=NAME"
    )


# the built-in formats, in detection order (most specific first)
from mmreason.tasks.generic.formats import verl, videor1, sharegpt, easyr1, trl  # noqa: E402,F401,I001
