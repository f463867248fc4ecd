"""``python -m eval compare A B``: paired significance tests between two scored runs (paper Appendix D).

``A`` and ``B`` are ``eval score`` output folders (or their ``per_question.jsonl``). Questions are paired by
index; only questions present in both count.

* **Recall**: paired bootstrap over questions (``--resamples`` 10,000, fixed ``--seed``): each resample draws
  n question indices with replacement and takes ``mean(B) - mean(A)`` of per-question recall at ``--iou``. The
  95% interval is the 2.5 / 97.5 percentiles; the two-sided p-value is ``min(1, 2 * min(P(d <= 0), P(d >= 0)))``
  over the resamples. When both runs were judged, the pairs are the questions **judged in both** (paper Table 8:
  "we pair the two conditions on the questions judged in both"); ``--recall-pairs all`` pairs every shared
  question (our earlier rule, and what judge-free runs always use). ``recall_pairs`` / ``n_recall`` in the output
  say which.
* **SAA** (and strict SAA): exact McNemar test on the questions judged in both runs. With ``b`` = questions
  that pass in A and fail in B and ``c`` the reverse, ``p = min(1, 2 * P(X <= min(b, c)))`` for
  ``X ~ Binomial(b + c, 1/2)`` (``p = 1`` when ``b + c = 0``); plus a bootstrap interval of the SAA difference.
* **AH** (and strict AH): each run's rate on the paired judged questions, a paired bootstrap interval of the
  difference ``AH(B) - AH(A)`` (paper Table 8: each resample draws n judged questions with replacement and
  recomputes both conditional rates, unattributed correct answers / correct answers, on the drawn questions; a
  resample in which either run has no correct answer has no AH and is left out, counted in ``undefined``; same
  seed and p-value rule as recall), and intersection-AH on the questions answered correctly (Ans >= 4) in both
  runs (removes the composition effect of different denominators).
* **Oracle union** (paper Table 11): mean over questions of ``max(recall_A, recall_B)``.
* ``--truncate-to-budget`` (paper Appendix H): B's citations cut, per question, to A's number of citations, in
  B's own citation order and by descending similarity, and rescored (recall at every threshold, precision, F1)
  with a paired bootstrap of truncated-B recall against A (:func:`eval.analyses.truncate_to_budget`). With A =
  base model and B = trained model this asks whether B's recall gain survives at A's citation budget; swap the
  arguments for the other direction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import binom

from core.errors import InputError
from eval.schemas import iter_jsonl

DEFAULT_RESAMPLES = 10_000
"""Bootstrap resamples (paper Appendix D)."""
DEFAULT_SEED = 20260727
MAX_RESAMPLES = 10_000_000
"""Upper bound of ``--resamples`` (the paper uses 10,000)."""
"""Fixed seed of the bootstrap, so a comparison is reproducible bit for bit."""


@dataclass(frozen=True)
class BootstrapResult:
    """Paired bootstrap of ``mean(b) - mean(a)``."""

    mean_a: float
    mean_b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int
    resamples: int
    seed: int
    undefined: int = 0
    """Resamples on which the statistic is undefined (a conditional rate with no denominator) and left out."""


RECALL_PAIRS: tuple[str, ...] = ("judged", "all")
"""Which questions the recall bootstrap pairs (``--recall-pairs``; the first is the default)."""


def _summarise(stats: np.ndarray, mean_a: float, mean_b: float, n: int, resamples: int, seed: int) -> BootstrapResult:
    """Percentile interval and two-sided p-value of the finite resampled differences ``stats``."""
    ok = stats[np.isfinite(stats)]
    if len(ok) == 0:
        nan = float("nan")
        return BootstrapResult(mean_a, mean_b, mean_b - mean_a, nan, nan, nan, n, resamples, seed, resamples)
    lo, hi = np.percentile(ok, [2.5, 97.5])
    p = min(1.0, 2 * min(float(np.mean(ok <= 0)), float(np.mean(ok >= 0))))
    return BootstrapResult(
        mean_a, mean_b, mean_b - mean_a, float(lo), float(hi), p, n, resamples, seed, int(resamples - len(ok))
    )


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, chunk: int = 1000
) -> BootstrapResult:
    """Paired bootstrap over questions of the difference of means ``b - a`` (arrays aligned by question)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired arrays must have the same 1-d shape, got {a.shape} and {b.shape}")
    n = len(a)
    if n == 0:
        raise InputError("no paired questions to compare")
    d = b - a
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        stats[start : start + m] = d[idx].mean(axis=1)
    r = _summarise(stats, float(a.mean()), float(b.mean()), n, resamples, seed)
    return BootstrapResult(**{**r.__dict__, "diff": float(d.mean())})


