"""``eval report`` and the demo's evaluation: tables, the recall-vs-IoU figure, report.html."""

from __future__ import annotations

import json

import pytest

from core.cli import main as cli_main
from eval.__main__ import COMMANDS
from eval.schemas import write_json, write_jsonl
from eval.tables import main_table, tables_markdown, threshold_table

METRICS_A = {
    "n": 4, "recall": {"page": 0.75, "0.1": 0.5, "0.3": 0.5, "0.5": 0.5, "0.7": 0.25}, "precision": 0.4, "f1": 0.3,
    "format_rate": 1.0, "citations_per_response": 2.5, "parser_ceiling": {"page": 1.0, "0.1": 1.0, "0.3": 0.9,
    "0.5": 0.875, "0.7": 0.8}, "counts": {},
}  # fmt: skip
METRICS_B = {**METRICS_A, "recall": {k: v / 2 for k, v in METRICS_A["recall"].items()}, "saa": 0.25, "ah": 0.5}


def test_tables_print_percentages_with_the_parser_ceiling_row():
    t = threshold_table([("lang", METRICS_A), ("coord", METRICS_B)])
    lines = t.splitlines()
    assert lines[0] == "| run | page | @0.1 | @0.3 | @0.5 | @0.7 | fmt |"
    assert lines[2] == "| parser ceiling (lang) | 100.0 | 100.0 | 90.0 | 87.5 | 80.0 | - |"
    assert lines[3] == "| lang | 75.0 | 50.0 | 50.0 | 50.0 | 25.0 | 100.0 |"
    assert lines[4] == "| coord | 37.5 | 25.0 | 25.0 | 25.0 | 12.5 | 100.0 |"
    m = main_table([("coord", METRICS_B)]).splitlines()[2]
    assert m == "| coord | 25.0 | 40.0 | 30.0 | - | - | 25.0 | 50.0 | - | 100.0 | 2.50 | 4 |"
    md = tables_markdown(METRICS_A, {}, "lang")
    assert "## Metric definitions" in md and "mean over questions with >= 1 citation" in md


def test_report_command_puts_runs_side_by_side(tmp_path, capsys):
    for name, m in (("lang", METRICS_A), ("coord", METRICS_B)):
        write_json(tmp_path / name / "metrics.json", m)
    out = tmp_path / "cmp"
    rc = cli_main("eval", "", COMMANDS, ["report", "--runs", str(tmp_path / "lang"), str(tmp_path / "coord"),
                                         "--out", str(out)])  # fmt: skip
    assert rc == 0
    text = (out / "tables.md").read_text()
    assert "| lang | 50.0 | 40.0 |" in text and "| coord | 25.0 | 40.0 |" in text
    assert (out / "recall_vs_iou.png").read_bytes()[:4] == b"\x89PNG"
    assert cli_main("eval", "", COMMANDS, ["report", "--runs", str(tmp_path / "none"), "--out", str(out)]) == 2
    assert "no metrics.json" in capsys.readouterr().err


def test_report_command_redraws_one_run_without_a_cache(tmp_path):
    d = tmp_path / "run"
    write_json(d / "metrics.json", METRICS_A)
    row = {"index": 5, "doc_key": "doc", "question": "Q <b>?", "gold_answer": "G", "answer": "A", "language": "en",
           "qtype": "t", "recall": {"0.5": 1.0}, "precision": 1.0, "f1": 1.0, "n_citations": 1,
           "citations": [{"page": 1, "bbox": [0, 0, 1, 1], "similarity": 0.5, "quote": "x < y", "hit": True}],
           "gt_necessary": [[1, 0, 0, 1, 1]], "gt_all": [[1, 0, 0, 1, 1]],
           "judge": {"answer": 5, "relevance": 4, "coverage": 3}, "saa": 1.0, "ah": 0.0}  # fmt: skip
    write_jsonl(d / "per_question.jsonl", [row])
    assert cli_main("eval", "", COMMANDS, ["report", "--score-dir", str(d)]) == 0
    html = (d / "report.html").read_text()
    assert "Q &lt;b&gt;?" in html and "x &lt; y" in html  # escaped
    assert "judge Ans 5 Rel 4 Cov 3" in html
    assert "<img" not in html  # no cache: text only


