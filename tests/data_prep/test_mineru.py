"""MinerU parser: conversion of every MinerU output schema (real fixtures and generated 4.x files), validation
against the PDF, and the subprocess contract of running ``mineru-kit`` (checked with stand-in scripts; the real
MinerU runs in tests/data_prep/test_mineru_run.py)."""

from __future__ import annotations

import json
import os
import re
import stat
import textwrap
from pathlib import Path

import numpy as np
import pytest
from reportlab.pdfbase.pdfmetrics import stringWidth
from reportlab.pdfgen import canvas

from core.errors import InputError
from data_prep.document import Document
from data_prep.parsers import PARSERS
from data_prep.parsers.mineru import MinerUParser, detect_schema
from data_prep.parsers.mineru_text import html_table_text, latex_plain
from data_prep.text import token_f1, token_recall
from data_prep.types import BLOCK_TYPES
from tests.conftest import fixture_path

MINERU = "opendatalab_MinerU"
V276 = "pr4637_v2.7.6_pipeline_329770bd"
V010 = "demo1_v0.10.0_b1adde8e"
# (pdf, MinerU output) pairs of the real fixtures, relative to ../shared/fixtures/opendatalab_MinerU.
MIDDLE_FIXTURES = {
    "aaai_v2.7.6": (f"{V276}/aaai26_paper/aaai.pdf", f"{V276}/aaai26_paper/aaai_middle.json"),
    "svolt_v2.7.6": (f"{V276}/svolt_datasheet_zh_en/svolt.pdf", f"{V276}/svolt_datasheet_zh_en/svolt_middle.json"),
    "demo1_v0.10": (f"{V010}/demo1.pdf", f"{V010}/demo1_middle.json"),
}
CONTENT_LIST_FIXTURES = {
    "aaai_v2.7.6": (f"{V276}/aaai26_paper/aaai.pdf", f"{V276}/aaai26_paper/aaai_content_list.json"),
    "svolt_v2.7.6": (
        f"{V276}/svolt_datasheet_zh_en/svolt.pdf",
        f"{V276}/svolt_datasheet_zh_en/svolt_content_list.json",
    ),
}
# Block types whose text MinerU takes from the PDF's own text layer (so it must agree with it inside the bbox).
TEXT_TYPES = {"text", "title", "list", "figure_caption", "table_caption", "table_footnote"}


def clean_layer(text: str) -> str:
    """pdfium marks a soft hyphen at a line end with U+0002; rejoin the word as MinerU does."""
    return text.replace("\x02\r\n", "").replace("\x02", "")


def layer_f1(doc: Document, block) -> float:
    return token_f1(block.text, clean_layer(doc.text_in_bbox(block.page, block.bbox)))


@pytest.fixture(scope="module")
def parser() -> MinerUParser:
    return MinerUParser()


@pytest.fixture(scope="module")
def converted(parser):
    """name -> (Document, blocks, raw JSON) for every real middle.json fixture, converted once per module."""
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            pdf, out = MIDDLE_FIXTURES[name]
            pdf_path, out_path = fixture_path(MINERU, pdf), fixture_path(MINERU, out)
            doc = Document.open(pdf_path)
            cache[name] = (doc, parser.parse(doc, out_path), json.loads(out_path.read_text(encoding="utf-8")))
        return cache[name]

    yield get
    for doc, _, _ in cache.values():
        doc.close()


# ---------------------------------------------------------------------------------------------- real fixtures
@pytest.mark.parametrize(
    "name, figures, tables, equations",
    [
        ("aaai_v2.7.6", 4, 3, 12),  # the fixture README: 4 figures, 3 tables, 12 equations
        ("svolt_v2.7.6", 1, 17, 0),  # 17 table bodies, 5 of them continuations merged into the previous page's
        ("demo1_v0.10", 5, 5, 7),  # 0.10 format: float page sizes, merged paragraphs
    ],
)
def test_every_middle_json_fixture_converts_with_boxes_inside_their_pages(converted, name, figures, tables, equations):
    doc, blocks, _ = converted(name)
    assert [b.block_id for b in blocks] == list(range(len(blocks)))
    assert {b.type for b in blocks} <= set(BLOCK_TYPES)
    for b in blocks:
        w, h = doc.page_sizes[b.page - 1]
        assert 1 <= b.page <= doc.n_pages
        assert 0 <= b.bbox[0] < b.bbox[2] <= w and 0 <= b.bbox[1] < b.bbox[3] <= h, b
    counts = {t: sum(b.type == t for b in blocks) for t in ("figure", "table", "equation")}
    assert counts == {"figure": figures, "table": tables, "equation": equations}
    # Reading order: pages never go backwards.
    assert [b.page for b in blocks] == sorted(b.page for b in blocks)


