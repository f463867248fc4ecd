"""The scoring rules of eval/metrics.py, each on a hand-computed case."""

from __future__ import annotations

import pytest

from eval.metrics import (
    METRICS,
    JudgeOutcome,
    QuestionResult,
    ScoringConfig,
    aggregate,
    get_metric,
    metric_docs,
    parser_ceiling_question,
    score_boxes,
)
from eval.schemas import Cited, Element, Gold, Prediction

A = (0.0, 0.0, 100.0, 100.0)  # element A on page 1
B = (0.0, 200.0, 100.0, 300.0)  # element B on page 1
C = (0.0, 0.0, 100.0, 100.0)  # element C on page 2 (same box as A, other page)


def gold(necessary, all_=None, index=0, language="en", qtype="Factual Retrieval", types=None) -> Gold:
    nec = tuple(Element(p, b) for p, b in necessary)
    alls = tuple(Element(p, b) for p, b in (all_ if all_ is not None else necessary))
    return Gold(index, "doc", "q?", "gold answer", language, qtype, nec, alls, types)


def cite(page, box, similarity=None) -> Cited:
    return Cited(page, tuple(float(v) for v in box), similarity)


def pred(citations, index=0) -> Prediction:
    return Prediction(index, "language", "{}", "answer", tuple(citations))


# ---------------------------------------------------------------------------------------------- box rules
def test_exact_citation_of_the_only_element_scores_one_everywhere():
    s = score_boxes(gold([(1, A)]), [cite(1, A)])
    assert s.recall == {"page": 1.0, "0.1": 1.0, "0.3": 1.0, "0.5": 1.0, "0.7": 1.0}
    assert (s.precision, s.f1, s.n_citations) == (1.0, 1.0, 1)


def test_question_with_no_citation_scores_recall_zero_f1_zero_and_no_precision():
    s = score_boxes(gold([(1, A)]), [])
    assert s.recall == {"page": 0.0, "0.1": 0.0, "0.3": 0.0, "0.5": 0.0, "0.7": 0.0}
    assert s.precision is None
    assert s.f1 == 0.0


def test_box_covering_two_annotated_elements_counts_two_in_precision():
    # One box spanning A and B (both on page 1). IoU with each: 100*100 / (100*300) = 1/3.
    big = (0.0, 0.0, 100.0, 300.0)
    g = gold([(1, A), (1, B)])
    s = score_boxes(g, [cite(1, big)], ScoringConfig(main_iou=0.3))
    assert s.recall["0.3"] == 1.0
    assert s.precision == 2.0  # two annotated elements hit / one citation: can exceed 1 (loop semantics)
    assert s.f1 == pytest.approx(2 * 2.0 * 1.0 / 3.0)
    assert s.recall["0.5"] == 0.0  # at the main threshold 1/3 is too little


def test_two_citations_on_one_element_count_once_in_the_numerator():
    g = gold([(1, A), (1, B)])
    s = score_boxes(g, [cite(1, A), cite(1, (0.0, 0.0, 100.0, 90.0))])
    assert s.recall["0.5"] == 0.5  # A found, B not
    assert s.precision == 0.5  # one annotated element hit, two citations
    assert s.f1 == pytest.approx(0.5)
    assert s.citation_hit == (True, True)


def test_right_box_on_the_wrong_page_is_no_match_at_any_threshold_or_page_level():
    s = score_boxes(gold([(2, C)]), [cite(1, C)])
    assert s.recall == {"page": 0.0, "0.1": 0.0, "0.3": 0.0, "0.5": 0.0, "0.7": 0.0}
    assert s.precision == 0.0
    assert s.f1 == 0.0


def test_iou_exactly_at_the_threshold_matches():
    s = score_boxes(gold([(1, A)]), [cite(1, (0.0, 0.0, 100.0, 50.0))])  # IoU 0.5
    assert s.recall["0.5"] == 1.0
    assert s.recall["0.7"] == 0.0


def test_same_page_recall_is_citevqas_distinct_page_share_and_the_option_gives_the_element_share():
    # A and B share page 1, C is on page 2; one citation on page 1.
    g = gold([(1, A), (1, B), (2, C)])
    cits = [cite(1, (400.0, 400.0, 500.0, 500.0))]
    s = score_boxes(g, cits)
    assert s.recall["page"] == pytest.approx(1 / 2)  # CiteVQA: gold pages {1, 2}, cited {1}
    assert s.recall["0.1"] == 0.0
    assert s.necessary_hit["page"] == (True, True, False)  # per element, for the analyses, in both readings
    old = score_boxes(g, cits, ScoringConfig(page_recall="elements"))
    assert old.recall["page"] == pytest.approx(2 / 3)  # our earlier reading: elements A, B of 3
    with pytest.raises(ValueError, match="page_recall"):
        ScoringConfig(page_recall="distinct")


