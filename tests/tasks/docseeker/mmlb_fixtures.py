"""Small MMLongBench-Doc-shaped data written by the tests: PDFs whose pages carry a text layer (or none),
a ``samples.json`` beside a ``documents/`` folder, rows in the published shape (string evidence lists)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmreason.rewards.mmlongbench import is_not_answerable


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def text_pdf(
    path: Path, pages: list[str | None], size: tuple[int, int] = (200, 260), encrypt_filter: str | None = None
) -> Path:
    """A PDF with one page per entry: the text in Helvetica (a real text layer), or a page with no text
    layer for None. ``encrypt_filter`` adds an /Encrypt dictionary with that (unsupported) filter."""
    n = len(pages)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n)), n),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        lines = [] if text is None else text.split("\n")
        stream = b"BT /F1 9 Tf 12 240 Td 11 TL " + b" ".join(b"(%s) '" % _escape(line) for line in lines) + b" ET"
        if text is None:  # a filled rectangle: something to see, nothing to read
            stream = b"0.2 0.4 0.8 rg 20 20 160 220 re f"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % (size[0], size[1], 5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    encrypt = (
        b""
        if encrypt_filter is None
        else b" /Encrypt << /Filter /%s /V 1 /R 2 >> /ID [<00> <00>]" % (encrypt_filter.encode())
    )
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, encrypt, xref)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


# A 12-page report: page k talks about one topic, page 7 has no text layer (a figure).
TOPICS = [
    "introduction overview",
    "revenue growth quarterly",
    "employee headcount offices",
    "carbon emissions",
    "customer satisfaction survey",
    "research budget patents",
    None,
    "dividend payout shareholders",
    "supply chain suppliers",
    "risk factors litigation",
    "board of directors governance",
    "appendix glossary",
]


def report_pages() -> list[str | None]:
    return [None if t is None else f"Section {k}\n{t}\n{t} details" for k, t in enumerate(TOPICS, 1)]


def published_row(
    doc_id: str, question: str, answer: str, pages: str, fmt: str, sources: str = "['Pure-text (Plain-text)']"
) -> dict:
    return {
        "doc_id": doc_id,
        "doc_type": "Research report / Introduction",
        "question": question,
        "answer": answer,
        "evidence_pages": pages,
        "evidence_sources": sources,
        "answer_format": fmt,
    }


def write_benchmark(folder: Path, rows: list[dict] | None = None) -> Path:
    """``folder/samples.json`` and ``folder/documents/report.pdf`` (12 pages) and ``short.pdf`` (3 pages)."""
    text_pdf(folder / "documents" / "report.pdf", report_pages())
    text_pdf(folder / "documents" / "short.pdf", ["cover page", "the answer is 42", "contact page"])
    if rows is None:
        rows = [
            published_row("report.pdf", "How large was the revenue growth quarterly?", "12", "[2]", "Int", "['Chart']"),
            published_row(
                "report.pdf",
                "What does the dividend payout to shareholders look like?",
                "3.5",
                "[8]",
                "Float",
                "['Table']",
            ),
            published_row(
                "report.pdf",
                "Which supply chain suppliers and litigation risk factors are named?",
                "['acme', 'zenith']",
                "[9, 10]",
                "List",
                "['Pure-text (Plain-text)', 'Table']",
            ),
            published_row("report.pdf", "Who is the chief executive's dog?", "Not answerable", "[]", "None", "[]"),
            published_row("short.pdf", "What is the answer?", "42", "[2]", "Str", "['Generalized-text (Layout)']"),
        ]
    (folder / "samples.json").write_text(json.dumps(rows, indent=1))
    return folder / "samples.json"


def accuracy_and_f1(rows: list[tuple[float, Any, Any]]) -> tuple[float, float]:
    """(generalized accuracy, F1) of (score, reference, prediction) rows, as defined above."""
    if not rows:
        return 0.0, 0.0
    acc = sum(s for s, _, _ in rows) / len(rows)
    answerable = [s for s, ref, _ in rows if not is_not_answerable(ref)]
    answered = [1 for _, _, pred in rows if not is_not_answerable(pred)]
    if not answerable or not answered:
        return acc, 0.0
    recall, precision = sum(answerable) / len(answerable), sum(answerable) / len(answered)
    return acc, (2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0)