@pytest.mark.parametrize("name", ["aaai_v2.7.6", "svolt_v2.7.6", "demo1_v0.10"])
def test_text_blocks_match_the_pdf_text_layer_inside_their_bbox(converted, name):
    """Proves the coordinate conversion: the PDF's own text inside each converted bbox is the block's text."""
    doc, blocks, _ = converted(name)
    scored = [layer_f1(doc, b) for b in blocks if b.type in TEXT_TYPES and b.text]
    share = sum(f >= 0.8 for f in scored) / len(scored)
    print(f"{name}: {share:.1%} of {len(scored)} text blocks have token F1 >= 0.8 with the text layer")
    assert len(scored) >= 25
    assert share >= 0.9


def test_aaai_text_blocks_meet_the_issue_threshold_exactly_as_specified(converted):
    doc, blocks, _ = converted("aaai_v2.7.6")
    text_blocks = [b for b in blocks if b.type == "text"]
    good = [b for b in text_blocks if token_f1(b.text, doc.text_in_bbox(b.page, b.bbox)) >= 0.8]
    assert len(text_blocks) == 72
    assert len(good) / len(text_blocks) >= 0.9


def _merged_pairs(data: dict) -> list[tuple[int, list[float], int, list[float], list[dict]]]:
    """(survivor page, survivor bbox, orphan page, orphan bbox, survivor lines) for each merged-away text block of
    a raw middle.json (pages 1-based, bboxes in points)."""
    seq = [(p["page_idx"] + 1, b) for p in data["pdf_info"] for b in p["para_blocks"]]
    pairs = []
    for i, (page, b) in enumerate(seq):
        if b.get("lines_deleted") and not b.get("lines") and b["type"] in ("text", "list"):
            j = i - 1
            while not (seq[j][1].get("lines") and seq[j][1]["type"] == b["type"]):
                j -= 1
            pairs.append((seq[j][0], seq[j][1]["bbox"], page, b["bbox"], seq[j][1]["lines"]))
    return pairs


def _block_at(blocks, page: int, bbox: list[float]):
    hits = [b for b in blocks if b.page == page and np.allclose(b.bbox, bbox, atol=0.01)]
    assert len(hits) == 1, (page, bbox)
    return hits[0]


@pytest.mark.parametrize(
    "name, n_merged, n_trap",
    [
        ("demo1_v0.10", 16, 14),  # 16 merged-away parts; for 14 the merged text disagrees with the kept bbox
        ("aaai_v2.7.6", 6, 3),  # 2.x merges the same way
    ],
)
def test_merged_paragraph_parts_become_separate_regions_with_their_own_text(converted, name, n_merged, n_trap):
    """The merge trap: MinerU gives the first part every line but only its own bbox. Each part must come back as
    its own region whose text is what the PDF shows inside that region."""
    doc, blocks, data = converted(name)
    pairs = _merged_pairs(data)
    assert len(pairs) == n_merged
    trap_shown = 0
    for s_page, s_bbox, o_page, o_bbox, lines in pairs:
        survivor, orphan = _block_at(blocks, s_page, s_bbox), _block_at(blocks, o_page, o_bbox)
        assert survivor.block_id != orphan.block_id
        assert layer_f1(doc, survivor) >= 0.8, survivor
        assert layer_f1(doc, orphan) >= 0.8, orphan
        # Control: the survivor's merged text (every line) does not match what its bbox shows.
        merged = " ".join(s.get("content", "") for ln in lines for s in ln["spans"])
        trap_shown += token_f1(merged, clean_layer(doc.text_in_bbox(s_page, survivor.bbox))) < 0.8
    assert trap_shown == n_trap


@pytest.mark.parametrize("name, n_groups", [("demo1_v0.10", 13), ("aaai_v2.7.6", 6)])
def test_merged_paragraph_words_are_all_kept_and_really_split_over_the_parts(converted, name, n_groups):
    """Complements the test above (each part's text is what its own bbox shows): no line of the merged paragraph
    is lost when it is split back, and no part keeps the whole paragraph. Words come from MinerU's own text spans
    (line-end hyphens rejoined), an independent source from the text layer."""
    doc, blocks, data = converted(name)
    groups: dict[tuple, list] = {}
    lines_of: dict[tuple, list] = {}
    for s_page, s_bbox, o_page, o_bbox, lines in _merged_pairs(data):
        key = (s_page, tuple(s_bbox))
        groups.setdefault(key, [_block_at(blocks, s_page, s_bbox)]).append(_block_at(blocks, o_page, o_bbox))
        lines_of[key] = lines
    assert len(groups) == n_groups
    for key, parts in groups.items():
        words = "".join(
            " ".join(s["content"] for s in ln["spans"] if s["type"] == "text").strip() + "\n" for ln in lines_of[key]
        )
        words = re.sub(r"-\n", "", words)
        assert token_recall(words, " ".join(p.text for p in parts)) >= 0.98, key
        assert max(token_recall(words, p.text) for p in parts) <= 0.92, key


