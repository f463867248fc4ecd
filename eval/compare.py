"""``python -m eval compare A B``: paired significance tests between two scored runs (paper Appendix D).

``A`` and ``B`` are ``eval score`` output folders (or their ``per_question.jsonl``). Questions are paired by
index; only questions present in both count.

* **Recall**: paired bootstrap over questions (``--resamples`` 10,000, fixed ``--seed``): each resample draws
  n question indices with replacement and takes ``mean(B) - mean(A)`` of per-question recall at ``--iou``. The
  95% interval is the 2.5 / 97.5 percentiles; the two-sided p-value is ``min(1, 2 * min(P(d <= 0), P(d >= 0)))``
  over the resamples.
* **SAA** (and strict SAA): exact McNemar test on the questions judged in both runs. With ``b`` = questions
  that pass in A and fail in B and ``c`` the reverse, ``p = min(1, 2 * P(X <= min(b, c)))`` for
  ``X ~ Binomial(b + c, 1/2)`` (``p = 1`` when ``b + c = 0``); plus a bootstrap interval of the SAA difference.
* **AH**: each run's rate on the paired judged questions, and intersection-AH on the questions answered
  correctly (Ans >= 4) in both runs (removes the composition effect of different denominators).
* **Oracle union** (paper Table 11): mean over questions of ``max(recall_A, recall_B)``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import binom

from data_prep.types import InputError
from eval.schemas import iter_jsonl, write_json

DEFAULT_RESAMPLES = 10_000
"""Bootstrap resamples (paper Appendix D)."""
DEFAULT_SEED = 20260727
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
    lo, hi = np.percentile(stats, [2.5, 97.5])
    p = min(1.0, 2 * min(float(np.mean(stats <= 0)), float(np.mean(stats >= 0))))
    return BootstrapResult(
        float(a.mean()), float(b.mean()), float(d.mean()), float(lo), float(hi), p, n, resamples, seed
    )


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
    out = {}
    for lineno, d in iter_jsonl(path):
        if "index" not in d or "recall" not in d:
            raise InputError(f"{path}:{lineno}: not a per_question.jsonl record (no index/recall)")
        out[str(d["index"])] = d
    return out


def compare(
    a: dict[str, dict],
    b: dict[str, dict],
    iou: str = "0.5",
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict:
    """All tests of the module docstring on two per-question tables."""
    keys = sorted(set(a) & set(b), key=lambda k: (len(k), k))
    if not keys:
        raise InputError("the two runs share no question index")
    for k in keys[:1]:
        if iou not in a[k]["recall"] or iou not in b[k]["recall"]:
            raise InputError(f"recall at {iou!r} is not in both runs (have {sorted(a[k]['recall'])})")
    ra = np.array([a[k]["recall"][iou] for k in keys])
    rb = np.array([b[k]["recall"][iou] for k in keys])
    out: dict = {
        "n_paired": len(keys),
        "only_in_a": len(set(a) - set(b)),
        "only_in_b": len(set(b) - set(a)),
        "recall": paired_bootstrap(ra, rb, resamples, seed).__dict__,
        "union_recall": float(np.maximum(ra, rb).mean()),
    }
    judged = [k for k in keys if a[k].get("saa") is not None and b[k].get("saa") is not None]
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
            res[name] = {
                "a": rate(a, judged),
                "b": rate(b, judged),
                "intersection_n": len(both),
                "intersection_a": rate(a, both),
                "intersection_b": rate(b, both),
            }
        out["judge"] = res
    return out


def format_comparison(c: dict, name_a: str = "A", name_b: str = "B") -> str:
    """A short human-readable summary (percentages)."""
    r = c["recall"]
    lines = [
        f"paired questions: {c['n_paired']} (only in {name_a}: {c['only_in_a']}, only in {name_b}: {c['only_in_b']})",
        f"recall: {name_a} {100 * r['mean_a']:.1f}  {name_b} {100 * r['mean_b']:.1f}  diff {100 * r['diff']:+.1f} "
        f"[95% CI {100 * r['ci_low']:+.1f}, {100 * r['ci_high']:+.1f}]  bootstrap p={r['p_value']:.4g} "
        f"({r['resamples']} resamples, seed {r['seed']})",
        f"oracle union recall: {100 * c['union_recall']:.1f}",
    ]
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

            lines.append(
                f"{name}: {name_a} {pct(s['a'])} / {name_b} {pct(s['b'])}; on the {s['intersection_n']} questions "
                f"correct in both: {pct(s['intersection_a'])} / {pct(s['intersection_b'])}"
            )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="score folder (or per_question.jsonl) of run A (baseline)")
    parser.add_argument("b", type=Path, help="score folder (or per_question.jsonl) of run B")
    parser.add_argument("--iou", default="0.5", help="recall threshold key: page, 0.1, 0.3, 0.5, 0.7 (default 0.5)")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples (10000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (fixed by default)")
    parser.add_argument("--out", type=Path, default=None, help="also write the comparison as JSON here")


def run(args: argparse.Namespace) -> int:
    if args.resamples < 1:
        raise InputError("--resamples must be >= 1")
    c = compare(load_per_question(args.a), load_per_question(args.b), args.iou, args.resamples, args.seed)
    print(format_comparison(c, str(args.a), str(args.b)))
    if args.out:
        write_json(args.out, c)
        print(f"wrote {args.out}")
    return 0
