"""MultAttrEval's metric (eval/multattreval.py, the MultAttnAttrib paper's Appendix 11) against hand-computed
cases, then inside ``eval score`` on the project's sample PDF."""

from __future__ import annotations

import json

import pytest

from data_prep.sample import SAMPLE_FACTS
from eval.multattreval import macro, score_item, similarity, tier

GOLD = "revenue grew by twelve percent in the last year"  # 9 words


@pytest.mark.parametrize(
    "pred, gold, p, r",
    [
        (GOLD, GOLD, 1.0, 1.0),
        ("revenue grew by twelve percent", GOLD, 1.0, 5 / 9),  # under-quoting: recall * 5/9
        (GOLD + " while costs fell sharply", GOLD, 9 / 13, 1.0),  # over-quoting: precision * 9/13
        ("Revenue  grew by TWELVE percent in the last year.", GOLD, 1.0, 1.0),  # case, spaces, full stop
        ("completely unrelated sentence about weather", GOLD, 0.0, 0.0),
    ],
)
def test_text_span_scores(pred, gold, p, r):
    s = score_item([pred], [gold])
    assert (s.precision, s.recall) == (pytest.approx(p), pytest.approx(r))
    assert s.f1 == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)


def test_the_three_tiers_use_rapidfuzz_partial_ratio():
    from rapidfuzz import fuzz

    a, b = "revenue rose by 12 percent", GOLD  # partial_ratio 69.8
    s = similarity(a, b)
    assert s == pytest.approx(fuzz.partial_ratio(a, b) / 100)
    assert 0.6 <= s < 0.9 and tier(s) == 0.5  # a near miss is half a citation
    item = score_item([a], [b])
    assert item.precision == pytest.approx(0.5 * 1.0) and item.recall == pytest.approx(0.5 * 5 / 9)


def test_images_by_exact_match_and_mixed_items():
    s = score_item([GOLD], [GOLD], pred_images=[3, 5], gold_images=[3, 7])
    # predictions: span 1, image 3 -> 1, image 5 -> 0; gold: span 1, image 3 -> 1, image 7 -> 0
    assert (s.precision, s.recall, s.n_pred, s.n_gold) == (pytest.approx(2 / 3), pytest.approx(2 / 3), 3, 3)
    empty = score_item([], [GOLD])
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)
    m = macro([s, empty])
    assert m == {"n": 2, "precision": pytest.approx(1 / 3), "recall": pytest.approx(1 / 3), "f1": pytest.approx(1 / 3)}


def test_best_counterpart_among_several_spans():
    s = score_item(["net income fell"], ["net income fell", GOLD])
    assert (s.precision, s.recall) == (1.0, pytest.approx(0.5))  # one of the two gold spans is recalled


def test_in_eval_score_on_the_sample_pdf(sample_pdf, tmp_path):
    from data_prep.cache import DocCache, build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from eval.cmd_score import score
    from eval.schemas import Cited, Element, Gold, Prediction

    cache = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path / "cache")
    caption = SAMPLE_FACTS.fact("figure_caption").text
    other = SAMPLE_FACTS.fact("list_item").text  # partial_ratio with the caption 0.45: tier 0
    cap = next(b for b in cache.blocks if b.text == caption)
    fig = next(b for b in cache.blocks if b.type == "figure")
    els = (Element(cap.page, tuple(cap.bbox)), Element(fig.page, tuple(fig.bbox)))
    g = Gold(0, cache.key, "In which month does the output peak?", "July", "en", "t", els, els, ("text", "figure"))
    language = Prediction(0, "language", json.dumps({"answer": "July", "quotes": [caption, other]}), "July", ())
    coordinate = Prediction(0, "coordinate", "", "July", (Cited(fig.page, tuple(fig.bbox)),))
    docs = DocCache(cache.path.parent)
    lang = score([g], [language], docs=docs).analyses["multattreval"]
    # precision: the caption quote matches (1), the list item does not (0) -> 1/2; recall: caption 1, figure 0 -> 1/2
    assert (lang["precision"], lang["recall"]) == (pytest.approx(0.5), pytest.approx(0.5))
    coord = score([g], [coordinate], docs=docs).analyses["multattreval"]
    assert (coord["precision"], coord["recall"]) == (1.0, 0.5)  # the figure, by exact match; the caption missed
