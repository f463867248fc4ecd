"""The real MinerU (4.0.12, ``flash`` tier, CPU, offline) run end to end: PDF -> mineru-kit -> docvortex.middle ->
blocks, on a PDF generated here (with a /Rotate 90 page) and on a real fixture PDF. MinerU runs once per document
per session (module-scoped fixtures); run with ``-s`` to see how long each run took."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from reportlab.lib import colors
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.pdfgen import canvas
from reportlab.platypus import Frame, Paragraph, Table, TableStyle

from data_prep.document import Document
from data_prep.parsers.mineru import MinerUParser
from data_prep.text import token_f1, tokenize
from tests.conftest import fixture_path

pytestmark = pytest.mark.mineru

TEXT_TYPES = {"text", "title", "list", "figure_caption", "table_caption", "table_footnote"}
PARA_1 = (
    "Apple orchards in the northern valley produced record yields this season because the spring frost arrived "
    "late and the summer rains were steady. Growers expect prices to fall slightly as supply rises."
)
PARA_2 = (
    "Pear growers in the southern groves reported that the harvest began two weeks early after an unusually warm "
    "April, and cold storage capacity ran short for the first time in a decade."
)
ROWS_1 = [["Region", "Revenue", "Growth"], ["North", "1200", "12%"], ["South", "950", "8%"], ["East", "780", "5%"]]
ROWS_2 = [["Grove", "Tonnes"], ["Hillside", "310"], ["Riverside", "275"]]
# Where page 2's content is drawn, in display points (top-left origin): the right half, below the middle.
ROT_FRAME = (400.0, 250.0, 800.0, 560.0)


def _content(title: str, para: str, caption: str, rows: list[list[str]]) -> list:
    styles = getSampleStyleSheet()
    table = Table(rows)
    table.setStyle(TableStyle([("GRID", (0, 0), (-1, -1), 0.5, colors.black)]))
    return [
        Paragraph(title, styles["Title"]),
        Paragraph(para, styles["BodyText"]),
        Paragraph(caption, styles["BodyText"]),
        table,
    ]


def write_run_pdf(path: Path) -> Path:
    """Page 1: A4 portrait, a title, a paragraph, a caption and a ruled table. Page 2: /Rotate 90, displayed
    landscape (841.89 x 595.28 pt), other text drawn upright in :data:`ROT_FRAME`."""
    c = canvas.Canvas(str(path), pagesize=A4, invariant=1)
    w, h = A4
    Frame(60, 60, w - 120, h - 120, showBoundary=0).addFromList(
        _content("Quarterly Report on Orchard Yields", PARA_1, "Table 1. Revenue by region.", ROWS_1), c
    )
    c.showPage()
    dw, dh = h, w  # display size of the rotated page
    c.setPageSize((dw, dh))  # reportlab writes the MediaBox swapped for a rotated page
    c.setPageRotation(90)
    c.saveState()
    c.translate(dh, 0)  # display (x, y-up) -> unrotated user space
    c.rotate(90)
    x0, top, x1, bottom = ROT_FRAME
    Frame(x0, dh - bottom, x1 - x0, bottom - top, showBoundary=0).addFromList(
        _content("Pear Harvest Notes", PARA_2, "Table 2. Yield by grove.", ROWS_2), c
    )
    c.restoreState()
    c.showPage()
    c.save()
    return path


def _require_mineru() -> MinerUParser:
    parser = MinerUParser(tier="flash", timeout_s=600)
    if parser.resolved_binary() is None:
        pytest.skip("MinerU is not installed (`make mineru` creates .venv-mineru; or set QUOTECITE_MINERU_BIN)")
    return parser


def _run(parser: MinerUParser, pdf: Path):
    doc = Document.open(pdf)
    t0 = time.monotonic()
    blocks = parser.parse(doc, None)
    seconds = time.monotonic() - t0
    print(f"\nMinerU {parser.version()} on {pdf.name}: {doc.n_pages} pages, {len(blocks)} blocks, {seconds:.1f} s")
    return doc, blocks


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    parser = _require_mineru()
    pdf = write_run_pdf(tmp_path_factory.mktemp("mineru_run") / "orchard.pdf")
    doc, blocks = _run(parser, pdf)
    yield doc, blocks
    doc.close()


@pytest.fixture(scope="module")
def fixture_doc():
    parser = _require_mineru()
    doc, blocks = _run(parser, fixture_path("docling-project_docling", "2305.03393v1-pg9.pdf"))
    yield doc, blocks
    doc.close()


def _layer_f1(doc: Document, b) -> float:
    layer = doc.text_in_bbox(b.page, b.bbox).replace("\x02\r\n", "").replace("\x02", "")
    return token_f1(b.text, layer)


def _assert_inside_pages(doc: Document, blocks) -> None:
    assert blocks
    assert [b.block_id for b in blocks] == list(range(len(blocks)))
    for b in blocks:
        w, h = doc.page_sizes[b.page - 1]
        assert 0 <= b.bbox[0] < b.bbox[2] <= w and 0 <= b.bbox[1] < b.bbox[3] <= h, b


def test_installed_mineru_version_names_release_and_tier():
    parser = _require_mineru()
    assert parser.version() == "mineru-4.0.12-flash-c1"


def test_generated_pdf_blocks_lie_inside_their_pages_and_match_the_text_layer(generated):
    doc, blocks = generated
    assert doc.page_rotation(2) == 90 and doc.page_sizes[1] == pytest.approx((841.89, 595.276), abs=0.01)
    _assert_inside_pages(doc, blocks)
    assert {b.page for b in blocks} == {1, 2}
    text_blocks = [b for b in blocks if b.type in TEXT_TYPES and b.text]
    assert len(text_blocks) >= 6
    assert all(_layer_f1(doc, b) >= 0.8 for b in text_blocks), [(b, _layer_f1(doc, b)) for b in text_blocks]


def test_generated_table_becomes_a_table_block_with_its_cells(generated):
    doc, blocks = generated
    table = next(b for b in blocks if b.type == "table" and b.page == 1)
    cells = {"region", "revenue", "growth", "north", "south", "east", "1200", "950", "780"}
    assert cells <= set(tokenize(table.text))
    assert " | " in table.text


def test_rotated_page_blocks_land_where_the_text_is_drawn_and_their_crop_shows_it(generated):
    doc, blocks = generated
    para = next(b for b in blocks if b.page == 2 and "southern groves" in b.text)
    assert token_f1(para.text, PARA_2) >= 0.9
    assert _layer_f1(doc, para) >= 0.9
    x0, top, x1, bottom = ROT_FRAME
    assert x0 - 2 <= para.bbox[0] and para.bbox[2] <= x1 + 2 and top - 2 <= para.bbox[1] and para.bbox[3] <= bottom
    ink = np.asarray(doc.crop(2, para.bbox, dpi=72).convert("L")) < 128
    assert ink.mean() > 0.03  # glyphs: a crop of the wrong place would be blank paper
    blank = np.asarray(doc.crop(2, (40.0, 40.0, 360.0, 500.0), dpi=72).convert("L")) < 128
    assert blank.mean() == 0.0  # control: nothing is drawn in the left part of the rotated page


def test_fixture_pdf_blocks_lie_inside_the_page_and_match_the_text_layer(fixture_doc):
    doc, blocks = fixture_doc
    _assert_inside_pages(doc, blocks)
    text_blocks = [b for b in blocks if b.type in TEXT_TYPES and b.text]
    good = [b for b in text_blocks if _layer_f1(doc, b) >= 0.8]
    assert len(text_blocks) >= 5
    assert len(good) / len(text_blocks) >= 0.9


def test_fixture_pdf_table_caption_is_its_own_block_pointing_at_the_table(fixture_doc):
    doc, blocks = fixture_doc
    caption = next(b for b in blocks if b.type == "table_caption")
    assert caption.text.startswith("Table 1. HPO performed in OTSL and HTML representation")
    table = blocks[caption.parent]
    assert table.type == "table" and table.page == caption.page
    assert table.bbox[1] > caption.bbox[3] - 1  # the caption sits above the table, each with its own box
    assert {"language", "otsl", "html"} <= set(tokenize(table.text))
