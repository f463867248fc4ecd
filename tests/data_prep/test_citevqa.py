"""``data_prep citevqa``: box conversion, the verification filter and the release rehydration, on records built
from the fixture PDFs (annotations taken from Docling's ground-truth regions of those PDFs)."""

from __future__ import annotations

import json
import math

import pytest

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.__main__ import COMMANDS
from data_prep.citevqa import (
    convert_raw,
    format_funnel,
    guess_language,
    raw_box_to_points,
    rehydrate,
    release_box_to_points,
    release_scale,
)
from data_prep.document import Document
from eval.schemas import read_gold
from tests.conftest import fixture_path

pytestmark = pytest.mark.fixtures


def test_raw_box_order_is_y_first_on_a_1000_grid():
    assert raw_box_to_points([100, 200, 300, 400], (600.0, 800.0)) == (120.0, 80.0, 240.0, 240.0)


RELEASE_SPACES = [
    ("points", (1.0, 1.0)),  # boxes already in points
    ("dpi:144", (2.0, 2.0)),  # 144 dpi render: 2 pixels per point
    ("norm1000", (1000 / 600, 1000 / 800)),  # relative 0-1000
    ("max-pixels:480000", (1.0, 1.0)),  # a 600 x 800 pt page under 480,000 pixels renders at 1 px/pt
]


@pytest.mark.parametrize(("space", "scale"), RELEASE_SPACES)
def test_release_scales(space, scale):
    assert release_scale(space, (600.0, 800.0)) == pytest.approx(scale)


def test_release_box_conversion_and_bad_space():
    assert release_box_to_points([200, 100, 400, 300], (600.0, 800.0), "dpi:144") == (100.0, 50.0, 200.0, 150.0)
    with pytest.raises(InputError, match="expected max-pixels:N"):
        release_scale("pixels", (1.0, 1.0))
    with pytest.raises(InputError, match="needs a number"):
        release_scale("dpi:high", (1.0, 1.0))


def test_language_guess():
    assert guess_language("深圳站点的发电量是多少？") == "zh"
    assert guess_language("What is the yield of the Shenzhen site?") == "en"


# ---------------------------------------------------------------------------------------------- fixture records
@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A PDF folder (symlinks to fixture PDFs) and annotations from Docling's regions of multi_page.pdf."""
    from data_prep.parsers import get_parser

    pdf = fixture_path("docling-project_docling", "multi_page.pdf")
    js = fixture_path("docling-project_docling", "multi_page.json")
    scanned = fixture_path("opendatalab_MinerU", "pdfs_HEAD", "small_ocr.pdf")
    d = tmp_path_factory.mktemp("pdfs")
    (d / "multi_page.pdf").symlink_to(pdf)
    (d / "small_ocr.pdf").symlink_to(scanned)
    (d / "broken.pdf").write_text("this is not a PDF")
    with Document.open(pdf) as doc:
        blocks = [b for b in get_parser("docling").parse(doc, js) if b.type == "text" and len(b.text) > 60]
        sizes = doc.page_sizes
    return d, blocks, sizes


def raw_box(block, sizes, order="yx"):
    """A CiteVQA box for a block, rounded to the integer 0-1000 grid like the release; ``order="xy"`` writes it
    the way the benchmark's prompt describes (x first), which is not the released order."""
    w, h = sizes[block.page - 1]
    x0, y0, x1, y1 = block.bbox
    nx0, ny0 = math.floor(x0 / w * 1000), math.floor(y0 / h * 1000)
    nx1, ny1 = math.ceil(x1 / w * 1000), math.ceil(y1 / h * 1000)
    return [ny0, nx0, ny1, nx1] if order == "yx" else [nx0, ny0, nx1, ny1]


def ev(block, sizes, order="yx", text=None, crucial=True):
    return {"page": block.page, "bbox": raw_box(block, sizes, order), "content": block.text if text is None else text,
            "is_crucial": crucial}  # fmt: skip


