"""``make demo``: the whole pipeline on the CPU defaults, on a document the project generates itself.

1. documents -> blocks -> embeddings: a 4-page bilingual sample PDF (table, captions, figure, a rotated page)
   parsed with ``pdftext`` and embedded with ``minilm`` into a cache; per-type block counts and a ``show`` image;
2. reward: a handful of sample responses scored with the model-free ``lexical`` judge;
3. evaluation: sample predictions resolved, scored and reported (metrics table, recall-vs-IoU plot, HTML report).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="output folder (default: demo_out)")


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

    console.rule("[bold]3. Evaluation: resolve, score, report")
    from eval.demo import run_eval_demo

    result = run_eval_demo(cached, out / "eval")
    console.print(f"recall vs IoU plot: {result['recall_vs_iou']}")
    console.print(f"HTML report: {result['report']}")
    console.rule(f"[bold green]demo finished in {time.perf_counter() - t0:.1f} s; outputs in {out}")
    return 0
