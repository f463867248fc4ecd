"""The LAT interface in evaluation (eval/lat.py): ``eval infer --interface lat``, ``eval resolve`` of its boxes and
LAT's metrics in ``eval score``, on the project's sample PDF with the MiniLM cache."""

from __future__ import annotations

import json
import math

import pytest

from core.errors import InputError
from data_prep.cache import DocCache
from data_prep.sample import SAMPLE_FACTS
from eval.cmd_resolve import Resolver, resolve_file
from eval.infer import PromptTemplate, run_inference
from eval.lat import answer_iou50, lat_citations, lat_metrics
from eval.schemas import Element, Gold, Prediction, read_predictions, write_jsonl
from reward.lat import LatSettings, parse_coe

CAPTION = SAMPLE_FACTS.fact("table_caption").text
ROW = SAMPLE_FACTS.fact("table_row").text


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("lat-eval"))


def block(cache, text):
    return next(b for b in cache.blocks if text in b.text)


def box(cache, b, image=None) -> str:
    w, h = cache.page_sizes[b.page - 1]
    x0, y0, x1, y1 = b.bbox
    g = [math.floor(x0 / w * 1000), math.floor(y0 / h * 1000), math.ceil(x1 / w * 1000), math.ceil(y1 / h * 1000)]
    return json.dumps({"bbox_2d": g, "Image_index": image or b.page})


def coe(cache, steps, answer="Shenzhen", answer_block=None) -> str:
    think = " ".join(f"{t}\nBounding box: {box(cache, b)}" for t, b in steps)
    tail = f"\nBounding box: {box(cache, answer_block)}" if answer_block is not None else ""
    return f"<think>{think}</think>\n<answer>{answer}{tail}</answer>"


def gold(cache, index=0, answer="Shenzhen") -> Gold:
    t = block(cache, "Shenzhen | 150")
    e = (Element(t.page, tuple(t.bbox)),)
    return Gold(index, cache.key, "Which test site had the highest annual yield?", answer, "en", "t", e, e)


class CoEGenerator:
    def __init__(self, text: str) -> None:
        self.text = text
        self.seen = []

    def generate(self, requests):
        self.seen.extend(requests)
        return [self.text for _ in requests]


def test_infer_with_the_lat_interface_asks_for_the_chain_and_records_its_answer(cache, sample_pdf, tmp_path):
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    gen = CoEGenerator(coe(cache, [(CAPTION, cap), (ROW, table)], answer_block=table))
    out = tmp_path / "pred.jsonl"
    counts = run_inference([gold(cache)], gen, out, "lat", lambda g: sample_pdf, template=PromptTemplate("lat"))
    assert counts["generated"] == 1
    (req,) = gen.seen
    assert '"bbox_2d"' in (req.system or "") + req.user_text
    assert "Image_index" in (req.system or "") + req.user_text and req.user_text.strip().startswith("Which test site")
    assert len(req.images) == 4  # every page, in order: Image_index N is page N
    (p,) = read_predictions(out)
    assert (p.interface, p.answer) == ("lat", "Shenzhen")