def records(blocks, sizes):
    b0, b1, b2 = blocks[0], blocks[3], blocks[6]
    return [
        {"index": 1, "Question": "How did word processing begin?", "Answer": "typewriters",
         "PDF_Source": ["data/pdf/multi_page.pdf"], "dataset_type": "Single-Doc",
         "evidence": [ev(b0, sizes), ev(b1, sizes, crucial=False)]},  # verified, one optional element
        {"index": 2, "Question": "Swapped box order", "Answer": "x", "PDF_Source": ["multi_page.pdf"],
         "evidence": [ev(b2, sizes, order="xy")]},  # x-first box: lands elsewhere, the filter drops it
        {"index": 3, "Question": "Wrong text", "Answer": "x", "PDF_Source": ["multi_page.pdf"],
         "evidence": [ev(b0, sizes, text="Quarterly revenue of the fishing fleet rose sharply in Norway.")]},
        {"index": 4, "Question": "Missing PDF", "Answer": "x", "PDF_Source": ["gone.pdf"], "evidence": [ev(b0, sizes)]},
        {"index": 5, "Question": "Not a PDF", "Answer": "x", "PDF_Source": ["broken.pdf"], "evidence": [ev(b0, sizes)]},
        {"index": 6, "Question": "Page 9 of 5", "Answer": "x", "PDF_Source": ["multi_page.pdf"],
         "evidence": [{**ev(b0, sizes), "page": 9}]},
        {"index": 7, "Question": "扫描件里写了什么？", "Answer": "x", "PDF_Source": ["small_ocr.pdf"],
         "evidence": [{"page": 1, "bbox": [100, 100, 200, 900], "content": "some words", "is_crucial": True}]},
        {"index": 8, "Question": "Two documents", "Answer": "x", "PDF_Source": ["multi_page.pdf", "small_ocr.pdf"],
         "dataset_type": "Multi (1-Gold)", "evidence": [ev(b0, sizes)]},
    ]  # fmt: skip


def test_verification_filter_keeps_true_annotations_and_catches_swapped_boxes(world):
    pdf_dir, blocks, sizes = world
    rows, funnel = convert_raw(records(blocks, sizes), pdf_dir)
    assert dict(funnel) == {"records": 8, "not single-doc": 1, "unreadable PDF": 2, "pages out of range": 1,
                            "text mismatch": 2, "kept": 2, "verified": 1, "unverifiable": 1,
                            "untyped": 2}  # fmt: skip
    by = {r["index"]: r for r in rows}
    assert sorted(by) == [1, 7]
    r1 = by[1]
    assert r1["alignment"] == "verified" and r1["doc_key"] == "multi_page"
    assert len(r1["gt_necessary"]) == 1 and len(r1["gt_all"]) == 2  # the optional element is precision-only
    page, *box = r1["gt_necessary"][0]
    assert page == blocks[0].page
    assert box == pytest.approx(list(blocks[0].bbox), abs=1.0)  # the 0-1000 grid costs under a point
    assert "gt_types" not in r1  # its annotation names no type: left out of Table 7, never guessed as text
    assert by[7]["alignment"] == "unverifiable" and by[7]["language"] == "zh"
    text = format_funnel(funnel)
    assert "text mismatch: 2" in text and "kept: 2" in text and "(verified 1, unverifiable 1)" in text


def test_missing_evidence_field_is_a_clear_error(world):
    pdf_dir, _, _ = world
    with pytest.raises(InputError, match="no evidence list"):
        convert_raw([{"index": 1, "Question": "q", "PDF_Source": ["multi_page.pdf"]}], pdf_dir)


