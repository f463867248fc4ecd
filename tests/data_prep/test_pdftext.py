"""The ``pdftext`` parser on the generated sample (always) and on the real fixtures (when present)."""

from __future__ import annotations

import re
import warnings
from collections import Counter

import pytest
from reportlab.lib.pagesizes import A4
from reportlab.lib.utils import simpleSplit
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfgen import canvas as rl_canvas

from core.errors import InputError
from data_prep.document import Document, clean_layer_text
from data_prep.parsers import get_parser
from data_prep.parsers.pdftext import _CAPTION_RE, PdfTextParser, join_lines
from data_prep.sample import SAMPLE_FACTS
from tests.conftest import fixture_path


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.fixture(scope="module")
def sample(sample_pdf):
    with Document.open(sample_pdf) as doc:
        yield doc, PdfTextParser().parse(doc)


def assert_well_formed(doc: Document, blocks) -> None:
    """ids 0..N-1, pages in range, every bbox inside its page, parents point at a table or figure."""
    assert [b.block_id for b in blocks] == list(range(len(blocks)))
    for b in blocks:
        w, h = doc.page_sizes[b.page - 1]
        x0, y0, x1, y1 = b.bbox
        assert 0 <= x0 <= x1 <= w + 1e-6 and 0 <= y0 <= y1 <= h + 1e-6, (b, (w, h))
        if b.parent is not None:
            assert blocks[b.parent].type in ("table", "figure"), b


def test_registry_name_and_version():
    parser = get_parser("pdftext")
    assert parser.name == "pdftext"
    assert parser.version().startswith("pdftext-2+pypdfium2-")


def test_sample_per_type_counts_are_exact(sample):
    _, blocks = sample
    # 4 pages x (2 header runs + 1 footer); 7 titles (title, 5 numbered sections, appendix heading); one each of
    # table, caption, note, figure, figure caption; 3 bullets; 9 paragraphs (4 on page 1, 2 on pages 2 and 3, 1
    # on page 4).
    assert Counter(b.type for b in blocks) == {
        "header": 8,
        "footer": 4,
        "title": 7,
        "text": 9,
        "list": 3,
        "table": 1,
        "table_caption": 1,
        "table_footnote": 1,
        "figure": 1,
        "figure_caption": 1,
    }
    assert_well_formed(sample[0], blocks)


@pytest.mark.parametrize("fact", SAMPLE_FACTS.facts, ids=[f.key for f in SAMPLE_FACTS.facts])
def test_each_sample_fact_lies_in_exactly_one_block_of_its_type_and_page(sample, fact):
    doc, blocks = sample
    holders = [b for b in blocks if squash(fact.text) in squash(b.text)]
    assert len(holders) == 1, [(b.block_id, b.type, b.text[:40]) for b in holders]
    (b,) = holders
    assert (b.page, b.type) == (fact.page, fact.type)
    # The box really holds the text: the text layer inside it contains the fact (cells of a row are spaced).
    inside = squash(doc.text_in_bbox(b.page, b.bbox))
    assert squash(fact.text.replace(" | ", "")) in inside


def test_table_text_joins_cells_with_bars_and_rows_with_newlines(sample):
    _, blocks = sample
    (table,) = [b for b in blocks if b.type == "table"]
    assert table.text.split("\n") == [
        "Site | Capacity (kW) | Yield (MWh) | Efficiency (%)",
        "Beijing | 120 | 158.4 | 19.2",
        "Shanghai | 95 | 117.6 | 18.7",
        "Shenzhen | 150 | 214.5 | 20.1",
        "Average | 121.7 | 163.5 | 19.3",
    ]


def test_captions_and_note_point_at_their_table_or_figure(sample):
    _, blocks = sample
    by_type = {b.type: b for b in blocks if b.type in ("table", "figure", "table_caption", "table_footnote")}
    (fig_caption,) = [b for b in blocks if b.type == "figure_caption"]
    assert by_type["table_caption"].parent == by_type["table"].block_id
    assert by_type["table_footnote"].parent == by_type["table"].block_id
    assert fig_caption.parent == by_type["figure"].block_id
    # Caption above the table, note below it, figure caption below the figure (display coordinates).
    assert by_type["table_caption"].bbox[3] <= by_type["table"].bbox[1]
    assert by_type["table_footnote"].bbox[1] >= by_type["table"].bbox[3]
    assert fig_caption.bbox[1] >= by_type["figure"].bbox[3]


