"""PDF pages as images, rendered by PDFium (pypdfium2), with an optional on-disk cache.

Page indices are 0-based. A page of ``w x h`` points rendered at ``dpi`` is
``ceil(w * dpi / 72) x ceil(h * dpi / 72)`` pixels (pypdfium2's rule; page rotation included), so its
visual-token count is known from the page size alone (``pdf_page_tokens``).

With a pixel budget the page is rendered directly at the scale of its ``smart_resize`` target and then
resized by at most a pixel or so onto the exact target, which is sharper than downsampling a high-dpi
bitmap and costs less; the target is that of the ``dpi`` rendering, so the token count does not depend
on this shortcut.

PDFium is not thread-safe: every call into it here holds one process-wide lock.

A long document is asked many questions, so within a process each file is opened once (an LRU of
``OPEN_DOCUMENTS`` open documents, keyed by the file's real path, size and mtime) and each rendering is
kept in memory (an LRU of at most ``MEMORY_CACHE_PIXELS`` pixels, keyed like the on-disk cache): a page
is rendered once per run at each budget it is asked at. Both LRUs belong to one ``PdfCache`` per process
(``PAGE_CACHE``), whose ``stats`` (a ``PdfStats``) counts documents opened and pages rendered (an eval's
``*_results.json`` reports them under ``resources``); ``PDF_STATS`` is that record, read-only.
"""

from __future__ import annotations

import atexit
import hashlib
import math
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PIL import Image

if TYPE_CHECKING:
    from pypdfium2 import PdfDocument, PdfPage

from mmreason.media.budget import (
    IMAGE_MAX_PIXELS,
    IMAGE_MIN_PIXELS,
    PixelBudget,
    image_tokens,
    resolve_budget,
)
from mmreason.media.errors import MediaError, describe, require_file
from mmreason.media.image import max_decode_pixels

_KIND = "PDF"
_PDFIUM_LOCK = threading.RLock()
PageSelection = int | Iterable[int] | None
OPEN_DOCUMENTS = 128  # documents kept open per process (a handle holds the parsed cross-reference table)
MEMORY_CACHE_PIXELS = int(os.environ.get("MMREASON_PAGE_CACHE_PIXELS", 60_000_000))  # ~180 MB of RGB pages


@dataclass
class PdfStats(Mapping[str, int]):
    """What the PDF layer did in this process: documents opened, pages rendered, pages served from the
    in-memory and the on-disk cache. Read as a mapping (``stats["pages_rendered"]``, ``dict(stats)``); only
    ``PdfCache`` adds to it."""

    documents_opened: int = 0
    pages_rendered: int = 0
    pages_from_memory: int = 0
    pages_from_disk: int = 0

    def __getitem__(self, key: str) -> int:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return int(getattr(self, key))

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in fields(self))

    def __len__(self) -> int:
        return len(fields(self))


class PdfCache:
    """The open documents and the in-memory renderings of one process, and the counts of what they did.

    Callers hold ``_PDFIUM_LOCK`` (``clear`` takes it itself: it also runs at exit)."""

    def __init__(self, *, open_documents: int = OPEN_DOCUMENTS, memory_pixels: int = MEMORY_CACHE_PIXELS) -> None:
        self.open_documents = open_documents
        self.memory_pixels = memory_pixels
        self.stats = PdfStats()
        self._documents: OrderedDict[tuple, Any] = OrderedDict()  # pypdfium2 PdfDocument handles
        self._rendered: OrderedDict[tuple, Image.Image] = OrderedDict()
        self._rendered_pixels = 0

    def document(self, path: str) -> PdfDocument:
        """The open document for ``path``, from the LRU or opened now."""
        key = _identity(path)
        doc = self._documents.get(key)
        if doc is not None:
            self._documents.move_to_end(key)
            return doc
        doc = _open(path)
        if not self.stats.documents_opened:  # after pypdfium2's own exit hook is registered, so it runs first
            atexit.register(self.clear)
        self.stats.documents_opened += 1
        self._documents[key] = doc
        while len(self._documents) > self.open_documents:
            self._documents.popitem(last=False)[1].close()
        return doc

    def recall(self, key: tuple) -> Image.Image | None:
        """The rendering kept under ``key`` (counted as served from memory), or None."""
        image = self._rendered.get(key)
        if image is not None:
            self._rendered.move_to_end(key)
            self.stats.pages_from_memory += 1
        return image

    def remember(self, key: tuple, image: Image.Image) -> None:
        pixels = image.width * image.height
        if pixels > self.memory_pixels:
            return
        self._rendered[key] = image
        self._rendered_pixels += pixels
        while self._rendered_pixels > self.memory_pixels:
            old = self._rendered.popitem(last=False)[1]
            self._rendered_pixels -= old.width * old.height

    def clear(self) -> None:
        """Close every document and drop the renderings; the counts stay."""
        with _PDFIUM_LOCK:
            while self._documents:
                self._documents.popitem()[1].close()
            self._rendered.clear()
            self._rendered_pixels = 0