def test_cross_page_merge_puts_the_continuation_on_the_next_page(converted):
    doc, blocks, _ = converted("demo1_v0.10")
    # A paragraph at the foot of page 2's right column continues at the top of page 3's left column; MinerU 0.10
    # merged both into the page-2 block (bbox [285, 461, 502, 665]) and left [42, 90, 257, 209] on page 3 empty.
    first, cont = _block_at(blocks, 2, [285, 461, 502, 665]), _block_at(blocks, 3, [42, 90, 257, 209])
    assert cont.type == first.type == "text"
    assert cont.text.startswith("were to (1) ﬁt a model to the observed annual time series of FDC percentiles")
    assert "were to (1)" not in first.text
    assert layer_f1(doc, cont) >= 0.95 and layer_f1(doc, first) >= 0.95


def test_nested_figure_and_table_children_are_separate_blocks_pointing_at_their_body(converted):
    doc, blocks, data = converted("aaai_v2.7.6")
    by_id = {b.block_id: b for b in blocks}
    captions = [b for b in blocks if b.type in ("figure_caption", "table_caption", "table_footnote")]
    assert len(captions) == 8  # 5 figure captions (figure 2 has two) + 3 table captions
    for c in captions:
        parent = by_id[c.parent]
        assert parent.type == ("figure" if c.type == "figure_caption" else "table")
        assert parent.page == c.page
        assert parent.bbox != c.bbox
    fig1 = next(b for b in blocks if b.text == "Figure 1: An overview of the proposed KEHGCN method.")
    assert fig1.type == "figure_caption" and fig1.page == 3
    assert by_id[fig1.parent].bbox == (52.0, 51.0, 558.0, 272.0)  # the image_body's own bbox in the JSON
    tab1 = next(b for b in blocks if b.text == "Table 1: Characteristics of Datasets")
    body = by_id[tab1.parent]
    assert body.type == "table" and body.page == 5
    assert [b.parent for b in blocks if b.type in ("figure", "table", "text", "title")] == [None] * sum(
        b.type in ("figure", "table", "text", "title") for b in blocks
    )


def test_table_text_is_its_cells_joined_row_by_row(converted):
    doc, blocks, _ = converted("aaai_v2.7.6")
    table1 = next(b for b in blocks if b.type == "table" and b.page == 5 and b.bbox[0] == 318.0)
    rows = table1.text.split("\n")
    assert rows[0] == "Attribute | MIMIC-III MIMIC-IV MED | GU | MIMIC-IV OMED"
    assert rows[1].startswith("# patients # diagnoses | 17,778 5,205 | 4,251 3,617 | 8,709 9,192")


def test_table_continued_across_pages_keeps_each_part_with_the_text_its_crop_shows(converted):
    doc, blocks, data = converted("svolt_v2.7.6")
    deleted_bodies = [
        (p["page_idx"] + 1, c["bbox"])
        for p in data["pdf_info"]
        for b in p["para_blocks"]
        for c in b.get("blocks", [])
        if c["type"] == "table_body" and c.get("lines_deleted")
    ]
    assert len(deleted_bodies) == 5
    for page, bbox in deleted_bodies:
        part = _block_at(blocks, page, bbox)
        assert part.type == "table"
        assert part.text  # from the text layer: MinerU moved this part's HTML into the previous page's table
        assert layer_f1(doc, part) >= 0.9


def test_discarded_blocks_become_headers_and_footers_by_position(converted):
    doc, blocks, _ = converted("svolt_v2.7.6")
    footers = [b for b in blocks if b.type == "footer"]
    assert len(footers) == 22  # one page-number line at the foot of every page
    assert all(b.bbox[1] > 0.8 * doc.page_sizes[b.page - 1][1] for b in footers)
    assert footers[0].text == "第Ⅰ页 共Ⅱ页"


def test_legacy_discarded_blocks_without_text_get_the_text_layer(converted):
    doc, blocks, _ = converted("demo1_v0.10")
    headers = [b for b in blocks if b.type == "header"]
    assert len(headers) == 28
    assert (
        sum(bool(b.text) for b in headers) == 26
    )  # 0.10 left them empty; the text layer fills all but 2 page-1 images
    assert "Journal of Hydrology 310 (2005) 253–265" in [b.text for b in headers]


