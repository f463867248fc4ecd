"""Hostile input to ``python -m eval report --runs``: metrics files that are not what ``eval score`` writes (a field
missing, of the wrong type, out of range) and runs that would share a row (two folders of one name, one label
twice) are one clear error naming the file or the label, never a traceback or a table that silently merged two runs.
Every case runs through the suite's harness (``harness.py``) and is counted in its summary."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.hostile import harness
from tests.hostile.harness import Case, clean_error, success

REPORT = ["eval", "report", "--runs", "{tmp}/a/run", "{tmp}/b/run", "--out", "{tmp}/out"]


def two_runs(change=None, where: str = "b"):
    """Set-up: two copies of the suite's scored run (``a/run``, ``b/run``), ``change(metrics)`` applied to one."""

    def setup(c) -> None:
        for side in ("a", "b"):
            shutil.copytree(c.env.score_dir, c.tmp / side / "run")
        if change is not None:
            mf = c.tmp / where / "run" / "metrics.json"
            m = json.loads(mf.read_text())
            m = change(m)
            mf.write_text(m if isinstance(m, str) else json.dumps(m))

    return setup


def drop(key):
    return lambda m: {k: v for k, v in m.items() if k != key}


def put(key, value):
    def f(m):
        m[key] = value
        return m

    return f


def recall_at(value):
    def f(m):
        k = next(iter(m["recall"]))
        m["recall"][k] = value
        return m

    return f


def wrote_two_rows(c, r):
    tables = (c.tmp / "out" / "tables.md").read_text()
    assert "| x |" in tables and "| y |" in tables, tables[:400]


CASES = [
    Case("report-two-runs-labelled", [*REPORT, "--labels", "x", "y"], success(wrote_two_rows), two_runs()),
    Case("report-same-folder-name", REPORT, clean_error("two runs are labelled 'run'"), two_runs()),
    Case("report-same-label", [*REPORT, "--labels", "x", "x"], clean_error("'x'", "--labels"), two_runs()),
    Case("report-label-count", [*REPORT, "--labels", "x"], clean_error("1 labels for 2 runs"), two_runs()),
    Case("report-no-recall", [*REPORT, "--labels", "x", "y"], clean_error("metrics.json", "'recall'"),
         two_runs(drop("recall"))),
    Case("report-no-recall-first", [*REPORT, "--labels", "x", "y"], clean_error("a/run/metrics.json", "'recall'"),
         two_runs(drop("recall"), where="a")),
    Case("report-metrics-array", [*REPORT, "--labels", "x", "y"], clean_error("metrics.json", "JSON object"),
         two_runs(lambda m: "[1, 2]")),
    Case("report-metrics-torn", [*REPORT, "--labels", "x", "y"], clean_error("metrics.json"),
         two_runs(lambda m: json.dumps(m)[:40])),
    Case("report-metrics-empty-object", [*REPORT, "--labels", "x", "y"], clean_error("metrics.json", "'recall'"),
         two_runs(lambda m: {})),
    Case("report-judged-subset-text", [*REPORT, "--labels", "x", "y"], clean_error("'judged_subset'"),
         two_runs(put("judged_subset", "all"))),
    Case("report-judged-subset-no-recall", [*REPORT, "--labels", "x", "y"], clean_error("'judged_subset.recall'"),
         two_runs(put("judged_subset", {"n": 3}))),
]  # fmt: skip
for label, v in [("text", "0.5"), ("negative", -0.1), ("over-one", 1.5), ("bool", True), ("list", [0.5]),
                 ("object", {"v": 1}), ("huge", 1e300)]:  # fmt: skip
    CASES.append(Case(f"report-recall-{label}", [*REPORT, "--labels", "x", "y"], clean_error("metrics.json", "recall"),
                      two_runs(recall_at(v))))  # fmt: skip
for label, v in [("text", "high"), ("list", [1]), ("number", 5), ("null-ok", None)]:
    expect = success() if v is None else clean_error("metrics.json", "'recall'")
    CASES.append(Case(f"report-recall-field-{label}", [*REPORT, "--labels", "x", "y"], expect,
                      two_runs(put("recall", v) if v is not None else recall_at(None))))  # fmt: skip


# ---------------------------------------------------------------------------------------------- report --score-dir
MARKUP = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
ONE = ["eval", "report", "--score-dir", "{tmp}/s"]


def one_run(change):
    """Set-up: a copy of the suite's scored run at ``tmp/s`` with ``change(row)`` applied to its first row."""

    def setup(c) -> None:
        shutil.copytree(c.env.score_dir, c.tmp / "s")
        path = c.tmp / "s" / "per_question.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines()]
        change(rows[0])
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    return setup


def no_markup(c, r):
    page = (c.tmp / "s" / "report.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and 'onerror="alert' not in page, "injected"


def setp(*path_value):
    *path, value = path_value

    def change(row):
        node = row
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value

    return change


for name, change in [
    ("question", setp("question", MARKUP)), ("gold", setp("gold_answer", MARKUP)), ("answer", setp("answer", MARKUP)),
    ("index", setp("index", MARKUP)), ("doc-key", setp("doc_key", MARKUP)), ("language", setp("language", MARKUP)),
    ("n-citations", setp("n_citations", MARKUP)), ("precision", setp("precision", MARKUP)),
    ("judge-answer", setp("judge", {"answer": MARKUP, "relevance": MARKUP, "coverage": None})),
    ("citation-page", lambda r: r["citations"].append({"page": MARKUP, "bbox": [MARKUP, 1, 2, 3], "quote": MARKUP,
                                                       "similarity": MARKUP})),
    ("recall-value", lambda r: r["recall"].update({"0.5": MARKUP})),
]:  # fmt: skip
    CASES.append(Case(f"report-markup-{name}", ONE, success(no_markup), one_run(change)))
for name, change, phrase in [
    ("no-recall", lambda r: r.pop("recall"), "'recall'"),
    ("citations-text", setp("citations", "many"), "'citations'"),
    ("citation-no-bbox", lambda r: r["citations"].append({"page": 1}), "citation"),
    ("question-number", setp("question", 7), "'question'"),
    ("gt-text", setp("gt_all", ["x"]), "'gt_all'"),
]:  # fmt: skip
    CASES.append(Case(f"report-row-{name}", ONE, clean_error("per_question.jsonl:1", phrase), one_run(change)))


@pytest.mark.parametrize("case", CASES, ids=harness.ids(CASES))
def test_hostile_report(case, hostile_env, tmp_path):
    harness.check_case(case, tmp_path, hostile_env, "report")