PAGE_CACHE = PdfCache()
PDF_STATS: Mapping[str, int] = PAGE_CACHE.stats  # read-only view of the counts (the eval results, tests)


def _identity(path: str) -> tuple:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def clear_pdf_caches() -> None:
    """Close every cached document and drop the in-memory renderings (tests; a file replaced in place)."""
    PAGE_CACHE.clear()


def _open(path: str) -> PdfDocument:
    """Open a document (caller holds the lock); encrypted and damaged files become MediaError."""
    import pypdfium2 as pdfium

    try:
        return pdfium.PdfDocument(path)
    except pdfium.PdfiumError as err:
        text = str(err).lower()
        if "password" in text:
            raise MediaError(path, "the PDF is encrypted (password protected)", _KIND) from err
        if "security" in text:
            raise MediaError(path, "the PDF is encrypted with an unsupported security handler", _KIND) from err
        raise MediaError(path, f"not a readable PDF, damaged or truncated ({describe(err)})", _KIND) from err


def _page_indices(path: str, pages: PageSelection, count: int) -> list[int]:
    if count == 0:
        raise MediaError(path, "the PDF has no pages", _KIND)
    if pages is None:
        return list(range(count))
    indices = [pages] if isinstance(pages, int) else [int(p) for p in pages]
    if not indices:
        raise ValueError(f"no pages selected from {path!r}: give None for all pages, or page indices")
    for index in indices:
        if not 0 <= index < count:
            raise MediaError(path, f"page {index} is out of range (the PDF has {count} pages, 0-based)", _KIND)
    return indices


def pdf_outline(path: str | os.PathLike) -> list[tuple[str, int]]:
    """The document outline (bookmarks) as (title, 0-based page) pairs; entries without a page are left out."""
    path = require_file(path, _KIND)
    with _PDFIUM_LOCK:
        doc = PAGE_CACHE.document(path)
        out = []
        for item in doc.get_toc():
            dest = item.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is not None and 0 <= index < len(doc):
                out.append((item.get_title() or "", int(index)))
        return out


def pdf_page_text(path: str | os.PathLike, index: int) -> str:
    """The text layer of one page (0-based); '' for a scanned page without text."""
    return pdf_page_texts(path, [index])[0]


def pdf_page_texts(path: str | os.PathLike, pages: PageSelection = None) -> list[str]:
    """The text layer of each selected page (0-based; None = all); '' for a page without text."""
    path = require_file(path, _KIND)
    with _PDFIUM_LOCK:
        doc = PAGE_CACHE.document(path)
        out = []
        for i in _page_indices(path, pages, len(doc)):
            page = _load_page(doc, path, i)
            try:
                textpage = page.get_textpage()
                try:
                    out.append(textpage.get_text_bounded())
                finally:
                    textpage.close()
            except Exception as err:  # PdfiumError: a damaged text layer reads as none
                if isinstance(err, MediaError):
                    raise
                out.append("")
            finally:
                page.close()
        return out


def pdf_page_count(path: str | os.PathLike) -> int:
    """Number of pages; raises MediaError for a missing, encrypted or damaged file."""
    path = require_file(path, _KIND)
    with _PDFIUM_LOCK:
        return len(PAGE_CACHE.document(path))


def _load_page(doc: PdfDocument, path: str, index: int) -> PdfPage:
    try:
        return doc[index]
    except Exception as err:  # PdfiumError: a damaged page object
        raise MediaError(path, f"page {index} cannot be loaded ({describe(err)})", _KIND) from err


def _rendered_size(page: PdfPage, dpi: float) -> tuple[int, int]:
    """(height, width) in pixels of ``page.render(scale=dpi / 72)``, by pypdfium2's own formula."""
    scale = dpi / 72
    return math.ceil(page.get_height() * scale), math.ceil(page.get_width() * scale)


def pdf_page_sizes(path: str | os.PathLike, pages: PageSelection = None, dpi: float = 100) -> list[tuple[int, int]]:
    """(height, width) in pixels of each selected page rendered at ``dpi``, without rendering."""
    path = require_file(path, _KIND)
    with _PDFIUM_LOCK:
        doc = PAGE_CACHE.document(path)
        out = []
        for i in _page_indices(path, pages, len(doc)):
            page = _load_page(doc, path, i)
            try:
                out.append(_rendered_size(page, dpi))
            finally:
                page.close()
        return out


