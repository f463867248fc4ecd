"""The one rule for a parser's box on its page, shared by every parser and converter (pdftext, MinerU, Docling)
and by the cache's own check of a parse.

A box ``(x0, y0, x1, y1)`` in display points (top-left origin) of a page ``width`` x ``height`` points is:

* **refused** (:class:`~core.errors.InputError` naming the source, the page and the box) when a coordinate is
  not a finite number (NaN, an infinity: a converter must never turn ``inf`` into "the page edge", which would be a
  made-up full-width box), or when it runs off the page by more than :func:`overshoot_tolerance` (a negative
  coordinate, a box past the right or bottom edge: the output of another PDF, or another unit);
* **clipped** to the page when it overshoots by up to that tolerance (parsers round outward; MinerU 2.x truncates
  page sizes to whole points);
* **dropped** (:func:`page_box` returns None, the caller counts it) when what is left has no area: narrower or
  lower than :data:`MIN_SIDE` points.

Swapped corners (``x1 < x0``) are put in order first.

>>> page_box((10, 20, 100, 40), 1, (200.0, 100.0), "out.json")
(10.0, 20.0, 100.0, 40.0)
>>> page_box((-1.5, 20, 201, 40), 1, (200.0, 100.0), "out.json")
(0.0, 20.0, 200.0, 40.0)
>>> page_box((10, 20, 10.2, 40), 1, (200.0, 100.0), "out.json") is None
True
>>> page_box((10, 20, float("inf"), 40), 3, (200.0, 100.0), "out.json")
Traceback (most recent call last):
...
core.errors.InputError: out.json: page 3: bbox (10, 20, inf, 40) has a coordinate that is not a finite number
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from core.errors import InputError

BBOX_TOLERANCE = 2.0
"""Points by which a box may run off its page before it is an error (at least; see :func:`overshoot_tolerance`)."""

RELATIVE_TOLERANCE = 0.01
"""Share of the page side by which a box may run off the page (normalised coordinates rounded outward)."""

BBox = tuple[float, float, float, float]
"""``(x0, y0, x1, y1)`` in PDF points, top-left origin of the page as displayed (:mod:`data_prep.types`)."""

MIN_SIDE = 0.5
"""A box narrower or lower than this many points after clipping has no area and is dropped."""


def area(box: Sequence[float]) -> float:
    """Area of a ``[x0, y0, x1, y1]`` box with ``x0 <= x1``, ``y0 <= y1`` (0 for a box without area)."""
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def intersection(a: Sequence[float], b: Sequence[float]) -> float:
    """Area of the overlap of two boxes with ``x0 <= x1``, ``y0 <= y1`` (0 when they do not overlap)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two ``[x0, y0, x1, y1]`` boxes with ``x0 <= x1``, ``y0 <= y1``; 0 when they do
    not overlap or either has no area. The one IoU of the project (data_prep's element typing, the LAT reward, the
    scorer; :func:`eval.boxes.iou` sorts each axis first).

    >>> iou((0, 0, 10, 10), (5, 0, 15, 10))
    0.3333333333333333
    """
    inter = intersection(a, b)
    if inter <= 0:
        return 0.0
    # both boxes overlap, so both sides are positive: the areas without area()'s clamps (iou is called per pair)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _box_array(boxes: np.ndarray) -> np.ndarray:
    return np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


def area_vector(boxes: np.ndarray) -> np.ndarray:
    """:func:`area` of every box of ``boxes`` ``(n, 4)`` -> ``(n,)``, vectorised."""
    b = _box_array(boxes)
    return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)


def intersection_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`intersection` of every pair of boxes ``a`` ``(n, 4)`` and ``b`` ``(m, 4)`` -> ``(n, m)``, vectorised."""
    a, b = _box_array(a), _box_array(b)
    w = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    h = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    return np.clip(w, 0, None) * np.clip(h, 0, None)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`iou` of every pair of boxes ``a`` ``(n, 4)`` and ``b`` ``(m, 4)`` -> ``(n, m)``, vectorised (the same
    rule: ``x0 <= x1``, ``y0 <= y1``; no overlap or a box without area -> 0).

    >>> float(iou_matrix([(0, 0, 10, 10)], [(0, 0, 10, 5), (20, 20, 30, 30)])[0, 0]), iou((0, 0, 10, 10), (0, 0, 10, 5))
    (0.5, 0.5)
    """
    a, b = _box_array(a), _box_array(b)
    inter = intersection_matrix(a, b)
    union = area_vector(a)[:, None] + area_vector(b)[None, :] - inter
    out = np.zeros_like(inter)
    # a box without area overlaps nothing (inter 0), so union > 0 is the only guard the division needs
    np.divide(inter, union, out=out, where=union > 0)
    return out


def overshoot_tolerance(side: float) -> float:
    """Points a box may run off a page side of ``side`` points and still be clipped:
    ``max(BBOX_TOLERANCE, RELATIVE_TOLERANCE * side)``."""
    return max(BBOX_TOLERANCE, RELATIVE_TOLERANCE * side)


def _fmt(bbox: Sequence) -> str:
    return "(" + ", ".join(f"{v:g}" if isinstance(v, int | float) else repr(v) for v in bbox) + ")"


def finite_box(bbox: Sequence, page: int, source: str, what: str = "") -> BBox:
    """The first half of the rule: ``bbox`` as 4 finite floats with its corners in order; raises
    :class:`~core.errors.InputError` when it is not 4 numbers or a coordinate is NaN or infinite."""
    where = f"{source}: page {page}: {what + ' ' if what else ''}"
    if not (isinstance(bbox, Sequence) and not isinstance(bbox, str) and len(bbox) == 4):
        raise InputError(f"{where}bbox {bbox!r} is not 4 numbers")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox):
        raise InputError(f"{where}bbox {list(bbox)!r} is not 4 numbers")
    if not all(math.isfinite(v) for v in bbox):
        raise InputError(f"{where}bbox {_fmt(bbox)} has a coordinate that is not a finite number")
    x0, x1 = sorted((float(bbox[0]), float(bbox[2])))
    y0, y1 = sorted((float(bbox[1]), float(bbox[3])))
    return (x0, y0, x1, y1)


def page_box(bbox: Sequence, page: int, page_size: tuple[float, float], source: str, what: str = "") -> BBox | None:
    """Apply the rule (module docstring) to ``bbox`` on 1-based ``page`` of ``page_size`` ``(width, height)``.

    Returns the box clipped to the page, or None when it has no area there; raises
    :class:`~core.errors.InputError` ``"{source}: page {page}: {what} bbox ... "`` when it is not 4 finite
    numbers or runs off the page beyond the tolerance."""
    x0, y0, x1, y1 = finite_box(bbox, page, source, what)
    w, h = page_size
    tx, ty = overshoot_tolerance(w), overshoot_tolerance(h)
    over_x, over_y = max(-x0, x1 - w), max(-y0, y1 - h)
    if over_x > tx or over_y > ty:
        where = f"{source}: page {page}: {what + ' ' if what else ''}"
        raise InputError(
            f"{where}bbox {_fmt(bbox)} runs off the page ({w:g} x {h:g} pt) by {max(over_x, over_y):.4g} pt; "
            "is the parser output from another PDF?"
        )
    x0, x1 = min(max(x0, 0.0), w), min(max(x1, 0.0), w)
    y0, y1 = min(max(y0, 0.0), h), min(max(y1, 0.0), h)
    if x1 - x0 < MIN_SIDE or y1 - y0 < MIN_SIDE:
        return None
    return (x0, y0, x1, y1)


def clip_bbox(bbox: BBox, width: float, height: float) -> BBox:
    """Clip a top-left-origin bbox (points) to a page of ``width`` x ``height`` points."""
    x0, y0, x1, y1 = bbox
    x0, x1 = sorted((min(max(x0, 0.0), width), min(max(x1, 0.0), width)))
    y0, y1 = sorted((min(max(y0, 0.0), height), min(max(y1, 0.0), height)))
    return (x0, y0, x1, y1)
