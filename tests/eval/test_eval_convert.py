"""``eval convert``: LAT boxes (pixels of the page image it saw, 1-based images) and MultAttnAttrib spans and
images (0-based ``[Image k]``) -> our prediction JSONL, checked on hand-computed boxes and end to end through
``eval resolve`` / ``eval score`` on the generated sample PDF."""

from __future__ import annotations

import doctest
import io
import json
from collections import Counter

import pytest

import eval.convert as convert_mod
from core.cli import main as cli_main
from core.errors import InputError
from data_prep.cache import build_cache
from data_prep.document import Document
from data_prep.sample import SAMPLE_FACTS, write_sample_pdf
from data_prep.types import Block
from eval.__main__ import COMMANDS
from eval.convert import Converter, DocInfo, convert_file, page_image_size, parse_lat_response
from eval.schemas import Element, Gold, write_jsonl


def test_docstring_examples_run():
    result = doctest.testmod(convert_mod)
    assert result.attempted >= 4 and result.failed == 0


# ---------------------------------------------------------------------------------------------- image sizes
def test_page_image_size_is_the_size_of_the_images_eval_infer_sends(sample_pdf):
    from PIL import Image

    from eval.infer import InferConfig, page_images

    with Document.open(sample_pdf) as doc:
        for total in (4e6, 777_777, 3e5):  # at the 1 MP cap, an odd budget, a small one
            sent = [Image.open(io.BytesIO(b)).size for b in page_images(doc, InferConfig(total_pixels=total))]
            budget = Document.page_pixel_budget(doc.n_pages, total, 1_000_000)
            assert [page_image_size(s, budget) for s in doc.page_sizes] == sent
            assert sent[3][0] > sent[3][1]  # page 4 carries /Rotate 90: the image is landscape, as displayed


@pytest.mark.parametrize(
    ("page_size", "budget", "expected"),
    [
        ((500.0, 500.0), 250_000, (500, 500)),  # scale exactly 1: one pixel per point
        ((500.0, 500.0), 1_000_000, (1000, 1000)),  # scale exactly 2
        ((400.0, 100.0), 40_000, (400, 100)),  # aspect ratio kept at scale 1
        ((612.0, 792.0), 1_000_000, (879, 1137)),  # US Letter: ceil(612 s) x ceil(792 s) shaved below 1e6
    ],
)
def test_page_image_size_hand_computed(page_size, budget, expected):
    assert page_image_size(page_size, budget) == expected
    w, h = page_image_size(page_size, budget)
    assert w * h <= budget


# ---------------------------------------------------------------------------------------------- LAT parsing
def test_lat_response_reads_step_and_answer_boxes_and_counts_broken_ones():
    text = (
        '<think>The table lists yields. Bounding box: {"bbox_2d": [10, 20, 30, 40], "Image_index": 2}. '
        'Broken: Bounding box: {"bbox_2d": [1, 2, 3], "Image_index": 1} and {\'bbox_2d\': [5, 6, 7, 8], '
        "'image_index': 3}</think>\n<answer>214.5 MWh\nBounding box: {\"bbox_2d\": [50, 60, 70, 80], "
        '"Image_index": 2}</answer>'
    )
    boxes, unparsed, answer = parse_lat_response(text)
    assert [(b.image, b.box, b.in_answer) for b in boxes] == [
        (2, (10.0, 20.0, 30.0, 40.0), False),
        (3, (5.0, 6.0, 7.0, 8.0), False),  # single quotes, lower-case key: LAT's own extractor accepts them
        (2, (50.0, 60.0, 70.0, 80.0), True),
    ]
    assert unparsed == 1  # three numbers
    assert answer == "214.5 MWh"


# ---------------------------------------------------------------------------------------------- LAT conversion
class StubDocs:
    """Documents with given page sizes (points) and blocks, no PDF."""

    def __init__(self, page_sizes, blocks=None, images=None):
        self.info = DocInfo("d", list(page_sizes), blocks, lambda: None)
        self.images = images or []

    def get(self, doc_key):
        return self.info

    def pdf_images(self, doc):
        return self.images


GOLD = Gold("q1", "d", "question?", "gold answer", "en", "Factual Retrieval", (Element(1, (0, 0, 1, 1)),), ())


