"""``eval compare``: exact McNemar on hand examples, reproducible paired bootstrap, the full comparison."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from data_prep.cli import main as cli_main
from eval.__main__ import COMMANDS
from eval.compare import compare, load_per_question, mcnemar_exact, paired_bootstrap
from eval.schemas import write_jsonl

MCNEMAR_CASES = [
    (1, 9, 2 * (comb(10, 0) + comb(10, 1)) / 2**10),  # 0.021484375: the textbook example
    (0, 0, 1.0),  # no discordant pair: no evidence either way
    (3, 3, 1.0),  # symmetric: two-sided p capped at 1
    (0, 5, 2 / 2**5),  # all discordant pairs one way: 2 * 0.5^5
    (7, 2, 2 * sum(comb(9, k) for k in range(3)) / 2**9),  # order of b and c does not matter
]


@pytest.mark.parametrize(("b", "c", "p"), MCNEMAR_CASES)
def test_exact_mcnemar_p_values(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-15)


def test_paired_bootstrap_is_reproducible_with_the_seed_and_centred_on_the_difference():
    rng = np.random.default_rng(0)
    a = rng.random(200)
    b = a + 0.1
    r1 = paired_bootstrap(a, b, resamples=2000, seed=7)
    r2 = paired_bootstrap(a, b, resamples=2000, seed=7)
    assert r1 == r2
    assert r1.diff == pytest.approx(0.1)
    assert r1.ci_low == pytest.approx(0.1) and r1.ci_high == pytest.approx(0.1)  # constant difference
    assert r1.p_value == 0.0
    noisy = paired_bootstrap(a, rng.random(200), resamples=2000, seed=7)
    assert noisy != paired_bootstrap(a, rng.random(200), resamples=2000, seed=8)
    assert noisy.ci_low < noisy.diff < noisy.ci_high


def test_bootstrap_of_identical_runs_has_p_one():
    x = np.array([0.0, 1.0, 0.5, 1.0])
    r = paired_bootstrap(x, x, resamples=500, seed=1)
    assert (r.diff, r.ci_low, r.ci_high, r.p_value) == (0.0, 0.0, 0.0, 1.0)


def _row(index, recall, saa=None, strict=None, correct=None, attributed=None, attributed_strict=None):
    d = {"index": index, "recall": {"0.5": recall, "page": recall}}
    if saa is not None:
        d.update(saa=saa, saa_strict=strict, answer_correct=correct, attributed=attributed,
                 attributed_strict=attributed_strict)  # fmt: skip
    return d


def test_compare_on_known_inputs(tmp_path):
    # 10 paired questions; B passes SAA on 9 that A fails, A on 1 that B fails -> exact p = 0.021484375.
    a_rows, b_rows = [], []
    for i in range(10):
        a_pass, b_pass = i == 0, i != 0
        a_rows.append(_row(i, 0.0, float(a_pass), float(a_pass), True, a_pass, a_pass))
        b_rows.append(_row(i, 1.0 if i < 5 else 0.5, float(b_pass), float(b_pass), True, b_pass, b_pass))
    a_rows.append(_row(99, 1.0))  # only in A: not paired
    write_jsonl(tmp_path / "a" / "per_question.jsonl", a_rows)
    write_jsonl(tmp_path / "b" / "per_question.jsonl", b_rows)
    c = compare(load_per_question(tmp_path / "a"), load_per_question(tmp_path / "b"), resamples=1000, seed=3)
    assert (c["n_paired"], c["only_in_a"], c["only_in_b"]) == (10, 1, 0)
    assert c["recall"]["diff"] == pytest.approx(0.75)
    assert c["union_recall"] == pytest.approx(0.75)
    s = c["judge"]["saa"]
    assert (s["a"], s["b"], s["a_only"], s["b_only"]) == (0.1, 0.9, 1, 9)
    assert s["mcnemar_p"] == pytest.approx(0.021484375)
    ah = c["judge"]["ah"]
    assert ah["a"] == pytest.approx(0.9) and ah["b"] == pytest.approx(0.1) and ah["intersection_n"] == 10


def test_compare_command_prints_and_writes_json(tmp_path, capsys):
    write_jsonl(tmp_path / "a.jsonl", [_row(i, 0.0) for i in range(5)])
    write_jsonl(tmp_path / "b.jsonl", [_row(i, 1.0) for i in range(5)])
    out = tmp_path / "cmp.json"
    rc = cli_main("eval", "", COMMANDS, ["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"),
                                         "--resamples", "100", "--out", str(out)])  # fmt: skip
    assert rc == 0
    assert "diff +100.0" in capsys.readouterr().out
    assert json.loads(out.read_text())["recall"]["resamples"] == 100
    rc = cli_main("eval", "", COMMANDS, ["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "none.jsonl")])
    assert rc == 2 and "not found" in capsys.readouterr().err