def paired_bootstrap_ratio(
    num_a: np.ndarray,
    den_a: np.ndarray,
    num_b: np.ndarray,
    den_b: np.ndarray,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    chunk: int = 1000,
) -> BootstrapResult:
    """Paired bootstrap over questions of ``sum(num_b)/sum(den_b) - sum(num_a)/sum(den_a)`` (a conditional rate
    such as AH: num = correct and unattributed, den = correct; arrays aligned by question, 0/1 or counts).

    Each resample draws n question indices with replacement (the same draws as :func:`paired_bootstrap` with the
    same seed) and recomputes both ratios on them; resamples where either denominator is 0 are left out and
    counted in ``undefined``. ``mean_a``/``mean_b`` are the two ratios on all questions (NaN when a denominator
    is 0; :func:`compare` then reports no interval)."""
    arrs = [np.asarray(x, dtype=np.float64) for x in (num_a, den_a, num_b, den_b)]
    if len({x.shape for x in arrs}) != 1 or arrs[0].ndim != 1:
        raise ValueError(f"paired arrays must have the same 1-d shape, got {[x.shape for x in arrs]}")
    n = len(arrs[0])
    if n == 0:
        raise InputError("no paired questions to compare")
    na, da, nb, db = arrs

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        sa = ratio(na[idx].sum(axis=1), da[idx].sum(axis=1))
        sb = ratio(nb[idx].sum(axis=1), db[idx].sum(axis=1))
        stats[start : start + m] = sb - sa
    full_a = float(ratio(np.array([na.sum()]), np.array([da.sum()]))[0])
    full_b = float(ratio(np.array([nb.sum()]), np.array([db.sum()]))[0])
    return _summarise(stats, full_a, full_b, n, resamples, seed)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts ``b`` (A only) and ``c`` (B only).

    >>> round(mcnemar_exact(1, 9), 9)  # 2 * (1 + 10) / 2**10
    0.021484375
    """
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be >= 0")
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2.0 * binom.cdf(min(b, c), n, 0.5)))


def load_per_question(path: str | Path) -> dict[str, dict]:
    """``index (as str) -> per-question record`` from a score folder or its ``per_question.jsonl``."""
    path = Path(path)
    if path.is_dir():
        path = path / "per_question.jsonl"
    if not path.is_file():
        raise InputError(f"{path}: not found (give an `eval score` output folder or its per_question.jsonl)")
    out: dict[str, dict] = {}
    for lineno, d in iter_jsonl(path):
        if "index" not in d or "recall" not in d:
            raise InputError(f"{path}:{lineno}: not a per_question.jsonl record (no index/recall)")
        _check_record(d, f"{path}:{lineno}")
        key = str(d["index"])
        if key in out:
            raise InputError(f"{path}:{lineno}: question index {d['index']!r} appears twice")
        out[key] = d
    if not out:
        raise InputError(f"{path}: no per-question records (an empty file)")
    return out


_BINARY_FIELDS = ("saa", "saa_strict", "ah", "ah_strict", "answer_correct", "attributed", "attributed_strict")


def _check_record(d: dict, where: str) -> None:
    """The fields :func:`compare` computes with: rates in [0, 1], pass/fail fields 0/1 or null."""

    def rate(v) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1

    rec = d["recall"]
    if not isinstance(rec, dict) or not rec or not all(rate(v) for v in rec.values()):
        raise InputError(f"{where}: recall must be an object of thresholds to numbers in [0, 1], got {rec!r}")
    for name in ("precision", "f1"):
        if d.get(name) is not None and not rate(d[name]):
            raise InputError(f"{where}: {name} must be a number in [0, 1] or null, got {d[name]!r}")
    for name in _BINARY_FIELDS:
        v = d.get(name)
        if v is not None and v not in (0, 1):
            raise InputError(f"{where}: {name} must be 0, 1, true, false or null, got {v!r}")
    if not isinstance(d.get("citations", []), list):
        raise InputError(f"{where}: citations must be a list")


def compare(
    a: dict[str, dict],
    b: dict[str, dict],
    iou: str = "0.5",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    truncate: bool = False,
    recall_pairs: str = "judged",
) -> dict:
    """All tests of the module docstring on two per-question tables (``truncate``: also B cut to A's citation
    budget, under ``"truncation"``; ``recall_pairs``: :data:`RECALL_PAIRS`)."""
    if recall_pairs not in RECALL_PAIRS:
        raise InputError(f"--recall-pairs {recall_pairs!r}: expected one of {RECALL_PAIRS}")
    keys = sorted(set(a) & set(b), key=lambda k: (len(k), k))
    if not keys:
        raise InputError("the two runs share no question index")
    for k in keys[:1]:
        if iou not in a[k]["recall"] or iou not in b[k]["recall"]:
            raise InputError(f"recall at {iou!r} is not in both runs (have {sorted(a[k]['recall'])})")
    ra = np.array([a[k]["recall"][iou] for k in keys])
    rb = np.array([b[k]["recall"][iou] for k in keys])
    judged = [k for k in keys if a[k].get("saa") is not None and b[k].get("saa") is not None]
    both_judged_runs = any("saa" in a[k] for k in keys) and any("saa" in b[k] for k in keys)
    rkeys = judged if recall_pairs == "judged" and both_judged_runs else keys
    if not rkeys:
        raise InputError("no question is judged in both runs: nothing to pair recall on (try --recall-pairs all)")
    rra = np.array([a[k]["recall"][iou] for k in rkeys])
    rrb = np.array([b[k]["recall"][iou] for k in rkeys])
    out: dict = {
        "n_paired": len(keys),
        "only_in_a": len(set(a) - set(b)),
        "only_in_b": len(set(b) - set(a)),
        "recall_pairs": "judged" if rkeys is judged else "all",
        "n_recall": len(rkeys),
        "recall": paired_bootstrap(rra, rrb, resamples, seed).__dict__,
        "union_recall": float(np.maximum(ra, rb).mean()),
    }
    if judged:
        res: dict = {"n_judged": len(judged)}
        for name in ("saa", "saa_strict"):
            sa = np.array([float(a[k][name]) for k in judged])
            sb = np.array([float(b[k][name]) for k in judged])
            n_b = int(((sa == 1) & (sb == 0)).sum())
            n_c = int(((sa == 0) & (sb == 1)).sum())
            res[name] = {
                "a": float(sa.mean()),
                "b": float(sb.mean()),
                "a_only": n_b,
                "b_only": n_c,
                "mcnemar_p": mcnemar_exact(n_b, n_c),
                "bootstrap": paired_bootstrap(sa, sb, resamples, seed).__dict__,
            }
        for name, strict in (("ah", False), ("ah_strict", True)):
            attr = "attributed_strict" if strict else "attributed"

            def rate(run: dict, ks: list[str], attr: str = attr) -> float | None:
                correct = [k for k in ks if run[k].get("answer_correct")]
                return float(np.mean([not run[k][attr] for k in correct])) if correct else None

            both = [k for k in judged if a[k].get("answer_correct") and b[k].get("answer_correct")]

            def arrays(run: dict, attr: str = attr) -> tuple[np.ndarray, np.ndarray]:
                correct = np.array([bool(run[k].get("answer_correct")) for k in judged])
                return correct & ~np.array([bool(run[k].get(attr)) for k in judged]), correct

            res[name] = {
                "a": rate(a, judged),
                "b": rate(b, judged),
                # None when a run has no correct answer at all: AH is undefined on every resample.
                "bootstrap": paired_bootstrap_ratio(*arrays(a), *arrays(b), resamples, seed).__dict__
                if rate(a, judged) is not None and rate(b, judged) is not None
                else None,
                "intersection_n": len(both),
                "intersection_a": rate(a, both),
                "intersection_b": rate(b, both),
            }
        out["judge"] = res
    if truncate:
        from eval.analyses import TRUNCATION_ORDERS, truncate_to_budget

        out["truncation"] = {}
        for order in TRUNCATION_ORDERS:
            t = truncate_to_budget({k: b[k] for k in keys}, {k: a[k] for k in keys}, order)
            rt = np.array([t.boxes[k].recall[iou] for k in keys])
            out["truncation"][order] = {**t.summary, "recall_vs_a": paired_bootstrap(ra, rt, resamples, seed).__dict__}
    return out


def format_comparison(c: dict, name_a: str = "A", name_b: str = "B") -> str:
    """A short human-readable summary (percentages)."""
    r = c["recall"]
    lines = [
        f"paired questions: {c['n_paired']} (only in {name_a}: {c['only_in_a']}, only in {name_b}: {c['only_in_b']})",
        f"recall: {name_a} {100 * r['mean_a']:.1f}  {name_b} {100 * r['mean_b']:.1f}  diff {100 * r['diff']:+.1f} "
        f"[95% CI {100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]  bootstrap p={r['p_value']:.4g} "
        f"({r['resamples']} resamples, seed {r['seed']}; "
        + ("questions judged in both runs" if c.get("recall_pairs") == "judged" else "all paired questions")
        + f", n={c.get('n_recall', c['n_paired'])})",
        f"oracle union recall: {100 * c['union_recall']:.1f}",
    ]
    for order, t in (c.get("truncation") or {}).items():
        bs = t["recall_vs_a"]
        how = "own citation order" if order == "cited" else "highest similarity first"
        prec = "-" if t["precision"] is None else f"{100 * t['precision']:.1f}"
        lines.append(
            f"{name_b} cut to {name_a}'s citation budget ({how}; {t['truncated']} questions cut): recall "
            f"{100 * bs['mean_b']:.1f} vs {name_a} {100 * bs['mean_a']:.1f}, diff {100 * bs['diff']:+.1f} "
            f"[95% CI {100 * bs['ci_low']:+.1f}, {100 * bs['ci_high']:+.1f}] bootstrap p={bs['p_value']:.4g}; "
            f"precision {prec}, F1 {100 * t['f1']:.1f}, {t['citations_per_response']:.2f} citations per response"
        )
    j = c.get("judge")
    if j:
        for name in ("saa", "saa_strict"):
            s = j[name]
            bs = s["bootstrap"]
            lines.append(
                f"{name}: {name_a} {100 * s['a']:.1f}  {name_b} {100 * s['b']:.1f}  "
                f"[95% CI of diff {100 * bs['ci_low']:+.1f}, {100 * bs['ci_high']:+.1f}]  "
                f"discordant {s['a_only']}/{s['b_only']}  exact McNemar p={s['mcnemar_p']:.4g}  (n={j['n_judged']})"
            )
        for name in ("ah", "ah_strict"):
            s = j[name]

            def pct(v: float | None) -> str:
                return "-" if v is None else f"{100 * v:.1f}"

            bs = s.get("bootstrap")
            ci = ""
            if bs and np.isfinite(bs["ci_low"]):
                ci = (f"  [95% CI of diff {100 * bs['ci_low']:+.1f}, {100 * bs['ci_high']:+.1f}]  "
                      f"bootstrap p={bs['p_value']:.4g}"
                      + (f" ({bs['undefined']} resamples without a correct answer left out)" if bs["undefined"]
                         else ""))  # fmt: skip
            lines.append(
                f"{name}: {name_a} {pct(s['a'])} / {name_b} {pct(s['b'])}{ci}; on the {s['intersection_n']} "
                f"questions correct in both: {pct(s['intersection_a'])} / {pct(s['intersection_b'])}"
            )
    return "\n".join(lines)
