"""Draw a document's blocks over its rendered pages, so that a person can check a parse by eye.

Each block is outlined in its type's colour (:data:`TYPE_COLORS`) over a light tint, with its ``block_id`` in a
tag at its top-left corner; a legend strip at the top names the types present with their counts. One page is
rendered at a dpi; all pages are laid out side by side (up to :attr:`ShowConfig.max_columns`, then in rows)
under a total pixel cap.

Block bboxes are in display points (top-left origin, after ``/Rotate``); a page image rendered at ``scale``
pixels per point maps a bbox to pixels by multiplying by ``scale``.

API:

* :func:`draw_blocks` (page image + its blocks -> annotated image);
* :func:`render_page_blocks` (Document + blocks + page -> annotated image);
* :func:`render_document_blocks` (all pages as a grid);
* :func:`show_document` (a loaded :class:`~data_prep.cache.CachedDoc` -> PNG file), used by ``python -m data_prep
  show`` and ``make demo``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from core.errors import InputError
from core.io import atomic_path
from data_prep.document import Document
from data_prep.types import BLOCK_TYPES, Block

TYPE_COLORS: dict[str, tuple[int, int, int]] = {
    "title": (214, 39, 40),
    "text": (31, 119, 180),
    "list": (23, 190, 207),
    "table": (44, 160, 44),
    "table_caption": (148, 103, 189),
    "table_footnote": (188, 189, 34),
    "figure": (255, 127, 14),
    "figure_caption": (227, 119, 194),
    "equation": (140, 86, 75),
    "header": (127, 127, 127),
    "footer": (80, 80, 80),
    "other": (0, 0, 0),
}
"""Outline colour (RGB) of each block type; distinct colours so that no two types share one."""


@dataclass(frozen=True)
class ShowConfig:
    """How the overlay looks."""

    dpi: float = 100.0
    """Resolution of a single page (``--page``)."""
    max_total_pixels: float = 24_000_000
    """Cap on the pixels of the whole image when all pages are drawn (pages shrink to fit)."""
    max_page_pixels: float = 1_000_000
    """Cap on the pixels of one page in the all-pages grid."""
    max_columns: int = 6
    """Pages per row in the all-pages grid."""
    outline_px: int = 2
    """Outline width in pixels."""
    fill_alpha: int = 40
    """Opacity (0-255) of the tint inside each block."""
    gap_px: int = 12
    """Space between pages in the grid."""


def _font(size: int) -> ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1 has only the bitmap font
        return ImageFont.load_default()


def draw_blocks(
    image: Image.Image, blocks: Sequence[Block], page_size: tuple[float, float], config: ShowConfig | None = None
) -> Image.Image:
    """Outline ``blocks`` (all on the page shown by ``image``) on a copy of ``image``.

    ``page_size`` is the page's display ``(width, height)`` in points; the image may have any resolution with
    the page's aspect ratio (pixels per point = ``image.width / width``)."""
    cfg = config or ShowConfig()
    base = image.convert("RGBA")
    sx, sy = base.width / page_size[0], base.height / page_size[1]
    tint = Image.new("RGBA", base.size, (0, 0, 0, 0))
    td = ImageDraw.Draw(tint)
    boxes = []
    for b in blocks:
        x0, y0, x1, y1 = b.bbox
        px = (
            round(x0 * sx),
            round(y0 * sy),
            max(round(x1 * sx), round(x0 * sx) + 1),
            max(round(y1 * sy), round(y0 * sy) + 1),
        )
        boxes.append((b, px))
        td.rectangle(px, fill=(*TYPE_COLORS[b.type], cfg.fill_alpha))
    out = Image.alpha_composite(base, tint).convert("RGB")
    draw = ImageDraw.Draw(out)
    font = _font(max(9, min(16, round(base.height / 70))))
    for b, px in boxes:
        draw.rectangle(px, outline=TYPE_COLORS[b.type], width=cfg.outline_px)
    for b, px in boxes:  # tags last, so that no outline crosses a number
        label = str(b.block_id)
        tx0, ty0, tx1, ty1 = draw.textbbox((0, 0), label, font=font)
        w, h = tx1 - tx0 + 4, ty1 - ty0 + 4
        x, y = px[0], max(0, px[1] - h)
        draw.rectangle((x, y, x + w, y + h), fill=TYPE_COLORS[b.type])
        draw.text((x + 2 - tx0, y + 2 - ty0), label, fill=(255, 255, 255), font=font)
    return out


