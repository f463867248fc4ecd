"""Open a PDF, read its text layer with boxes, render pages and crop regions.

All boxes crossing this module's boundary are ``(x0, y0, x1, y1)`` in PDF points with the origin at the
top-left of the page as displayed (after ``/Rotate``); pages are 1-based. pdfium reports text boxes in the
unrotated page space with a bottom-left origin: :meth:`Document.to_display` converts them with pdfium's own
page-to-device mapping, so rotation and crop-box offsets are applied exactly as the renderer applies them.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import re
import threading
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from data_prep.types import BBox, InputError

DEFAULT_CROP_DPI = 150
"""Crops of blocks are rendered at this resolution (SPEC step 2)."""

_PDFIUM_LOCK = threading.RLock()  # pdfium is not thread-safe; every call into it goes through this lock.


@dataclass(frozen=True)
class TextLine:
    """A run of text on one line of a page: ``bbox`` in display points (top-left origin)."""

    text: str
    bbox: BBox
    font_size: float


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while data := f.read(chunk):
            h.update(data)
    return h.hexdigest()


def normalize_text(text: str) -> str:
    """NFKC, lower-case, whitespace collapsed: the form used for fingerprints and text comparisons."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+", " ", text).strip()


class Document:
    """A PDF opened with pdfium. Use :meth:`open`; close with :meth:`close` or a ``with`` block."""

    def __init__(self, path: Path, pdf: pdfium.PdfDocument, sha256: str) -> None:
        self.path = path
        self._pdf = pdf
        self.sha256 = sha256
        self.n_pages = len(pdf)
        self._matrices: dict[int, np.ndarray] = {}
        sizes = []
        for i in range(self.n_pages):
            page = pdf[i]
            sizes.append((float(page.get_width()), float(page.get_height())))
            page.close()
        self.page_sizes: list[tuple[float, float]] = sizes
        """Per page ``(width, height)`` in points of the displayed (rotated) page, index = page - 1."""

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path) -> Document:
        """Open ``path``; raise :class:`InputError` naming the file when it is missing, not a PDF, encrypted,
        damaged, or has no pages."""
        path = Path(path)
        if not path.exists():
            raise InputError(f"{path}: no such file")
        if not path.is_file():
            raise InputError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            head = f.read(1024)
        if b"%PDF-" not in head:
            raise InputError(f"{path}: not a PDF (no %PDF- header)")
        with _PDFIUM_LOCK:
            try:
                pdf = pdfium.PdfDocument(str(path))
            except pdfium.PdfiumError as e:
                msg = str(e).lower()
                if "password" in msg or "security" in msg:
                    raise InputError(f"{path}: the PDF is encrypted (password required); decrypt it first") from None
                raise InputError(f"{path}: cannot be read as a PDF ({e})") from None
            if len(pdf) == 0:
                pdf.close()
                raise InputError(f"{path}: the PDF has zero pages")
            return cls(path, pdf, sha256_file(path))

    def close(self) -> None:
        with _PDFIUM_LOCK:
            self._pdf.close()

    def __enter__(self) -> Document:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_page(self, page: int) -> None:
        if not 1 <= page <= self.n_pages:
            raise InputError(f"{self.path}: page {page} out of range 1..{self.n_pages}")

    def page_rotation(self, page: int) -> int:
        """The page's ``/Rotate`` in degrees clockwise (0, 90, 180, 270)."""
        self._check_page(page)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                return int(p.get_rotation())
            finally:
                p.close()

    # ------------------------------------------------------------------ coordinates
    def _matrix(self, page: int, handle) -> np.ndarray:
        """Affine map (3x2) from pdfium page space (points, bottom-left) to display points (top-left)."""
        m = self._matrices.get(page)
        if m is not None:
            return m
        w, h = self.page_sizes[page - 1]
        # Device size in "pixels" equal to the display size in points, so device units are display points.
        size_x, size_y = max(1, round(w * 64)), max(1, round(h * 64))
        sx, sy = size_x / w, size_y / h
        dx, dy = ctypes.c_int(), ctypes.c_int()
        pts = []
        for px, py in ((0.0, 0.0), (1000.0, 0.0), (0.0, 1000.0)):
            ok = pdfium_c.FPDF_PageToDevice(handle, 0, 0, size_x, size_y, 0, px, py, dx, dy)
            if not ok:
                raise RuntimeError(f"{self.path}: pdfium could not map page {page} coordinates")
            pts.append((dx.value / sx, dy.value / sy))
        (ox, oy), (ax, ay), (bx, by) = pts
        m = np.array([[(ax - ox) / 1000.0, (ay - oy) / 1000.0], [(bx - ox) / 1000.0, (by - oy) / 1000.0], [ox, oy]])
        self._matrices[page] = m
        return m

    def to_display(self, page: int, rect_pdf: tuple[float, float, float, float], _handle=None) -> BBox:
        """Convert a pdfium rect ``(left, bottom, right, top)`` in page space to a display bbox."""
        self._check_page(page)
        with _PDFIUM_LOCK:
            if _handle is None:
                p = self._pdf[page - 1]
                try:
                    m = self._matrix(page, p.raw)
                finally:
                    p.close()
            else:
                m = self._matrix(page, _handle)
        left, bottom, right, top = rect_pdf
        corners = np.array([[left, bottom, 1.0], [right, bottom, 1.0], [left, top, 1.0], [right, top, 1.0]])
        xy = corners @ m
        return (float(xy[:, 0].min()), float(xy[:, 1].min()), float(xy[:, 0].max()), float(xy[:, 1].max()))

    def from_display(self, page: int, bbox: BBox) -> tuple[float, float, float, float]:
        """Inverse of :meth:`to_display`: display bbox -> pdfium ``(left, bottom, right, top)``."""
        self._check_page(page)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                m = self._matrix(page, p.raw)
            finally:
                p.close()
        full = np.vstack([m.T, [0.0, 0.0, 1.0]])  # 3x3 for [x, y, 1] column vectors
        inv = np.linalg.inv(full)
        x0, y0, x1, y1 = bbox
        pts = np.array([[x0, y0, 1.0], [x1, y0, 1.0], [x0, y1, 1.0], [x1, y1, 1.0]]) @ inv.T
        return (float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max()))

    # ------------------------------------------------------------------ text
    def page_text(self, page: int) -> str:
        """All text of a 1-based page, in the text layer's order."""
        self._check_page(page)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            tp = p.get_textpage()
            try:
                return tp.get_text_range()
            finally:
                tp.close()
                p.close()

    def full_text(self) -> str:
        return "\n".join(self.page_text(i) for i in range(1, self.n_pages + 1))

    def text_fingerprint(self) -> str:
        """sha256 of the whole normalised text: equal for the same document whatever its bytes (re-saves,
        metadata edits). Used to prove that no training document is an evaluation document."""
        return hashlib.sha256(normalize_text(self.full_text()).encode("utf-8")).hexdigest()

    def has_text(self, page: int) -> bool:
        return bool(self.page_text(page).strip())

    def text_lines(self, page: int) -> list[TextLine]:
        """The text layer of a page as line runs with display boxes, using pdfium's text rectangles.

        pdfium splits a page's characters into rectangles, one per run of characters on a line with the same
        font size; each becomes a :class:`TextLine`."""
        self._check_page(page)
        out: list[TextLine] = []
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            tp = p.get_textpage()
            try:
                n_rects = tp.count_rects()
                for i in range(n_rects):
                    left, bottom, right, top = tp.get_rect(i)
                    text = tp.get_text_bounded(left, bottom, right, top)
                    text = text.replace("\r", " ").replace("\n", " ").strip()
                    if not text:
                        continue
                    bbox = self.to_display(page, (left, bottom, right, top), _handle=p.raw)
                    font = self._rect_font_size(tp, left, bottom, right, top)
                    out.append(TextLine(text, bbox, font))
            finally:
                tp.close()
                p.close()
        return out

    @staticmethod
    def _rect_font_size(tp, left: float, bottom: float, right: float, top: float) -> float:
        idx = tp.get_index((left + right) / 2, (bottom + top) / 2, (right - left) / 2 + 1, (top - bottom) / 2 + 1)
        if idx is not None and idx >= 0:
            size = pdfium_c.FPDFText_GetFontSize(tp.raw, idx)
            if size and size > 0:
                return float(size)
        return float(top - bottom)

    def text_in_bbox(self, page: int, bbox: BBox) -> str:
        """Text of the text layer whose characters fall inside a display bbox (points)."""
        left, bottom, right, top = self.from_display(page, bbox)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            tp = p.get_textpage()
            try:
                return tp.get_text_bounded(left, bottom, right, top)
            finally:
                tp.close()
                p.close()

    # ------------------------------------------------------------------ rendering
    @staticmethod
    def page_pixel_budget(n_pages: int, total_budget: float, max_pixels_per_page: float = 1_000_000) -> float:
        """Per-page pixel budget ``min(max_pixels_per_page, total_budget / n_pages)`` (SPEC, inference)."""
        if n_pages <= 0:
            raise ValueError("n_pages must be positive")
        return min(float(max_pixels_per_page), float(total_budget) / n_pages)

    def scale_for_pixels(self, page: int, max_pixels: float) -> float:
        """Render scale (pixels per point) so that the page image has at most ``max_pixels`` pixels."""
        self._check_page(page)
        w, h = self.page_sizes[page - 1]
        return math.sqrt(max_pixels / (w * h))

    def render_page(self, page: int, max_pixels: float | None = None, dpi: float | None = None) -> Image.Image:
        """Render a whole page as RGB, either under a pixel budget (aspect ratio kept) or at a dpi."""
        self._check_page(page)
        if (max_pixels is None) == (dpi is None):
            raise ValueError("give exactly one of max_pixels or dpi")
        if max_pixels is not None:
            scale = self.scale_for_pixels(page, max_pixels)
            w, h = self.page_sizes[page - 1]
            # pdfium rounds the bitmap size; shave the scale so the product stays within the budget.
            while round(w * scale) * round(h * scale) > max_pixels and scale > 1e-4:
                scale *= 0.999
        else:
            scale = dpi / 72.0
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                bitmap = p.render(scale=scale)
                img = bitmap.to_pil().convert("RGB")
            finally:
                p.close()
        return img

    def render_pages(
        self, total_budget: float, max_pixels_per_page: float = 1_000_000, pages: list[int] | None = None
    ) -> list[Image.Image]:
        """Render ``pages`` (default all) under ``min(max_pixels_per_page, total_budget / len(pages))``."""
        pages = list(range(1, self.n_pages + 1)) if pages is None else pages
        budget = self.page_pixel_budget(len(pages), total_budget, max_pixels_per_page)
        return [self.render_page(p, max_pixels=budget) for p in pages]

    def crop(self, page: int, bbox: BBox, dpi: float = DEFAULT_CROP_DPI, pad: float = 0.0) -> Image.Image:
        """Render the region ``bbox`` (display points, top-left origin) of a page at ``dpi``.

        Only the region is rasterised (pdfium renders the crop window directly), so cropping a small block of
        a large page is cheap."""
        self._check_page(page)
        w, h = self.page_sizes[page - 1]
        x0, y0, x1, y1 = bbox
        x0, y0 = max(0.0, x0 - pad), max(0.0, y0 - pad)
        x1, y1 = min(w, x1 + pad), min(h, y1 + pad)
        if x1 - x0 < 1e-6 or y1 - y0 < 1e-6:
            raise InputError(f"{self.path}: empty crop region {bbox} on page {page}")
        scale = dpi / 72.0
        # pypdfium2's crop is the amount cut from (left, bottom, right, top) in points, after rotation.
        cut = (x0, h - y1, w - x1, y0)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                bitmap = p.render(scale=scale, crop=cut)
                img = bitmap.to_pil().convert("RGB")
            finally:
                p.close()
        return img
