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
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c
from PIL import Image

from core.errors import InputError
from core.geometry import BBox
from core.io import open_regular

DEFAULT_CROP_DPI = 150
"""Crops of blocks are rendered at this resolution (docs/METHOD.md step 2)."""

MAX_CROP_PIXELS = 4_000_000
"""Most pixels one crop may have (12 MB as RGB): a larger region is rendered at a lower dpi (:meth:`Document.crop`).
A full A4 page at 150 dpi has 2.2 million."""

BLANK_CHECK_PIXELS = 1_000_000
"""Pixel budget of the page render that :meth:`Document.blank_regions` inspects."""

BLANK_CONTRAST = 24
"""A rendered region whose grey levels span less than this (of 255) shows nothing: no glyph was drawn."""

STANDARD_FAMILIES = frozenset(
    {"Courier", "Helvetica", "Times", "Symbol", "ZapfDingbats", "Arial", "TimesNewRoman", "CourierNew"}
)
"""Font families pdfium draws with its built-in fonts when the PDF does not embed them: the standard 14
("Times-Roman", "Helvetica-Bold", ...) and their common aliases ("ArialMT", "TimesNewRomanPS-BoldMT", "Arial,Bold")."""


def _standard_family(base_font: str) -> bool:
    """Whether a base font name (``ABCDEF+Name`` subset tags allowed) is of :data:`STANDARD_FAMILIES`.

    >>> [_standard_family(n) for n in ("Times-Roman", "ABCDEF+ArialMT", "Arial,Bold", "STSong-Light")]
    [True, True, True, False]
    """
    name = base_font.split("+")[-1]
    family = re.split(r"[-,]", name)[0]
    return re.sub(r"(PS)?MT$", "", family) in STANDARD_FAMILIES


BOLD_SHARE = 0.9
"""Share of a run's characters that must be bold for the run to count as bold (a run-in heading is not enough)."""

_PDFIUM_LOCK = threading.RLock()  # pdfium is not thread-safe; every call into it goes through this lock.
PAGE_CACHE = 4
"""Loaded pages a :class:`Document` keeps for :meth:`Document.crop` (least recently used closed past it): loading
the page again was about two thirds of a crop's CPU, and a response's crops mostly come from a few pages."""


@dataclass(frozen=True)
class TextLine:
    """A run of text on one line of a page: ``bbox`` in display points (top-left origin)."""

    text: str
    bbox: BBox
    font_size: float
    bold: bool = False
    """True when at least :data:`BOLD_SHARE` of the run's characters use a bold font (weight >= 600 or a bold
    font name)."""


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """The sha256 of a regular file (:func:`core.io.open_regular`: a FIFO or a device is refused, never read)."""
    h = hashlib.sha256()
    with open_regular(path) as f:
        while data := f.read(chunk):
            h.update(data)
    return h.hexdigest()