def test_resolve_turns_every_box_into_a_citation_in_points(cache, tmp_path):
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    text = coe(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    gpath, ppath, out = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl", tmp_path / "resolved.jsonl"
    write_jsonl(gpath, [gold(cache).to_json()])
    write_jsonl(ppath, [{"index": 0, "interface": "lat", "response": text, "answer": "", "citations": []}])
    resolve_file(gpath, ppath, out, Resolver(DocCache(cache.path.parent), resolver="lexical"))
    (p,) = read_predictions(out)
    assert p.answer == "Shenzhen"
    assert [c.page for c in p.citations] == [2, 2]  # the answer's box repeats the table step: kept once
    for c, b in zip(p.citations, (cap, table), strict=True):
        assert all(abs(u - v) < 1.0 for u, v in zip(c.bbox, b.bbox, strict=True))  # grid rounding < 1 pt
        assert all(u <= v for u, v in zip(c.bbox[:2], b.bbox[:2], strict=True))  # rounded outwards
    assert p.extra["resolve"]["duplicate"] == 1 and p.extra["resolve"]["n_steps"] == 2


def test_citations_follow_the_pages_shown_and_drop_what_cannot_be_placed():
    parsed = parse_coe(
        '<think>A. {"bbox_2d": [0, 0, 100, 100], "Image_index": 1} B. {"bbox_2d": [0, 0, 100, 100], "Image_index": 3}'
        ' C. {"bbox_2d": [500, 0, 100, 100], "Image_index": 2}</think><answer>x</answer>'
    )
    cits, info = lat_citations(parsed, [(100.0, 100.0)] * 5, pages=[4, 5])
    assert cits == [{"page": 4, "bbox": [0.0, 0.0, 10.0, 10.0]}]  # image 3 was not shown; C is reversed
    assert info == {"n_boxes": 3, "unplaced": 2, "duplicate": 0}
    with pytest.raises(ValueError, match="mode"):
        lat_citations(parsed, [(1.0, 1.0)], mode="steps")


def test_lat_metrics_hand_computed(cache):
    cap, table, footer = block(cache, CAPTION), block(cache, "Shenzhen | 150"), block(cache, "Page 2 of 4")
    docs = DocCache(cache.path.parent)
    preds = [
        # right answer, answer box = gold table, both steps supported, disjoint: EM 1, IoU 1, SA 1
        coe(cache, [(CAPTION, cap), (ROW, table)], answer_block=table),
        # empty answer (EM 0: LAT's script would count it), answer box on the caption (IoU 0), a step on the footer
        # whose text is not there (SA 0)
        coe(cache, [(CAPTION, cap), (ROW, footer)], answer="", answer_block=cap),
        # one supported step only: SA 0.5 (no chain of two); answer contains the gold: EM 1
        coe(cache, [(ROW, table)], answer="Shenzhen site", answer_block=table),
    ]
    golds = [gold(cache, i) for i in range(4)]
    ps = [Prediction(i, "lat", t, parse_coe(t).answer, ()) for i, t in enumerate(preds)] + [None]  # one missing
    m = lat_metrics(golds, ps, docs)
    assert m["n"] == 4 and m["n_lat"] == 3
    assert m["soft_em"] == pytest.approx(2 / 4)
    assert m["iou50"] == pytest.approx(2 / 4)
    assert m["stepwise_attribution"] == pytest.approx((1.0 + 0.0 + 0.5) / 3)
    assert m["sa_embedder"] == "text-layer:minilm"


def test_other_interfaces_get_soft_em_and_iou_from_their_citations(cache):
    from eval.schemas import Cited

    table = block(cache, "Shenzhen | 150")
    g = gold(cache)
    coord = Prediction(0, "coordinate", "", "Shenzhen", (Cited(table.page, tuple(table.bbox)),))
    m = lat_metrics([g], [coord])
    assert (m["soft_em"], m["iou50"], m["stepwise_attribution"]) == (1.0, 1.0, None)
    assert answer_iou50([(3, table.bbox)], g.gt_all) == 0.0  # right box, wrong page


def test_eval_score_reports_lat_metrics_beside_ours(cache):
    from eval.cmd_score import score

    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    text = coe(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    cits, _ = lat_citations(parse_coe(text), cache.page_sizes)
    from eval.schemas import Cited

    p = Prediction(0, "lat", text, "Shenzhen", tuple(Cited(c["page"], tuple(c["bbox"])) for c in cits))
    run = score([gold(cache)], [p], docs=DocCache(cache.path.parent))
    assert run.analyses["lat"]["soft_em"] == 1.0 and run.analyses["lat"]["stepwise_attribution"] == 1.0
    assert run.analyses["lat"]["iou50"] == 1.0
    assert LatSettings().tau == 0.3


@pytest.mark.parametrize("pages", ["2", {"1": 2}, [0], [99], [1, "2"], [True], [1.5], 3])
def test_a_pages_field_that_is_not_page_numbers_of_the_document_is_refused_naming_the_prediction(cache, tmp_path,
                                                                                               pages):  # fmt: skip
    # the pages eval infer showed map each image to its PDF page: a string, an object, 0 or a page past the end
    # would place a citation on no page or another one (a wrong number) or crash (an index past the sizes)
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    text = coe(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    gpath, ppath, out = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl", tmp_path / "resolved.jsonl"
    write_jsonl(gpath, [gold(cache).to_json()])
    write_jsonl(ppath, [{"index": 0, "interface": "lat", "response": text, "answer": "", "citations": [],
                         "pages": pages}])  # fmt: skip
    with pytest.raises(InputError, match="prediction 0: field 'pages'"):
        resolve_file(gpath, ppath, out, Resolver(DocCache(cache.path.parent), resolver="lexical"))
    assert not out.exists()