def test_rehydrating_the_release_converts_pixels_back_to_points(world):
    pdf_dir, blocks, sizes = world
    b = blocks[0]
    w, h = sizes[b.page - 1]
    s = math.sqrt(1_000_000 / (w * h))  # the release's pixels: the page under a one-megapixel budget
    px = [b.page, *(round(v * s, 1) for v in b.bbox)]
    release = [
        {"index": 1, "pdf_stem": "multi_page", "language": "en", "qtype": "Factual Retrieval", "alignment": "verified",
         "gt_pages": [b.page], "gt_necessary": [px], "gt_all": [px]},
        {"index": 2, "pdf_stem": "multi_page", "gt_necessary": [px], "gt_all": [px]},  # not in the download
        {"index": 3, "pdf_stem": "gone", "gt_necessary": [px], "gt_all": [px]},
        {"index": 4, "pdf_stem": "multi_page", "gt_necessary": [[7, 1, 1, 2, 2]], "gt_all": []},
        {"index": 5, "pdf_stem": "multi_page", "gt_necessary": [[1, 10, 10, 3000, 3000]], "gt_all": []},
    ]  # fmt: skip
    citevqa = [{"index": i, "Question": f"q{i}", "Answer": f"a{i}"} for i in (1, 3, 4, 5)]
    rows, funnel = rehydrate(release, citevqa, pdf_dir)
    assert dict(funnel) == {"records": 5, "not in CiteVQA download": 1, "unreadable PDF": 1, "pages out of range": 1,
                            "box outside page": 1, "kept": 1, "verified": 1, "untyped": 1}  # fmt: skip
    (r,) = rows
    assert (r["question"], r["answer"], r["qtype"]) == ("q1", "a1", "Factual Retrieval")
    assert r["gt_necessary"][0][1:] == pytest.approx(list(b.bbox), abs=0.2)


def test_citevqa_command_writes_gold_and_funnel(world, tmp_path, capsys):
    pdf_dir, blocks, sizes = world
    src = tmp_path / "CiteVQA.json"
    src.write_text(json.dumps(records(blocks, sizes)))
    out = tmp_path / "gold.jsonl"
    argv = ["citevqa", "--citevqa", str(src), "--pdf-dir", str(pdf_dir), "--out", str(out)]
    assert cli_main("data_prep", "", COMMANDS, argv) == 2  # byte verification needs CiteVQA's PDF list
    assert "pdf_source.csv" in capsys.readouterr().err and not out.exists()
    assert cli_main("data_prep", "", COMMANDS, [*argv, "--no-byte-check"]) == 0
    printed = capsys.readouterr().out
    assert "unreadable PDF: 2" in printed and "wrote 2 gold records" in printed
    assert [g.index for g in read_gold(out)] == [1, 7]
    assert json.loads((tmp_path / "gold.jsonl.funnel.json").read_text())["text mismatch"] == 2


def test_evidence_from_answer_bboxes_tags_is_read_y_first_and_stripped_from_the_answer(world):
    # CiteVQA's scorer reads gold boxes from <bbox> tags in `answer_bboxes`; the released numbers are y-first.
    from data_prep.citevqa import CiteVQAFields

    pdf_dir, blocks, sizes = world
    b = blocks[0]
    y1, x1, y2, x2 = raw_box(b, sizes)
    tag = f'<bbox page="{b.page}" x1="{y1}" y1="{x1}" x2="{y2}" y2="{x2}" />'
    rec = {"index": 9, "Question": "q", "PDF_Source": ["data/pdf/multi_page.pdf"], "dataset_type": "Single-Doc",
           "answer_bboxes": f"Typewriters came first. {tag}\nSo the answer is typewriters."}  # fmt: skip
    rows, funnel = convert_raw([rec], pdf_dir)
    (r,) = rows
    assert r["answer"] == "Typewriters came first.\nSo the answer is typewriters."
    assert r["alignment"] == "unverifiable"  # tags carry no annotated text to check
    assert r["gt_necessary"][0][0] == b.page
    assert r["gt_necessary"][0][1:] == pytest.approx(list(b.bbox), abs=1.0)
    # Read x-first, the same tag is another box entirely.
    rows_xy, _ = convert_raw([rec], pdf_dir, CiteVQAFields(tag_order="xyxy"))
    assert rows_xy[0]["gt_necessary"][0][1:] != pytest.approx(list(b.bbox), abs=1.0)