def test_inline_formulas_are_plain_text_by_default_and_latex_on_request(converted):
    pdf, out = MIDDLE_FIXTURES["aaai_v2.7.6"]
    doc, blocks, _ = converted("aaai_v2.7.6")
    authors = next(b for b in blocks if b.text.startswith("Zihan Zhang"))
    assert authors.text.startswith("Zihan Zhang1, Hongzhi Liu1*, Xiaoshuang Guo1")
    latex = MinerUParser(math_text="latex").parse(doc, fixture_path(MINERU, out))
    assert latex[authors.block_id].text.startswith(r"Zihan Zhang1, Hongzhi $\mathbf { L i u } ^ { 1 * }$")


@pytest.mark.parametrize("name", ["aaai_v2.7.6", "svolt_v2.7.6"])
def test_content_list_fixture_converts_with_boxes_inside_pages(parser, name):
    pdf, out = CONTENT_LIST_FIXTURES[name]
    with Document.open(fixture_path(MINERU, pdf)) as doc:
        blocks = parser.parse(doc, fixture_path(MINERU, out))
        raw = json.loads(fixture_path(MINERU, out).read_text(encoding="utf-8"))
        assert len(blocks) == len(raw)
        for b in blocks:
            w, h = doc.page_sizes[b.page - 1]
            assert 0 <= b.bbox[0] < b.bbox[2] <= w and 0 <= b.bbox[1] < b.bbox[3] <= h
        scored = [layer_f1(doc, b) for b in blocks if b.type in ("text", "title")]
        assert sum(f >= 0.8 for f in scored) / len(scored) >= 0.9


def test_content_list_of_mineru_0_10_has_no_boxes_and_is_rejected(parser):
    with Document.open(fixture_path(MINERU, V010, "demo1.pdf")) as doc:
        with pytest.raises(InputError, match=r"demo1_content_list\.json: .*no boxes"):
            parser.parse(doc, fixture_path(MINERU, V010, "demo1_content_list.json"))


# ---------------------------------------------------------------------------------------------- wrong inputs
def test_middle_json_of_another_pdf_is_rejected_by_page_count(parser):
    _, out = MIDDLE_FIXTURES["aaai_v2.7.6"]
    with Document.open(fixture_path(MINERU, V010, "demo1.pdf")) as doc:
        with pytest.raises(InputError, match=r"aaai_middle\.json: has 9 pages but .*demo1\.pdf has 13.*another PDF"):
            parser.parse(doc, fixture_path(MINERU, out))


def test_middle_json_of_another_pdf_is_rejected_by_page_size(parser, tmp_path):
    """Same page count (9), A4 instead of US Letter: only the page size tells them apart."""
    pdf = write_pdf(tmp_path / "a4_nine.pdf", [Page(595.276, 841.89, [])] * 9)
    _, out = MIDDLE_FIXTURES["aaai_v2.7.6"]
    with Document.open(pdf) as doc:
        with pytest.raises(InputError, match=r"aaai_middle\.json: page 1 is 612x792 pt but .* 595\.276x841\.89 pt"):
            parser.parse(doc, fixture_path(MINERU, out))


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"foo": 1}', "unknown schema"),  # some other JSON object
        ("[1, 2, 3]", "unknown schema"),  # a JSON list that is not a content_list
        ("[]", "unknown schema"),  # empty list
        (
            '{"schema": "docvortex.model", "schema_version": "2.0", "pages": []}',
            "a docvortex.model 2.0 file; expected docvortex.middle 2.0",
        ),
        (
            '{"schema": "docvortex.middle", "schema_version": "1.0", "pages": []}',
            "a docvortex.middle 1.0 file",
        ),  # an older schema
        ('[{"layout_dets": [], "page_info": {"page_no": 0}}]', "model.json"),  # raw layout-model output
        ("{not json", "not a JSON file"),  # broken file
        ('{"pdf_info": [{"page_size": [612, 792]}]}', "pdf_info is not a list of pages with page_idx"),
        (
            '{"pdf_info": [{"page_idx": 0, "page_size": [612, 792], "para_blocks": [{"type": "text", "bbox": "x"}]}]}',
            "malformed MinerU legacy_middle file (ValueError",
        ),  # a bbox that is not numbers: a one-line error, not a traceback
    ],
)
def test_unknown_or_broken_output_files_are_rejected_naming_the_file(parser, tmp_path, content, message):
    pdf = write_pdf(tmp_path / "one.pdf", [Page(612, 792, [])])
    out = tmp_path / "weird_output.json"
    out.write_text(content, encoding="utf-8")
    with Document.open(pdf) as doc:
        with pytest.raises(InputError, match=r"weird_output\.json: ") as e:
            parser.parse(doc, out)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_missing_output_file_is_rejected(parser, tmp_path):
    pdf = write_pdf(tmp_path / "one.pdf", [Page(612, 792, [])])
    with Document.open(pdf) as doc, pytest.raises(InputError, match=r"nope\.json: MinerU output file not found"):
        parser.parse(doc, tmp_path / "nope.json")