def test_figure_box_covers_the_drawn_bar_chart(sample):
    _, blocks = sample
    (fig,) = [b for b in blocks if b.type == "figure"]
    assert fig.page == 3 and fig.text == ""
    # The chart spans the text width (84..511 pt) and is 190 pt tall (see data_prep.sample._Painter.bar_chart).
    x0, y0, x1, y1 = fig.bbox
    assert x1 - x0 == pytest.approx(427.3, abs=2) and y1 - y0 == pytest.approx(190, abs=2)


def test_headers_and_footers_repeat_on_every_page(sample):
    _, blocks = sample
    headers = [b for b in blocks if b.type == "header" and b.text == "QuoteCite Sample Report"]
    footers = [(b.page, b.text) for b in blocks if b.type == "footer"]
    assert [b.page for b in headers] == [1, 2, 3, 4]
    assert footers == [(p, f"Page {p} of 4") for p in range(1, 5)]


def test_blocks_are_in_reading_order(sample):
    _, blocks = sample
    page1 = [b.text for b in blocks if b.page == 1 and b.type in ("title", "text", "list")]
    assert page1[0] == SAMPLE_FACTS.title
    assert page1.index("1. Introduction") < page1.index("2. 研究背景") < page1.index("3. Methods")


def test_chinese_lines_join_without_spaces(sample):
    _, blocks = sample
    zh = SAMPLE_FACTS.fact("zh_sentence").text
    (b,) = [b for b in blocks if zh in b.text]  # the sentence wraps across two lines of the PDF
    assert " " not in b.text


@pytest.mark.parametrize(
    "line, kind",
    [
        ("Table 1: Annual yield.", "table"),
        ("Table 1 lists the capacity of each site.", None),  # a sentence about the table, not its caption
        ("Figure 1 shows the output.", None),  # likewise for a figure
        ("Fig. 2. Output per month", "figure"),
        ("TABLE IV", "table"),  # IEEE style, the caption text follows on the next line
        ("Figure 3-2 – Layout", "figure"),
        ("表1 各站点发电量", "table"),
        ("图 2 系统结构", "figure"),
        ("表1所示的数据", None),  # "as shown in table 1": running text
        ("Tables are useful", None),
    ],
)
def test_caption_detection(line, kind):
    m = _CAPTION_RE.match(line)
    got = (
        None
        if m is None
        else ("table" if (m.group("latin") or m.group("cjk")).lower() in ("table", "表") else "figure")
    )
    assert got == kind


@pytest.mark.parametrize(
    "lines, joined",
    [
        (["深圳站点的发电", "效率。"], "深圳站点的发电效率。"),  # Chinese wraps mid-word: no space
        (["The yield", "was high."], "The yield was high."),
        (["见表1", "Table 1 shows"], "见表1 Table 1 shows"),  # CJK then Latin: a space
        (["  padded  ", ""], "padded"),
        (["The experi\u00ad", "ment worked."], "The experiment worked."),  # soft hyphen: word rejoined, no space
        (["Ends in a soft hy\u00ad"], "Ends in a soft hy"),  # a trailing mark alone is dropped
        (["state-of-the-", "art"], "state-of-the- art"),  # a real hyphen is kept as written
    ],
)
def test_join_lines(lines, joined):
    assert join_lines(lines) == joined


def test_output_file_is_refused(sample_pdf, tmp_path):
    with Document.open(sample_pdf) as doc, pytest.raises(InputError, match="reads the PDF itself"):
        PdfTextParser().parse(doc, tmp_path / "x.json")


def _hyphenated_pdf(path) -> None:
    """Two paragraphs whose first line ends in a hyphenated word, as TeX and Word break them."""
    c = rl_canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    c.setFont("Helvetica", 12)
    c.drawString(20, 250, "The measure-")
    c.drawString(20, 235, "ments were taken at noon.")
    c.drawString(20, 190, "A second experi-")
    c.drawString(20, 175, "ment followed.")
    c.showPage()
    c.save()


