"""A task pack's data rows from a JSON Lines, JSON or parquet file, kept exactly as written.

JSON (``.jsonl`` / ``.json``: one object per line, or one array of objects) is read with the standard ``json``
module, so every value keeps its JSON type: ``"007"`` stays the string ``"007"`` beside a number ``7`` in the
same column. (Reading through ``datasets`` / pyarrow unifies a column to one type, which turned the answer
strings ``"007"`` and ``"1.10"`` into the numbers 7 and 1.1 when other rows held numbers.) Parquet columns
hold one type each and are read by pyarrow as they are.

Anything the reader cannot accept is one ``ValueError`` line naming the pack, the file and the line or row:
bytes that are not UTF-8, a line that is not JSON, a row that is not an object, a string holding a lone
UTF-16 surrogate (``"\\ud800"`` is valid JSON but no valid text: tokenizers and log writers fail on it later),
``NaN`` / ``Infinity`` (Python's ``json`` writes and reads them, JSON has no such value: an answer ``NaN`` would
become the text "nan"), and a key written twice in one object (readers keep the last without a word).

The pack-side helpers ``where``, ``check_count`` and ``require_text`` word the errors of one row's fields the same
way in every pack: ``{file}: row {index} (id {id!r}): {field} ...``; ``parse_pair`` (a ``[start, end]`` time
window), ``gold_letter`` (an option letter from a letter or an option's text) and ``shape_of`` (a bad value, short,
for an error line) read the fields video packs share.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from mmreason.files import decode, first_value, max_data_bytes, not_text, read_bytes, regular_file

LETTERS = "ABCDEFGHIJ"  # option letters of a multiple-choice row, at most ten options
_PAIR_TEXT = re.compile(r"\s*\[\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\]\s*")


def where(source: str, index: int, row: Any) -> str:
    """``{file}: row {index} (id {id!r})``: the prefix of every row error (index 0-based, as rows are counted)."""
    rid = row.get("id", "?") if isinstance(row, dict) else "?"
    return f"{source}: row {index} (id {rid!r})"


def check_count(where_: str, field: str, values: Any, cap: int, knob: str) -> None:
    """Refuse a list field of more than ``cap`` entries, naming the field, its size and the cap's name."""
    if isinstance(values, (list, tuple)) and len(values) > cap:
        raise ValueError(f"{where_}: {field} has {len(values):,} entries, over the cap of {cap} ({knob})")


def require_text(where_: str, row: dict[str, Any], keys: tuple[str, ...], numbers: tuple[str, ...] = ()) -> None:
    """Each of ``keys`` present in ``row`` is a string (those in ``numbers`` may be a JSON number too, written
    back as text by the loader); else ValueError naming the field and the type found."""
    for key in keys:
        value = row.get(key)
        if value is None or isinstance(value, str):
            continue
        if key in numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
            continue
        raise ValueError(f"{where_}: {key!r} is a JSON {_json_type(value)}, not a string")


def parse_pair(value: Any, what: str) -> tuple[float, float]:
    """[start, end] seconds (a list / tuple of two numbers or the string "[s, e]"), 0 <= start < end; else
    ValueError naming ``what`` and the value."""
    pair = value
    if isinstance(value, str):
        m = _PAIR_TEXT.fullmatch(value)
        pair = [m.group(1), m.group(2)] if m else None
    try:
        start, end = (float(v) for v in pair)
    except (TypeError, ValueError):
        raise ValueError(f"{what} {value!r} is not [start, end] in seconds") from None
    if not (math.isfinite(start) and math.isfinite(end)) or start < 0 or end <= start:
        raise ValueError(f"{what} [{start}, {end}] is not a time window (need 0 <= start < end)")
    return start, end


def gold_letter(answer: str, options: list[str]) -> str | None:
    """The option letter a multiple-choice answer names: a letter ("B", "(b)", "[B]", "B.") within the options,
    else the letter of the one option whose text equals the answer (case-insensitive); None when neither."""
    text = answer.strip()
    m = re.fullmatch(r"[\(\[]?([A-Ja-j])[\)\]\.]?", text)
    if m and m.group(1).upper() in LETTERS[: len(options)]:
        return m.group(1).upper()
    matches = [LETTERS[k] for k, o in enumerate(options) if str(o).strip().lower() == text.lower()]
    return matches[0] if len(matches) == 1 else None


