"""IoU, normalisation and matching (eval/boxes.py): hand-computed cases and hypothesis properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.geometry import iou_matrix
from eval.boxes import (
    box_distance,
    containment,
    containment_matrix,
    iou,
    match_matrix,
    normalize_box,
)

IOU_CASES = [
    ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),  # identical
    ((0, 0, 10, 10), (0, 0, 10, 5), 0.5),  # half of a box: exactly the main threshold
    ((0, 0, 10, 10), (5, 0, 15, 10), 50 / 150),  # half overlap side by side: 50 / (100 + 100 - 50)
    ((0, 0, 10, 10), (10, 0, 20, 10), 0.0),  # touching edges share no area
    ((0, 0, 10, 10), (20, 20, 30, 30), 0.0),  # disjoint
    ((0, 0, 10, 10), (2, 2, 8, 8), 36 / 100),  # one inside the other: inner / outer
    ((0, 0, 10, 10), (5, 5, 5, 9), 0.0),  # zero-width box never overlaps
    ((0, 0, 0, 0), (0, 0, 0, 0), 0.0),  # two identical points: zero area, not a match
    ((10, 10, 0, 0), (0, 0, 10, 10), 1.0),  # reversed box is normalised before IoU
]


@pytest.mark.parametrize(("a", "b", "expected"), IOU_CASES)
def test_iou_hand_computed(a, b, expected):
    assert iou(a, b) == pytest.approx(expected, abs=1e-12)
    assert iou_matrix(np.array([normalize_box(a)[0]]), np.array([normalize_box(b)[0]]))[0, 0] == pytest.approx(
        expected, abs=1e-12
    )


NORMALIZE_CASES = [
    ([0, 0, 10, 10], ((0.0, 0.0, 10.0, 10.0), False)),  # well formed
    ([10, 0, 0, 10], ((0.0, 0.0, 10.0, 10.0), True)),  # x reversed
    ([0, 10, 10, 0], ((0.0, 0.0, 10.0, 10.0), True)),  # y reversed
    ([5, 5, 5, 5], ((5.0, 5.0, 5.0, 5.0), False)),  # a point is degenerate but not reversed
]


@pytest.mark.parametrize(("box", "expected"), NORMALIZE_CASES)
def test_normalize_box_sorts_axes_and_flags_reversed_boxes(box, expected):
    assert normalize_box(box) == expected


def test_normalize_box_rejects_wrong_length_and_non_finite_values():
    with pytest.raises(ValueError, match="4 numbers"):
        normalize_box([1, 2, 3])
    with pytest.raises(ValueError, match="finite"):
        normalize_box([0, 0, float("nan"), 1])


def test_match_at_exactly_the_threshold_counts_and_just_below_does_not():
    pages = np.array([1])
    gold = np.array([[0.0, 0.0, 10.0, 10.0]])
    exactly_half = np.array([[0.0, 0.0, 10.0, 5.0]])  # IoU 0.5
    just_below = np.array([[0.0, 0.0, 10.0, 4.999]])  # IoU 0.4999
    assert match_matrix(pages, gold, pages, exactly_half, 0.5)[0, 0]
    assert not match_matrix(pages, gold, pages, just_below, 0.5)[0, 0]


def test_threshold_point_three_matches_an_iou_that_float_rounding_puts_below_it():
    # On paper the IoU is 0.003 / 0.01 = 0.3; in floats it comes out as 0.29999999999999993. The tolerance
    # makes it match at 0.3, as the rule says.
    gold = np.array([[0.0, 0.0, 0.1, 0.1]])
    cited = np.array([[0.0, 0.0, 0.1, 0.03]])
    assert iou(gold[0], cited[0]) < 0.3
    assert match_matrix(np.array([1]), gold, np.array([1]), cited, 0.3)[0, 0]


def test_right_box_on_the_wrong_page_never_matches():
    box = np.array([[0.0, 0.0, 10.0, 10.0]])
    assert not match_matrix(np.array([1]), box, np.array([2]), box, 0.1)[0, 0]
    assert not match_matrix(np.array([1]), box, np.array([2]), box, None)[0, 0]


def test_same_page_criterion_ignores_geometry():
    assert match_matrix(np.array([3]), np.array([[0, 0, 1, 1]]), np.array([3]), np.array([[50, 50, 60, 60]]), None)[
        0, 0
    ]


def test_zero_area_box_never_matches_even_at_threshold_zero():
    gold = np.array([[0.0, 0.0, 10.0, 10.0]])
    line = np.array([[0.0, 5.0, 10.0, 5.0]])
    assert not match_matrix(np.array([1]), gold, np.array([1]), line, 0.0)[0, 0]


def test_containment_and_distance():
    assert containment((2, 2, 4, 4), (0, 0, 10, 10)) == 1.0
    assert containment((8, 8, 12, 12), (0, 0, 10, 10)) == pytest.approx(4 / 16)
    assert containment((1, 1, 1, 5), (0, 0, 10, 10)) == 0.0  # zero-area inner
    assert box_distance((0, 0, 1, 1), (4, 5, 6, 6)) == pytest.approx(5.0)  # gaps 3 and 4
    assert box_distance((0, 0, 5, 5), (4, 4, 9, 9)) == 0.0


# ---------------------------------------------------------------------------------------------- properties
coord = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)
box = st.tuples(coord, coord, coord, coord)


def positive_box():
    return st.tuples(coord, coord, st.floats(0.5, 1e3), st.floats(0.5, 1e3)).map(
        lambda t: (t[0], t[1], t[0] + t[2], t[1] + t[3])
    )


@settings(max_examples=200, deadline=None)
@given(box, box)
def test_iou_is_symmetric_and_bounded(a, b):
    v = iou(a, b)
    assert 0.0 <= v <= 1.0 + 1e-12
    assert v == pytest.approx(iou(b, a), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(positive_box())
def test_iou_of_a_box_with_itself_is_one(a):
    assert iou(a, a) == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(positive_box(), positive_box(), st.floats(0.01, 100.0))
def test_iou_is_scale_invariant(a, b, s):
    scaled = iou(tuple(v * s for v in a), tuple(v * s for v in b))
    assert scaled == pytest.approx(iou(a, b), abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(box, coord, coord, st.booleans())
def test_zero_area_never_matches(b, x, y, vertical):
    degenerate = (x, y, x, y + 5) if vertical else (x, y, x + 5, y)
    assert iou(degenerate, b) == 0.0
    assert not match_matrix(np.array([1]), np.array([normalize_box(b)[0]]), np.array([1]),
                            np.array([normalize_box(degenerate)[0]]), 0.0)[0, 0]  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(st.lists(positive_box(), min_size=1, max_size=5), st.lists(positive_box(), min_size=1, max_size=5))
def test_vectorised_iou_equals_the_scalar_one(a, b):
    m = iou_matrix(np.array(a), np.array(b))
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            assert m[i, j] == pytest.approx(iou(x, y), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(st.lists(box, min_size=0, max_size=5), st.lists(box, min_size=0, max_size=5))
def test_vectorised_containment_equals_the_scalar_one(a, b):
    inner = [normalize_box(x)[0] for x in a]
    outer = [normalize_box(y)[0] for y in b]
    m = containment_matrix(np.array(inner), np.array(outer))
    assert m.shape == (len(a), len(b))
    for i, x in enumerate(inner):
        for j, y in enumerate(outer):
            assert m[i, j] == pytest.approx(containment(x, y), abs=1e-9)