def test_hyphenated_line_ends_are_rejoined_in_blocks_and_in_text_in_bbox(tmp_path):
    """pdfium reports a line-end hyphen as a soft-hyphen mark (U+0002) with the hyphen's glyph box; blocks and
    ``text_in_bbox`` give the whole word, and the first line's box still covers the drawn hyphen."""
    _hyphenated_pdf(tmp_path / "hy.pdf")
    with Document.open(tmp_path / "hy.pdf") as doc:
        blocks = PdfTextParser().parse(doc)
        assert [(b.type, b.text) for b in blocks] == [
            ("text", "The measurements were taken at noon."),
            ("text", "A second experiment followed."),
        ]
        assert doc.text_in_bbox(1, blocks[0].bbox) == "The measurements were taken at noon."
        assert (
            doc.text_in_bbox(1, (0, 0, 400, 300))
            == "The measurements were taken at noon.\nA second experiment followed."
        )
        first = doc.text_lines(1)[0]
        assert first.text == "The measure\u00ad"
        hyphen_right = 20 + pdfmetrics.stringWidth("The measure-", "Helvetica", 12)
        assert first.bbox[2] == pytest.approx(hyphen_right, abs=0.5)


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("experi\x02ment", "experiment"),  # bounded-text soft hyphen, no break in between
        ("experi\x02\r\nment", "experiment"),  # soft hyphen then pdfium's CRLF
        ("experi\ufffement", "experiment"),  # the text-range call's mark
        ("one\r\ntwo\rthree\nfour", "one\ntwo\nthree\nfour"),  # CRLF and lone CR become LF
        ("state-of-the-\r\nart", "state-of-the-\nart"),  # a real hyphen stays
    ],
)
def test_clean_layer_text(raw, clean):
    assert clean_layer_text(raw) == clean


def _run_in_pdf(path) -> None:
    c = rl_canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    y = 260
    for _ in range(3):
        c.setFont("Helvetica", 10)
        c.drawString(30, y, "Body text of a normal paragraph that goes across the whole column width.")
        y -= 12
    y -= 14
    # A bold run-in heading longer than the sentence it opens (most of the line is bold), one space apart...
    lead = "Implementation details and settings. "
    c.setFont("Helvetica-Bold", 10)
    c.drawString(30, y, lead)
    c.setFont("Helvetica", 10)
    c.drawString(30 + pdfmetrics.stringWidth(lead, "Helvetica-Bold", 10), y, "We use two GPUs.")
    y -= 26
    # ...and one set apart by a wide gap (TeX's \quad), which the text layer splits into two runs.
    lead = "Implementation details and settings."
    c.setFont("Helvetica-Bold", 10)
    c.drawString(30, y, lead)
    c.setFont("Helvetica", 10)
    c.drawString(30 + pdfmetrics.stringWidth(lead, "Helvetica-Bold", 10) + 14, y, "We use two GPUs.")
    y -= 26
    c.setFont("Helvetica-Bold", 10)
    c.drawString(30, y, "A real bold heading")
    y -= 14
    c.setFont("Helvetica", 10)
    c.drawString(30, y, "Body text of a normal paragraph that goes across the whole column width.")
    c.showPage()
    c.save()


def test_bold_run_in_heading_keeps_its_paragraph_text_while_a_bold_line_is_a_title(tmp_path):
    _run_in_pdf(tmp_path / "runin.pdf")
    with Document.open(tmp_path / "runin.pdf") as doc:
        blocks = PdfTextParser().parse(doc)
    assert [(b.type, b.text) for b in blocks][1:] == [
        ("text", "Implementation details and settings. We use two GPUs."),
        ("text", "Implementation details and settings. We use two GPUs."),
        ("title", "A real bold heading"),
        ("text", "Body text of a normal paragraph that goes across the whole column width."),
    ]


