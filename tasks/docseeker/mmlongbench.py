"""MMLongBench-Doc's published rows (``data/samples.json``), read as they are.

    {"doc_id": "report.pdf", "doc_type": "Research report / Introduction", "question": str,
     "answer": str, "evidence_pages": "[19, 20]", "evidence_sources": "['Chart']",
     "answer_format": "Int" | "Float" | "Str" | "List" | "None"}

``evidence_pages`` is a string holding a list of 1-based page numbers ("[]" for none), and
``evidence_sources`` a string holding a list of labels; both are parsed as JSON or Python literals (never
evaluated). The PDF is ``doc_dir / doc_id``, where ``doc_dir`` defaults to the ``documents/`` folder next to
the data file (the repository's layout, ``data/samples.json`` beside ``data/documents/``). A row gets the id
``<row index>:<doc_id>``, the row's position in the file.

``adapt_row`` turns one row into the DocSeeker loader's shape or raises ``BadRow`` naming the file and row
(the loader counts it by ``reason``): an ``answer_format`` that is not one of the benchmark's five names
(``null`` and ``"Integer"`` included), an answer that is not text or is longer than ``MAX_ANSWER_CHARS``.
The file itself is read by ``mmreason/rows.py`` like every pack's (bytes that are not UTF-8, a lone
surrogate: one line naming the file and the line).

Evidence pages that are 0 (or, found by the loader, past the document's last page) are published in 7 of
the questions on the benchmark's present PDFs. Such a row is kept and scored on its answer as the benchmark
scores it; its evidence is left out: ``evidence_pages`` becomes ``[-1]`` (no gold page, so the
evidence-page metrics skip it), ``published_evidence_pages`` keeps the list as published (for the single- /
cross-page breakdown) and ``evidence_left_out`` says why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmreason.rewards.mmlongbench import FORMATS, parse_list

PUBLISHED_KEYS = ("doc_id", "question", "answer", "evidence_pages", "answer_format")
MAX_ANSWER_CHARS = 1_000  # the published answers are at most a few hundred characters; ANLS is O(n * m)


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
    parsed = parse_list(str(value).strip(), max_chars=10_000)
    if parsed is not None:
        return parsed
    raise BadRow(f"{where}: {column} {str(value)[:80]!r} is not a list", f"{column} not a list")


def evidence_pages(value: Any, where: str) -> list[int]:
    """The evidence pages of a row as published (``[]`` for none), 1-based; 0 or less kept (see above)."""
    pages = _literal_list(value, "evidence_pages", where)
    if not all(isinstance(p, int) and not isinstance(p, bool) for p in pages):
        raise BadRow(
            f"{where}: evidence_pages {str(value)[:80]!r} holds something other than page numbers",
            "evidence_pages not a list",
        )
    return sorted(set(pages))


def adapt_row(row: dict, index: int, source: str, doc_dir: str | Path | None) -> dict:
    """The row in the DocSeeker loader's shape (``document`` an absolute PDF path, 1-based evidence)."""
    where = f"{source}: row {index}"
    missing = [k for k in PUBLISHED_KEYS if k not in row]
    if missing:
        raise BadRow(f"{where}: no {', '.join(repr(k) for k in missing)} column", "missing column")
    where = f"{where} (doc_id {str(row['doc_id'])[:200]!r})"
    fmt = row["answer_format"]
    if fmt not in FORMATS:  # null, "Integer", a number ...: the metrics know these five names only
        raise BadRow(
            f"{where}: unknown answer_format {str(fmt)[:80]!r} (one of {', '.join(FORMATS)})", "unknown answer_format"
        )
    answer = row["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise BadRow(f"{where}: answer is a JSON {type(answer).__name__}, not text", "answer not text")
    if len(str(answer)) > MAX_ANSWER_CHARS:
        raise BadRow(
            f"{where}: answer has {len(str(answer)):,} characters, over the cap of {MAX_ANSWER_CHARS:,} "
            "(MAX_ANSWER_CHARS in tasks/docseeker/mmlongbench.py)",
            "answer too long",
        )
    folder = Path(doc_dir) if doc_dir else Path(source).parent / "documents"
    sources = row.get("evidence_sources")
    pages = evidence_pages(row["evidence_pages"], where)
    out = {k: v for k, v in row.items() if k not in ("evidence_pages", "evidence_sources")}
    out.update(
        id=f"{index}:{row['doc_id']}",
        document=str((folder / str(row["doc_id"])).resolve()),
        evidence_pages=pages or [-1],
        evidence_base=1,
        published_evidence_pages=pages,
        evidence_sources=[str(s) for s in _literal_list(sources, "evidence_sources", where)]
        if sources not in (None, "")
        else [],
        row_index=index,
    )
    if pages and pages[0] < 1:
        out.update(evidence_pages=[-1], evidence_left_out=f"evidence page {pages[0]} (pages are 1-based)")
    return out
