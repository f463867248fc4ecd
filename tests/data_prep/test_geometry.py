"""One rule for a parser's box on its page (core/geometry.py), applied the same way by the MinerU and Docling
converters and by the cache's own check: the same geometric problem in either converter's output gets the same
outcome (refused with the same one-line reason, clipped to the same box, or dropped)."""

from __future__ import annotations

import doctest
import json
import math
from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

import core.geometry
from core.errors import InputError
from core.geometry import page_box
from data_prep.cache import validate_blocks
from data_prep.document import Document
from data_prep.parsers.docling import DoclingParser
from data_prep.parsers.mineru import MinerUParser
from data_prep.types import Block

W, H = 600.0, 800.0
NAN, INF = float("nan"), float("inf")


def test_docstring_examples_run():
    result = doctest.testmod(core.geometry)
    assert result.attempted > 0 and result.failed == 0


@pytest.fixture(scope="module")
def pdf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("geometry") / "page.pdf"
    c = canvas.Canvas(str(path), pagesize=(W, H), invariant=1)
    c.setFont("Helvetica", 12)
    c.drawString(100, 700, "Hello world from page one")
    c.showPage()
    c.save()
    return path


def mineru_json(bbox: list[float]) -> dict:
    """A MinerU 2.x-style middle.json with one text region (points, top-left origin)."""
    span = {"type": "text", "content": "Hello world", "bbox": bbox}
    block = {"type": "text", "bbox": bbox, "index": 0, "lines": [{"bbox": bbox, "spans": [span]}]}
    return {"pdf_info": [{"page_idx": 0, "page_size": [W, H], "para_blocks": [block], "discarded_blocks": []}]}


def docling_json(bbox: list[float]) -> dict:
    """A DoclingDocument with one text item whose prov is the same display box (bottom-left origin)."""
    x0, y0, x1, y1 = bbox
    prov = {"page_no": 1, "bbox": {"l": x0, "t": H - y0, "r": x1, "b": H - y1, "coord_origin": "BOTTOMLEFT"}}
    prov["charspan"] = [0, 11]
    item = {"self_ref": "#/texts/0", "label": "text", "text": "Hello world", "prov": [prov]}
    return {
        "pages": {"1": {"size": {"width": W, "height": H}, "page_no": 1}},
        "body": {"children": [{"$ref": "#/texts/0"}]},
        "texts": [item],
    }


CONVERTERS = {"mineru": (MinerUParser, mineru_json), "docling": (DoclingParser, docling_json)}

CASES = [
    # (name, display bbox, expected: a box after the rule, None = dropped, or a phrase of the one-line error)
    ("inside", [100, 90, 300, 110], (100, 90, 300, 110)),
    ("nan", [100, 90, NAN, 110], "not a finite number"),
    ("inf_right", [100, 90, INF, 110], "not a finite number"),  # never clipped to a made-up full-width box
    ("minus_inf_top", [100, -INF, 300, 110], "not a finite number"),
    ("all_nan", [NAN, NAN, NAN, NAN], "not a finite number"),
    ("negative_far", [-50, 90, 300, 110], "runs off the page"),
    ("past_right_edge", [100, 90, 700, 110], "runs off the page"),
    ("past_bottom_edge", [100, 700, 300, 900], "runs off the page"),
    ("wholly_off_page", [900, 900, 950, 950], "runs off the page"),
    ("small_overshoot_clipped", [-1.5, 90, 603, 110], (0, 90, W, 110)),
    ("swapped_corners", [300, 110, 100, 90], (100, 90, 300, 110)),
    ("no_width_dropped", [100, 90, 100, 110], None),
]


@pytest.mark.parametrize("converter", sorted(CONVERTERS))
@pytest.mark.parametrize("name, bbox, expected", CASES, ids=[c[0] for c in CASES])
def test_both_converters_apply_the_same_rule(pdf, tmp_path, converter, name, bbox, expected):
    parser_cls, make = CONVERTERS[converter]
    out = tmp_path / f"{converter}.json"
    out.write_text(json.dumps(make(bbox)), encoding="utf-8")  # NaN/Infinity as Python's json writes them
    with Document.open(pdf) as doc:
        if isinstance(expected, str):
            with pytest.raises(InputError) as err:
                parser_cls().parse(doc, out)
            msg = str(err.value)
            assert msg.startswith(f"{out}: page 1: ") and expected in msg and "\n" not in msg
            return
        blocks = parser_cls().parse(doc, out)
    if expected is None:
        assert blocks == []
    else:
        assert [b.bbox for b in blocks] == [pytest.approx(expected)]
        assert blocks[0].text == "Hello world"


def test_the_rule_is_the_caches_check_too():
    sizes = [(W, H)]
    ok = validate_blocks([Block(0, 1, (-1.0, 0.0, 601.0, 20.0), "text", "x")], sizes, "parse")
    assert ok[0].bbox == (0.0, 0.0, W, 20.0)
    with pytest.raises(InputError, match=r"parse: page 1: block 0 bbox .* runs off the page"):
        validate_blocks([Block(0, 1, (0.0, 0.0, 700.0, 20.0), "text", "x")], sizes, "parse")


@pytest.mark.parametrize("bbox", [[1, 2, 3], "abcd", [1, 2, "3", 4], [True, 0, 1, 1]])
def test_a_box_that_is_not_four_numbers_is_refused(bbox):
    with pytest.raises(InputError, match="is not 4 numbers"):
        page_box(bbox, 2, (W, H), "out.json")


def test_tolerance_grows_with_the_page():
    # 1% of a 10,000 pt side: 100 pt of overshoot is clipped, 101 is refused.
    assert page_box((0, 0, 10_100, 50), 1, (10_000.0, 10_000.0), "big.json") == (0.0, 0.0, 10_000.0, 50.0)
    with pytest.raises(InputError, match="by 101 pt"):
        page_box((0, 0, 10_101, 50), 1, (10_000.0, 10_000.0), "big.json")
    assert math.isclose(core.geometry.overshoot_tolerance(100.0), core.geometry.BBOX_TOLERANCE)