def test_precision_counts_optional_elements_but_recall_does_not():
    g = gold([(1, A)], all_=[(1, A), (1, B)])
    s = score_boxes(g, [cite(1, B)])
    assert s.recall["0.5"] == 0.0
    assert s.precision == 1.0  # B is annotated (optional): not an error
    assert s.f1 == 0.0  # recall 0 makes F1 0
    assert s.citation_hit == (False,) and s.citation_hit_all == (True,)


def test_reversed_citation_is_malformed_and_matches_nothing_but_the_option_normalises_it():
    # Raw-output semantics (CiteVQA's scorer gives a reversed box no overlap).
    reversed_a = Cited(1, (0.0, 0.0, 100.0, 100.0), malformed=True)  # as read from [100, 100, 0, 0]
    s = score_boxes(gold([(1, A)]), [reversed_a])
    assert s.recall["0.1"] == s.recall["0.5"] == 0.0 and s.precision == 0.0
    assert s.recall["page"] == 1.0  # it still names page 1
    assert s.n_malformed == 1
    old = score_boxes(gold([(1, A)]), [reversed_a], ScoringConfig(reversed_boxes="normalize"))
    assert old.recall["0.5"] == 1.0 and old.precision == 1.0
    assert old.n_malformed == 1


def test_zero_area_citation_counts_in_the_denominator_and_never_matches():
    s = score_boxes(gold([(1, A)]), [cite(1, A), cite(1, (10.0, 10.0, 10.0, 50.0))])
    assert s.recall["0.5"] == 1.0
    assert s.precision == 0.5
    assert s.recall["page"] == 1.0


def test_recall_is_the_share_of_necessary_elements_found():
    g = gold([(1, A), (1, B), (2, C)])
    s = score_boxes(g, [cite(1, A), cite(2, C)])
    assert s.recall["0.5"] == pytest.approx(2 / 3)
    assert s.precision == 1.0
    assert s.f1 == pytest.approx(2 * (2 / 3) / (1 + 2 / 3))


# ---------------------------------------------------------------------------------------------- aggregation
def _result(g, cits, judge=None):
    p = pred(cits, g.index)
    return QuestionResult(g, p, score_boxes(g, cits), judge)