def _legend(blocks: Sequence[Block], width: int) -> Image.Image:
    counts = Counter(b.type for b in blocks)
    font = _font(14)
    items = [(t, counts[t]) for t in BLOCK_TYPES if counts[t]] or [("no blocks", 0)]
    row_h, x, y, rows = 24, 8, 6, 1
    positions = []
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    for t, n in items:
        label = f"{t} ({n})"
        tw = probe.textbbox((0, 0), label, font=font)[2]
        if x + 20 + tw > width - 8 and x > 8:
            x, y, rows = 8, y + row_h, rows + 1
        positions.append((x, y, t, label))
        x += 20 + tw + 18
    img = Image.new("RGB", (width, rows * row_h + 8), (255, 255, 255))
    d = ImageDraw.Draw(img)
    for x, y, t, label in positions:
        color = TYPE_COLORS.get(t, (0, 0, 0))
        d.rectangle((x, y + 3, x + 14, y + 17), fill=color)
        d.text((x + 20, y + 2), label, fill=(0, 0, 0), font=font)
    return img


def _with_legend(img: Image.Image, blocks: Sequence[Block]) -> Image.Image:
    legend = _legend(blocks, img.width)
    out = Image.new("RGB", (img.width, img.height + legend.height), (255, 255, 255))
    out.paste(legend, (0, 0))
    out.paste(img, (0, legend.height))
    return out


def render_page_blocks(
    doc: Document, blocks: Sequence[Block], page: int, config: ShowConfig | None = None, legend: bool = True
) -> Image.Image:
    """Page ``page`` (1-based) of ``doc`` rendered at ``config.dpi`` with the blocks of that page drawn on it.
    With ``legend`` the legend strip sits above the page (the page image starts at its height)."""
    cfg = config or ShowConfig()
    on_page = [b for b in blocks if b.page == page]
    img = draw_blocks(doc.render_page(page, dpi=cfg.dpi), on_page, doc.page_sizes[page - 1], cfg)
    return _with_legend(img, on_page) if legend else img


def render_document_blocks(doc: Document, blocks: Sequence[Block], config: ShowConfig | None = None) -> Image.Image:
    """Every page with its blocks, side by side (rows of ``max_columns``); the page tiles together stay under
    ``max_total_pixels`` (gaps and the legend strip come on top)."""
    cfg = config or ShowConfig()
    n = doc.n_pages
    per_page = min(cfg.max_page_pixels, cfg.max_total_pixels / n)
    tiles = [
        draw_blocks(
            doc.render_page(p, max_pixels=per_page), [b for b in blocks if b.page == p], doc.page_sizes[p - 1], cfg
        )
        for p in range(1, n + 1)
    ]
    cols = min(n, cfg.max_columns)
    gap = cfg.gap_px
    rows = [tiles[i : i + cols] for i in range(0, n, cols)]
    # Each tile keeps its own size (a landscape page next to portrait ones wastes no space).
    width = max(sum(t.width for t in row) + (len(row) + 1) * gap for row in rows)
    height = sum(max(t.height for t in row) for row in rows) + (len(rows) + 1) * gap
    grid = Image.new("RGB", (width, height), (200, 200, 200))
    y = gap
    for row in rows:
        x = gap
        for t in row:
            grid.paste(t, (x, y))
            x += t.width + gap
        y += max(t.height for t in row) + gap
    return _with_legend(grid, blocks)


def _save_png(img: Image.Image, out_png: Path) -> Path:
    out_png = Path(out_png)
    with atomic_path(out_png) as tmp:
        img.save(tmp, format="PNG")
    return out_png


def show_document(cached, out_png: str | Path, page: int | None = None, config: ShowConfig | None = None) -> Path:
    """Write the blocks of a loaded cache entry (:class:`~data_prep.cache.CachedDoc`) drawn over its PDF to
    ``out_png`` (atomically): page ``page`` (1-based) alone, or all pages in a grid when None. Returns the path."""
    with cached.open_pdf() as doc:
        if page is not None and not 1 <= page <= doc.n_pages:
            raise InputError(f"{cached.pdf_path}: page {page} out of range 1..{doc.n_pages}")
        if page is None:
            img = render_document_blocks(doc, cached.blocks, config)
        else:
            img = render_page_blocks(doc, cached.blocks, page, config)
    return _save_png(img, Path(out_png))
