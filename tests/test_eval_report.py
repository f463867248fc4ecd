"""``eval report`` and the demo's evaluation: tables, the recall-vs-IoU figure, report.html."""

from __future__ import annotations

import json

import pytest

from data_prep.cli import main as cli_main
from eval.__main__ import COMMANDS
from eval.report import main_table, tables_markdown, threshold_table
from eval.schemas import write_json, write_jsonl

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