def shape_of(value: Any) -> str:
    """A short description of a bad value for an error line (never the whole of a huge list)."""
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", bool: "boolean", int: "number", float: "number", str: "string"}
    return names.get(type(value), type(value).__name__)


class Constant:
    """``NaN`` / ``Infinity`` / ``-Infinity`` as the strict reader meets them (``_check_row`` names the field)."""

    def __init__(self, text: str) -> None:
        self.text = text


class DuplicateKey(ValueError):
    """A key written twice in one JSON object."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def loads(text: str) -> Any:
    """``json.loads`` that refuses a key written twice in one object (``DuplicateKey``) and keeps ``NaN`` /
    ``Infinity`` as ``Constant`` for the caller to name (``bad_value``)."""
    return json.loads(text, object_pairs_hook=_object, parse_constant=Constant)


def duplicate_line(label: str, at: str, err: DuplicateKey) -> str:
    return f"{label}: {at}: key {err.args[0]!r} is written twice in one object (a reader keeps only the last)"


def bad_value(value: Any) -> str | None:
    """What is wrong with the first unusable value of a row read by ``loads`` (a lone surrogate, ``NaN`` /
    ``Infinity``), naming its field; None when there is none."""
    found = _bad_text(value)
    if found is None:
        return None
    path, what = found
    if isinstance(what, Constant):
        return f"field {path!r} is {what.text}, which is not JSON (write null, a number or a string)"
    return f"field {path!r} holds a lone surrogate (not valid Unicode text)"


def _bad_text(value: Any) -> tuple[str, Any] | None:
    """(the path, the value) of the first string (or key) in ``value`` that is not encodable text, or of the
    first ``Constant``; None when there is none."""
    found = first_value(value, lambda item: isinstance(item, Constant) or not_text(item))
    return None if found is None else (found[0] or "the row", found[1])


def _json_rows(path: Path, label: str) -> list[dict[str, Any]]:
    text = decode(read_bytes(path, "data file", max_data_bytes()), label)  # a leading BOM dropped
    stripped = text.lstrip(" \t\r\n")
    if stripped.startswith("["):  # one JSON array of rows
        try:
            items = loads(stripped)
        except DuplicateKey as err:
            raise ValueError(duplicate_line(label, "an object", err)) from None
        except RecursionError:
            raise ValueError(f"{label}: a JSON array of rows: JSON nested too deeply to read") from None
        except ValueError as err:
            raise ValueError(f"{label}: not a JSON array of rows ({err})") from None
        return [_check_row(item, label, f"row {k}") for k, item in enumerate(items)]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = loads(line)
        except DuplicateKey as err:
            raise ValueError(duplicate_line(label, f"line {number}", err)) from None
        except RecursionError:
            raise ValueError(f"{label}: line {number}: JSON nested too deeply to read") from None
        except ValueError as err:
            raise ValueError(f"{label}: line {number} is not JSON ({err})") from None
        rows.append(_check_row(item, label, f"line {number}"))
    return rows


def _check_row(item: Any, label: str, at: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ValueError(f"{label}: {at} is a JSON {type(item).__name__}, not an object (one row per line)")
    bad = bad_value(item)
    if bad:
        raise ValueError(f"{label}: {at}: {bad}")
    return item


def _parquet_rows(path: Path, label: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow: not a parquet file, truncated footer, unreadable column
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{label}: cannot be read as parquet rows ({type(err).__name__}: {first})") from None


def read_rows(path: str | Path, pack: str) -> list[dict[str, Any]]:
    """The rows of ``path`` (``.parquet``: parquet; anything else: JSON Lines or a JSON array), values as
    written; FileNotFoundError / ValueError naming ``pack``'s data file otherwise."""
    path = regular_file(path, f"{pack} data file")  # not a folder, FIFO or device: a line, never a hang
    label = f"{pack} data file {str(path)!r}"
    return _parquet_rows(path, label) if path.suffix == ".parquet" else _json_rows(path, label)
