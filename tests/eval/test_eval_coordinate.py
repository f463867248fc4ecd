"""The coordinate interface: bbox tags, 0-1000 -> points, snap (eval/coordinate.py)."""

from __future__ import annotations

import pytest

from data_prep.types import Block
from eval.coordinate import parse_coordinate_response, snap, strip_thinking, to_points

TAG_CASES = [
    ('<bbox page="2" x1="100" y1="50" x2="900" y2="120" />', [(2, (100.0, 50.0, 900.0, 120.0))], 0),  # CiteVQA
    ('<bbox page="2" y1="50" x1="100" y2="120" x2="900"/>', [(2, (100.0, 50.0, 900.0, 120.0))], 0),  # any order
    ('<bbox page="3" 120 80 560 240 />', [(3, (120.0, 80.0, 560.0, 240.0))], 0),  # positional numbers
    ("<bbox page=3 x1=1.5 y1=2 x2=3 y2=4>", [(3, (1.5, 2.0, 3.0, 4.0))], 0),  # unquoted, no slash
    ("<bbox page='1' bbox='[10, 20, 30, 40]'/>", [(1, (10.0, 20.0, 30.0, 40.0))], 0),  # one list attribute
    ('<BBOX PAGE="1" X1="1" Y1="2" X2="3" Y2="4"/>', [(1, (1.0, 2.0, 3.0, 4.0))], 0),  # upper case
    ('<bbox page="0" x1="1" y1="2" x2="3" y2="4"/>', [], 1),  # page 0: unreadable, not guessed
    ('<bbox x1="1" y1="2" x2="3" y2="4"/>', [], 1),  # no page
    ('<bbox page="1" 1 2 3 />', [], 1),  # three numbers
    ('<bbox page="1" x1="a" y1="2" x2="3" y2="4"/>', [], 1),  # a word for a number
    ("The evidence is on page 4, in the table of results.", [], 0),  # location in words only
    ('<think><bbox page="9" x1="1" y1="1" x2="2" y2="2"/></think>ok <bbox page="1" 1 2 3 4/>', [(1, (1.0, 2.0, 3.0, 4.0))], 0),
]  # fmt: skip


@pytest.mark.parametrize(("text", "boxes", "unparsed"), TAG_CASES)
def test_bbox_tags_are_read_or_counted(text, boxes, unparsed):
    p = parse_coordinate_response(text)
    assert [(b.page, b.box) for b in p.boxes] == boxes
    assert p.n_unparsed == unparsed


def test_answer_is_the_text_without_tags():
    p = parse_coordinate_response('It is 42.\n<bbox page="1" x1="1" y1="2" x2="3" y2="4" />\n\nDone.')
    assert p.answer == "It is 42.\nDone."


def test_strip_thinking_drops_reasoning():
    assert strip_thinking("<think>a</think>b") == "b"
    assert strip_thinking("reasoning without open tag</think>answer") == "answer"


def test_to_points_scales_by_the_page_size_in_points():
    # x on the width, y on the height: 0-1000 of a 600 x 800 pt page.
    assert to_points((100, 200, 500, 1000), (600.0, 800.0)) == pytest.approx((60.0, 160.0, 300.0, 800.0))


BLOCKS = [
    Block(0, 1, (0.0, 0.0, 100.0, 50.0), "text", "a"),
    Block(1, 1, (0.0, 100.0, 100.0, 200.0), "text", "b"),
    Block(2, 2, (0.0, 0.0, 100.0, 100.0), "text", "c"),
]


def test_snap_picks_the_block_with_the_highest_iou_on_the_stated_page():
    assert snap(1, (0.0, 90.0, 100.0, 210.0), BLOCKS).block_id == 1
    assert snap(1, (0.0, 0.0, 100.0, 60.0), BLOCKS).block_id == 0


def test_snap_falls_back_to_the_nearest_block_when_none_overlaps():
    # Gap to block 0 is 20 pt (y 70 vs 50), to block 1 it is 10 pt (y 90 vs 100).
    assert snap(1, (0.0, 70.0, 100.0, 90.0), BLOCKS).block_id == 1
    assert snap(1, (300.0, 0.0, 400.0, 40.0), BLOCKS).block_id == 0  # same gap to both: nearer centre wins


def test_snap_leaves_a_box_on_a_page_without_blocks_alone():
    assert snap(3, (0.0, 0.0, 10.0, 10.0), BLOCKS) is None