# ---------------------------------------------------------------------------------------------- generated 4.x
class Page:
    """A page to draw: display size in points, /Rotate, and text items ``(text, x, top, size)`` in display
    points (top-left origin; ``top`` is the top of the text line)."""

    def __init__(self, width: float, height: float, items: list[tuple[str, float, float, float]], rotate: int = 0):
        self.width, self.height, self.items, self.rotate = width, height, items, rotate


def write_pdf(path: Path, pages: list[Page]) -> Path:
    """Draw ``pages`` with reportlab so that each item appears upright at its display position."""
    c = canvas.Canvas(str(path), invariant=1)
    for p in pages:
        c.setPageSize((p.width, p.height))  # reportlab swaps it into the MediaBox for a rotated page
        c.setPageRotation(p.rotate)
        c.saveState()
        if p.rotate == 90:  # display (x, y-up) -> unrotated user space: translate(H, 0) then rotate(90)
            c.translate(p.height, 0)
            c.rotate(90)
        for text, x, top, size in p.items:
            c.setFont("Helvetica", size)
            c.drawString(x, p.height - top - 0.8 * size, text)
        c.restoreState()
        c.showPage()
    c.save()
    return path


def item_box(item: tuple[str, float, float, float]) -> tuple[float, float, float, float]:
    text, x, top, size = item
    return (x, top, x + stringWidth(text, "Helvetica", size), top + size)


def norm(box, w: float, h: float) -> list[float]:
    """A display bbox in points -> MinerU 4.x's 0-1 bbox, rounded to 3 decimals as MinerU writes it."""
    return [round(box[0] / w, 3), round(box[1] / h, 3), round(box[2] / w, 3), round(box[3] / h, 3)]


TITLE = ("Orchard Yields Report", 72, 60, 18)
PARA = ("Apple orchards produced record yields this season.", 72, 100, 11)
CAPTION = ("Table 1. Revenue by region.", 72, 140, 10)
CELLS = [("Region", 72, 160, 10), ("Revenue", 200, 160, 10), ("North", 72, 176, 10), ("1200", 200, 176, 10)]
HEADER = ("Annual report 2024", 72, 20, 8)
PAGENO = ("7", 300, 810, 8)
ROT_PARA = ("Pears ripened two weeks early in the southern groves.", 300, 420, 11)