def box(x0, y0, x1, y1, image=None, key="Image_index"):
    d = {"bbox_2d": [x0, y0, x1, y1]}
    if image is not None:
        d[key] = image
    return "Bounding box: " + json.dumps(d)


SQUARE3 = [(500.0, 500.0)] * 3  # three 500 x 500 pt pages
LANDSCAPE = [(600.0, 800.0), (800.0, 600.0)]  # a portrait page, then a /Rotate 90 page as displayed

LAT_CASES = [
    # (why, page sizes, converter kwargs, record, expected citations, expected drops)
    (
        "render budget 3 pages x 250,000 px: scale 1, pixels are points; Image_index 2 is page 2",
        SQUARE3,
        {"render_pixels": 750_000},
        {"response": f"<answer>x {box(100, 50, 300, 150, 2)}</answer>"},
        [{"page": 2, "bbox": [100.0, 50.0, 300.0, 150.0]}],
        {},
    ),
    (
        "budget capped at 1 MP per page: 1000 x 1000 px images, so every pixel is half a point",
        SQUARE3,
        {"render_pixels": 30_000_000},
        {"response": f"<answer>x {box(100, 50, 300, 150, 1)}</answer>"},
        [{"page": 1, "bbox": [50.0, 25.0, 150.0, 75.0]}],
        {},
    ),
    (
        "a window of pages: Image_index 2 is the second page shown (page 3); budget split over 2 images",
        SQUARE3,
        {"render_pixels": 500_000},
        {"response": box(0, 0, 500, 250, 2), "pages": [1, 3]},
        [{"page": 3, "bbox": [0.0, 0.0, 500.0, 250.0]}],
        {},
    ),
    (
        "image sizes in the record: x by 600/1200, y by 800/1000 on the portrait page",
        LANDSCAPE,
        {},
        {"response": box(120, 100, 240, 200, 1), "image_sizes": [[1200, 1000], [1000, 750]]},
        [{"page": 1, "bbox": [60.0, 80.0, 120.0, 160.0]}],
        {},
    ),
    (
        "--page-images-info on the rotated (landscape) page: 1000 x 750 px for 800 x 600 pt",
        LANDSCAPE,
        {"page_images_info": {"d": [[1200, 1000], [1000, 750]]}},
        {"response": box(500, 375, 1000, 750, 2)},
        [{"page": 2, "bbox": [400.0, 300.0, 800.0, 600.0]}],
        {},
    ),
    (
        "no Image_index with one image shown: LAT's single-image setting, image 1",
        SQUARE3,
        {"render_pixels": 250_000},
        {"response": box(10, 20, 30, 40), "pages": [2]},
        [{"page": 2, "bbox": [10.0, 20.0, 30.0, 40.0]}],
        {},
    ),
    (
        "no Image_index with several images shown: cannot be placed",
        SQUARE3,
        {"render_pixels": 750_000},
        {"response": box(10, 20, 30, 40)},
        [],
        {"no_image_index": 1},
    ),
    (
        "LAT's placeholder for 'no box' (image 0) and an image past the last page are out of range",
        SQUARE3,
        {"render_pixels": 750_000},
        {"response": box(0, 0, 0, 0, 0) + box(1, 1, 2, 2, 4)},
        [],
        {"image_index_out_of_range": 2},
    ),
    (
        "the answer repeats a step's box: cited once",
        SQUARE3,
        {"render_pixels": 750_000},
        {"response": f"<think>a {box(1, 2, 3, 4, 1)}</think><answer>b {box(1, 2, 3, 4, 1)}</answer>"},
        [{"page": 1, "bbox": [1.0, 2.0, 3.0, 4.0]}],
        {"duplicate": 1},
    ),
    (
        "--lat-boxes answer keeps only the answer's source box",
        SQUARE3,
        {"render_pixels": 750_000, "lat_boxes": "answer"},
        {"response": f"<think>a {box(1, 2, 3, 4, 1)}</think><answer>b {box(5, 6, 7, 8, 3)}</answer>"},
        [{"page": 3, "bbox": [5.0, 6.0, 7.0, 8.0]}],
        {},
    ),
    (
        "a reversed box is kept as written (the scorer normalises it and counts it malformed)",
        SQUARE3,
        {"render_pixels": 750_000},
        {"response": box(300, 150, 100, 50, 1)},
        [{"page": 1, "bbox": [300.0, 150.0, 100.0, 50.0]}],
        {},
    ),
    (
        "LAT's evaluation.py record: idx row, model_output a list of one text, unreadable box counted",
        SQUARE3,
        {"render_pixels": 750_000},
        {"idx": 0, "result": {"model_output": ['<answer>x Bounding box: {"bbox_2d": [1, 2, "a", 4]}</answer>']}},
        [],
        {"unparsed_box": 1},
    ),
    (
        "only extracted_answer stored (image_id key, 1-based)",
        SQUARE3,
        {"render_pixels": 750_000},
        {"idx": 0, "result": {"extracted_answer": [{"bbox": [7, 8, 9, 10], "image_id": 3}]}},
        [{"page": 3, "bbox": [7.0, 8.0, 9.0, 10.0]}],
        {},
    ),
]