def pdf_page_tokens(
    path: str | os.PathLike,
    pages: PageSelection = None,
    dpi: float = 100,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
) -> list[int]:
    """Visual tokens the Qwen image processor (with these limits) produces for each selected page.

    Equal to the count for ``render_pages(path, pages, dpi, max_pixels=..., min_pixels=...)``.
    """
    sizes = pdf_page_sizes(path, pages, dpi)
    try:
        return [image_tokens(h, w, min_pixels, max_pixels) for h, w in sizes]
    except ValueError as err:  # aspect ratio above 200
        raise MediaError(str(path), str(err), _KIND) from err


def _render(path: str, page: PdfPage, dpi: float, budget: PixelBudget | None, index: int) -> Image.Image:
    """Render one page (caller holds the lock) to RGB at ``dpi``, or onto the budget's target size."""
    height, width = _rendered_size(page, dpi)
    scale = dpi / 72
    target = None
    cap = max_decode_pixels()
    if budget is None and height * width > cap:  # no budget: a poster-sized page would render at full size
        raise MediaError(
            path,
            f"page {index} renders to {width}x{height} px at {dpi:g} dpi, over the cap of "
            f"{cap:,} pixels (MMREASON_MAX_IMAGE_PIXELS); give a pixel budget or a lower dpi",
            _KIND,
        )
    if budget is not None:
        try:
            target = budget.resize(height, width)
        except ValueError as err:  # aspect ratio above 200
            raise MediaError(path, f"page {index}: {err}", _KIND) from err
        scale = max(target[0] / page.get_height(), target[1] / page.get_width())
    try:
        image = page.render(scale=scale).to_pil().convert("RGB")  # convert copies out of PDFium's buffer
        PAGE_CACHE.stats.pages_rendered += 1
    except Exception as err:
        raise MediaError(path, f"page {index} cannot be rendered ({describe(err)})", _KIND) from err
    if target is not None and image.size != (target[1], target[0]):
        image = image.resize((target[1], target[0]), Image.Resampling.BICUBIC)
    return image


def _cache_file(cache_dir: str | os.PathLike, path: str, index: int, dpi: float, budget: PixelBudget | None) -> Path:
    """Cache entry for one rendering: keyed by the file (real path, size, mtime), page, dpi and budget."""
    stat = os.stat(path)
    identity = f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:24]
    limits = "native" if budget is None else f"{budget.min_pixels}-{budget.max_pixels}"
    return Path(cache_dir) / key / f"p{index}_dpi{dpi:g}_{limits}.png"


def _read_cached(file: Path) -> Image.Image | None:
    try:
        with Image.open(file) as cached:
            return cached.convert("RGB")
    except (OSError, ValueError):  # missing or half-written by a killed process: render again
        return None


def _write_cached(file: Path, image: Image.Image) -> None:
    """Write atomically (temporary file + rename), so concurrent readers never see half a PNG."""
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            image.save(handle, format="PNG", compress_level=1)
        os.replace(tmp, file)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_pages(
    pdf_path: str | os.PathLike,
    pages: PageSelection = None,
    dpi: float = 100,
    cache_dir: str | os.PathLike | None = None,
    max_pixels: int | None = None,
    *,
    min_pixels: int | None = None,
) -> list[Image.Image]:
    """Render the selected pages (None = all; an index, a range or a list; 0-based) as RGB PIL images.

    Without a budget a page is ``ceil(w * dpi / 72) x ceil(h * dpi / 72)`` pixels. With ``max_pixels``
    and/or ``min_pixels`` (the other limit defaults to the image processor's) it is exactly the
    ``smart_resize`` of that size, so the processor keeps it as it is. ``cache_dir`` keeps each
    rendering as a PNG keyed by (file path, size, mtime, page, dpi, budget); a changed file misses.
    Raises MediaError naming the file for a missing, encrypted or damaged PDF and for a page out of range.
    """
    path = require_file(pdf_path, _KIND)
    if dpi <= 0:
        raise ValueError(f"dpi must be positive, got {dpi}")
    budget = resolve_budget(min_pixels, max_pixels, IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS)
    limits = None if budget is None else (budget.min_pixels, budget.max_pixels)
    with _PDFIUM_LOCK:
        doc = PAGE_CACHE.document(path)
        identity = _identity(path)
        images = []
        for index in _page_indices(path, pages, len(doc)):
            key = (identity, index, dpi, limits)
            image = PAGE_CACHE.recall(key)
            if image is not None:
                images.append(image.copy())  # callers may change their copy
                continue
            file = None if cache_dir is None else _cache_file(cache_dir, path, index, dpi, budget)
            image = None if file is None else _read_cached(file)
            if image is None:
                page = _load_page(doc, path, index)
                try:
                    image = _render(path, page, dpi, budget, index)
                finally:
                    page.close()
                if file is not None:
                    _write_cached(file, image)
            else:
                PAGE_CACHE.stats.pages_from_disk += 1
            PAGE_CACHE.remember(key, image)
            images.append(image.copy())
        return images