@pytest.fixture(scope="module")
def v4_case(tmp_path_factory):
    """A generated 2-page PDF (page 2 carries /Rotate 90, displayed landscape) and a docvortex.middle 2.0 file
    for it with the structure mineru-kit 4.0.12 writes (see tests/data_prep/test_mineru_run.py for the real thing)."""
    tmp = tmp_path_factory.mktemp("v4")
    a4 = (595.276, 841.89)
    pdf = write_pdf(
        tmp / "doc.pdf",
        [
            Page(*a4, [TITLE, PARA, CAPTION, *CELLS, HEADER, PAGENO]),
            Page(a4[1], a4[0], [ROT_PARA], rotate=90),
        ],
    )
    w, h = a4
    table_box = (72, 160, 240, 186)
    blocks = [
        {"type": "header", "index": 0, "bbox": norm(item_box(HEADER), w, h),
         "content": [{"type": "text", "content": HEADER[0]}]},
        {"type": "doc_title", "index": 1, "bbox": norm(item_box(TITLE), w, h), "level": 1,
         "content": [{"type": "text", "content": "Orchard ", "styles": ["bold"]},
                     {"type": "text", "content": "Yields Report"}]},
        {"type": "text", "index": 2, "bbox": norm(item_box(PARA), w, h), "content": [
            {"type": "text", "content": "Apple orchards produced "},
            {"type": "hyperlink", "url": "https://example.org", "content": [{"type": "text", "content": "record"}]},
            {"type": "text", "content": " yields this"},
            {"type": "equation_inline", "content": "\\mathrm { s e a s o n }"},
            {"type": "text", "content": "."},
        ]},
        {"type": "table", "index": 4, "bbox": norm(table_box, w, h), "content": [
            {"type": "table_caption", "index": 3, "bbox": norm(item_box(CAPTION), w, h),
             "content": [{"type": "text", "content": CAPTION[0]}]},
            {"type": "table_body", "index": 4, "bbox": norm(table_box, w, h),
             "content": "<table><tbody><tr><td>Region</td><td>Revenue</td></tr>"
                        "<tr><td>North</td><td>1200</td></tr></tbody></table>"},
        ]},
        {"type": "page_number", "index": 5, "bbox": norm(item_box(PAGENO), w, h),
         "content": [{"type": "text", "content": "7"}]},
    ]  # fmt: skip
    rw, rh = a4[1], a4[0]
    rot_blocks = [
        {"type": "text", "index": 0, "bbox": norm(item_box(ROT_PARA), rw, rh),
         "content": [{"type": "text", "content": ROT_PARA[0]}]},
        {"type": "equation", "index": 1, "bbox": norm((300, 460, 420, 480), rw, rh), "content": ""},
        {"type": "list", "index": 2, "bbox": norm((72, 500, 300, 540), rw, rh), "content": [
            {"type": "text", "index": 0, "content": [{"type": "text", "content": "first item"}]},
            {"type": "text", "index": 1, "content": [{"type": "text", "content": "second item"}]},
        ]},
    ]  # fmt: skip
    middle = {
        "metadata": {
            "file_suffix": "pdf",
            "producer": {"name": "mineru", "version": "4.0.12"},
            "document": {"page_count": 2, "page_count_kind": "physical"},
        },
        "extensions": {
            "mineru": {"tier": "flash", "parse_mode": "txt"},
            "docvortex_layout": {
                "version": 1,
                "pages": [
                    {"page_idx": 0, "width_pt": w, "height_pt": h},
                    {"page_idx": 1, "width_pt": rw, "height_pt": rh},
                ],
            },
        },
        "pages": [{"page_idx": 0, "blocks": blocks}, {"page_idx": 1, "blocks": rot_blocks}],
        "is_full_document": True,
        "schema": "docvortex.middle",
        "schema_version": "2.0",
    }
    out = tmp / "doc.json"
    out.write_text(json.dumps(middle), encoding="utf-8")
    return pdf, out, middle


def test_docvortex_middle_boxes_are_scaled_to_display_points_of_each_page(parser, v4_case):
    pdf, out, middle = v4_case
    with Document.open(pdf) as doc:
        assert doc.page_rotation(2) == 90 and doc.page_sizes[1] == pytest.approx((841.89, 595.276), abs=0.01)
        blocks = parser.parse(doc, out)
        texts = [(b.page, b.type, b.text) for b in blocks]
        assert texts == [
            (1, "header", "Annual report 2024"),
            (1, "title", "Orchard Yields Report"),
            (1, "text", "Apple orchards produced record yields this season."),
            (1, "table_caption", "Table 1. Revenue by region."),
            (1, "table", "Region | Revenue\nNorth | 1200"),
            (1, "footer", "7"),  # page_number at the foot of the page
            (2, "text", "Pears ripened two weeks early in the southern groves."),
            (2, "equation", ""),  # flash leaves equations empty; nothing is drawn there to fill it from
            (2, "list", "first item\nsecond item"),
        ]
        for b, src in zip(blocks[:1], middle["pages"][0]["blocks"][:1], strict=True):
            assert b.bbox == pytest.approx([v * s for v, s in zip(src["bbox"], (595.276, 841.89) * 2, strict=True)])
        rot = blocks[6]
        x0, y0, x1, y1 = norm(item_box(ROT_PARA), 841.89, 595.276)
        assert rot.bbox == pytest.approx((x0 * 841.89, y0 * 595.276, x1 * 841.89, y1 * 595.276))
        # The PDF's own text inside each converted box is the block's text, on the rotated page too.
        for b in blocks:
            if b.type in ("title", "text", "table_caption", "header", "footer") and b.page in (1, 2):
                assert layer_f1(doc, b) >= 0.9, b


def test_docvortex_table_children_are_separate_blocks_with_the_body_as_parent(parser, v4_case):
    pdf, out, _ = v4_case
    with Document.open(pdf) as doc:
        blocks = parser.parse(doc, out)
    caption, body = blocks[3], blocks[4]
    assert (caption.type, caption.parent) == ("table_caption", body.block_id)
    assert (body.type, body.parent) == ("table", None)
    assert caption.bbox != body.bbox