@pytest.mark.timeout(300)
def test_eval_demo_scores_both_interfaces_and_returns_its_outputs(tmp_path, sample_pdf, capsys):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from eval.demo import run_eval_demo

    cached = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path / "cache")
    r = run_eval_demo(cached, tmp_path / "eval")
    assert r["recall_vs_iou"].is_file() and r["report"].is_file() and r["tables"].is_file()
    lang, coord = r["metrics"], r["metrics_coordinate"]
    assert lang["n"] == coord["n"] == 4
    assert lang["format_rate"] == 0.75  # one response has no JSON
    assert coord["format_rate"] == 0.75  # one answer describes the location in words
    assert lang["recall"]["0.5"] > coord["recall"]["0.5"]
    assert lang["parser_ceiling"]["0.5"] == 1.0  # gold is drawn from the parsed blocks
    rows = [json.loads(x) for x in (tmp_path / "eval" / "language" / "per_question.jsonl").read_text().splitlines()]
    assert rows[1]["recall"]["0.5"] == 1.0  # the verbatim table row resolves to the table block
    assert rows[3]["n_citations"] == 0 and rows[3]["resolve"]["reason"] == "no_object"
    assert "Recall of necessary evidence" in capsys.readouterr().out


def test_table1_uses_the_judged_subset_for_box_metrics_when_the_run_was_judged():
    # Paper Section 4: Table 1 reports Rec.5 / Prec on the questions with a parsed judge output.
    judged = {**METRICS_B, "judged_subset": {"n": 3, "recall": {"0.5": 0.2}, "precision": 0.6, "f1": 0.3}}
    row = main_table([("j", judged)]).splitlines()[2]
    assert row == "| j | 20.0 | 60.0 | 30.0 | - | - | 25.0 | 50.0 | - | 100.0 | 2.50 | 3 |"


def _run(d, label_metrics, analyses=None, per_question=None):
    write_json(d / "metrics.json", label_metrics)
    if analyses is not None:
        write_json(d / "analyses.json", analyses)
    if per_question is not None:
        write_jsonl(d / "per_question.jsonl", [{"index": i, "recall": {"0.5": r}} for i, r in per_question])


def test_runs_side_by_side_give_the_condition_grid_oracle_union_and_analyses_tables(tmp_path):
    def m(r5):
        return {**METRICS_A, "recall": {**METRICS_A["recall"], "0.5": r5}}

    # Per-question recall at 0.5 of one backbone under three readings of the same output (4 questions).
    _run(tmp_path / "q", m(0.25), per_question=[(0, 0.0), (1, 0.0), (2, 1.0), (3, 0.0)])
    _run(tmp_path / "qa", m(0.5), per_question=[(0, 1.0), (1, 0.0), (2, 0.0), (3, 1.0)])
    analyses = {
        "by_language": {"en": {"n": 2, "recall@0.5": 0.5, "saa": 0.5, "ah": 0.0}},
        "by_element_type": {"figure": {"n_elements": 1, "recall": 0.0}, "text": {"n_elements": 3, "recall": 2 / 3}},
        "residuals": {"iou": {"n_elements": 4, "recovered": 0.5, "rank_limited": 0.25, "not_retrieved": 0.25,
                              "parser_unreachable": 0.0, "not_retrieved_incl_unreachable": 0.25}},
        "selective_prediction": {"n_citations": 4, "bins": [{"lo": 0.1, "hi": 0.2, "n": 2, "hit_rate": 0.0},
                                                            {"lo": 0.5, "hi": 0.9, "n": 2, "hit_rate": 1.0}],
                                 "retention": [{"keep": 1.0, "n": 4, "precision": 0.5, "min_similarity": 0.1},
                                               {"keep": 0.5, "n": 2, "precision": 1.0, "min_similarity": 0.5}]},
        "quote_fidelity": {"n_quotes": 4, "exact": 0.25, "fuzzy": 0.75},
    }  # fmt: skip
    _run(tmp_path / "quotes", m(0.5), analyses, per_question=[(0, 0.0), (1, 1.0), (2, 0.0), (3, 1.0)])
    _run(tmp_path / "raw", m(0.0))
    out = tmp_path / "cmp"
    labels = ["8B/q", "8B/q+a", "8B/quotes", "8B/raw"]
    dirs = [str(tmp_path / n) for n in ("q", "qa", "quotes", "raw")]
    assert cli_main("eval", "", COMMANDS, ["report", "--runs", *dirs, "--labels", *labels, "--out", str(out)]) == 0
    text = (out / "tables.md").read_text()
    # Table 2 layout: coordinate raw first, then the retrieval controls, then quotes.
    assert "| backbone | raw | q | q+a | quotes |\n|---|---|---|---|---|\n| 8B | 0.0 | 25.0 | 50.0 | 50.0 |" in text
    # Table 11: quotes|q+a = mean(max) = (1 + 1 + 0 + 1) / 4; q|q+a = (1 + 0 + 1 + 1) / 4.
    assert "| 8B | 50.0 | 50.0 | 75.0 | 75.0 | 4 |" in text
    assert "| 8B/quotes | en | 2 | 50.0 | 50.0 | 0.0 |" in text  # Table 6
    assert "| run | figure | text |" in text and "| 8B/quotes | 0.0 | 66.7 |" in text  # Table 7
    assert "| 8B/quotes | 4 | 50.0 | 25.0 | 25.0 | 0.0 | 25.0 |" in text  # Figure 7
    assert "| 8B/quotes | 0.0 | 100.0 |" in text  # Figure 8b: hit rate by bin
    assert "| run | keep 100.0 | keep 50.0 |" in text and "| 8B/quotes | 50.0 | 100.0 |" in text  # Figure 8a
    assert "| 8B/quotes | 4 | 25.0 | 75.0 |" in text  # Table 12 fidelity


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("Qwen3-VL-8B/quotes", ("Qwen3-VL-8B", "quotes")),  # the usual backbone/condition label
        ("org/model/q+a", ("org/model", "q+a")),  # a backbone name with a slash keeps it
        ("plain", None),  # no condition: not in the grid
        ("trailing/", None),  # empty condition
    ],
)
def test_split_label(label, expected):
    from eval.tables import split_label

    assert split_label(label) == expected


