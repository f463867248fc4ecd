"""``Document.crop`` keeps the pages it loaded (a bounded LRU of pdfium pages): the crops are the pixels a freshly
loaded page renders, the least recently used page is closed past the bound, every kept page is closed with the
document, and crops from several threads (pdfium is not thread-safe) give the same images."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from data_prep import document
from data_prep.document import Document


def _boxes(doc: Document) -> list[tuple[int, tuple[float, float, float, float]]]:
    """A few boxes on every page: the top band, the middle and a corner."""
    out = []
    for page, (w, h) in enumerate(doc.page_sizes, start=1):
        out += [(page, (0.0, 0.0, w, h / 4)), (page, (w / 4, h / 3, 3 * w / 4, 2 * h / 3)), (page, (0.0, 0.0, 90, 60))]
    return out


def _fresh_crop(pdf, page, box, dpi=150):
    with Document.open(pdf) as d:
        return d.crop(page, box, dpi=dpi).tobytes()


def test_crops_from_kept_pages_are_the_pixels_of_a_freshly_loaded_page(sample_pdf, monkeypatch):
    monkeypatch.setattr(document, "PAGE_CACHE", 2)  # the sample's pages cycle through a bound smaller than them
    with Document.open(sample_pdf) as doc:
        assert doc.n_pages > 2
        boxes = _boxes(doc)
        order = boxes + boxes[::-1] + boxes[::2]  # pages kept, evicted and loaded again
        got = [(p, b, doc.crop(p, b, dpi=150).tobytes()) for p, b in order]
    fresh = {(p, b): _fresh_crop(sample_pdf, p, b) for p, b in boxes}
    assert all(img == fresh[(p, b)] for p, b, img in got)


def test_the_least_recently_used_page_is_closed_past_the_bound_and_all_with_the_document(sample_pdf, monkeypatch):
    monkeypatch.setattr(document, "PAGE_CACHE", 2)
    doc = Document.open(sample_pdf)
    try:
        assert doc.n_pages >= 3
        doc.crop(1, (0, 0, 50, 50))
        first = doc._pages[1]
        doc.crop(2, (0, 0, 50, 50))
        doc.crop(1, (10, 10, 60, 60))  # page 1 used again: page 2 is now the least recently used
        assert doc._pages[1] is first and list(doc._pages) == [2, 1]
        second = doc._pages[2]
        doc.crop(3, (0, 0, 50, 50))
        assert list(doc._pages) == [1, 3] and second.raw is None and first.raw is not None  # page 2 closed
        kept = list(doc._pages.values())
    finally:
        doc.close()
    assert not doc._pages and all(p.raw is None for p in kept)
    doc.close()  # closing twice is harmless


def test_crops_from_several_threads_are_the_sequential_ones(sample_pdf):
    with Document.open(sample_pdf) as doc:
        boxes = _boxes(doc) * 3
        sequential = [doc.crop(p, b, dpi=120).tobytes() for p, b in boxes]
        with ThreadPoolExecutor(max_workers=4) as pool:
            threaded = list(pool.map(lambda pb: doc.crop(pb[0], pb[1], dpi=120).tobytes(), boxes))
        assert len(doc._pages) <= document.PAGE_CACHE
    assert threaded == sequential


@pytest.mark.parametrize("dpi", [72, 150, 151])
def test_a_kept_page_renders_every_dpi_as_a_fresh_one(sample_pdf, dpi):
    with Document.open(sample_pdf) as doc:
        box = (20.0, 30.0, 300.0, 200.0)
        doc.crop(1, box, dpi=dpi + 7)  # the page is loaded and kept by another render
        assert doc.crop(1, box, dpi=dpi).tobytes() == _fresh_crop(sample_pdf, 1, box, dpi)


def test_a_crop_is_pdfiums_default_render_of_the_region(sample_pdf):
    """The crop is rendered in RGB byte order: the same pixels as pdfium's default (BGR) bitmap converted to RGB."""
    import pypdfium2 as pdfium

    with Document.open(sample_pdf) as doc:
        boxes = _boxes(doc)
        crops = [doc.crop(p, b, dpi=150) for p, b in boxes]
        sizes = doc.page_sizes
    pdf = pdfium.PdfDocument(str(sample_pdf))
    try:
        for (page, (x0, y0, x1, y1)), img in zip(boxes, crops, strict=True):
            w, h = sizes[page - 1]
            p = pdf[page - 1]
            ref = p.render(scale=150 / 72, crop=(x0, h - y1, w - x1, y0)).to_pil().convert("RGB")
            p.close()
            assert img.mode == "RGB" and img.tobytes() == ref.tobytes()
    finally:
        pdf.close()
    # Some crop shows colour (red differs from blue somewhere), so a swapped byte order would have shown.
    assert any(np.any(np.asarray(c)[..., 0] != np.asarray(c)[..., 2]) for c in crops)