@pytest.mark.parametrize(("why", "sizes", "kwargs", "record", "expected", "drops"), LAT_CASES, ids=lambda v: "")
def test_lat_record_conversion(why, sizes, kwargs, record, expected, drops):
    # These cases are about reading and placing boxes, most outside an <answer> block: every box is cited.
    conv = Converter("lat", StubDocs(sizes), **{"lat_boxes": "all", **kwargs})
    out = conv.convert(record, GOLD, "in.jsonl:1")
    assert out["interface"] == "coordinate"
    assert out["index"] == "q1"
    assert out["citations"] == expected, why
    assert out["convert"]["dropped"] == drops, why


def test_lat_default_cites_only_the_answer_boxes_as_lats_own_evaluation_and_all_gives_the_steps_too():
    # LAT's IoU@0.5 reads only the <answer> boxes.
    record = {"response": f"<think>a {box(1, 2, 3, 4, 1)}</think><answer>b {box(5, 6, 7, 8, 3)}</answer>"}
    out = Converter("lat", StubDocs(SQUARE3), render_pixels=750_000).convert(record, GOLD, "in.jsonl:1")
    assert out["citations"] == [{"page": 3, "bbox": [5.0, 6.0, 7.0, 8.0]}]
    assert out["convert"]["lat_boxes"] == "answer"
    old = Converter("lat", StubDocs(SQUARE3), render_pixels=750_000, lat_boxes="all").convert(record, GOLD, "x:1")
    assert old["citations"] == [{"page": 1, "bbox": [1.0, 2.0, 3.0, 4.0]}, {"page": 3, "bbox": [5.0, 6.0, 7.0, 8.0]}]
    # A response without an <answer> block has no answer boxes to score.
    bare = Converter("lat", StubDocs(SQUARE3), render_pixels=750_000).convert({"response": box(1, 2, 3, 4, 1)},
                                                                              GOLD, "in.jsonl:1")  # fmt: skip
    assert bare["citations"] == []


def test_lat_without_any_image_size_stops_with_a_clear_error():
    conv = Converter("lat", StubDocs(SQUARE3), lat_boxes="all")
    with pytest.raises(InputError, match=r"^in.jsonl:7: the pixel size of the page images is unknown"):
        conv.convert({"index": "q1", "response": box(1, 2, 3, 4, 1)}, GOLD, "in.jsonl:7")


# ---------------------------------------------------------------------------------------------- MultAttnAttrib
FIG_BLOCKS = [
    Block(0, 2, (100.0, 100.0, 400.0, 300.0), "figure", ""),
    Block(1, 2, (100.0, 320.0, 400.0, 340.0), "figure_caption", "Figure 1: x"),
    Block(2, 1, (50.0, 50.0, 450.0, 200.0), "text", "some text"),
]

MAA_CASES = [
    # (why, record, expected citations, expected quotes, expected drops)
    (
        "text_quote and text_quotes become quotes (duplicates once, empty ones left out)",
        {"text_quote": "Alpha beta.", "text_quotes": ["Gamma.", "Alpha beta.", "  "], "image_indices": []},
        [],
        ["Alpha beta.", "Gamma."],
        {},
    ),
    (
        "[Image 1] (0-based) lies over the figure block of page 2: its box, clipped to the page, is cited",
        {"text_quote": "", "image_indices": [1]},
        [{"page": 2, "bbox": [90.0, 95.0, 410.0, 500.0], "image_index": 1}],
        [],
        {},
    ),
    (
        "[Image 0] sits on page 1 where no figure block is: unresolvable; [Image 5] does not exist",
        {"image_indices": [0, 5]},
        [],
        [],
        {"image_no_figure_block": 1, "image_index_out_of_range": 1},
    ),
]


