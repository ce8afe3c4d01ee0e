"""The report's reading of a run's JSONL files, one record at a time, never trusting their shape.

``iter_records(path, bad)`` yields ``(line number, dict)`` for each record and counts in ``bad`` (a
``Malformed``) each line that is not a JSON object or holds a lone surrogate (text that cannot be written as
UTF-8); the report sections count records of the wrong shape the same way (``bad.add(path, n, why)``) and the
page lists every count with the first line of each. ``cut`` bounds the text of one table cell.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_fast_loads: Callable[[bytes | str], Any]
_FastError: tuple[type[Exception], ...]
try:  # orjson: three times json's speed on a metrics row, and strict (no NaN, no lone surrogate)
    import orjson

    _fast_loads, _FastError, _STRICT = orjson.loads, (orjson.JSONDecodeError,), True
except ImportError:  # pragma: no cover - a dependency; without it the standard library parses everything
    _fast_loads, _FastError, _STRICT = json.loads, (ValueError, RecursionError), False

CELL_CHARS = 1000  # characters of one cell's text (the rest is counted, not shown)
MAX_STEP = 2**53  # a step past this is not an exact integer in JSON's doubles
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]")


class Malformed:
    """Counts of records left out, by (file name, reason), with the first line of each."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], list[int]] = {}  # -> [count, first line]

    def add(self, path: Path, line: int, why: str) -> None:
        entry = self.counts.setdefault((path.name, why), [0, line])
        entry[0] += 1

    def total(self) -> int:
        return sum(c for c, _ in self.counts.values())


def iter_records(path: Path, bad: Malformed) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            strict = _STRICT
            try:
                record = _fast_loads(raw)
            except _FastError:  # json takes what orjson refuses (NaN, 1e400, a lone surrogate)
                if not raw.strip():
                    continue
                try:
                    record, strict = json.loads(raw), False
                except (ValueError, RecursionError):
                    bad.add(path, n, "not JSON")
                    continue
            if not strict and _SURROGATE.search(raw) and _lone_surrogate(record):
                bad.add(path, n, "a lone surrogate (text that is not Unicode)")
            elif type(record) is dict:
                yield n, record
            else:
                bad.add(path, n, f"a JSON {type(record).__name__}, not an object")


def _lone_surrogate(record: dict) -> bool:
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def step_of(record: dict[str, Any]) -> int | None:
    """The record's ``step`` as an int, or None when it is not an integral number in [0, 2**53]."""
    v = record.get("step")
    if type(v) is int and 0 <= v <= MAX_STEP:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return int(v) if v == int(v) and 0 <= v <= MAX_STEP else None


def cut(value: Any, limit: int = CELL_CHARS) -> str:
    """``str(value)``, at most ``limit`` characters of it, then how many more there were."""
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"
