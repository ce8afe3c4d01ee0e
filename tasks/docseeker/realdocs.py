"""Questions on real PDFs nobody here wrote, from their outline (bookmarks), checked against the page text.

For each outline entry whose title is printed on the page the entry points to (PDFium's text layer), the
row asks on which page that section begins; the evidence is that page. Any PDF with an outline works,
for example the R manuals that Debian's ``r-doc-pdf`` installs (``/usr/share/R/doc/manual/*.pdf``) or
``debian-reference-en`` (``/usr/share/debian-reference/debian-reference.en.pdf``).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from mmreason.media import pdf_outline, pdf_page_text


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def outline_entries(pdf: str) -> list[tuple[str, int]]:
    """(section title without its number, 0-based page) of each outline entry found on its page's text."""
    out = []
    for raw_title, index in pdf_outline(pdf):
        title = re.sub(r"^[\d.]+\s+", "", raw_title).strip()
        if len(title) >= 4 and _normalise(title) in _normalise(pdf_page_text(pdf, index)):
            out.append((title, index))
    return out


def outline_rows(pdf: str, n: int = 4, seed: int = 0) -> list[dict]:
    """Up to ``n`` loader rows for ``pdf`` (sections whose title occurs once in the outline)."""
    entries = outline_entries(pdf)
    titles = [t for t, _ in entries]
    unique = [(t, i) for t, i in entries if titles.count(t) == 1]
    picked = random.Random(seed).sample(unique, min(n, len(unique)))
    stem = Path(pdf).stem
    return [
        {
            "id": f"{stem}-p{index + 1}-{k}",
            "document": str(Path(pdf).resolve()),
            "question": f"On which page does the section titled '{title}' begin? Answer with the page number.",
            "answer": str(index + 1),
            "evidence_pages": [index + 1],
            "evidence_base": 1,
            "answer_format": "int",
            "qtype": "outline",
        }
        for k, (title, index) in enumerate(sorted(picked, key=lambda e: e[1]))
    ]


def write_outline_jsonl(pdfs: list[str], out: str | Path, n: int = 4, seed: int = 0) -> Path:
    """Rows for every PDF in ``pdfs`` written to ``out/data.jsonl``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    rows = [row for pdf in pdfs for row in outline_rows(pdf, n, seed)]
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