@pytest.mark.parametrize(("why", "record", "expected", "quotes", "drops"), MAA_CASES, ids=lambda v: "")
def test_multattnattrib_record_conversion(why, record, expected, quotes, drops):
    images = [(1, (50.0, 50.0, 450.0, 200.0)), (2, (90.0, 95.0, 410.0, 900.0))]  # page 2 is 500 pt tall
    conv = Converter("multattnattrib", StubDocs(SQUARE3, FIG_BLOCKS, images))
    out = conv.convert({"index": "q1", **record}, GOLD, "in.jsonl:1")
    assert out["interface"] == "language"
    assert out["citations"] == expected, why
    assert out["fixed_citations"] == expected
    assert json.loads(out["response"]) == {"answer": "gold answer", "quotes": quotes}
    assert out["convert"]["dropped"] == drops, why
    assert out["convert"]["answer_source"] == "gold"


def test_multattnattrib_answer_and_image_list_from_the_record():
    conv = Converter("multattnattrib", StubDocs(SQUARE3, FIG_BLOCKS), image_list={"d": [[3, 0, 0, 10, 10]]})
    rec = {"index": "q1", "reference_answer": "42", "image_indices": [0], "images": [[2, 150, 150, 200, 200]]}
    out = conv.convert(rec, GOLD, "in.jsonl:1")
    assert out["citations"] == [{"page": 2, "bbox": [150.0, 150.0, 200.0, 200.0], "image_index": 0}]
    assert out["answer"] == "42" and out["convert"]["answer_source"] == "record"
    # Without the record's list, --image-list places [Image 0] on page 3, which has no figure block.
    out = conv.convert({"index": "q1", "image_indices": [0]}, GOLD, "in.jsonl:2")
    assert out["citations"] == [] and out["convert"]["dropped"] == {"image_no_figure_block": 1}


def test_multattnattrib_images_are_read_from_the_pdf_when_no_list_is_given(tmp_path):
    from PIL import Image
    from reportlab.pdfgen import canvas

    from data_prep.parsers import get_parser

    png = tmp_path / "chart.png"
    Image.new("RGB", (200, 100), (30, 90, 200)).save(png)
    pdf = tmp_path / "img.pdf"
    c = canvas.Canvas(str(pdf), pagesize=(500, 500), invariant=1)
    c.setFont("Helvetica", 11)
    c.drawString(50, 450, "Solar output rose sharply in the summer months of the study.")
    c.showPage()
    c.drawString(50, 450, "The chart below shows the monthly output.")
    c.drawImage(str(png), 100, 100, width=300, height=150)  # display box: x 100..400, y 250..400
    c.drawString(50, 80, "Figure 1: Monthly output.")
    c.showPage()
    c.save()
    cached = build_cache(pdf, get_parser("pdftext"), None, tmp_path / "cache")
    assert any(b.type == "figure" and b.page == 2 for b in cached.blocks)
    write_jsonl(tmp_path / "gold.jsonl", [{"index": 0, "doc_key": cached.key, "question": "q", "answer": "a",
                                           "gt_necessary": [[2, 100, 250, 400, 400]], "gt_all": []}])  # fmt: skip
    write_jsonl(tmp_path / "in.jsonl", [{"index": 0, "image_indices": [0, 1]}])
    conv = Converter("multattnattrib", convert_mod.Documents(tmp_path / "cache"))
    stats = convert_file(tmp_path / "in.jsonl", tmp_path / "gold.jsonl", tmp_path / "out.jsonl", conv)
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["citations"] == [{"page": 2, "bbox": [100.0, 250.0, 400.0, 400.0], "image_index": 0}]
    assert stats["dropped:image_index_out_of_range"] == 1  # the PDF has one image


