"""MMLongBench-Doc's published rows (``data/samples.json``), read as they are.

    {"doc_id": "report.pdf", "doc_type": "Research report / Introduction", "question": str,
     "answer": str, "evidence_pages": "[19, 20]", "evidence_sources": "['Chart']",
     "answer_format": "Int" | "Float" | "Str" | "List" | "None"}

``evidence_pages`` is a string holding a list of 1-based page numbers ("[]" for none), and
``evidence_sources`` a string holding a list of labels; both are parsed as JSON or Python literals (never
evaluated). The PDF is ``doc_dir / doc_id``, where ``doc_dir`` defaults to the ``documents/`` folder next to
the data file (the repository's layout, ``data/samples.json`` beside ``data/documents/``). A row gets the id
``<row index>:<doc_id>``, the row's position in the file.

``adapt_row`` turns one row into the DocSeeker loader's shape or raises ``BadRow`` naming the file and row.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from mmreason.tasks.docseeker.mmlb_score import FORMATS

PUBLISHED_KEYS = ("doc_id", "question", "answer", "evidence_pages", "answer_format")


class BadRow(ValueError):
    """A data row that cannot be used; ``reason`` is a short category for the skip counts."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def is_published_row(row: dict) -> bool:
    """A row in MMLongBench-Doc's shape (it has ``doc_id`` and no ``document``)."""
    return "doc_id" in row and "document" not in row


def _literal_list(value: Any, column: str, where: str) -> list:
    if isinstance(value, list):
        return value
    text = str(value).strip()
    if len(text) <= 10_000:
        for parse in (json.loads, ast.literal_eval):  # literals only
            try:
                parsed = parse(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, list):
                return parsed
            break
    raise BadRow(f"{where}: {column} {str(value)[:80]!r} is not a list", f"{column} not a list")


def evidence_pages(value: Any, where: str) -> list[int]:
    """The 1-based evidence pages of a row (``[]`` for none)."""
    pages = _literal_list(value, "evidence_pages", where)
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in pages):
        raise BadRow(f"{where}: evidence_pages {value!r} holds something other than page numbers",
                     "evidence_pages not a list")
    if any(p < 1 for p in pages):
        raise BadRow(f"{where}: evidence page {min(pages)} is out of range (pages are 1-based)",
                     "evidence page out of range")
    return sorted(set(pages))


def adapt_row(row: dict, index: int, source: str, doc_dir: str | Path | None) -> dict:
    """The row in the DocSeeker loader's shape (``document`` an absolute PDF path, 1-based evidence)."""
    where = f"{source}: row {index}"
    missing = [k for k in PUBLISHED_KEYS if k not in row]
    if missing:
        raise BadRow(f"{where}: no {', '.join(repr(k) for k in missing)} column", "missing column")
    where = f"{where} (doc_id {row['doc_id']!r})"
    fmt = str(row["answer_format"])
    if fmt not in FORMATS:
        raise BadRow(f"{where}: unknown answer_format {fmt!r} (one of {', '.join(FORMATS)})",
                     "unknown answer_format")
    folder = Path(doc_dir) if doc_dir else Path(source).parent / "documents"
    sources = row.get("evidence_sources")
    out = {k: v for k, v in row.items() if k not in ("evidence_pages", "evidence_sources")}
    out.update(id=f"{index}:{row['doc_id']}", document=str((folder / str(row["doc_id"])).resolve()),
               evidence_pages=evidence_pages(row["evidence_pages"], where) or [-1], evidence_base=1,
               evidence_sources=[str(s) for s in _literal_list(sources, "evidence_sources", where)]
               if sources not in (None, "") else [],
               row_index=index)
    return out


def read_rows(path: str) -> list[dict]:
    """The rows of a ``.json`` file holding a list of objects (``samples.json``) or of a JSONL file."""
    text = Path(path).read_text()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}: line {n} is not valid JSON ({err})") from None
    for n, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: row {n} is not a JSON object")
    return rows