def _drawn_bullets_pdf(path) -> list[str]:
    """A paragraph, then three list items whose bullets are filled circles drawn as paths (no bullet glyph)."""
    c = rl_canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    c.setFont("Helvetica", 10)
    c.drawString(30, 260, "The survey covered the following sites across the region this year:")
    items = ["Shenzhen rooftop array", "Lhasa ground station", "Harbin test field"]
    y = 244
    for item in items:
        c.circle(38, y + 3.5, 2, stroke=0, fill=1)
        c.drawString(46, y, item)
        y -= 12
    c.showPage()
    c.save()
    return items


def test_bullets_drawn_as_graphics_make_list_blocks(tmp_path):
    items = _drawn_bullets_pdf(tmp_path / "bullets.pdf")
    with Document.open(tmp_path / "bullets.pdf") as doc:
        blocks = PdfTextParser().parse(doc)
    assert [(b.type, b.text) for b in blocks] == [
        ("text", "The survey covered the following sites across the region this year:"),
        *[("list", item) for item in items],
    ]


def _two_column_pdf(path) -> list[str]:
    """A page of two text columns, three paragraphs each, lines aligned across the gutter."""
    c = rl_canvas.Canvas(str(path), pagesize=A4, invariant=1)
    paragraphs = []
    for col in range(2):
        y = 780.0
        for k in range(3):
            text = (
                f"Column {col + 1} paragraph {k + 1} talks about solar panels and their yield over a long year "
                "of careful measurement at several sites, which is long enough to wrap over lines."
            )
            paragraphs.append(text)
            for line in simpleSplit(text, "Helvetica", 10, 230):
                c.setFont("Helvetica", 10)
                c.drawString(60 + col * 270, y, line)
                y -= 12
            y -= 14
    c.showPage()
    c.save()
    return paragraphs


def test_two_columns_are_not_merged_and_each_paragraph_is_one_block(tmp_path):
    paragraphs = _two_column_pdf(tmp_path / "cols.pdf")
    with Document.open(tmp_path / "cols.pdf") as doc:
        blocks = PdfTextParser().parse(doc)
    assert [b.text for b in blocks] == paragraphs
    assert all(b.type == "text" for b in blocks)
    mid = doc.page_sizes[0][0] / 2
    assert all(b.bbox[2] < mid or b.bbox[0] > mid for b in blocks)


def test_figure_inside_a_form_xobject_is_placed_on_the_page(tmp_path):
    """Objects inside a form XObject have bounds in the form's space; the parser maps them to the page."""
    c = rl_canvas.Canvas(str(tmp_path / "form.pdf"), pagesize=(600, 800), invariant=1)
    c.beginForm("chart")
    for i in range(5):
        c.rect(i * 20, 0, 15, 20 + i * 15, fill=1, stroke=0)
    c.endForm()
    c.saveState()
    c.translate(300, 400)  # the chart's content-space origin lands at (300, 400): display (300, 400 - height)
    c.doForm("chart")
    c.restoreState()
    c.setFont("Helvetica", 10)
    c.drawString(60, 60, "Some text so that the page has a text layer.")
    c.showPage()
    c.save()
    with Document.open(tmp_path / "form.pdf") as doc:
        (fig,) = [b for b in PdfTextParser().parse(doc) if b.type == "figure"]
    assert fig.bbox == pytest.approx((300, 800 - 400 - 80, 395, 400), abs=1.5)


def test_scanned_pages_become_one_figure_each_with_a_warning():
    pdf = fixture_path("opendatalab_MinerU", "pdfs_HEAD", "small_ocr.pdf")
    with Document.open(pdf) as doc, pytest.warns(UserWarning) as record:
        blocks = PdfTextParser().parse(doc)
    assert len(blocks) == doc.n_pages
    for p, b in enumerate(blocks, start=1):
        assert (b.page, b.type, b.text) == (p, "figure", "")
        assert b.bbox == pytest.approx((0, 0, *doc.page_sizes[p - 1]))
    messages = [str(w.message) for w in record]
    assert [m for m in messages if "no text layer" in m] == [
        f"{pdf}: page {p} has no text layer (scanned?); it becomes one figure block" for p in range(1, doc.n_pages + 1)
    ]