# ---------------------------------------------------------------------------------------------- byte verification
def _pdf_source(path, rows):
    lines = ["track_id,content_length,language_label,page_count,url,domain_label_en,sub_domain_label_en"]
    lines += [f"{stem},{size},en,{pages},http://example.org/{stem}.pdf,x,y" for stem, size, pages in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_byte_verification_drops_pdfs_of_another_version_and_the_option_keeps_them(world, tmp_path, capsys):
    # The paper's Appendix B: 16 questions "cannot be byte-verified".
    from data_prep.citevqa import load_pdf_source

    pdf_dir, blocks, sizes = world
    size = (pdf_dir / "multi_page.pdf").stat().st_size
    n_pages = len(sizes)
    recs = records(blocks, sizes)
    with Document.open(pdf_dir / "small_ocr.pdf") as d:
        ocr = ("small_ocr", (pdf_dir / "small_ocr.pdf").stat().st_size, d.n_pages)
    for listed, kept in (
        ([("multi_page", size, n_pages), ocr], [1, 7]),
        ([("multi_page", size + 1, n_pages)], []),  # another size: not the annotated file; small_ocr unlisted
        ([("multi_page", size, n_pages + 1)], []),  # another page count
    ):
        sources = load_pdf_source(_pdf_source(tmp_path / "src.csv", listed))
        rows, funnel = convert_raw(recs, pdf_dir, sources=sources)
        assert [r["index"] for r in rows] == kept, listed
        assert funnel["not byte-verified"] == 2 - len(kept)
    rows, funnel = convert_raw(recs, pdf_dir)  # no list: the earlier behaviour
    assert [r["index"] for r in rows] == [1, 7] and funnel["not byte-verified"] == 0
    # The CLI finds the list beside CiteVQA's data/ folder and prints the step.
    data = tmp_path / "CiteVQA" / "data"
    (data / "validation").mkdir(parents=True)
    (data / "download").mkdir()
    src = data / "validation" / "CiteVQA.json"
    src.write_text(json.dumps(recs))
    _pdf_source(data / "download" / "pdf_source.csv", [("multi_page", size + 1, n_pages)])
    out = tmp_path / "gold.jsonl"
    assert cli_main("data_prep", "", COMMANDS, ["citevqa", "--citevqa", str(src), "--pdf-dir", str(pdf_dir),
                                                "--out", str(out)]) == 0  # fmt: skip
    assert "not byte-verified: 2" in capsys.readouterr().out and out.read_text() == ""
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="expected CiteVQA's pdf_source.csv"):
        load_pdf_source(tmp_path / "bad.csv")


# ---------------------------------------------------------------------------------------------- element types
def test_release_path_gets_gt_types_from_the_records_annotations_or_the_parsed_blocks(world, tmp_path):
    # Table 7 from the release path.
    from data_prep.cache import build_cache
    from data_prep.citevqa import BlockTypes

    pdf_dir, blocks, sizes = world
    b0, b1 = blocks[0], blocks[3]

    def px(b):
        w, h = sizes[b.page - 1]
        s = math.sqrt(1_000_000 / (w * h))
        return [b.page, *(round(v * s, 1) for v in b.bbox)]

    release = [{"index": 1, "pdf_stem": "multi_page", "gt_necessary": [px(b0), px(b1)], "gt_all": [px(b0), px(b1)]}]
    typed = [
        {
            "index": 1,
            "Question": "q",
            "Answer": "a",
            "evidence": [{**ev(b0, sizes), "type": "table_caption"}, {**ev(b1, sizes), "type": "paragraph"}],
        }
    ]
    rows, funnel = rehydrate(release, typed, pdf_dir)
    assert rows[0]["gt_types"] == ["table", "text"] and funnel["untyped"] == 0
    # Without types in the record, and no block cache: no gt_types (the earlier output), counted.
    rows, funnel = rehydrate(release, [{"index": 1, "Question": "q", "Answer": "a"}], pdf_dir)
    assert "gt_types" not in rows[0] and funnel["untyped"] == 1
    assert "1 kept without gt_types" in format_funnel(funnel)
    # With a block cache: the most-overlapping parsed block's type.

    class Fixed:
        name = "fixed"

        def version(self):
            return "types-test-1"

        def parse(self, doc, output=None):
            from data_prep.types import Block

            return [
                Block(0, b0.page, b0.bbox, "figure_caption", b0.text),
                Block(1, b1.page, b1.bbox, "title", b1.text),
            ]

    cache_dir = tmp_path / "cache"
    build_cache(pdf_dir / "multi_page.pdf", Fixed(), None, cache_dir)
    rows, _ = rehydrate(release, [{"index": 1, "Question": "q", "Answer": "a"}], pdf_dir,
                        block_types=BlockTypes(cache_dir))  # fmt: skip
    assert rows[0]["gt_types"] == ["figure", "text"]