def test_docvortex_equation_without_content_is_filled_from_the_text_layer(tmp_path, parser):
    eq = ("E = mc2", 100, 100, 12)
    pdf = write_pdf(tmp_path / "eq.pdf", [Page(612, 792, [eq])])
    middle = {
        "metadata": {"file_suffix": "pdf", "producer": {"name": "mineru", "version": "4.0.12"}},
        "pages": [{"page_idx": 0, "blocks": [
            {"type": "equation", "index": 0, "bbox": norm(item_box(eq), 612, 792), "content": ""},
        ]}],
        "is_full_document": True,
        "schema": "docvortex.middle",
        "schema_version": "2.0",
    }  # fmt: skip
    out = tmp_path / "eq.json"
    out.write_text(json.dumps(middle), encoding="utf-8")
    with Document.open(pdf) as doc:
        assert [b.text for b in parser.parse(doc, out)] == ["E = mc2"]
        assert [b.text for b in MinerUParser(fill_from_text_layer=False).parse(doc, out)] == [""]


@pytest.mark.parametrize(
    "patch, message",
    [
        ({"metadata": {"document": {"page_count": 3}}}, "has 3 pages but"),  # declared page count differs
        ({"extensions": {"docvortex_layout": {"pages": [{"page_idx": 0, "width_pt": 612.0, "height_pt": 792.0}]}}},
         "page 1 is 612x792 pt"),  # US Letter output for an A4 PDF
        ({"pages": [{"page_idx": 5, "blocks": []}]}, "page_idx 5 out of range"),  # a page the PDF lacks
        ({"pages": [{"page_idx": 0, "blocks": [
            {"type": "text", "index": 0, "bbox": [10, 20, 300, 400], "content": "x"},
        ]}]},
         "not normalised to 0-1"),  # point boxes in a 4.x file
    ],
)  # fmt: skip
def test_docvortex_file_of_another_pdf_is_rejected(parser, v4_case, tmp_path, patch, message):
    pdf, _, middle = v4_case
    bad = json.loads(json.dumps(middle))
    for key, value in patch.items():
        if key == "metadata":
            bad["metadata"]["document"].update(value["document"])
        elif key == "extensions":
            bad["extensions"]["docvortex_layout"] = value["docvortex_layout"]
        else:
            bad[key] = value
    out = tmp_path / "other.json"
    out.write_text(json.dumps(bad), encoding="utf-8")
    with Document.open(pdf) as doc, pytest.raises(InputError, match=r"other\.json: ") as e:
        parser.parse(doc, out)
    assert message in str(e.value)


# ---------------------------------------------------------------------------------------------- small helpers
@pytest.mark.parametrize(
    "html, text",
    [
        ("<table><tr><td>a</td><td>b</td></tr><tr><td>1</td><td>2</td></tr></table>", "a | b\n1 | 2"),
        ("<table><thead><tr><th>h1</th><th>h2</th></tr></thead><tbody><tr><td colspan='2'>x</td></tr></tbody></table>",
         "h1 | h2\nx"),  # header cells, a spanning cell
        ("<table><tr><td>line<br>break</td><td> padded  text </td></tr></table>", "line break | padded text"),
        ("<table><tr><td>A&amp;B</td><td></td></tr><tr></tr></table>", "A&B | "),  # entities, empty cell, empty row
        ("<p>not a table</p>", "not a table"),  # MinerU sometimes emits non-table markup
    ],
)  # fmt: skip
def test_html_table_text(html, text):
    assert html_table_text(html) == text


@pytest.mark.parametrize(
    "latex, plain",
    [
        (r"\mathbf { L i u } ^ { 1 * }", "Liu1*"),  # MinerU spaces out every letter
        (r"2 5 { \pm } 3 ~ ^ { \circ } \mathrm { C }", "25±3°C"),  # symbols become Unicode
        (r"G _ { u } ~ = ~ ( E , R )", "Gu=(E,R)"),
        (r"\alpha + \Omega \leq \sigma", "α+Ω≤σ"),  # Greek letters (omicron has no command, sigma is not final)
        (r"\begin{array} { r } { a = b } \\ { c } \end{array}", "a=b c"),  # array environments and line breaks
        (r"\log ( \hat { y } )", "log (y)"),  # function names stay, accents go
        (r"50 \% \mathrm { S O C }", "50%SOC"),  # escaped percent
    ],
)
def test_latex_plain(latex, plain):
    assert latex_plain(latex) == plain


@pytest.mark.parametrize(
    "data, schema",
    [
        ({"pdf_info": [], "_version_name": "2.7.6"}, "legacy_middle"),
        ({"schema": "docvortex.middle", "schema_version": "2.0", "pages": []}, "docvortex_middle"),
        ({"schema": "docvortex.model", "schema_version": "2.0"}, "docvortex_other"),
        ([{"type": "text", "text": "a", "page_idx": 0, "bbox": [0, 0, 10, 10]}], "content_list"),
        ([{"type": "text", "text": "a", "page_idx": 0}], "content_list_v0"),
        ([{"layout_dets": [], "page_info": {}}], "model_json"),
        ({"texts": [], "schema_name": "DoclingDocument"}, "unknown"),  # a Docling file given to the wrong parser
    ],
)
def test_detect_schema(data, schema):
    assert detect_schema(data) == schema


