"""Box geometry for scoring: normalisation, IoU, containment, matching.

Every box here is ``(x0, y0, x1, y1)`` in one coordinate space shared by the two boxes compared (the scorer uses
PDF points, origin top-left of the displayed page); IoU is scale invariant, so the unit only has to agree.

Rules (stated once, used by every metric):

* A box with ``x1 < x0`` or ``y1 < y0`` is *malformed*: it is normalised (the coordinates of each axis sorted)
  and the caller counts it (:func:`normalize_box` returns the flag).
* A box with zero area (``x1 == x0`` or ``y1 == y0``) never matches anything: its IoU with every box is 0.
* Two boxes *match at threshold t* when they are on the same page, ``IoU > 0`` and ``IoU >= t - IOU_EPS``.
  ``IOU_EPS`` absorbs floating-point rounding only, so a box whose IoU is exactly the threshold on paper
  matches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from core.geometry import BBox, area, area_vector, intersection, intersection_matrix, iou_matrix
from core.geometry import iou as geometry_iou

IOU_EPS = 1e-9
"""Tolerance on ``IoU >= t`` for floating-point rounding (an IoU of exactly t on paper must match)."""

Box = BBox
"""The one box type (:data:`core.geometry.BBox`): ``(x0, y0, x1, y1)`` in PDF points, top-left origin."""


def normalize_box(box: Sequence[float]) -> tuple[Box, bool]:
    """``(sorted box, malformed)``: malformed when ``x1 < x0`` or ``y1 < y0`` in the input.

    >>> normalize_box([10, 5, 0, 8])
    ((0.0, 5.0, 10.0, 8.0), True)
    """
    if len(box) != 4:
        raise ValueError(f"a box has 4 numbers [x0, y0, x1, y1], got {list(box)!r}")
    x0, y0, x1, y1 = (float(v) for v in box)
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        raise ValueError(f"a box must have finite coordinates, got {list(box)!r}")
    malformed = x1 < x0 or y1 < y0
    return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)), malformed


def iou(a: Sequence[float], b: Sequence[float]) -> float:
    """Intersection over union of two boxes (normalised first); 0 when either has zero area.

    >>> iou((0, 0, 10, 10), (0, 0, 10, 5))
    0.5
    """
    a, _ = normalize_box(a)
    b, _ = normalize_box(b)
    return geometry_iou(a, b)


def matches(iou_value: float, threshold: float) -> bool:
    """The match rule on an IoU already known to be between boxes of the same page."""
    return iou_value > 0 and iou_value >= threshold - IOU_EPS


def containment(inner: Sequence[float], outer: Sequence[float]) -> float:
    """Share of ``inner``'s area that lies inside ``outer`` (0 when ``inner`` has zero area)."""
    inner, _ = normalize_box(inner)
    outer, _ = normalize_box(outer)
    a = area(inner)
    return intersection(inner, outer) / a if a > 0 else 0.0


def box_distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Euclidean gap between two normalised boxes (0 when they touch or overlap)."""
    dx = max(0.0, max(a[0], b[0]) - min(a[2], b[2]))
    dy = max(0.0, max(a[1], b[1]) - min(a[3], b[3]))
    return math.hypot(dx, dy)


def containment_matrix(inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """``(n, m)``: share of each ``inner`` box's area inside each ``outer`` box (normalised boxes)."""
    inner = np.asarray(inner, dtype=np.float64)
    inter = intersection_matrix(inner, outer)
    a = area_vector(inner)
    out = np.zeros_like(inter)
    np.divide(inter, a[:, None], out=out, where=a[:, None] > 0)
    return out


def match_matrix(
    pages_a: np.ndarray, boxes_a: np.ndarray, pages_b: np.ndarray, boxes_b: np.ndarray, threshold: float | None
) -> np.ndarray:
    """Boolean ``(n, m)``: element i of ``a`` matches element j of ``b``.

    ``threshold=None`` is the same-page criterion (page equality only); otherwise same page,
    ``IoU >= threshold - IOU_EPS`` and ``IoU > 0`` (so zero-area boxes never match, even at threshold 0)."""
    same_page = np.asarray(pages_a).reshape(-1, 1) == np.asarray(pages_b).reshape(1, -1)
    if threshold is None:
        return same_page
    m = iou_matrix(boxes_a, boxes_b)
    return same_page & (m >= threshold - IOU_EPS) & (m > 0)
