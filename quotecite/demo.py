"""``make demo``: the whole pipeline on the CPU defaults, on a document the project generates itself.

1. documents -> blocks -> embeddings: a 4-page bilingual sample PDF (table, captions, figure, a rotated page)
   parsed with ``pdftext`` and embedded with ``minilm`` into a cache; per-type block counts and a ``show`` image;
2. reward: a handful of sample responses scored with the model-free ``lexical`` judge;
3. training: a real GRPO run (TRL) of a tiny Qwen3-VL policy, warm-started offline, on the sample document's
   questions with the same reward (:mod:`quotecite.trl_demo`); the reward per step, the run log and its samples page;
4. evaluation: sample predictions resolved, scored and reported (metrics table, recall-vs-IoU plot, HTML report).

``--seed`` changes every random choice of the training (the policy's weights, the warm-start data, sampling, LoRA).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m quotecite demo")

import argparse
import collections
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from data_prep.validate import seed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="output folder (default: demo_out)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of every random choice of the training step")
    parser.add_argument("--no-train", action="store_true", help="skip the GRPO training step")


def run(args: argparse.Namespace) -> int:
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from data_prep.sample import write_sample_pdf
    from data_prep.show import show_document

    console = Console()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    console.rule("[bold]1. Document stage: PDF -> blocks -> embeddings cache")
    pdf = write_sample_pdf(out / "sample.pdf")
    cached = build_cache(pdf, get_parser("pdftext"), get_encoder("minilm"), out / "cache")
    counts = collections.Counter(b.type for b in cached.blocks)
    table = Table(title=f"{pdf.name}: {cached.n_pages} pages, {len(cached.blocks)} blocks (doc_key {cached.key})")
    table.add_column("block type")
    table.add_column("count", justify="right")
    for t, n in sorted(counts.items()):
        table.add_row(t, str(n))
    console.print(table)
    show_png = show_document(cached, out / "show_sample.png")
    console.print(f"cache: {cached.path}")
    console.print(f"show image (blocks over the pages, coloured by type): {show_png}")

    console.rule("[bold]2. Reward: sample responses scored with the lexical judge")
    from reward.demo import run_reward_demo

    run_reward_demo(cached, out / "reward")
    # --- samples (reward/samples.py) ---
    from quotecite.samples_demo import run_samples_demo

    console.print(f"samples page (what the reward saw, per step): {run_samples_demo(cached, out / 'samples_run')}")

    if not args.no_train:
        console.rule("[bold]3. Training: GRPO with this reward (TRL) on a tiny Qwen3-VL, warm-started offline")
        from quotecite.trl_demo import DemoSettings, run_trl_demo

        trained = run_trl_demo(cached, out / "trl", DemoSettings(seed=args.seed))
        rewards = [r["reward"].get("overall", 0.0) for r in trained["steps"]]
        k = max(1, len(rewards) // 5)
        console.print(
            f"mean reward: first {k} steps {sum(rewards[:k]) / k:.3f}, last {k} steps {sum(rewards[-k:]) / k:.3f} "
            f"({trained['seconds']:.0f} s)"
        )
        console.print(f"adapter: {trained['adapter']}; run log: {out / 'trl' / 'run' / 'run_log.jsonl'}")
        console.print(f"samples page: {trained['samples_page']}")
        console.print(f"training curves: python -m launch.runlog plot {out / 'trl' / 'run'}")

    console.rule("[bold]4. Evaluation: resolve, score, report")
    from eval.demo import run_eval_demo

    result = run_eval_demo(cached, out / "eval")
    console.print(f"recall vs IoU plot: {result['recall_vs_iou']}")
    console.print(f"HTML report: {result['report']}")
    console.rule(f"[bold green]demo finished in {time.perf_counter() - t0:.1f} s; outputs in {out}")
    return 0
