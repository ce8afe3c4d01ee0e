"""PDF pages: sizes by pypdfium2's formula, the right page in the right order, token counts that match
the image processor, a cache that is really read, and clear errors for encrypted or damaged files.

The fixture PDF has three flat-coloured pages (red, green, blue) of 200x100, 210x100 and 100x300 points.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pypdfium2 as pdfium
import pytest
import torch
from media_fixtures import PAGE_COLORS, encrypted_pdf_bytes
from PIL import Image
from transformers import Qwen2VLImageProcessor

from mmreason.media import (
    MediaError,
    pdf_page_count,
    pdf_page_sizes,
    pdf_page_tokens,
    render_pages,
    smart_resize,
)
from mmreason.media.pdf import PDF_STATS, clear_pdf_caches

torch.set_num_threads(1)


def _color(image: Image.Image) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(image)[image.height // 2, image.width // 2])


def _assert_page_colors(images, pages):
    for image, page in zip(images, pages, strict=True):
        assert image.mode == "RGB"
        assert np.abs(np.subtract(_color(image), PAGE_COLORS[page])).max() <= 8  # JPEG-coded page


def test_page_count_and_sizes_by_hand(pdf):
    assert pdf_page_count(pdf) == 3
    # at 100 dpi a side of s points is ceil(s * 100 / 72) pixels: 200 -> 278, 210 -> 292, 100 -> 139, 300 -> 417
    assert pdf_page_sizes(pdf, dpi=100) == [(139, 278), (139, 292), (417, 139)]
    assert pdf_page_sizes(pdf, pages=[2], dpi=72) == [(300, 100)]
    images = render_pages(pdf, dpi=100)
    assert [(im.height, im.width) for im in images] == [(139, 278), (139, 292), (417, 139)]
    _assert_page_colors(images, [0, 1, 2])


def test_page_selection_forms_keep_order(pdf):
    _assert_page_colors(render_pages(pdf, pages=1, dpi=30), [1])
    _assert_page_colors(render_pages(pdf, pages=range(1, 3), dpi=30), [1, 2])
    _assert_page_colors(render_pages(pdf, pages=[2, 0, 2], dpi=30), [2, 0, 2])


@pytest.mark.parametrize("limits", [None, (28 * 28 * 4, 28 * 28 * 30), (28 * 28 * 200, 28 * 28 * 400)])
@pytest.mark.parametrize("dpi", [72, 100, 150])
def test_page_tokens_match_processor(pdf, dpi, limits):
    """Counted from the page size alone, equal to what the processor makes of the rendered pages."""
    processor = (
        Qwen2VLImageProcessor() if limits is None else Qwen2VLImageProcessor(min_pixels=limits[0], max_pixels=limits[1])
    )
    low, high = int(processor.size["shortest_edge"]), int(processor.size["longest_edge"])
    predicted = pdf_page_tokens(pdf, dpi=dpi, min_pixels=low, max_pixels=high)
    budget = {} if limits is None else {"min_pixels": low, "max_pixels": high}
    images = render_pages(pdf, dpi=dpi, **budget)
    grids = processor(images=images, return_tensors="pt")["image_grid_thw"]
    assert predicted == [int(grid.prod()) // 4 for grid in grids]
    if limits is not None:  # rendered straight to the processor's size: it does not resize again
        for image, (height, width) in zip(images, pdf_page_sizes(pdf, dpi=dpi)):
            assert (image.height, image.width) == smart_resize(height, width, min_pixels=low, max_pixels=high)
        assert [(im.height // 14, im.width // 14) for im in images] == [tuple(g[1:].tolist()) for g in grids]
        _assert_page_colors(images, [0, 1, 2])


def test_rotated_page(tmp_path, pdf):
    doc = pdfium.PdfDocument(str(pdf))
    doc[0].set_rotation(90)
    rotated = tmp_path / "rotated.pdf"
    doc.save(str(rotated))
    doc.close()
    assert pdf_page_sizes(rotated, pages=0, dpi=72) == [(200, 100)]  # 200 x 100 pt turned on its side
    (image,) = render_pages(rotated, pages=0, dpi=72)
    assert (image.height, image.width) == (200, 100)
    processor = Qwen2VLImageProcessor()
    grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0]
    assert pdf_page_tokens(rotated, pages=0, dpi=72) == [int(grid.prod()) // 4]


def test_cache_is_written_read_and_invalidated(tmp_path, pdf):
    source = tmp_path / "doc.pdf"
    source.write_bytes(pdf.read_bytes())
    cache = tmp_path / "cache"
    first = render_pages(source, dpi=50, cache_dir=cache)
    files = sorted(cache.rglob("*.png"))
    assert len(files) == 3
    again = render_pages(source, dpi=50, cache_dir=cache)
    assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(first, again))
    # the cache is really read: a planted entry comes back (once the in-memory copy is dropped)
    page0 = next(f for f in files if f.name.startswith("p0_"))
    Image.new("RGB", first[0].size, (0, 0, 0)).save(page0)
    clear_pdf_caches()
    assert _color(render_pages(source, pages=0, dpi=50, cache_dir=cache)[0]) == (0, 0, 0)
    # other dpi or budget: other entries
    render_pages(source, pages=0, dpi=60, cache_dir=cache)
    render_pages(source, pages=0, dpi=50, cache_dir=cache, max_pixels=28 * 28 * 8)
    assert len(list(cache.rglob("*.png"))) == 5
    # a changed file (new mtime) misses the stale entries
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    _assert_page_colors(render_pages(source, pages=0, dpi=50, cache_dir=cache), [0])


def test_a_page_renders_once_per_process_and_a_document_opens_once(tmp_path, pdf, monkeypatch):
    """Three calls for the same page at one budget: one rendering, one open; a copy each time (callers may
    change theirs); another budget is another rendering; a changed file is opened and rendered again."""
    source = tmp_path / "doc.pdf"
    source.write_bytes(pdf.read_bytes())
    clear_pdf_caches()
    before = dict(PDF_STATS)
    images = [render_pages(source, pages=1, dpi=40)[0] for _ in range(3)]
    assert pdf_page_count(source) == 3 and pdf_page_sizes(source, [0])
    images[0].paste((0, 0, 0), (0, 0, images[0].width, images[0].height))
    _assert_page_colors(render_pages(source, pages=1, dpi=40), [1])  # the cached copy is untouched
    render_pages(source, pages=1, dpi=40, max_pixels=28 * 28 * 4)
    delta = {k: PDF_STATS[k] - before[k] for k in PDF_STATS}
    assert delta == {"documents_opened": 1, "pages_rendered": 2, "pages_from_memory": 3, "pages_from_disk": 0}
    stat = source.stat()
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    render_pages(source, pages=1, dpi=40)
    assert PDF_STATS["documents_opened"] - before["documents_opened"] == 2
    assert PDF_STATS["pages_rendered"] - before["pages_rendered"] == 3


def test_a_damaged_cache_entry_is_rendered_again(tmp_path, pdf):
    cache = tmp_path / "cache"
    render_pages(pdf, pages=1, dpi=40, cache_dir=cache)
    (entry,) = cache.rglob("*.png")
    entry.write_bytes(b"half a png")
    clear_pdf_caches()
    _assert_page_colors(render_pages(pdf, pages=1, dpi=40, cache_dir=cache), [1])
    assert Image.open(entry).size == (117, 56)  # rewritten: ceil(210 * 40 / 72) x ceil(100 * 40 / 72)


def test_threads_render_the_same_pages(pdf):
    serial = [np.asarray(im) for im in render_pages(pdf, dpi=60)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: render_pages(pdf, dpi=60), range(8)))
    for images in results:
        assert all(np.array_equal(np.asarray(a), b) for a, b in zip(images, serial))


# ---- bad input --------------------------------------------------------------------------------------


def test_encrypted_pdf(tmp_path):
    path = tmp_path / "locked.pdf"
    path.write_bytes(encrypted_pdf_bytes(user_password=b"secret"))
    # the fixture is a real password-protected PDF: PDFium opens it with the password
    assert len(pdfium.PdfDocument(str(path), password="secret")) == 1
    message = r"cannot read PDF '.*locked\.pdf': the PDF is encrypted \(password protected\)"
    with pytest.raises(MediaError, match=message):
        render_pages(path)
    with pytest.raises(MediaError, match=message):
        pdf_page_count(path)
    with pytest.raises(MediaError, match=message):
        pdf_page_tokens(path)


def test_broken_and_truncated_pdf(tmp_path, pdf):
    noise = tmp_path / "noise.pdf"
    noise.write_bytes(np.random.default_rng(2).integers(0, 256, 3000, dtype=np.uint8).tobytes())
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(pdf.read_bytes()[: pdf.stat().st_size // 2])
    for path in (noise, cut):
        with pytest.raises(MediaError, match=rf"cannot read PDF '.*{path.name}': not a readable PDF"):
            render_pages(path)


def test_missing_pdf(tmp_path):
    with pytest.raises(MediaError, match=r"cannot read PDF '.*absent\.pdf': file does not exist"):
        render_pages(tmp_path / "absent.pdf")


@pytest.mark.parametrize("pages", [5, [0, 3], -1])
def test_page_out_of_range_names_page_and_count(pdf, pages):
    bad = pages if isinstance(pages, int) else 3
    with pytest.raises(MediaError, match=rf"colors\.pdf': page {bad} is out of range \(the PDF has 3 pages"):
        render_pages(pdf, pages=pages)
    with pytest.raises(MediaError, match=f"page {bad} is out of range"):
        pdf_page_tokens(pdf, pages=pages)


def test_empty_page_selection_is_an_error(pdf):
    with pytest.raises(ValueError, match="no pages selected"):
        render_pages(pdf, pages=[])


def test_outline_and_page_text_of_a_pdf_with_a_text_layer(tmp_path):
    import pypdfium2 as pdfium

    from mmreason.media import pdf_outline, pdf_page_text

    path = tmp_path / "blank.pdf"
    doc = pdfium.PdfDocument.new()
    doc.new_page(200, 300)
    doc.new_page(200, 300)
    doc.save(str(path))
    doc.close()
    assert pdf_outline(path) == []  # no bookmarks
    assert pdf_page_text(path, 1) == ""  # no text layer
    with pytest.raises(MediaError, match="out of range"):
        pdf_page_text(path, 5)


def test_a_page_over_the_pixel_cap_without_a_budget_is_refused_before_rendering(pdf, monkeypatch):
    """Page 0 is 200x100 pt: at 100 dpi 278x139 px. Under a 30,000-pixel cap and no budget it is refused,
    naming the page, its size and the knob; with a budget it renders onto the budget."""
    monkeypatch.setenv("MMREASON_MAX_IMAGE_PIXELS", "30000")
    with pytest.raises(MediaError, match=r"colors.pdf.*page 0 renders to 278x139 px .*MMREASON_MAX_IMAGE_PIXELS"):
        render_pages(pdf, [0])
    (image,) = render_pages(pdf, [0], max_pixels=28 * 28 * 16)
    assert image.width * image.height <= 28 * 28 * 16