def test_aggregation_means_recall_over_all_questions_and_precision_over_citing_ones():
    r1 = _result(gold([(1, A)], index=1), [cite(1, A)])  # recall 1, precision 1
    r2 = _result(gold([(1, A), (1, B)], index=2), [cite(1, A), cite(1, (500, 500, 600, 600))])  # 0.5, 0.5
    r3 = _result(gold([(1, A)], index=3), [])  # recall 0, no precision, F1 0
    m = aggregate([r1, r2, r3])
    assert m["n"] == 3
    assert m["recall"]["0.5"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["precision"] == pytest.approx((1 + 0.5) / 2)
    assert m["f1"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["format_rate"] == pytest.approx(2 / 3)
    assert m["citations_per_response"] == pytest.approx(1.0)
    assert m["counts"]["with_citation"] == 2
    assert "saa" not in m and "judge_failures" not in m


def test_missing_prediction_is_scored_as_an_empty_response_and_counted():
    g = gold([(1, A)])
    r = QuestionResult(g, None, score_boxes(g, []))
    m = aggregate([r, _result(gold([(1, A)], index=1), [cite(1, A)])])
    assert m["recall"]["0.5"] == 0.5
    assert m["counts"]["missing_predictions"] == 1


# ---------------------------------------------------------------------------------------------- judge rules
# (answer, relevance, citations) -> SAA, AH, strict SAA, strict AH for a single-element question.
JUDGE_CASES = [
    ((5, 5), [cite(1, A)], (1.0, 0.0, 1.0, 0.0)),  # right answer, relevant and found
    ((4, 2), [cite(1, A)], (1.0, 0.0, 0.0, 1.0)),  # irrelevant by judge but recall 1 >= 0.6: SAA yes, strict no
    ((4, 4), [], (1.0, 0.0, 1.0, 0.0)),  # relevant by judge with recall 0: SAA yes
    ((4, 3), [cite(1, B)], (0.0, 1.0, 0.0, 1.0)),  # right answer, unattributed: hallucination
    ((3, 5), [cite(1, A)], (0.0, None, 0.0, None)),  # wrong answer: no SAA, not in AH's denominator
]


@pytest.mark.parametrize(("scores", "cits", "expected"), JUDGE_CASES)
def test_saa_and_ah_per_question(scores, cits, expected):
    r = _result(gold([(1, A)]), cits, JudgeOutcome(scores[0], scores[1], 0))
    got = tuple(get_metric(n).per_question(r) for n in ("saa", "ah", "saa_strict", "ah_strict"))
    assert got == expected


def test_saa_recall_disjunct_needs_recall_of_at_least_point_six():
    g = gold([(1, A), (1, B), (2, C)])
    two_of_three = _result(g, [cite(1, A), cite(1, B)], JudgeOutcome(5, 0, 0))  # recall 0.667
    one_of_three = _result(g, [cite(1, A)], JudgeOutcome(5, 0, 0))  # recall 0.333
    assert get_metric("saa").per_question(two_of_three) == 1.0
    assert get_metric("saa").per_question(one_of_three) == 0.0


def test_judge_metrics_leave_out_unparsed_judge_outputs_and_count_them():
    rs = [
        _result(gold([(1, A)], index=1), [cite(1, A)], JudgeOutcome(5, 5, 5)),  # SAA
        _result(gold([(1, A)], index=2), [], JudgeOutcome(4, 1, 0)),  # AH
        _result(gold([(1, A)], index=3), [cite(1, A)], JudgeOutcome(None, None, None)),  # judge failed
        _result(gold([(1, A)], index=4), [], JudgeOutcome(0, 0, 0)),  # wrong answer
    ]
    m = aggregate(rs, judged=True)
    assert m["ans"] == pytest.approx((5 + 4 + 0) / 3 / 5)
    assert m["rel"] == pytest.approx((5 + 1 + 0) / 3 / 5)
    assert m["saa"] == pytest.approx(1 / 3)
    assert m["ah"] == pytest.approx(1 / 2)
    assert m["saa_strict"] == pytest.approx(1 / 3)
    assert m["judge_failures"] == {"failed": 1, "judged": 3}
    assert m["recall"]["0.5"] == pytest.approx(2 / 4)  # box metrics still count every question


def test_parser_ceiling_is_recall_with_every_block_cited():
    import numpy as np

    g = gold([(1, A), (2, C)])
    pages = np.array([1, 1])
    boxes = np.array([A, B])  # page 2 has no block
    assert parser_ceiling_question(g, pages, boxes, ScoringConfig()) == {
        "page": 0.5,
        "0.1": 0.5,
        "0.3": 0.5,
        "0.5": 0.5,
        "0.7": 0.5,
    }
    # Same-page ceiling follows the page-recall reading: distinct pages (1 of 2) or elements (2 of 3).
    g3 = gold([(1, A), (1, B), (2, C)])
    assert parser_ceiling_question(g3, pages, boxes, ScoringConfig())["page"] == 0.5
    assert parser_ceiling_question(g3, pages, boxes, ScoringConfig(page_recall="elements"))["page"] == 2 / 3


def test_every_metric_declares_aggregation_and_direction():
    docs = {d["name"]: d for d in metric_docs()}
    assert list(docs) == METRICS.in_order()  # registration order: the report's order
    assert list(docs)[:4] == ["precision", "f1", "format_rate", "citations_per_response"]
    assert docs["ah"]["higher_is_better"] is False
    assert docs["saa"]["higher_is_better"] is True
    assert (
        "at least one citation" in docs["precision"]["aggregation"]
        or ">= 1 citation" in docs["precision"]["aggregation"]
    )
    with pytest.raises(KeyError, match="did you mean 'precision'"):
        get_metric("precison")


def test_judged_subset_repeats_the_box_metrics_over_questions_with_a_parsed_judge_output():
    from eval.metrics import JudgeOutcome, QuestionResult, aggregate, score_boxes
    from eval.schemas import Cited, Element, Gold

    def gold(i):
        box = (0.0, 0.0, 10.0, 10.0)
        return Gold(i, "d", "q", "a", "en", "t", (Element(1, box),), (Element(1, box),))

    hit = (Cited(1, (0.0, 0.0, 10.0, 10.0)),)
    miss = (Cited(1, (50.0, 50.0, 60.0, 60.0)),)
    rows = [(hit, JudgeOutcome(5, 5)), (miss, JudgeOutcome(3, 1)), (hit, JudgeOutcome(None, None))]
    results = [QuestionResult(gold(i), None, score_boxes(gold(i), c), j) for i, (c, j) in enumerate(rows)]
    m = aggregate(results, judged=True)
    assert m["recall"]["0.5"] == pytest.approx(2 / 3)  # all questions
    js = m["judged_subset"]
    assert js["n"] == 2  # the third judge output did not parse
    assert js["recall"]["0.5"] == 0.5 and js["precision"] == 0.5 and js["f1"] == 0.5 and js["format_rate"] == 1.0