def _empty_page_tree(path: Path, limit: int = 64 << 20) -> bool:
    """Whether the file's page tree says ``/Count 0`` and no page tree node counts more (pdfium will not open a
    PDF without pages, so the reason is read from the bytes)."""
    if path.stat().st_size > limit:
        return False
    counts = [int(m) for m in re.findall(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", path.read_bytes())]
    counts += [int(m) for m in re.findall(rb"/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", path.read_bytes())]
    return bool(counts) and max(counts) == 0


SOFT_HYPHEN_MARKS = ("\x02", "\ufffe")
"""What pdfium reports for a hyphen it judges to be a line-end word break: U+0002 from its bounded-text call,
U+FFFE from its text-range call."""

_SOFT_BREAK = re.compile("[\x02\ufffe](?:\r\n|\r|\n)?")


def clean_layer_text(text: str) -> str:
    """Text as pdfium returns it -> plain text: a soft-hyphen mark (and the line break after it) is removed so the
    hyphenated word is whole again ("experi\\x02\\r\\nment" -> "experiment"); ``\\r\\n`` and lone ``\\r`` become
    ``\\n``. Nothing else changes (spacing and line breaks stay for callers that need them).

    >>> clean_layer_text("The experi\\x02\\r\\nment\\r\\nworked\\rwell".encode().decode("unicode_escape"))
    'The experiment\\nworked\\nwell'
    """
    text = _SOFT_BREAK.sub("", text)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalize_text(text: str) -> str:
    """NFKC, lower-case, whitespace collapsed: the form used for fingerprints and text comparisons."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"\s+", " ", text).strip()


def fit_scale(page_size: tuple[float, float], max_pixels: float) -> float:
    """Render scale (pixels per point) for a page of ``page_size`` points under a budget of ``max_pixels``.

    pypdfium2 makes the bitmap ``ceil(width * scale)`` by ``ceil(height * scale)`` pixels, so the scale of
    ``sqrt(max_pixels / area)`` is shaved until that product fits the budget; the aspect ratio is kept."""
    w, h = page_size
    if not (w > 0 and h > 0 and max_pixels > 0):
        raise ValueError(f"page size {page_size} and pixel budget {max_pixels} must be positive")
    scale = math.sqrt(max_pixels / (w * h))
    while math.ceil(w * scale) * math.ceil(h * scale) > max_pixels and scale > 1e-4:
        scale *= 0.999
    return scale


def render_size(page_size: tuple[float, float], max_pixels: float) -> tuple[int, int]:
    """Pixel ``(width, height)`` of :meth:`Document.render_page` under ``max_pixels``, without rendering.

    >>> render_size((612.0, 792.0), 1_000_000)
    (879, 1137)
    """
    scale = fit_scale(page_size, max_pixels)
    return math.ceil(page_size[0] * scale), math.ceil(page_size[1] * scale)


class Document:
    """A PDF opened with pdfium. Use :meth:`open`; close with :meth:`close` or a ``with`` block."""

    def __init__(self, path: Path, pdf: pdfium.PdfDocument, sha256: str) -> None:
        self.path = path
        self._pdf = pdf
        self.sha256 = sha256
        self.n_pages = len(pdf)
        self._matrices: dict[int, np.ndarray] = {}
        self._pages: OrderedDict[int, pdfium.PdfPage] = OrderedDict()  # :meth:`_loaded_page`, under _PDFIUM_LOCK
        sizes = []
        for i in range(self.n_pages):
            page = pdf[i]
            w, h = float(page.get_width()), float(page.get_height())
            page.close()
            if not (math.isfinite(w) and math.isfinite(h) and w > 0 and h > 0):
                raise ValueError(f"page {i + 1} has size {w} x {h}")
            sizes.append((w, h))
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
        with open_regular(path, "PDF") as f:
            head = f.read(1024)
        if b"%PDF-" not in head:
            raise InputError(f"{path}: not a PDF (no %PDF- header)")
        with _PDFIUM_LOCK:
            try:
                pdf = pdfium.PdfDocument(str(path))
            except pdfium.PdfiumError as e:
                # pdfium keeps its last error between calls, so its message alone can name a stale cause: the
                # page tree is read from the bytes first (pdfium refuses a page-less file with "Success").
                if _empty_page_tree(path):
                    raise InputError(f"{path}: the PDF has zero pages") from None
                msg = str(e).lower()
                if "password" in msg or "security" in msg:
                    raise InputError(f"{path}: the PDF is encrypted (password required); decrypt it first") from None
                raise InputError(f"{path}: cannot be read as a PDF ({e})") from None
            if len(pdf) == 0:
                pdf.close()
                raise InputError(f"{path}: the PDF has zero pages")
            try:  # every page is loaded here: a page tree that lies about its pages or loops fails now, clearly
                return cls(path, pdf, sha256_file(path))
            except (pdfium.PdfiumError, ValueError, OverflowError) as e:
                n = len(pdf)
                pdf.close()
                raise InputError(f"{path}: damaged PDF: its page tree lists {n} pages, but a page cannot "
                                 f"be loaded ({e})") from None  # fmt: skip

    def close(self) -> None:
        with _PDFIUM_LOCK:
            while self._pages:
                self._pages.popitem(last=False)[1].close()
            self._pdf.close()

    def _loaded_page(self, page: int):
        """The pdfium page ``page`` (1-based) from the :data:`PAGE_CACHE` most recently used ones, loaded when absent;
        the least recently used one is closed past the bound. Call with ``_PDFIUM_LOCK`` held; never close it."""
        p = self._pages.get(page)
        if p is not None:
            self._pages.move_to_end(page)
            return p
        p = self._pdf[page - 1]
        self._pages[page] = p
        while len(self._pages) > PAGE_CACHE:
            self._pages.popitem(last=False)[1].close()
        return p

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

    def to_display(self, page: int, rect_pdf: BBox, _handle=None) -> BBox:
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

    def from_display(self, page: int, bbox: BBox) -> BBox:
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

    def text_lines(self, page: int, gap_em: float = 1.0, size_ratio: float = 1.2) -> list[TextLine]:
        """The text layer of a page as runs of characters on one line, with display boxes (points, top-left).

        Built from pdfium's characters and their *loose* boxes (font ascent to descent), not from its text
        rectangles: those drop characters whose glyph box is empty, which is every character of a non-embedded
        CJK font such as STSong-Light. A run ends at a line break of the text layer, when the next character
        is not on the same line, when the horizontal gap before it exceeds ``gap_em`` times the font size
        (table cells, columns), or when the font size changes by more than ``size_ratio``.
        A run that ends in a soft-hyphen mark (a word hyphenated at the line end) ends with U+00AD (SOFT HYPHEN):
        the word continues on the next line, so a joiner should drop it and add no space; a mark followed by more
        characters of the same run becomes a plain ``-``.
        Runs are returned in the text layer's order."""
        self._check_page(page)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            tp = p.get_textpage()
            try:
                m = self._matrix(page, p.raw)
                chars = self._page_chars(tp)
            finally:
                tp.close()
                p.close()
        if not chars:
            return []
        codes, boxes, sizes, bold = chars
        # Corners of each loose box in display space; rotation keeps the axis-aligned union exact.
        left, bottom, right, top = boxes.T
        xs = np.stack([left, right, left, right], 1)
        ys = np.stack([bottom, bottom, top, top], 1)
        dx = xs * m[0, 0] + ys * m[1, 0] + m[2, 0]
        dy = xs * m[0, 1] + ys * m[1, 1] + m[2, 1]
        disp = np.stack([dx.min(1), dy.min(1), dx.max(1), dy.max(1)], 1)
        return _group_runs(codes, disp.tolist(), sizes, bold, gap_em, size_ratio)

    @staticmethod
    def _page_chars(tp) -> tuple[list[int], np.ndarray, list[float], list[bool]] | None:
        """Per character of a text page: code point, loose box (left, bottom, right, top in page space), font
        size in points as drawn (the ``Tf`` size times the text matrix scale), bold flag. Whitespace and line
        breaks get size 0 and an empty box (they only separate words and runs); soft-hyphen marks keep the box of
        the hyphen glyph."""
        n = pdfium_c.FPDFText_CountChars(tp.raw)
        if n <= 0:
            return None
        raw = tp.raw
        get_uni = pdfium_c.FPDFText_GetUnicode
        get_box = pdfium_c.FPDFText_GetLooseCharBox
        get_size = pdfium_c.FPDFText_GetFontSize
        get_obj = pdfium_c.FPDFText_GetTextObject
        get_matrix = pdfium_c.FPDFText_GetMatrix
        per_obj: dict[int, tuple[bool, float]] = {}  # text object address -> (bold font, matrix scale)
        rect = pdfium_c.FS_RECTF()
        mat = pdfium_c.FS_MATRIX()
        codes: list[int] = []
        sizes: list[float] = []
        bold: list[bool] = []
        boxes = np.zeros((n, 4), dtype=np.float64)
        info: tuple[bool, float] | None = None
        last_size = -1.0
        for i in range(n):
            code = get_uni(raw, i)
            codes.append(code)
            if (code <= 32 and code != 2) or code in (0xA0, 0x3000, 0xFFFF):
                sizes.append(0.0)
                bold.append(False)
                continue
            get_box(raw, i, rect)
            boxes[i] = (rect.left, rect.bottom, rect.right, rect.top)
            size = float(get_size(raw, i))
            # Look the text object up only where it may change (after a break or at a size change): it is the
            # slowest call here, and the characters of a word share one object.
            if info is None or size != last_size or codes[i - 1] <= 32:
                obj = get_obj(raw, i)
                key = ctypes.cast(obj, ctypes.c_void_p).value or 0
                info = per_obj.get(key)
                if info is None:
                    scale = 1.0
                    if get_matrix(raw, i, mat):
                        scale = math.sqrt(abs(mat.a * mat.d - mat.b * mat.c)) or 1.0
                    info = per_obj[key] = (_font_is_bold(obj), scale)
            last_size = size
            sizes.append(size * info[1])
            bold.append(info[0])
        return codes, boxes, sizes, bold

    def drawing_boxes(self, page: int) -> list[tuple[BBox, bool]]:
        """Display bboxes (points, top-left origin) of the page's image, path and shading objects, including
        those nested in form XObjects (whose bounds pdfium reports in the form's own space), each with a flag
        that is True for images. Text objects are left out."""
        self._check_page(page)
        out: list[tuple[BBox, bool]] = []
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                mats: list[np.ndarray] = [np.eye(3)]  # mats[level]: space of that nesting level -> page space
                for obj in p.get_objects(max_depth=4):
                    level = obj.level
                    del mats[level + 1 :]
                    m = mats[level]
                    if obj.type == pdfium_c.FPDF_PAGEOBJ_FORM:
                        a, b, c, d, e, f = obj.get_matrix().get()
                        mats.append(np.array([[a, b, 0.0], [c, d, 0.0], [e, f, 1.0]]) @ m)
                        continue
                    is_image = obj.type == pdfium_c.FPDF_PAGEOBJ_IMAGE
                    if not is_image and obj.type not in (pdfium_c.FPDF_PAGEOBJ_PATH, pdfium_c.FPDF_PAGEOBJ_SHADING):
                        continue
                    try:
                        left, bottom, right, top = obj.get_bounds()
                    except pdfium.PdfiumError:
                        continue
                    if level > 0:
                        pts = np.array([[left, bottom, 1], [right, bottom, 1], [left, top, 1], [right, top, 1]]) @ m
                        left, bottom = float(pts[:, 0].min()), float(pts[:, 1].min())
                        right, top = float(pts[:, 0].max()), float(pts[:, 1].max())
                    out.append((self.to_display(page, (left, bottom, right, top), _handle=p.raw), is_image))
            finally:
                p.close()
        return out

    def text_in_bbox(self, page: int, bbox: BBox) -> str:
        """Text of the text layer whose characters fall inside a display bbox (points), cleaned by
        :func:`clean_layer_text` (hyphenated words rejoined, ``\\n`` line breaks)."""
        left, bottom, right, top = self.from_display(page, bbox)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            tp = p.get_textpage()
            try:
                return clean_layer_text(tp.get_text_bounded(left, bottom, right, top))
            finally:
                tp.close()
                p.close()

    def unembedded_fonts(self, page: int) -> set[str]:
        """Base names of the fonts the page's text uses that are neither embedded in the PDF nor one of the
        standard 14 (which pdfium always has): text in them is drawn only if the machine has a stand-in, and is
        blank otherwise (see :meth:`blank_regions`)."""
        self._check_page(page)
        names: set[str] = set()
        seen: set[int] = set()
        buf = ctypes.create_string_buffer(256)
        with _PDFIUM_LOCK:
            p = self._pdf[page - 1]
            try:
                for obj in p.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_TEXT,), max_depth=4):
                    font = pdfium_c.FPDFTextObj_GetFont(obj.raw)
                    key = ctypes.cast(font, ctypes.c_void_p).value or 0
                    if not font or key in seen:
                        continue
                    seen.add(key)
                    if pdfium_c.FPDFFont_GetIsEmbedded(font):
                        continue
                    n = pdfium_c.FPDFFont_GetBaseFontName(font, buf, 256)
                    name = buf.value.decode("latin-1", "replace") if n else "?"
                    if not _standard_family(name):
                        names.add(name)
            finally:
                p.close()
        return names

    def blank_regions(self, page: int, boxes: list[BBox], max_pixels: float = BLANK_CHECK_PIXELS) -> list[bool]:
        """For each display box of ``page``: True when the rendered page shows nothing there (one flat colour, no
        glyph). Renders the page once under ``max_pixels``. Used to notice text-layer text that the renderer
        draws blank (a font that is neither embedded nor on this machine): page images and crops of it show no
        text, though the text layer has it."""
        if not boxes:
            return []
        w, h = self.page_sizes[page - 1]
        img = np.asarray(self.render_page(page, max_pixels=max_pixels).convert("L"))
        sx, sy = img.shape[1] / w, img.shape[0] / h
        out = []
        for x0, y0, x1, y1 in boxes:
            region = img[
                max(0, math.floor(y0 * sy)) : math.ceil(y1 * sy), max(0, math.floor(x0 * sx)) : math.ceil(x1 * sx)
            ]
            out.append(region.size == 0 or int(region.max()) - int(region.min()) < BLANK_CONTRAST)
        return out

    # ------------------------------------------------------------------ rendering
    @staticmethod
    def page_pixel_budget(n_pages: int, total_budget: float, max_pixels_per_page: float = 1_000_000) -> float:
        """Per-page pixel budget ``min(max_pixels_per_page, total_budget / n_pages)`` (docs/METHOD.md, "Inference")."""
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
            scale = fit_scale(self.page_sizes[page - 1], max_pixels)
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

    def crop(
        self,
        page: int,
        bbox: BBox,
        dpi: float = DEFAULT_CROP_DPI,
        pad: float = 0.0,
        max_pixels: float = MAX_CROP_PIXELS,
    ) -> Image.Image:
        """Render the region ``bbox`` (display points, top-left origin) of a page at ``dpi``.

        Only the region is rasterised (pdfium renders the crop window directly), so cropping a small block of
        a large page is cheap. A region that would exceed ``max_pixels`` at ``dpi`` (a block of a poster-sized
        page) is rendered at the lower resolution that fits, so memory stays bounded whatever the page size."""
        self._check_page(page)
        w, h = self.page_sizes[page - 1]
        x0, y0, x1, y1 = bbox
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
            raise InputError(f"{self.path}: crop region {bbox} on page {page} is not 4 finite numbers")
        x0, y0 = max(0.0, x0 - pad), max(0.0, y0 - pad)
        x1, y1 = min(w, x1 + pad), min(h, y1 + pad)
        if x1 - x0 < 1e-6 or y1 - y0 < 1e-6:
            raise InputError(f"{self.path}: empty crop region {bbox} on page {page}")
        scale = min(dpi / 72.0, fit_scale((x1 - x0, y1 - y0), max_pixels))
        # pypdfium2's crop is the amount cut from (left, bottom, right, top) in points, after rotation.
        cut = (x0, h - y1, w - x1, y0)
        with _PDFIUM_LOCK:
            # RGB byte order from pdfium itself: the same pixels as its default BGR converted, without the swap.
            bitmap = self._loaded_page(page).render(scale=scale, crop=cut, rev_byteorder=True)
            img = bitmap.to_pil().convert("RGB")
        return img


