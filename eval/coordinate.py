"""The coordinate interface: CiteVQA-style ``<bbox .../>`` tags -> citations in PDF points, and *snap*.

CiteVQA's prompt asks for ``<bbox page="N" x1="left" y1="top" x2="right" y2="bottom" />`` with 1-based pages
and coordinates relative to the page image on a 0-1000 scale. Models also write the numbers positionally
(``<bbox page="3" 120 80 560 240 />``), with commas, or without quotes; all are read. A tag whose page or four
numbers cannot be read is counted as unparsed, never guessed.

Conversion: ``x_pt = x / 1000 * page_width_pt``, ``y_pt = y / 1000 * page_height_pt`` with the displayed page
size (after ``/Rotate``), so the result is ``[x0, y0, x1, y1]`` in points, origin top-left. The box is kept as
written (a reversed box stays reversed: the scorer counts it malformed and it matches nothing, raw-output
semantics); nothing is clipped.

*Snap* (paper Table 10): each box is replaced by the block on its stated page with the highest IoU; when no
block overlaps it, by the nearest block (smallest gap between the boxes, ties broken by centre distance); when
the page has no parsed block, it is left unchanged.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from core.geometry import BBox
from data_prep.types import Block
from eval.boxes import box_distance, iou, normalize_box

COORD_SCALE = 1000.0
"""CiteVQA's coordinates are relative to the page on this scale."""

_TAG_RE = re.compile(r"<\s*bbox\b([^<>]*?)/?\s*>", re.IGNORECASE | re.DOTALL)
_ATTR_RE = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'/>]+))""")
_NUM_RE = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class CoordBox:
    """A tag as written: 1-based ``page`` and ``(x1, y1, x2, y2)`` on the 0-1000 scale of that page."""

    page: int
    box: BBox
    raw: str


@dataclass(frozen=True)
class ParsedCoordinates:
    """All tags of a response: the readable ones, the count of unreadable ones, and the answer text."""

    boxes: tuple[CoordBox, ...]
    n_unparsed: int
    answer: str


def strip_thinking(text: str) -> str:
    """Drop ``<think>...</think>`` blocks (and anything before a lone ``</think>``) of a thinking model."""
    text = _THINK_RE.sub("", text)
    if "</think>" in text:
        text = text.split("</think>", 1)[1]
    return text


def _tag_box(attrs: str) -> tuple[int, BBox] | None:
    named: dict[str, str] = {}
    for m in _ATTR_RE.finditer(attrs):
        named[m.group(1).lower()] = next(g for g in m.groups()[1:] if g is not None)
    rest = _ATTR_RE.sub(" ", attrs)
    page_s = named.get("page")
    if page_s is None:
        return None
    try:
        page_f = float(page_s)
    except ValueError:
        return None
    if not math.isfinite(page_f) or page_f != int(page_f) or page_f < 1:
        return None
    coords: list[float] = []
    if all(k in named for k in ("x1", "y1", "x2", "y2")):
        try:
            coords = [float(named[k]) for k in ("x1", "y1", "x2", "y2")]
        except ValueError:
            return None
    else:
        # Positional numbers, or one attribute holding all four ("bbox='[1, 2, 3, 4]'").
        pool = [named[k] for k in ("bbox", "box", "coords") if k in named] + [rest]
        nums = [float(x) for x in _NUM_RE.findall(" ".join(pool))]
        if len(nums) != 4:
            return None
        coords = nums
    if not all(math.isfinite(v) for v in coords):
        return None
    return int(page_f), (coords[0], coords[1], coords[2], coords[3])


def parse_coordinate_response(text: str) -> ParsedCoordinates:
    """Read every ``<bbox .../>`` tag of a response (thinking removed). The answer is the text without tags.

    >>> p = parse_coordinate_response('Yes. <bbox page="2" x1="100" y1="50" x2="900" y2="120" />')
    >>> p.boxes[0].page, p.boxes[0].box, p.answer
    (2, (100.0, 50.0, 900.0, 120.0), 'Yes.')
    """
    text = strip_thinking(text or "")
    boxes, unparsed = [], 0
    for m in _TAG_RE.finditer(text):
        got = _tag_box(m.group(1))
        if got is None:
            unparsed += 1
        else:
            boxes.append(CoordBox(got[0], got[1], m.group(0)))
    answer = re.sub(r"[ \t]+", " ", _TAG_RE.sub("", text)).strip()
    answer = re.sub(r"\n\s*\n+", "\n", answer)
    return ParsedCoordinates(tuple(boxes), unparsed, answer)


def to_points(box: Sequence[float], page_size: tuple[float, float], scale: float = COORD_SCALE) -> BBox:
    """``(x1, y1, x2, y2)`` on the 0-``scale`` grid of a page of ``(width, height)`` points -> points."""
    w, h = page_size
    x1, y1, x2, y2 = box
    return (x1 / scale * w, y1 / scale * h, x2 / scale * w, y2 / scale * h)


def snap(page: int, bbox: Sequence[float], blocks: Sequence[Block]) -> Block | None:
    """The block that replaces a box on ``page`` (points): max IoU, else nearest; None when the page has none."""
    on_page = [b for b in blocks if b.page == page]
    if not on_page:
        return None
    box, _ = normalize_box(bbox)
    best, best_iou = None, 0.0
    for b in on_page:
        v = iou(box, b.bbox)
        if v > best_iou:
            best, best_iou = b, v
    if best is not None:
        return best
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2

    def key(b: Block) -> tuple[float, float]:
        bx, by = (b.bbox[0] + b.bbox[2]) / 2, (b.bbox[1] + b.bbox[3]) / 2
        return (box_distance(box, b.bbox), math.hypot(bx - cx, by - cy))

    return min(on_page, key=key)