FIXTURE_PDFS = [
    ("opendatalab_MinerU", "pr4637_v2.7.6_pipeline_329770bd", "aaai26_paper", "aaai.pdf"),
    ("opendatalab_MinerU", "pr4637_v2.7.6_pipeline_329770bd", "svolt_datasheet_zh_en", "svolt.pdf"),
    ("opendatalab_MinerU", "demo1_v0.10.0_b1adde8e", "demo1.pdf"),
    ("opendatalab_MinerU", "research_report_zh_3a0039eb", "research_report_1f978cd81fb7260c8f7644039ec2c054.pdf"),
    ("opendatalab_MinerU", "extras_no_gt", "2list_1table_zh.pdf"),
    ("opendatalab_MinerU", "pdfs_HEAD", "demo2.pdf"),
    ("opendatalab_MinerU", "pdfs_HEAD", "demo3.pdf"),
    ("docling-project_docling", "redp5110_sampled.pdf"),
    ("docling-project_docling", "normal_4pages.pdf"),
    ("docling-project_docling", "amt_handbook_sample.pdf"),
    ("mayubo2333_MMLongBench-Doc", "a4f3ced0696009fec3179f493e4f28c4.pdf"),
]


@pytest.mark.parametrize("parts", FIXTURE_PDFS, ids=[p[-1] for p in FIXTURE_PDFS])
def test_every_fixture_parses_into_well_formed_blocks(parts):
    with Document.open(fixture_path(*parts)) as doc:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an image-only page warns; that is tested above
            blocks = PdfTextParser().parse(doc)
        assert_well_formed(doc, blocks)
        pages_with_text = {p for p in range(1, doc.n_pages + 1) if doc.has_text(p)}
        assert {b.page for b in blocks} >= pages_with_text


def test_two_column_paper_text_is_never_merged_across_the_gutter():
    pdf = fixture_path("opendatalab_MinerU", "pr4637_v2.7.6_pipeline_329770bd", "aaai26_paper", "aaai.pdf")
    with Document.open(pdf) as doc:
        blocks = PdfTextParser().parse(doc)
        mid = doc.page_sizes[0][0] / 2
    body = [b for b in blocks if b.type in ("text", "list", "title") and b.bbox[1] > 200]  # below the title block
    assert len(body) > 100
    crossing = [b for b in body if b.bbox[0] < mid - 6 and b.bbox[2] > mid + 6]
    assert crossing == []


def _shifted_pdf(path, dx: float, dy: float) -> None:
    """Five lines of text on a 600 x 800 page whose MediaBox starts at (dx, dy), the content moved with it, so
    the page shows the same thing wherever its origin is."""
    c = rl_canvas.Canvas(str(path), pagesize=(600, 800))
    c.translate(dx, dy)
    c.setFont("Helvetica", 14)
    for i in range(5):
        c.drawString(72, 700 - 40 * i, f"Line number {i} of the shifted page.")
    c.showPage()
    c.save()
    data = path.read_bytes()
    box = b"/MediaBox [ 0 0 600 800 ]"
    assert box in data
    path.write_bytes(data.replace(box, f"/MediaBox [ {dx:g} {dy:g} {600 + dx:g} {800 + dy:g} ]".encode()))


@pytest.mark.parametrize("origin", [(-300, -400), (50, 120)], ids=["negative", "positive"])
def test_a_mediabox_away_from_the_origin_gives_the_same_boxes_as_one_at_it(tmp_path, origin):
    """Boxes are in the page's own frame (top-left of the MediaBox): a MediaBox at negative coordinates (the
    hostile battery's case) or past the origin gives the boxes of the same page drawn at (0, 0), none of zero
    width or height."""
    _shifted_pdf(tmp_path / "base.pdf", 0, 0)
    _shifted_pdf(tmp_path / "moved.pdf", *origin)
    got = {}
    for name in ("base", "moved"):
        with Document.open(tmp_path / f"{name}.pdf") as doc:
            blocks = PdfTextParser().parse(doc)
            assert_well_formed(doc, blocks)
            got[name] = [(b.text, [round(v, 2) for v in b.bbox]) for b in blocks]
    assert len(got["base"]) == 5 and got["moved"] == got["base"]
    assert all(x1 - x0 > 100 and y1 - y0 > 5 for _, (x0, y0, x1, y1) in got["moved"])
