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


@pytest.mark.parametrize("case", CASES, ids=harness.ids(CASES))
def test_hostile_report(case, hostile_env, tmp_path):
    harness.check_case(case, tmp_path, hostile_env, "report")