# ---------------------------------------------------------------------------------------------- malformed input
MALFORMED = [
    # (why, system, line, message after "in.jsonl:2: ")
    ("no join key", "lat", {"response": "x"}, "record has neither index"),
    ("unknown gold index", "lat", {"index": "zz", "response": "x"}, "index 'zz' is not in the gold file"),
    ("idx past the gold rows", "lat", {"idx": 5, "response": "x"}, "idx 5 is not a 0-based row"),
    ("a response that is a number", "lat", {"index": "q1", "response": 3}, "response must be a string"),
    ("two texts in model_output", "lat", {"index": "q1", "model_output": ["a", "b"]}, "model_output must be a"),
    ("nothing to read", "lat", {"index": "q1"}, "LAT record has no response"),
    ("pages out of the document", "lat", {"index": "q1", "response": "x", "pages": [4]}, "pages must be"),
    (
        "image_sizes of the wrong length",
        "lat",
        {"index": "q1", "response": box(1, 2, 3, 4, 1), "image_sizes": [[10, 10]]},
        "image_sizes must be one",
    ),  # fmt: skip
    ("image_indices of strings", "multattnattrib", {"index": "q1", "image_indices": ["1"]}, "image_indices must be"),
    ("text_quote a list", "multattnattrib", {"index": "q1", "text_quote": ["a"]}, "text_quote must be a string"),
    ("text_spans of numbers", "multattnattrib", {"index": "q1", "text_spans": [1]}, "text_spans must be a list"),
]