def test_mineru_is_registered_with_its_settings():
    assert "mineru" in PARSERS
    p = PARSERS.create("mineru", tier="standard", timeout_s=60)
    assert (p.name, p.tier, p.timeout_s) == ("mineru", "standard", 60)
    with pytest.raises(ValueError, match="tier must be one of"):
        MinerUParser(tier="turbo")


# ---------------------------------------------------------------------------------------------- running MinerU
def fake_binary(tmp_path: Path, script: str, python_version: str | None = None) -> str:
    """A stand-in ``mineru-kit`` (a shell script) in its own bin/ folder, optionally with a ``python`` beside it
    that reports ``python_version`` for importlib.metadata.version("mineru")."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir(exist_ok=True)
    exe = bindir / "mineru-kit"
    exe.write_text("#!/bin/sh\n" + textwrap.dedent(script), encoding="utf-8")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    if python_version is not None:
        py = bindir / "python"
        py.write_text(f"#!/bin/sh\necho {python_version}\n", encoding="utf-8")
        py.chmod(py.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def test_run_passes_the_documented_command_line_and_a_scratch_home(tmp_path, v4_case):
    pdf, middle_file, _ = v4_case
    record = tmp_path / "record.txt"
    # Writes what it was called with, then the middle JSON where MinerU 4 puts it: OUT/<stem>.json.
    exe = fake_binary(
        tmp_path,
        f"""
        echo "$@" > {record}
        echo "HOME=$HOME" >> {record}
        while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then out="$2"; fi; shift; done
        mkdir -p "$out" && cp {middle_file} "$out/doc.json"
        echo "Parsed 1 input(s)."
        """,
    )
    with Document.open(pdf) as doc:
        blocks = MinerUParser(binary=exe, tier="flash").parse(doc, None)
    assert [b.type for b in blocks][:3] == ["header", "title", "text"]
    args, home = record.read_text().splitlines()
    parts = args.split()
    assert parts[:2] == ["parse", str(Path(pdf).resolve())]
    assert parts[2:6] == ["--tier", "flash", "-f", "middle_json"]
    assert parts[6] == "-o"
    scratch = home.removeprefix("HOME=")
    assert scratch != os.environ.get("HOME") and "quotecite-mineru-" in scratch
    assert not Path(scratch).exists()  # the scratch directory is removed after the run


def test_run_failure_is_one_line_naming_the_pdf_and_the_log_tail(tmp_path, v4_case):
    pdf, _, _ = v4_case
    exe = fake_binary(tmp_path, "echo 'loading models' >&2\necho 'RuntimeError: boom at page 3' >&2\nexit 3\n")
    with Document.open(pdf) as doc, pytest.raises(InputError) as e:
        MinerUParser(binary=exe).parse(doc, None)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{pdf}: MinerU (flash) failed with exit code 3: ")
    assert msg.endswith("loading models | RuntimeError: boom at page 3")


def test_run_that_writes_nothing_is_an_error(tmp_path, v4_case):
    pdf, _, _ = v4_case
    exe = fake_binary(tmp_path, "echo 'Parsed 0 input(s).'\n")
    with Document.open(pdf) as doc, pytest.raises(InputError, match=r"wrote no middle JSON: Parsed 0 input\(s\)\."):
        MinerUParser(binary=exe).parse(doc, None)


def test_run_past_its_timeout_is_killed_and_reported(tmp_path, v4_case):
    pdf, _, _ = v4_case
    exe = fake_binary(tmp_path, "echo started\nsleep 30\n")
    with Document.open(pdf) as doc, pytest.raises(InputError, match=r"MinerU timed out after 1 s: started"):
        MinerUParser(binary=exe, timeout_s=1).parse(doc, None)


def test_run_without_mineru_installed_says_how_to_install_it(tmp_path, v4_case):
    pdf, _, _ = v4_case
    with Document.open(pdf) as doc, pytest.raises(InputError, match=r"cannot run MinerU .*make mineru"):
        MinerUParser(binary=str(tmp_path / "absent" / "mineru-kit")).parse(doc, None)


def test_version_names_the_installed_mineru_and_tier_or_says_convert_only(tmp_path):
    exe = fake_binary(tmp_path, "exit 0\n", python_version="4.0.12")
    assert MinerUParser(binary=exe, tier="standard").version() == "mineru-4.0.12-standard-c1"
    assert MinerUParser(binary=str(tmp_path / "absent")).version() == "mineru-convert-c1"
