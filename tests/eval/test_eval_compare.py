"""``eval compare``: exact McNemar on hand examples, reproducible paired bootstrap, the full comparison."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from core.cli import main as cli_main
from eval.__main__ import COMMANDS
from eval.compare import compare, load_per_question, mcnemar_exact, paired_bootstrap, paired_bootstrap_ratio
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
    # AH bootstrap: all 10 answers correct in both, A unattributed except q0, B only on q0. A resample with k draws
    # of q0 gives AH_B - AH_A = k/10 - (10-k)/10 = 2k/10 - 1, k ~ Binomial(10, 0.1): P(k=0) = 0.35 sets the 2.5th
    # percentile at -1, P(k<=2) = 0.93 < 0.975 < P(k<=3) = 0.987 puts the 97.5th at 2*3/10 - 1 = -0.4;
    # p = 2 P(k >= 5) = 0.003.
    bs = ah["bootstrap"]
    assert (bs["mean_a"], bs["mean_b"], bs["diff"]) == (pytest.approx(0.9), pytest.approx(0.1), pytest.approx(-0.8))
    assert (bs["ci_low"], bs["ci_high"], bs["undefined"]) == (pytest.approx(-1.0), pytest.approx(-0.4), 0)
    assert bs["p_value"] < 0.02


def test_recall_bootstrap_pairs_the_questions_judged_in_both_runs_and_the_option_pairs_all():
    # Table 8: q0-q3 judged in both; q4 has no parsed judge output in B.
    a = {str(i): _row(i, 0.0, 0.0, 0.0, False, False, False) for i in range(5)}
    b = {str(i): _row(i, 0.5, 0.0, 0.0, False, False, False) for i in range(4)}
    b["4"] = {**_row(4, 1.0), "saa": None, "saa_strict": None}  # judge output did not parse
    c = compare(a, b, resamples=200, seed=1)
    assert (c["recall_pairs"], c["n_recall"], c["n_paired"]) == ("judged", 4, 5)
    assert c["recall"]["diff"] == pytest.approx(0.5)  # q4 (diff 1.0) is left out
    old = compare(a, b, resamples=200, seed=1, recall_pairs="all")
    assert (old["recall_pairs"], old["n_recall"]) == ("all", 5)
    assert old["recall"]["diff"] == pytest.approx(0.6)  # (4 * 0.5 + 1.0) / 5
    # Judge-free runs have nothing to pair on but their questions.
    free = compare({k: _row(int(k), 0.0) for k in a}, {k: _row(int(k), 1.0) for k in a}, resamples=50, seed=1)
    assert (free["recall_pairs"], free["n_recall"]) == ("all", 5)


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


def test_ratio_bootstrap_with_every_answer_correct_is_the_mean_bootstrap():
    # Denominators all 1: AH is the plain mean of "unattributed", and the draws are the same for the same seed.
    rng = np.random.default_rng(5)
    na, nb = (rng.random(50) < 0.6).astype(float), (rng.random(50) < 0.3).astype(float)
    ones = np.ones(50)
    r = paired_bootstrap_ratio(na, ones, nb, ones, resamples=3000, seed=11)
    m = paired_bootstrap(na, nb, resamples=3000, seed=11)
    assert (r.ci_low, r.ci_high, r.p_value, r.undefined) == (pytest.approx(m.ci_low), pytest.approx(m.ci_high),
                                                             pytest.approx(m.p_value), 0)  # fmt: skip
    assert r.diff == pytest.approx(nb.mean() - na.mean())


def test_ratio_bootstrap_leaves_out_resamples_without_a_correct_answer():
    # q0: correct in both, unattributed in A only; q1: wrong in both. A resample of two draws that never picks q0
    # (probability 1/4) has no AH; every other one has AH_A = 1, AH_B = 0.
    r = paired_bootstrap_ratio(np.array([1, 0]), np.array([1, 0]), np.array([0, 0]), np.array([1, 0]),
                               resamples=10_000, seed=3)  # fmt: skip
    assert (r.mean_a, r.mean_b, r.diff, r.ci_low, r.ci_high, r.p_value) == (1.0, 0.0, -1.0, -1.0, -1.0, 0.0)
    assert 2300 <= r.undefined <= 2700  # 10,000 x 1/4, +-4.6 standard deviations


def test_ah_bootstrap_is_absent_when_a_run_has_no_correct_answer():
    a = {str(i): _row(i, 0.0, 0.0, 0.0, False, False, False) for i in range(3)}
    b = {str(i): _row(i, 1.0, 1.0, 1.0, True, True, True) for i in range(3)}
    ah = compare(a, b, resamples=100)["judge"]["ah"]
    assert (ah["a"], ah["b"], ah["bootstrap"]) == (None, 0.0, None)


def _cited_row(index, cited, recall):
    """A per_question.jsonl record with gold E1, E2 on page 1 and the given (element, similarity) citations."""
    e1, e2 = [1, 0.0, 0.0, 100.0, 100.0], [1, 0.0, 200.0, 100.0, 300.0]
    els = {"E1": e1, "E2": e2, "MISS": [2, 0.0, 0.0, 50.0, 50.0]}
    cits = [{"page": els[n][0], "bbox": els[n][1:], "similarity": s} for n, s in cited]
    return {"index": index, "doc_key": "d", "question": "q", "gold_answer": "a", "gt_necessary": [e1, e2],
            "gt_all": [e1, e2], "citations": cits, "n_citations": len(cits), "recall": {"0.5": recall}}  # fmt: skip


def test_compare_truncates_b_to_a_citation_budget(tmp_path, capsys):
    # A (base) cites E1 once: recall 1/2. B cites E2 (0.3), MISS (0.9), E1 (0.5): recall 1. At A's budget of one
    # citation, B's own first citation E2 keeps recall 1/2 (diff 0 on every question, p = 1); its most similar
    # citation MISS leaves recall 0 (diff -1/2 on every question, p = 0).
    write_jsonl(tmp_path / "a.jsonl", [_cited_row(i, [("E1", 0.8)], 0.5) for i in range(4)])
    write_jsonl(
        tmp_path / "b.jsonl", [_cited_row(i, [("E2", 0.3), ("MISS", 0.9), ("E1", 0.5)], 1.0) for i in range(4)]
    )
    out = tmp_path / "cmp.json"
    rc = cli_main("eval", "", COMMANDS, ["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"),
                                         "--truncate-to-budget", "--resamples", "200", "--out", str(out)])  # fmt: skip
    assert rc == 0
    t = json.loads(out.read_text())["truncation"]
    cited, sim = t["cited"], t["similarity"]
    assert (cited["recall"]["0.5"], cited["precision"], cited["truncated"], cited["citations_per_response"]) == (
        0.5, 1.0, 4, 1.0)  # fmt: skip
    assert (cited["recall_vs_a"]["diff"], cited["recall_vs_a"]["p_value"]) == (0.0, 1.0)
    assert (sim["recall"]["0.5"], sim["precision"], sim["recall_vs_a"]["diff"]) == (0.0, 0.0, -0.5)
    assert (sim["recall_vs_a"]["ci_low"], sim["recall_vs_a"]["ci_high"], sim["recall_vs_a"]["p_value"]) == (
        -0.5, -0.5, 0.0)  # fmt: skip
    printed = capsys.readouterr().out
    assert "cut to " in printed and "own citation order; 4 questions cut): recall 50.0 vs" in printed
    assert "highest similarity first; 4 questions cut): recall 0.0 vs" in printed