@pytest.mark.parametrize(("why", "system", "line", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_records_name_the_input_line(tmp_path, monkeypatch, why, system, line, message):
    write_jsonl(tmp_path / "gold.jsonl", [{**GOLD.to_json(), "index": "q0"}, GOLD.to_json()])
    (tmp_path / "in.jsonl").write_text(json.dumps({"index": "q0", "response": ""}) + "\n" + json.dumps(line) + "\n")
    kw = {"lat_boxes": "all"} if system == "lat" else {}
    conv = Converter(system, StubDocs(SQUARE3, FIG_BLOCKS), render_pixels=750_000, **kw)
    with pytest.raises(InputError) as e:
        convert_file(tmp_path / "in.jsonl", tmp_path / "gold.jsonl", tmp_path / "out.jsonl", conv)
    assert str(e.value).startswith(f"{tmp_path / 'in.jsonl'}:2: {message}"), why
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out.jsonl").exists()


def test_the_same_question_twice_is_an_error(tmp_path):
    write_jsonl(tmp_path / "gold.jsonl", [GOLD.to_json()])
    write_jsonl(tmp_path / "in.jsonl", [{"index": "q1", "response": ""}, {"idx": 0, "response": ""}])
    conv = Converter("lat", StubDocs(SQUARE3), render_pixels=750_000)
    with pytest.raises(InputError, match=r"in.jsonl:2: gold index 'q1' already converted from line 1"):
        convert_file(tmp_path / "in.jsonl", tmp_path / "gold.jsonl", tmp_path / "out.jsonl", conv)


# ---------------------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def sample_cache(tmp_path_factory):
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    d = tmp_path_factory.mktemp("convert")
    pdf = write_sample_pdf(d / "sample.pdf")
    return build_cache(pdf, get_parser("pdftext"), get_encoder("minilm"), d / "cache")


def block_of(cached, key):
    fact = SAMPLE_FACTS.fact(key)
    norm = " ".join(fact.text.replace(" | ", " ").split())
    hits = [b for b in cached.blocks if b.page == fact.page and norm in " ".join(b.text.replace(" | ", " ").split())]
    assert len(hits) == 1, key
    return hits[0]


def sample_gold(cached):
    qa = SAMPLE_FACTS.qa
    rows = []
    for i, q in enumerate(qa):
        blocks = [block_of(cached, k) for k in q.evidence]
        els = [[b.page, *b.bbox] for b in blocks]
        rows.append({"index": i, "doc_key": cached.key, "question": q.question, "answer": q.answer, "language": "en",
                     "qtype": "Factual Retrieval", "gt_necessary": els, "gt_all": els})  # fmt: skip
    return rows


def run_cli(*argv):
    return cli_main("eval", "", COMMANDS, [str(a) for a in argv])


def test_lat_outputs_convert_and_score_with_the_expected_recall(sample_cache, tmp_path, capsys):
    cached = sample_cache
    gold = sample_gold(cached)
    write_jsonl(tmp_path / "gold.jsonl", gold)
    total = 2_000_000  # 4 pages -> 500,000 px per page, below the 1 MP cap
    budget = Document.page_pixel_budget(cached.n_pages, total)
    sizes = [page_image_size(s, budget) for s in cached.page_sizes]

    def lat_box(b, image=None):
        (w, h), (iw, ih) = cached.page_sizes[b.page - 1], sizes[b.page - 1]
        px = [
            round(b.bbox[0] * iw / w),
            round(b.bbox[1] * ih / h),
            round(b.bbox[2] * iw / w),
            round(b.bbox[3] * ih / h),
        ]
        return "Bounding box: " + json.dumps({"bbox_2d": px, "Image_index": image or b.page})

    ev = [[block_of(cached, k) for k in q.evidence] for q in SAMPLE_FACTS.qa]
    records = [
        # both evidence elements, one per step: recall 1
        {
            "idx": 0,
            "result": {
                "model_output": [
                    f"<think>a {lat_box(ev[0][0])} b {lat_box(ev[0][1])}</think>"
                    f"<answer>Shenzhen {lat_box(ev[0][1])}</answer>"
                ]
            },
        },  # fmt: skip
        # the right box with the wrong image index (page 1 instead of 2): recall 0
        {"index": 1, "response": f"<answer>214.5 MWh {lat_box(ev[1][0], image=1)}</answer>"},
        # one of two elements: recall 0.5
        {"index": 2, "response": f"<answer>July {lat_box(ev[2][0])}</answer>"},
        # the rotated page, displayed landscape: recall 1
        {"index": 3, "response": f"<answer>Every 14 days {lat_box(ev[3][0])}</answer>"},
    ]
    write_jsonl(tmp_path / "lat.jsonl", records)

    def convert_and_score(name: str, *extra) -> tuple[str, dict]:
        rc = run_cli("convert", "--from", "lat", "--input", tmp_path / "lat.jsonl", "--gold", tmp_path / "gold.jsonl",
                     "--cache-dir", cached.path.parent, "--render-pixels", total, "--out", tmp_path / f"{name}.jsonl",
                     *extra)  # fmt: skip
        assert rc == 0
        summary = capsys.readouterr().out
        rc = run_cli("score", "--gold", tmp_path / "gold.jsonl", "--pred", tmp_path / f"{name}.jsonl", "--cache-dir",
                     cached.path.parent, "--no-report", "--out", tmp_path / name)  # fmt: skip
        assert rc == 0
        return summary, json.loads((tmp_path / name / "metrics.json").read_text())

    # Default (LAT's own evaluation): only the <answer> boxes; question 0's answer cites one of its two elements.
    summary, m = convert_and_score("answer")
    assert "converted 4 records" in summary and "4 citations" in summary and "dropped: none" in summary
    assert m["recall"]["0.5"] == pytest.approx((0.5 + 0 + 0.5 + 1) / 4)
    assert m["recall"]["0.7"] == pytest.approx((0.5 + 0 + 0.5 + 1) / 4)  # integer pixels lose < 1 pt
    # --lat-boxes all: the chain's step boxes count too (the earlier default).
    summary, m = convert_and_score("all", "--lat-boxes", "all")
    assert "converted 4 records" in summary and "5 citations" in summary and "duplicate: 1" in summary
    assert m["recall"]["0.5"] == pytest.approx((1 + 0 + 0.5 + 1) / 4)
    # same-page recall: question 2's uncited element is on the cited page 3; question 1 cites page 1, not 2
    assert m["recall"]["page"] == pytest.approx((1 + 0 + 1 + 1) / 4)
    assert m["format_rate"] == 1.0


def test_wrong_render_size_is_what_the_conversion_guards_against(sample_cache, tmp_path):
    # The same LAT boxes read as if the pages had been rendered at the 1 MP cap: every box shrinks by
    # sqrt(0.5), and IoU with the gold falls below 0.5 -- the reason the image size is required.
    cached = sample_cache
    b = block_of(cached, "table_row")
    (w, h) = cached.page_sizes[1]
    iw, ih = page_image_size((w, h), 500_000)
    px = [b.bbox[0] * iw / w, b.bbox[1] * ih / h, b.bbox[2] * iw / w, b.bbox[3] * ih / h]
    rec = {"index": 0, "response": "Bounding box: " + json.dumps({"bbox_2d": px, "Image_index": 2})}
    gold = Gold(0, cached.key, "q", "a", "en", "", (Element(2, b.bbox),), ())
    docs = convert_mod.Documents(cached.path.parent)
    rec["response"] = f"<answer>{rec['response']}</answer>"
    right = Converter("lat", docs, render_pixels=2_000_000).convert(rec, gold, "x:1")["citations"][0]["bbox"]
    wrong = Converter("lat", docs, render_pixels=4_000_000).convert(rec, gold, "x:1")["citations"][0]["bbox"]
    from eval.boxes import iou

    assert iou(right, b.bbox) > 0.99
    assert iou(wrong, b.bbox) < 0.5


def test_multattnattrib_spans_resolve_and_score_with_the_expected_recall(sample_cache, tmp_path, capsys):
    cached = sample_cache
    gold = sample_gold(cached)
    fig = next(b for b in cached.blocks if b.type == "figure")
    gold[2]["gt_necessary"] = gold[2]["gt_all"] = [[fig.page, *fig.bbox]]  # question 2's evidence: the chart
    write_jsonl(tmp_path / "gold.jsonl", gold)
    f = SAMPLE_FACTS.fact
    records = [
        # both evidence sentences quoted verbatim: recall 1 after resolve
        {
            "index": 0,
            "text_quote": f("en_sentence").text,
            "text_quotes": [f("table_row").text.replace(" | ", " ")],
            "image_indices": [],
        },  # fmt: skip
        # a sentence from another page: recall 0
        {"index": 1, "text_quote": f("rotated_sentence").text, "image_indices": []},
        # the chart as [Image 0] (image list given: the chart's drawing on page 3): recall 1 without resolve
        {"index": 2, "text_quote": "", "image_indices": [0], "images": [[fig.page, *fig.bbox]]},
        # nothing cited: recall 0
        {"index": 3, "text_quote": "", "image_indices": []},
    ]
    write_jsonl(tmp_path / "maa.jsonl", records)
    rc = run_cli("convert", "--from", "multattnattrib", "--input", tmp_path / "maa.jsonl", "--gold",
                 tmp_path / "gold.jsonl", "--cache-dir", cached.path.parent, "--out", tmp_path / "conv.jsonl")  # fmt: skip
    assert rc == 0
    assert "3 quotes (run eval resolve), 1 image citations; 1 without any" in capsys.readouterr().out
    rows = [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]
    assert [r["interface"] for r in rows] == ["language"] * 4

    # Image citations are scored as converted.
    write_jsonl(tmp_path / "images_only.jsonl", [rows[2]])
    rc = run_cli("score", "--gold", tmp_path / "gold.jsonl", "--pred", tmp_path / "images_only.jsonl",
                 "--no-report", "--out", tmp_path / "s_img")  # fmt: skip
    assert rc == 0
    m = json.loads((tmp_path / "s_img" / "metrics.json").read_text())
    assert m["recall"]["0.5"] == pytest.approx(1 / 4)  # the three other questions have no prediction

    # Spans go through eval resolve (the reward's embedding resolver) before scoring.
    rc = run_cli("resolve", "--pred", tmp_path / "conv.jsonl", "--gold", tmp_path / "gold.jsonl", "--cache-dir",
                 cached.path.parent, "--out", tmp_path / "pred.jsonl")  # fmt: skip
    assert rc == 0
    resolved = {r["index"]: r for r in map(json.loads, (tmp_path / "pred.jsonl").read_text().splitlines())}
    assert sorted(c["block_id"] for c in resolved[0]["citations"]) == sorted(
        b.block_id for b in (block_of(cached, "en_sentence"), block_of(cached, "table_row"))
    )
    rc = run_cli("score", "--gold", tmp_path / "gold.jsonl", "--pred", tmp_path / "pred.jsonl", "--no-report",
                 "--out", tmp_path / "s")  # fmt: skip
    assert rc == 0
    m = json.loads((tmp_path / "s" / "metrics.json").read_text())
    # eval resolve keeps the converter's ``fixed_citations`` (question 2's image citation has no quote).
    assert [c["page"] for c in resolved[2]["citations"]] == [c["page"] for c in rows[2]["fixed_citations"]]
    assert m["recall"]["0.5"] == pytest.approx((1 + 0 + 1 + 0) / 4)


def test_summary_counts_drops_by_reason():
    s = Counter({"records": 3, "citations": 2, "without_citation": 1, "missing": 4, "dropped:duplicate": 2})
    assert convert_mod.format_summary(s, "p.jsonl") == (
        "converted 3 records -> p.jsonl: 2 citations; 1 without any; 4 gold questions without a record; "
        "dropped: duplicate: 2"
    )