def test_an_exact_hit_shows_the_gold_box_inside_the_citation_box(tmp_path):
    from PIL import Image

    from eval.report import CITATION_PAD_PX, _draw_page

    class WhitePage:  # 1 pixel per point, so the expected pixels are the boxes' coordinates
        page_sizes = [(300.0, 300.0)]

        def render_page(self, page, max_pixels):
            return Image.new("RGB", (300, 300), "white")

    box = [100, 100, 200, 200]
    row = {"gt_necessary": [[1, *box]], "gt_all": [[1, *box]], "citations": [{"page": 1, "bbox": box, "hit": True}]}
    out = tmp_path / "p.jpg"
    _draw_page(WhitePage(), 1, row, out)
    img = Image.open(out).convert("RGB")
    r, g, b = img.getpixel((150, 101))  # on the gold edge: green
    assert g > 100 and g > r + 60 and g > b + 40
    r, g, b = img.getpixel((150, 100 - CITATION_PAD_PX))  # on the citation edge just outside: blue
    assert b > 150 and b > r + 80
    assert img.getpixel((150, 150)) == pytest.approx((255, 255, 255), abs=12)  # the inside is not painted


def test_recall_by_answer_correctness_of_the_language_run_splits_every_condition(tmp_path):
    # The quotes run's judge: q0, q1 correct; q2 wrong; q3 unparsed (left out of both groups).
    verdicts = {0: True, 1: True, 2: False, 3: None}
    recalls = {
        "quotes": [1.0, 0.0, 0.5, 1.0],
        "q+a": [0.5, 0.5, 0.0, 1.0],
        "raw": [0.25, 0.0, 0.0, 1.0],
    }
    own = {"correct": {"n": 2, "recall@0.5": 0.5}, "incorrect": {"n": 1, "recall@0.5": 0.5},
           "unjudged": {"n": 1, "recall@0.5": 1.0}}  # fmt: skip
    dirs, labels = [], []
    for cond, rs in recalls.items():
        d = tmp_path / cond.replace("+", "_")
        write_json(d / "metrics.json", METRICS_A)
        rows = [{"index": i, "recall": {"0.5": r}} for i, r in enumerate(rs)]
        if cond == "quotes":
            rows = [{**row, "answer_correct": verdicts[i]} for i, row in enumerate(rows)]
            write_json(d / "analyses.json", {"by_answer_correctness": own})
        write_jsonl(d / "per_question.jsonl", rows)
        dirs.append(str(d))
        labels.append(f"8B/{cond}")
    out = tmp_path / "cmp"
    assert cli_main("eval", "", COMMANDS, ["report", "--runs", *dirs, "--labels", *labels, "--out", str(out)]) == 0
    text = (out / "tables.md").read_text()
    assert "| backbone | condition | n correct | Rec.5 correct | n wrong | Rec.5 wrong |" in text
    assert "| 8B | raw | 2 | 12.5 | 1 | 0.0 |" in text  # (0.25 + 0) / 2 on the correct ones, 0 on the wrong one
    assert "| 8B | q+a | 2 | 50.0 | 1 | 0.0 |" in text
    assert "| 8B | quotes | 2 | 50.0 | 1 | 50.0 |" in text
    assert "| 8B/quotes | 2 | 50.0 | 1 | 50.0 |" in text  # each run's own verdicts
    md = tables_markdown(METRICS_A, {"by_answer_correctness": own}, "lang")
    assert "By answer correctness, judge Ans >= 4 vs < 4" in md
    assert "| correct | 2 | 50.0 |" in md and "| unjudged | 1 | 100.0 |" in md
