"""``pdftext``: the embedded default parser. Blocks from the PDF's own text layer and drawing objects, CPU only.

No model is involved: it groups the text layer's line runs (:meth:`Document.text_lines`, display points, top-left
origin) into paragraphs, titles, list items, captions, table footnotes, headers and footers; finds tables as
consecutive column-aligned rows of separated cells; and finds figures as image objects and clusters of vector
drawing objects. Its limits are those of the text layer: a scanned page (no text layer) becomes one ``figure``
block covering the page, with a warning; equations are not recognised (they come out as ``text``). Hyphenated line ends are rejoined, list bullets drawn
as graphics are seen, and a bold run-in heading ("Results. We ...") leaves its paragraph ``text``.

Every bbox it returns is ``(x0, y0, x1, y1)`` in PDF points of the displayed (rotated) page, origin top-left;
pages are 1-based; block ids are 0..N-1 in reading order (page by page: headers, body, footers).
"""

from __future__ import annotations

import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium
from scipy import ndimage

from core.errors import InputError
from core.geometry import BBox, clip_bbox
from data_prep.document import SOFT_HYPHEN, Document, TextLine
from data_prep.text import is_cjk, tokenize
from data_prep.types import Block, renumber

PDFTEXT_VERSION = 2
"""Bumped whenever a change may change the blocks this parser returns (it is part of the cache key)."""