SOFT_HYPHEN = "\u00ad"
"""Ends a :class:`TextLine` whose last word continues on the next line (see :meth:`Document.text_lines`)."""

_BOLD_NAME = re.compile(r"bold|black|heavy|semibold|demi|[-,]medi\b|bx\d", re.IGNORECASE)
"""Bold font names: "Times-Bold", "NimbusRomNo9L-Medi", TeX's "CMBX10" / "SFBX1000" (bold extended)."""


def _font_is_bold(text_obj) -> bool:
    """Whether a pdfium text object's font is bold, by weight or by its base font name (the standard 14 fonts
    report no weight)."""
    if not text_obj:
        return False
    font = pdfium_c.FPDFTextObj_GetFont(text_obj)
    if not font:
        return False
    if pdfium_c.FPDFFont_GetWeight(font) >= 600:
        return True
    buf = ctypes.create_string_buffer(256)
    n = pdfium_c.FPDFFont_GetBaseFontName(font, buf, 256)
    return bool(n) and bool(_BOLD_NAME.search(buf.value.decode("latin-1", "replace")))


def _group_runs(
    codes: list[int], boxes: list[list[float]], sizes: list[float], bold: list[bool], gap_em: float, size_ratio: float
) -> list[TextLine]:
    """Split a page's characters (text-layer order, display boxes) into one-line runs; see ``text_lines``."""
    out: list[TextLine] = []
    cur: list[str] = []
    box: list[float] | None = None  # union of the run's visible characters
    last_x0 = last_x1 = 0.0
    run_sizes: list[float] = []
    run_bold = 0
    pending_space = False
    pending_hyphen = False  # the run's last visible mark is a soft hyphen
    has_surrogate = False

    def flush() -> None:
        nonlocal cur, box, run_sizes, run_bold, pending_space, pending_hyphen, has_surrogate
        # pdfium reports characters outside the BMP as UTF-16 surrogate pairs: recombine them, drop strays.
        text = "".join(cur)
        if has_surrogate:
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        text = text.strip()
        if text and pending_hyphen:
            text += SOFT_HYPHEN
        if text and box is not None:
            size = sorted(run_sizes)[len(run_sizes) // 2]
            # Bold only when (nearly) the whole run is: a bold run-in heading ("Results. We ...") does not make the
            # sentence it opens bold.
            bold = run_bold >= BOLD_SHARE * len(run_sizes)
            out.append(TextLine(text, (box[0], box[1], box[2], box[3]), size, bold))
        cur, box, run_sizes, run_bold, pending_space, has_surrogate = [], None, [], 0, False, False
        pending_hyphen = False

    for code, b, size, is_bold in zip(codes, boxes, sizes, bold, strict=True):
        if code in (10, 13):
            flush()
            continue
        if size == 0.0:  # whitespace: a word separator inside a run
            pending_space = box is not None
            continue
        x0, y0, x1, y1 = b
        if box is not None:
            h = min(y1 - y0, box[3] - box[1])
            overlap = min(y1, box[3]) - max(y0, box[1])
            ref = run_sizes[-1]
            same_line = h <= 0 or overlap >= 0.5 * h
            gap = x0 - last_x1
            if (
                not same_line
                or gap > gap_em * max(size, ref)
                or x0 < last_x0 - 0.5 * max(size, ref)  # jumps back left: a new line or column (ligature parts
                # share one glyph box, so they start where the previous character starts)
                or max(size, ref) > size_ratio * max(min(size, ref), 1e-6)
            ):
                flush()
        if box is None:
            box = [x0, y0, x1, y1]
        else:
            if pending_space:
                cur.append(" ")
            box = [min(box[0], x0), min(box[1], y0), max(box[2], x1), max(box[3], y1)]
        pending_space = False
        if code in (2, 0xFFFE):  # soft-hyphen mark: kept only if the run goes on (see text_lines)
            pending_hyphen = True
            last_x0, last_x1 = x0, x1
            run_sizes.append(size)
            run_bold += is_bold
            continue
        if pending_hyphen:
            cur.append("-")
            pending_hyphen = False
        cur.append(chr(code) if 0 <= code < 0x110000 else "\ufffd")
        has_surrogate = has_surrogate or 0xD800 <= code <= 0xDFFF
        last_x0, last_x1 = x0, x1
        run_sizes.append(size)
        run_bold += is_bold
    flush()
    return out
