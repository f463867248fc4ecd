"""GRPO with TRL on a CPU (``make bench``; or ``python -m benchmarks.bench_trl [--seeds N] [--steps N]``).

1. Seconds per GRPO step of the demo's tiny policy (:mod:`quotecite.trl_demo`: 4 questions x 4 responses, 4 page
   images each, 64 new tokens at most), split into rollout (``generate``), reward (the quote reward's own timer)
   and update (the rest of the step: log-probabilities, KL, loss, backward, optimizer), and the reward's share.
2. Does the reward teach? Per seed, the same warm-started policy trained twice on the sample document: at the
   demo's learning rate and at 0 (frozen: the same sampling, no update). Reported per seed: the trained arm's mean
   reward over its first 5 steps and its last 10, the frozen arm's last 10, and the two effects (trained late minus
   frozen late, trained late minus trained early). A learning *test* would assert a margin at a third of the
   smallest effect over the seeds; the numbers measured so far are in docs/training-trl.md.

Rows as JSON under ``$QUOTECITE_BENCH_OUT/trl.json`` (default ``bench_out/``); with ``--plot``, the reward per
step of seed 0, trained vs frozen, as ``docs/img/trl_reward_curve.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EARLY, LATE = 5, 10


def _out_dir() -> Path:
    return Path(os.environ.get("QUOTECITE_BENCH_OUT") or REPO / "bench_out")


def sample_cache(root: Path):
    from data_prep.cache import build_cache
    from data_prep.parsers import get_parser
    from data_prep.sample import write_sample_pdf

    pdf = write_sample_pdf(root / "sample.pdf")
    return build_cache(pdf, get_parser("pdftext"), None, root / "cache")


def run_arms(cached, root: Path, seed: int, steps: int, lrs=(None, 0.0)) -> dict:
    """Warm-start a policy with ``seed`` and train it once per learning rate (None: the demo's); returns
    ``{"seed", "arms": {lr: [records]}}``."""
    from quotecite.trl_demo import DemoSettings, trl_run, warm_policy, write_sample_set
    from reward.trl_train import train

    s = DemoSettings(seed=seed, steps=steps)
    data = root / f"data-{seed}"
    write_sample_set(cached, data, s.questions, s.max_pixels)
    warm = warm_policy(cached, data, root / f"policy-{seed}", s)
    arms = {}
    for lr in lrs:
        name = "trained" if lr is None else f"lr{lr:g}"
        result = train(trl_run(cached, data, warm, root / f"run-{seed}-{name}", s, lr=lr, quiet=True))
        arms[name] = result["steps"]
    return {"seed": seed, "arms": arms}


def _mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def summarise(result: dict) -> dict:
    trained = [r["reward"]["overall"] for r in result["arms"]["trained"]]
    frozen = [r["reward"]["overall"] for r in result["arms"]["lr0"]]
    row = {
        "seed": result["seed"],
        "trained_early": _mean(trained[:EARLY]),
        "trained_late": _mean(trained[-LATE:]),
        "frozen_late": _mean(frozen[-LATE:]),
    }
    row["vs_frozen"] = row["trained_late"] - row["frozen_late"]
    row["vs_early"] = row["trained_late"] - row["trained_early"]
    return row


def step_times(records: list[dict]) -> dict:
    """Mean seconds per step: rollout, reward, update, and the reward's share of the step."""
    rows = [r["trl"] for r in records[1:]]  # the first step pays for warm-up
    step = _mean([r["step_time"] for r in rows])
    rollout = _mean([r["time.rollout_s"] for r in rows])
    reward = _mean([r["time.reward_s"] for r in rows])
    return {"step_s": step, "rollout_s": rollout, "reward_s": reward, "update_s": step - _mean(
        [r["time.generate_and_score_s"] for r in rows]), "reward_share": reward / step}  # fmt: skip


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    for name, label in (("trained", "trained (lr 2e-3)"), ("lr0", "frozen (lr 0)")):
        recs = result["arms"][name]
        ax.plot([r["step"] for r in recs], [r["reward"]["overall"] for r in recs], label=label, marker=".")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean reward (0..1)")
    ax.set_title(f"Tiny Qwen3-VL, quote reward (lexical judge), seed {result['seed']}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_trl", description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--plot", action="store_true", help="write docs/img/trl_reward_curve.png from seed 0")
    a = ap.parse_args(argv)
    from benchmarks.report import print_table

    with tempfile.TemporaryDirectory(prefix="bench-trl-") as tmp:
        root = Path(tmp)
        cached = sample_cache(root)
        results, rows = [], []
        for seed in range(a.seeds):
            res = run_arms(cached, root, seed, a.steps)
            results.append(res)
            rows.append(summarise(res))
            print(json.dumps(rows[-1]), flush=True)
        times = step_times(results[0]["arms"]["trained"])
    print_table("GRPO step on a CPU (tiny Qwen3-VL, 16 responses a step)", ["step s", "rollout s", "reward s",
                "update s", "reward share"], [[f"{times['step_s']:.2f}", f"{times['rollout_s']:.2f}",
                f"{times['reward_s']:.3f}", f"{times['update_s']:.2f}", f"{times['reward_share']:.1%}"]])  # fmt: skip
    print_table(
        f"Mean reward, trained vs frozen (first {EARLY} / last {LATE} of {a.steps} steps)",
        ["seed", "trained early", "trained late", "frozen late", "late - frozen", "late - early"],
        [
            [
                str(r["seed"]),
                *(f"{r[k]:.3f}" for k in ("trained_early", "trained_late", "frozen_late", "vs_frozen", "vs_early")),
            ]
            for r in rows
        ],  # fmt: skip
    )
    smallest = min(min(r["vs_frozen"], r["vs_early"]) for r in rows)
    print(f"smallest effect over {len(rows)} seeds: {smallest:.3f}; a test margin would be <= {smallest / 3:.3f}"
          f" (median late - frozen {statistics.median(r['vs_frozen'] for r in rows):.3f})")  # fmt: skip
    out = _out_dir()
    out.mkdir(parents=True, exist_ok=True)
    (out / "trl.json").write_text(json.dumps({"times": times, "seeds": rows}, indent=1))
    if a.plot:
        print(f"plot: {plot(results[0], REPO / 'docs' / 'img' / 'trl_reward_curve.png')}")
    return 0


def bench_trl_step_and_learning():
    """``make bench``: two seeds (the full five-seed run: ``python -m benchmarks.bench_trl``)."""
    assert main(["--seeds", "2"]) == 0


if __name__ == "__main__":
    raise SystemExit(main())