_CAPTION_RE = re.compile(
    r"^\s*(?:(?P<latin>table|tab\.|figure|fig\.)\s*(?:[0-9]+(?:[.\-–][0-9]+)*|[ivxlc]+)\s*(?:[:：.．|]|[-–—]\s|$)"
    r"|(?P<cjk>表|图|圖)\s*(?:[0-9]+(?:[.\-–][0-9]+)*|[一二三四五六七八九十]+)(?![中所的是为和与]))",
    re.IGNORECASE,
)
"""A caption's first line: "Table 1: ...", "Fig. 2. ...", "TABLE IV", "表1 ...", "图 2-1 ...". A delimiter is
required after a Latin number so that a sentence such as "Table 1 lists ..." is not a caption."""
_FOOTNOTE_RE = re.compile(r"^\s*(note|notes|source|sources|\*|†|‡|注|资料来源|数据来源|来源)\b|^\s*[*†‡注]", re.I)
_BULLET_RE = re.compile(
    r"^\s*(?:[•·▪‣●○■□◦➢►✓✔❖◆◇\-–—*]\s+|\(?(?:\d{1,2}|[a-zA-Z]|[ivxIVX]{1,4})[.)]\s+|\(\d{1,2}\)\s*|[①-⑳]|（\d{1,2}）)"
)
_PAGE_NUMBER_RE = re.compile(
    r"^\s*(?:page\s*)?[-–—]?\s*(?:\d{1,4}|[ivxlc]{1,6})\s*[-–—]?\s*(?:(?:of|/)\s*\d{1,4})?\s*$|^\s*第\s*\d+\s*页",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class PdfTextConfig:
    """Knobs of the ``pdftext`` parser. Lengths in em are multiples of the line's font size."""

    margin_band: float = 0.08
    """Header/footer band: this fraction of the page height at the top and at the bottom."""
    fragment_gap_em: float = 0.6
    """Runs on one line closer than this (em) are one line (the text layer splits at font-size changes)."""
    line_join_em: float = 2.0
    """After tables are taken out, runs on one line closer than this (em) and adjacent in the text order are one
    line (justified text, a section number and its heading, inline math)."""
    pitch_tolerance: float = 1.25
    """A line continues a paragraph when its baseline is at most this times the document's typical line pitch
    below the previous line."""
    align_em: float = 1.5
    """Largest difference of left edges between consecutive lines of one paragraph, in em."""
    indent_em: float = 4.0
    """Largest first-line or hanging indent inside a paragraph or list item, in em."""
    new_para_indent_em: float = 0.8
    """A line indented by more than this (em) against the line above starts a new paragraph."""
    size_ratio: float = 1.15
    """Lines whose font sizes differ by more than this factor are never in the same paragraph."""
    title_ratio: float = 1.15
    """A short paragraph whose font is this much larger than the body font is a title."""
    title_max_lines: int = 3
    """Longest paragraph (lines) that can be a title."""
    table_row_gap_em: float = 2.5
    """Largest vertical gap between consecutive rows of a table, in em."""
    table_cell_max_width: float = 0.35
    """Cells of a two-cell row are narrower than this fraction of the page width (30% more for wider rows)."""
    table_cell_max_words: int = 6
    """A row's median cell has at most this many words (longer runs side by side are columns of text)."""
    table_min_rows: int = 2
    """Fewest rows of separated cells that make a table."""
    rule_max_thickness: float = 2.0
    """A drawing object thinner than this (points) is a rule; ruled grids with text in their cells are tables."""
    graphics_grid: float = 2.0
    """Resolution of the occupancy grid used to cluster drawing objects, in points per cell."""
    graphics_join: float = 4.0
    """Drawing objects closer than this (points) belong to one cluster."""
    figure_min_size: float = 24.0
    """Smallest width and height (points) of a figure."""
    figure_max_text_share: float = 0.3
    """A drawing cluster whose area is covered more than this by text lines is a framed text box, not a figure."""
    background_share: float = 0.8
    """Drawing objects covering more than this share of the page are page backgrounds and are ignored."""
    bullet_min_em: float = 0.15
    """A drawn list bullet (a dot or square left of a line, not a glyph) is at least this big (em of the line)..."""
    bullet_max_em: float = 0.8
    """...and at most this big (em), roughly square..."""
    bullet_gap_em: float = 2.0
    """...and its right edge lies at most this far (em) left of the line's first character."""


@dataclass
class _Line:
    text: str
    bbox: BBox
    size: float
    bold: bool
    index: int  # position in the page's text-layer order

    @property
    def height(self) -> float:
        return self.bbox[3] - self.bbox[1]


@dataclass
class _Draft:
    """A block under construction; ``key`` orders blocks on a page (text-layer position)."""

    type: str
    bbox: BBox
    text: str
    key: float
    parent: _Draft | None = None
    lines: list[_Line] = field(default_factory=list)
    page: int = 0


def _union(boxes) -> BBox:
    boxes = list(boxes)
    return (
        min(b[0] for b in boxes),
        min(b[1] for b in boxes),
        max(b[2] for b in boxes),
        max(b[3] for b in boxes),
    )


def _area(b: BBox) -> float:
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def _inter(a: BBox, b: BBox) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _x_overlap(a: BBox, b: BBox) -> float:
    return min(a[2], b[2]) - max(a[0], b[0])


def _center_inside(b: BBox, region: BBox, tol: float = 0.0) -> bool:
    cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    return region[0] - tol <= cx <= region[2] + tol and region[1] - tol <= cy <= region[3] + tol


def join_lines(texts: list[str]) -> str:
    """Join the lines of a paragraph: no space between two CJK characters (Chinese wraps mid-sentence), none
    after a line that ends in a soft hyphen (U+00AD, see :meth:`Document.text_lines`: the word goes on, the mark
    is dropped), one space otherwise.

    >>> join_lines(["深圳站点的发电", "效率。", "Next line"])
    '深圳站点的发电效率。 Next line'
    >>> join_lines(["The experi\u00ad", "ment worked"])
    'The experiment worked'
    """
    out = ""
    for t in texts:
        t = t.strip()
        if not t:
            continue
        if out.endswith(SOFT_HYPHEN):
            out = out[:-1]
        elif out and not (is_cjk(out[-1]) and is_cjk(t[0])):
            out += " "
        out += t
    return out.removesuffix(SOFT_HYPHEN)


def _hard(text: str) -> str:
    """A run joined to a later run of the same line: a soft hyphen at its end was a real hyphen after all."""
    return text[:-1] + "-" if text.endswith(SOFT_HYPHEN) else text


class _PageParser:
    """Parses one page; see the module docstring for the rules."""

    def __init__(
        self,
        cfg: PdfTextConfig,
        page: int,
        size: tuple[float, float],
        lines: list[_Line],
        graphics: list[tuple[BBox, bool]],
        body_size: float,
        furniture: set[int],
        pitch: float = 1.2,
    ) -> None:
        self.cfg = cfg
        self.page = page
        self.w, self.h = size
        self.lines = lines
        self.graphics = graphics  # (display bbox, is_image)
        self.body = body_size
        self.furniture = furniture  # indices of header/footer lines
        self.pitch = pitch  # typical baseline-to-baseline distance inside a paragraph, in em

    # -------------------------------------------------------------------------------------------- top level
    def parse(self) -> list[_Draft]:
        header = [ln for ln in self.lines if ln.index in self.furniture and ln.bbox[1] < self.h / 2]
        footer = [ln for ln in self.lines if ln.index in self.furniture and ln.bbox[1] >= self.h / 2]
        body = [ln for ln in self.lines if ln.index not in self.furniture]

        tables, body = self._ruled_tables(body)
        text_tables, body = self._tables(body)
        tables += text_tables
        figures, body = self._figures(body, tables)
        body = self._join_same_line(body)
        paragraphs = [self._classify(p) for p in self._paragraphs(body)]

        self._attach(paragraphs, tables, figures)
        body_drafts = paragraphs + tables
        self._order_figures(figures, body_drafts)
        body_drafts += figures
        body_drafts.sort(key=lambda d: d.key)
        head = [self._simple("header", grp) for grp in self._paragraphs(header)]
        foot = [self._simple("footer", grp) for grp in self._paragraphs(footer)]
        return sorted(head, key=lambda d: d.key) + body_drafts + sorted(foot, key=lambda d: d.key)

    def _simple(self, type_: str, lines: list[_Line]) -> _Draft:
        return _Draft(
            type_, _union(ln.bbox for ln in lines), join_lines([ln.text for ln in lines]), lines[0].index, None, lines
        )

    # -------------------------------------------------------------------------------------------- tables
    def _bands(self, lines: list[_Line]) -> list[list[_Line]]:
        """Lines grouped into horizontal bands (same baseline), top to bottom; each band sorted by x."""
        bands: list[list[_Line]] = []
        boxes: list[list[float]] = []
        for ln in sorted(lines, key=lambda x: ((x.bbox[1] + x.bbox[3]) / 2, x.bbox[0])):
            placed = False
            for band, box in zip(bands[-3:], boxes[-3:], strict=True):
                h = min(ln.height, box[3] - box[1])
                if h > 0 and min(ln.bbox[3], box[3]) - max(ln.bbox[1], box[1]) >= 0.6 * h:
                    band.append(ln)
                    box[1], box[3] = min(box[1], ln.bbox[1]), max(box[3], ln.bbox[3])
                    placed = True
                    break
            if not placed:
                bands.append([ln])
                boxes.append([ln.bbox[0], ln.bbox[1], ln.bbox[2], ln.bbox[3]])
        for band in bands:
            band.sort(key=lambda x: x.bbox[0])
        return bands

    def _is_row(self, band: list[_Line]) -> bool:
        if len(band) < 2:
            return False
        if any(_CAPTION_RE.match(ln.text) for ln in band):
            return False
        # Two-column text also puts several runs on one baseline, but its runs are long and wordy.
        words = sorted(len(ln.text.split()) for ln in band)
        if words[len(words) // 2] > self.cfg.table_cell_max_words:
            return False
        widest = max(ln.bbox[2] - ln.bbox[0] for ln in band)
        limit = self.cfg.table_cell_max_width * (1.0 if len(band) == 2 else 1.3)
        return widest < limit * self.w

    def _tables(self, lines: list[_Line]) -> tuple[list[_Draft], list[_Line]]:
        cfg = self.cfg
        bands = self._bands(lines)
        tables: list[_Draft] = []
        used: set[int] = set()
        i = 0
        while i < len(bands):
            if not self._is_row(bands[i]):
                i += 1
                continue
            rows = [bands[i]]
            j = i + 1
            while j < len(bands):
                prev_bottom = max(ln.bbox[3] for ln in rows[-1])
                top = min(ln.bbox[1] for ln in bands[j])
                em = max(ln.size for ln in rows[-1])
                if top - prev_bottom > cfg.table_row_gap_em * em:
                    break
                if self._is_row(bands[j]) and self._aligned(bands[j], rows):
                    rows.append(bands[j])
                    j += 1
                    continue
                # A one-cell band inside the table's x-range continues a wrapped cell; anything else ends it.
                box = _union(ln.bbox for r in rows for ln in r)
                if (
                    len(bands[j]) == 1
                    and j + 1 < len(bands)
                    and self._is_row(bands[j + 1])
                    and bands[j][0].bbox[0] >= box[0] - 2
                    and bands[j][0].bbox[2] <= box[2] + 2
                    and not _CAPTION_RE.match(bands[j][0].text)
                ):
                    rows.append(bands[j])
                    j += 1
                    continue
                break
            table = self._make_table(rows)
            if table is not None:
                tables.append(table)
                used.update(ln.index for r in rows for ln in r)
                i = j
            else:
                i += 1
        return tables, [ln for ln in lines if ln.index not in used]

    @staticmethod
    def _aligned(band: list[_Line], rows: list[list[_Line]]) -> bool:
        """Whether ``band`` shares columns with the rows above: at least two of its cells (all, if it has fewer)
        overlap horizontally with a cell of those rows."""
        above = [ln.bbox for r in rows for ln in r]
        hits = sum(1 for ln in band if any(_x_overlap(ln.bbox, b) > 0 for b in above))
        return hits >= min(2, len(band))

    def _make_table(self, rows: list[list[_Line]]) -> _Draft | None:
        multi = [r for r in rows if len(r) >= 2]
        if len(multi) < self.cfg.table_min_rows:
            return None
        if max(len(r) for r in multi) < 3 and len(multi) < 3:
            return None  # two cells side by side twice is too little evidence of a table
        text = "\n".join(" | ".join(ln.text for ln in r) for r in rows)
        all_lines = [ln for r in rows for ln in r]
        return _Draft(
            "table", _union(ln.bbox for ln in all_lines), text, min(ln.index for ln in all_lines), None, all_lines
        )

    # -------------------------------------------------------------------------------------------- figures
    def _components(self, boxes: list[BBox]) -> list[list[int]]:
        """Cluster display boxes that touch or lie within ``graphics_join`` points of each other; returns lists of
        indices into ``boxes``. Uses a coarse occupancy grid, so it stays fast on pages with thousands of paths."""
        cfg = self.cfg
        g = cfg.graphics_grid
        gw, gh = max(1, math.ceil(self.w / g)), max(1, math.ceil(self.h / g))
        mask = np.zeros((gh, gw), dtype=bool)
        pad = cfg.graphics_join / 2
        cells = []
        for x0, y0, x1, y1 in boxes:
            c0, c1 = max(0, int((x0 - pad) / g)), min(gw, max(1, math.ceil((x1 + pad) / g)))
            r0, r1 = max(0, int((y0 - pad) / g)), min(gh, max(1, math.ceil((y1 + pad) / g)))
            c0, r0 = min(c0, c1 - 1), min(r0, r1 - 1)
            mask[r0:r1, c0:c1] = True
            cells.append((r0, c0))
        labels, _ = ndimage.label(mask)
        groups: dict[int, list[int]] = {}
        for i, (r, c) in enumerate(cells):
            groups.setdefault(int(labels[r, c]), []).append(i)
        return list(groups.values())

    def _ruled_tables(self, lines: list[_Line]) -> tuple[list[_Draft], list[_Line]]:
        """Tables drawn as a grid of rules: each text line goes to the cell (between consecutive horizontal and
        vertical rules) that holds its centre; a row's cells are joined with " | "."""
        cfg = self.cfg
        t = cfg.rule_max_thickness
        page_area = self.w * self.h
        rules: list[BBox] = []
        for b, img in self.graphics:
            w, h = b[2] - b[0], b[3] - b[1]
            if img or _area(b) >= cfg.background_share * page_area or max(w, h) < 5:
                continue
            if w <= t or h <= t:
                rules.append(b)
            else:  # a stroked or filled rectangle contributes its four edges
                rules += [
                    (b[0], b[1], b[2], b[1]),
                    (b[0], b[3], b[2], b[3]),
                    (b[0], b[1], b[0], b[3]),
                    (b[2], b[1], b[2], b[3]),
                ]
        if len(rules) < 4:
            return [], lines

        def distinct(values: list[float]) -> list[float]:
            out: list[float] = []
            for v in sorted(values):
                if not out or v - out[-1] > 2.0:
                    out.append(v)
            return out

        tables: list[_Draft] = []
        used: set[int] = set()
        for group in self._components(rules):
            members = [rules[i] for i in group]
            box = _union(members)
            ys = distinct([(b[1] + b[3]) / 2 for b in members if b[2] - b[0] > b[3] - b[1]])
            xs = distinct([(b[0] + b[2]) / 2 for b in members if b[3] - b[1] >= b[2] - b[0]])
            if len(ys) < 3 or len(xs) < 3:
                continue
            inside = [
                ln
                for ln in lines
                if ln.index not in used and _center_inside(ln.bbox, box) and not _CAPTION_RE.match(ln.text)
            ]
            if len(inside) < 2:
                continue
            cells: dict[tuple[int, int], list[_Line]] = {}
            for ln in inside:
                cy, cx = (ln.bbox[1] + ln.bbox[3]) / 2, (ln.bbox[0] + ln.bbox[2]) / 2
                r = max(0, min(len(ys) - 2, int(np.searchsorted(ys, cy)) - 1))
                c = max(0, min(len(xs) - 2, int(np.searchsorted(xs, cx)) - 1))
                cells.setdefault((r, c), []).append(ln)
            rows_multi = sum(1 for r in range(len(ys) - 1) if sum((r, c) in cells for c in range(len(xs) - 1)) >= 2)
            if rows_multi < 2 or len(cells) < 0.3 * (len(ys) - 1) * (len(xs) - 1):
                continue
            row_texts = []
            for r in range(len(ys) - 1):
                row = []
                for c in range(len(xs) - 1):
                    if (r, c) in cells:
                        part = sorted(cells[(r, c)], key=lambda ln: ((ln.bbox[1] + ln.bbox[3]) / 2, ln.bbox[0]))
                        row.append(join_lines([ln.text for ln in part]))
                if row:
                    row_texts.append(" | ".join(row))
            used.update(ln.index for ln in inside)
            tables.append(
                _Draft(
                    "table",
                    _union([box, *(ln.bbox for ln in inside)]),
                    "\n".join(row_texts),
                    min(ln.index for ln in inside),
                    None,
                    inside,
                )
            )
        return tables, [ln for ln in lines if ln.index not in used]

    def _figures(self, lines: list[_Line], tables: list[_Draft]) -> tuple[list[_Draft], list[_Line]]:
        cfg = self.cfg
        page_area = self.w * self.h
        boxes = [b for b, _ in self.graphics if _area(b) < cfg.background_share * page_area]
        if not boxes:
            return [], lines
        is_image = [img for b, img in self.graphics if _area(b) < cfg.background_share * page_area]
        groups = self._components(boxes)
        # A lone rectangle or two (a shaded heading, a frame) is not a drawing: vector figures need 3+ objects.
        comp = {
            k: [boxes[i] for i in group]
            for k, group in enumerate(groups)
            if len(group) >= 3 or any(is_image[i] for i in group)
        }
        figures: list[_Draft] = []
        absorbed: set[int] = set()
        for members in comp.values():
            box = clip_bbox(_union(members), self.w, self.h)
            if box[2] - box[0] < cfg.figure_min_size or box[3] - box[1] < cfg.figure_min_size:
                continue
            # A table's ruling: widen the table to its grid instead of making a figure.
            grid_of = [t for t in tables if _inter(t.bbox, box) >= 0.5 * _area(t.bbox)]
            if grid_of:
                for t in grid_of:
                    if _area(box) <= 2.5 * _area(t.bbox):
                        t.bbox = _union([t.bbox, box])
                continue
            if any(_inter(t.bbox, box) >= 0.5 * min(_area(t.bbox), _area(box)) for t in tables):
                continue
            inside = [ln for ln in lines if _center_inside(ln.bbox, box) and not _CAPTION_RE.match(ln.text)]
            text_area = sum(_area(ln.bbox) for ln in inside)
            if text_area > cfg.figure_max_text_share * _area(box):
                continue  # a framed or shaded text box: its text stays paragraphs
            absorbed.update(ln.index for ln in inside)
            inside.sort(key=lambda ln: ln.index)
            figures.append(_Draft("figure", box, " ".join(ln.text for ln in inside), math.inf, None, inside))
        return figures, [ln for ln in lines if ln.index not in absorbed]

    # -------------------------------------------------------------------------------------------- paragraphs
    def _fits(self, para: list[_Line], ln: _Line) -> float | None:
        """Baseline pitch (points) when ``ln`` continues ``para``, else None."""
        cfg = self.cfg
        last = para[-1]
        size = max(min(last.size, ln.size), 1e-6)
        em = max(last.size, ln.size)
        if em > cfg.size_ratio * size or last.bold != ln.bold:
            return None
        pitch = ln.bbox[3] - last.bbox[3]
        if pitch < 0.5 * em or pitch > cfg.pitch_tolerance * self.pitch * em or ln.bbox[1] - last.bbox[3] < -0.4 * em:
            return None
        if _x_overlap(ln.bbox, last.bbox) <= 0 and _x_overlap(ln.bbox, _union(x.bbox for x in para)) <= 0:
            return None
        first = para[0]
        dx_last = abs(ln.bbox[0] - last.bbox[0])
        centered = abs((ln.bbox[0] + ln.bbox[2]) / 2 - (last.bbox[0] + last.bbox[2]) / 2) <= em
        if len(para) >= 2 and ln.bbox[0] - last.bbox[0] > cfg.new_para_indent_em * em and not centered:
            return None  # a first-line indent starts the next paragraph
        indented = len(para) == 1 and -cfg.indent_em * em <= ln.bbox[0] - first.bbox[0] <= cfg.indent_em * em
        if dx_last <= cfg.align_em * em or centered or indented:
            return pitch
        return None

    def _join_same_line(self, lines: list[_Line]) -> list[_Line]:
        """Join runs adjacent in the text order that sit on one line less than ``line_join_em`` apart."""
        out: list[_Line] = []
        for ln in sorted(lines, key=lambda x: x.index):
            if out:
                prev = out[-1]
                em = max(prev.size, ln.size)
                h = min(prev.height, ln.height)
                overlap = min(prev.bbox[3], ln.bbox[3]) - max(prev.bbox[1], ln.bbox[1])
                gap = ln.bbox[0] - prev.bbox[2]
                if (
                    h > 0
                    and overlap >= 0.5 * h
                    and -0.3 * em <= gap <= self.cfg.line_join_em * em
                    and not _CAPTION_RE.match(ln.text)
                ):
                    main = prev if len(prev.text) >= len(ln.text) else ln
                    sep = "" if is_cjk(prev.text[-1]) and is_cjk(ln.text[0]) else " "
                    # Bold only if both parts are: a bold run-in heading does not make its sentence a title.
                    bold = prev.bold and ln.bold
                    text = _hard(prev.text) + sep + ln.text
                    out[-1] = _Line(text, _union([prev.bbox, ln.bbox]), main.size, bold, prev.index)
                    continue
            out.append(ln)
        return out

    def _graphic_bullet(self, ln: _Line) -> bool:
        """Whether a small drawing (a dot or square drawn as a path or image, not as a glyph) sits just left of the
        line, on its middle: a list bullet the text layer does not show."""
        cfg = self.cfg
        em = max(ln.size, 1.0)
        cy = (ln.bbox[1] + ln.bbox[3]) / 2
        for (x0, y0, x1, y1), _ in self.graphics:
            w, h = x1 - x0, y1 - y0
            if not (cfg.bullet_min_em * em <= max(w, h) <= cfg.bullet_max_em * em and min(w, h) >= 0.5 * max(w, h)):
                continue
            if y0 <= cy <= y1 and ln.bbox[0] - cfg.bullet_gap_em * em <= x1 <= ln.bbox[0] + 0.1 * em:
                return True
        return False

    def _paragraphs(self, lines: list[_Line]) -> list[list[_Line]]:
        paras: list[list[_Line]] = []
        for ln in sorted(lines, key=lambda x: x.index):
            forced = bool(_CAPTION_RE.match(ln.text) or _BULLET_RE.match(ln.text) or _FOOTNOTE_RE.match(ln.text))
            forced = forced or self._graphic_bullet(ln)
            best, best_gap = None, math.inf
            if not forced:
                for p in paras[-12:]:  # open paragraphs near in the text order (columns interleave)
                    gap = self._fits(p, ln)
                    if gap is not None and abs(gap) < best_gap:
                        best, best_gap = p, abs(gap)
            if best is not None:
                best.append(ln)
            else:
                paras.append([ln])
        return self._absorb_fragments(paras)

    def _absorb_fragments(self, paras: list[list[_Line]]) -> list[list[_Line]]:
        """A short one-line paragraph lying mostly inside a larger paragraph is a piece of it (a display formula
        fragment, a superscript the text layer put elsewhere): merge it, keeping the lines in visual order."""
        boxes = [_union(ln.bbox for ln in p) for p in paras]
        keep = [True] * len(paras)
        for i, p in enumerate(paras):
            if len(p) != 1 or len(p[0].text) > 40 or _CAPTION_RE.match(p[0].text) or _BULLET_RE.match(p[0].text):
                continue
            area = _area(boxes[i])
            for j, q in enumerate(paras):
                if j == i or not keep[j] or len(q) < 2:
                    continue
                if area > 0 and _inter(boxes[i], boxes[j]) >= 0.5 * area:
                    q.append(p[0])
                    q.sort(key=lambda ln: (round((ln.bbox[1] + ln.bbox[3]) / 2 / max(ln.height, 1.0)), ln.bbox[0]))
                    keep[i] = False
                    break
        return [p for p, k in zip(paras, keep, strict=True) if k]

    def _classify(self, lines: list[_Line]) -> _Draft:
        cfg = self.cfg
        text = join_lines([ln.text for ln in lines])
        size = sorted(ln.size for ln in lines)[len(lines) // 2]
        first = lines[0].text
        m = _CAPTION_RE.match(first)
        if m:
            kind = (m.group("latin") or m.group("cjk")).lower()
            type_ = "table_caption" if kind in ("table", "tab.", "表") else "figure_caption"
        elif _FOOTNOTE_RE.match(first):
            type_ = "table_footnote"  # demoted to text by _attach when no table is right above
        elif len(lines) <= cfg.title_max_lines and size >= cfg.title_ratio * self.body and len(text) < 200:
            type_ = "title"
        elif len(lines) <= 2 and all(ln.bold for ln in lines) and len(tokenize(text)) <= 15 and len(text) < 100:
            type_ = "title"
        elif _BULLET_RE.match(first) or self._graphic_bullet(lines[0]):
            type_ = "list"
        else:
            type_ = "text"
        return _Draft(type_, _union(ln.bbox for ln in lines), text, min(ln.index for ln in lines), None, lines)

    # -------------------------------------------------------------------------------------------- relations
    def _attach(self, paragraphs: list[_Draft], tables: list[_Draft], figures: list[_Draft]) -> None:
        """Link captions and table notes to the nearest table/figure (``parent``)."""

        def nearest(d: _Draft, targets: list[_Draft], below_only: bool = False) -> _Draft | None:
            best, best_gap = None, math.inf
            for t in targets:
                if _x_overlap(d.bbox, t.bbox) <= 0:
                    continue
                if d.bbox[1] >= t.bbox[3] - 2:  # d below t
                    gap = d.bbox[1] - t.bbox[3]
                elif not below_only and d.bbox[3] <= t.bbox[1] + 2:  # d above t
                    gap = t.bbox[1] - d.bbox[3]
                else:
                    continue
                if gap < best_gap:
                    best, best_gap = t, gap
            return best

        for d in paragraphs:
            if d.type == "table_caption":
                d.parent = nearest(d, tables)
            elif d.type == "figure_caption":
                d.parent = nearest(d, figures)
            elif d.type == "table_footnote":
                t = nearest(d, tables, below_only=True)
                em = max(ln.size for ln in d.lines)
                if t is None or d.bbox[1] - t.bbox[3] > 3 * em:
                    d.type = "text"
                else:
                    d.parent = t

    def _order_figures(self, figures: list[_Draft], others: list[_Draft]) -> None:
        """A figure has no text order: put it just before the first block below it in its column."""
        for f in figures:
            below = [o.key for o in others if o.bbox[1] >= f.bbox[1] - 2 and _x_overlap(o.bbox, f.bbox) > 0]
            if f.lines:
                below.append(min(ln.index for ln in f.lines) + 0.5)
            f.key = (min(below) - 0.5) if below else (max((o.key for o in others), default=0) + 0.5)


class PdfTextParser:
    """The ``pdftext`` parser (see the module docstring)."""

    name = "pdftext"

    def __init__(self, config: PdfTextConfig | None = None) -> None:
        self.config = config or PdfTextConfig()

    def version(self) -> str:
        return f"pdftext-{PDFTEXT_VERSION}+pypdfium2-{pdfium.PYPDFIUM_INFO}"

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        """Blocks of every page of ``doc`` (display points, top-left origin, 1-based pages, ids 0..N-1).

        ``output`` must be None: this parser reads the PDF itself and has no output file to convert."""
        if output is not None:
            raise InputError(
                f"{output}: the pdftext parser reads the PDF itself; --parser-output is for mineru/docling"
            )
        cfg = self.config
        pages = range(1, doc.n_pages + 1)
        all_lines = {p: _merge_fragments(_lines(doc, p), cfg) for p in pages}
        body_size = _body_font_size(all_lines)
        pitch = _line_pitch(all_lines)
        furniture = _furniture(all_lines, doc.page_sizes, cfg)
        drafts: list[_Draft] = []
        for p in pages:
            lines = all_lines[p]
            size = doc.page_sizes[p - 1]
            if not lines:
                warnings.warn(
                    f"{doc.path}: page {p} has no text layer (scanned?); it becomes one figure block", stacklevel=2
                )
                drafts.append(_Draft("figure", (0.0, 0.0, size[0], size[1]), "", 0.0, page=p))
                continue
            page_drafts = _PageParser(
                cfg, p, size, lines, doc.drawing_boxes(p), body_size, furniture[p], pitch
            ).parse()
            for d in page_drafts:
                d.page = p
            drafts.extend(page_drafts)
        ids = {id(d): i for i, d in enumerate(drafts)}
        blocks = []
        for i, d in enumerate(drafts):
            w, h = doc.page_sizes[d.page - 1]
            parent = ids.get(id(d.parent)) if d.parent is not None else None
            text = d.text.replace(SOFT_HYPHEN, "")  # a hyphen mark no joiner consumed (a one-line block)
            blocks.append(Block(i, d.page, clip_bbox(d.bbox, w, h), d.type, text, parent))
        return renumber(blocks)


def _lines(doc: Document, page: int) -> list[TextLine]:
    return [t for t in doc.text_lines(page) if t.text.strip()]


def _merge_fragments(lines: list[TextLine], cfg: PdfTextConfig) -> list[_Line]:
    """Rejoin runs that the text layer split inside one line (a superscript, inline math, a font change):
    consecutive in text order, on the same baseline, and at most ``fragment_gap_em`` apart."""
    out: list[_Line] = []
    weights: list[int] = []
    for t in lines:
        if out:
            prev = out[-1]
            em = max(prev.size, t.font_size)
            h = min(prev.height, t.bbox[3] - t.bbox[1])
            overlap = min(prev.bbox[3], t.bbox[3]) - max(prev.bbox[1], t.bbox[1])
            gap = t.bbox[0] - prev.bbox[2]
            if h > 0 and overlap >= 0.5 * h and -0.3 * em <= gap <= cfg.fragment_gap_em * em:
                sep = "" if gap < 0.15 * em or (is_cjk(prev.text[-1]) and is_cjk(t.text[0])) else " "
                n = len(t.text)
                size = t.font_size if n > weights[-1] else prev.size
                bold = prev.bold and t.bold  # a bold lead-in plus plain text is not a bold line
                out[-1] = _Line(_hard(prev.text) + sep + t.text, _union([prev.bbox, t.bbox]), size, bold, prev.index)
                weights[-1] += n
                continue
        out.append(_Line(t.text, t.bbox, t.font_size, t.bold, len(out)))
        weights.append(len(t.text))
    return out


def _body_font_size(all_lines: dict[int, list[_Line]]) -> float:
    """The most common font size, weighted by characters (rounded to 0.5 pt)."""
    counts: Counter[float] = Counter()
    for lines in all_lines.values():
        for ln in lines:
            counts[round(ln.size * 2) / 2] += len(ln.text)
    return counts.most_common(1)[0][0] if counts else 10.0


def _line_pitch(all_lines: dict[int, list[_Line]]) -> float:
    """The document's typical baseline-to-baseline distance between consecutive lines of one paragraph, in em
    (median over consecutive, same-size, horizontally overlapping lines; 1.2 when there are none)."""
    ratios = []
    for lines in all_lines.values():
        for a, b in zip(lines, lines[1:], strict=False):
            if abs(a.size - b.size) > 0.1 * a.size or a.size <= 0 or _x_overlap(a.bbox, b.bbox) <= 0:
                continue
            r = (b.bbox[3] - a.bbox[3]) / a.size
            if 0.9 <= r <= 2.5:
                ratios.append(r)
    return float(np.median(ratios)) if ratios else 1.2


def _furniture(
    all_lines: dict[int, list[_Line]], sizes: list[tuple[float, float]], cfg: PdfTextConfig
) -> dict[int, set[int]]:
    """Indices of header/footer lines per page: lines in the top/bottom band that repeat on other pages (digits
    ignored), look like a page number, or are set smaller than the body text."""
    body = _body_font_size(all_lines)

    def band(p: int, ln: _Line) -> bool:
        h = sizes[p - 1][1]
        return ln.bbox[3] <= cfg.margin_band * h or ln.bbox[1] >= (1 - cfg.margin_band) * h

    def norm(t: str) -> str:
        return re.sub(r"\d+", "#", re.sub(r"\s+", " ", t.strip().lower()))

    seen: Counter[str] = Counter()
    for p, lines in all_lines.items():
        for key in {norm(ln.text) for ln in lines if band(p, ln)}:
            seen[key] += 1
    out: dict[int, set[int]] = {}
    for p, lines in all_lines.items():
        out[p] = {
            ln.index
            for ln in lines
            if band(p, ln)
            and (
                (len(all_lines) > 1 and seen[norm(ln.text)] > 1)
                or _PAGE_NUMBER_RE.match(ln.text)
                or ln.size < 0.9 * body
            )
        }
    return out
