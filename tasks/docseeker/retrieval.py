"""Page retrieval for documents too long to show whole: BM25 over each page's text layer.

DocSeeker pairs its model with page retrieval on ultra-long documents; here the question is the query and
each page's PDFium text layer (``media.pdf_page_texts``) is a document of a per-PDF Okapi BM25 index
(``rank_bm25.BM25Okapi``, k1 = 1.5, b = 0.75):

    score(q, page) = sum_{t in q} IDF(t) * f(t, page) * (k1 + 1) / (f(t, page) + k1 * (1 - b + b * |page| / avgdl))

The top ``k`` pages are kept and shown in document order, labelled with their real page numbers. A page
with no text layer (a scan, a full-page figure) scores 0 and still takes part: ties, among them every
text-less page, go to the earlier page, so a document without any text layer keeps its first ``k`` pages.
Each PDF's texts and index are built once per process (an LRU of ``INDEXED_DOCUMENTS``) and reused by its
questions.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from mmreason.media import pdf_page_texts

METHODS = ("none", "bm25")
INDEXED_DOCUMENTS = 32
_TOKEN = re.compile(r"\w+", re.UNICODE)
_INDEX: OrderedDict[str, tuple] = OrderedDict()


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _index(pdf: str):
    """(BM25 index or None when no page has text, page count) of ``pdf``, cached."""
    from rank_bm25 import BM25Okapi

    if pdf in _INDEX:
        _INDEX.move_to_end(pdf)
        return _INDEX[pdf]
    pages = [tokenize(t) for t in pdf_page_texts(pdf)]
    # BM25Okapi divides by the corpus length; a page without words is given one placeholder token that no
    # query contains, so it scores 0 instead of breaking the index.
    corpus = [words or ["\u2400"] for words in pages]
    entry = (BM25Okapi(corpus) if any(pages) else None, len(pages))
    _INDEX[pdf] = entry
    while len(_INDEX) > INDEXED_DOCUMENTS:
        _INDEX.popitem(last=False)
    return entry


def bm25_pages(pdf: str, question: str, k: int, limit: int | None = None) -> list[int]:
    """0-based indices of the ``k`` pages (among the first ``limit``, default all) that score highest against
    ``question``, in document order (ties to the earlier page)."""
    if k < 1:
        raise ValueError(f"retrieval_top_k must be >= 1, got {k}")
    bm25, count = _index(pdf)
    count = min(count, limit) if limit else count
    if count <= k:
        return list(range(count))
    scores = list(bm25.get_scores(tokenize(question)))[:count] if bm25 is not None else [0.0] * count
    best = sorted(range(count), key=lambda i: (-scores[i], i))[:k]
    return sorted(best)
