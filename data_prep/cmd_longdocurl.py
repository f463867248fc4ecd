"""``python -m data_prep longdocurl``: build the GRPO training set from LongDocURL (:mod:`data_prep.longdocurl`), whole
or as one shard of a Slurm array."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m data_prep longdocurl")

import argparse
from pathlib import Path

from data_prep.fingerprint import (
    MinHashConfig,
)
from data_prep.longdocurl import CACHE_FAILED, DEFAULT_FORMAT_PROMPT, build, config_from_args, print_summary
from data_prep.qwen_tokens import PromptBudget
from data_prep.validate import bounded_float, bounded_int, nonneg_int, positive_float, positive_int, seed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    b = PromptBudget()
    m = MinHashConfig()
    parser.add_argument("--jsonl", type=Path, required=True, help="LongDocURL.jsonl")
    parser.add_argument("--pdf-dir", type=Path, required=True, help="folder of the LongDocURL PDFs (recursive)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--eval-pdfs", type=Path, help="evaluation PDFs: exclude training documents that match")
    parser.add_argument("--max-window", type=positive_int, default=30, help="pages per window at most (default 30)")
    parser.add_argument("--val", type=nonneg_int, default=83, help="questions held out for validation (default 83)")
    parser.add_argument("--seed", type=seed, default=0, help="seed of the split (default 0)")
    parser.add_argument("--parser", default="pdftext", help="layout parser for the block cache (default pdftext)")
    parser.add_argument("--parser-arg", action="append", metavar="KEY=VALUE", help="parser keyword argument")
    parser.add_argument(
        "--encoder", default="minilm", help="encoder for the block cache (default minilm; none: blocks only)"
    )
    parser.add_argument("--encoder-arg", action="append", metavar="KEY=VALUE", help="encoder keyword argument")
    parser.add_argument("--cache-dir", type=Path, help="block cache folder (default OUT/cache)")
    parser.add_argument(
        "--max-prompt-length", type=positive_int, default=b.max_prompt_length, help="tokens (default 48000)"
    )
    parser.add_argument(
        "--max-pixels-per-page",
        type=bounded_float(784, 1e9),
        default=b.max_pixels_per_page,
        help="evaluation cap (default 1e6)",
    )
    parser.add_argument("--total-pixels", type=positive_float, help="evaluation total pixel budget (default: none)")
    parser.add_argument(
        "--headroom", type=nonneg_int, default=b.headroom_tokens, help="spare prompt tokens (default 1024)"
    )
    parser.add_argument(
        "--format-prompt", type=Path, default=DEFAULT_FORMAT_PROMPT, help="the recipe's data.format_prompt"
    )
    parser.add_argument(
        "--jpeg-quality", type=bounded_int(1, 100), default=90, help="JPEG quality of page images (default 90)"
    )
    parser.add_argument(
        "--near-dup-threshold",
        type=bounded_float(0, 1),
        default=m.threshold,
        help=f"MinHash Jaccard at or above which a training PDF duplicates an evaluation PDF (default {m.threshold})",
    )
    arr = parser.add_mutually_exclusive_group()
    arr.add_argument(
        "--shard",
        metavar="I/N",
        help="job-array task: only the documents of shard I of N (1-based; by a hash of doc_no) into the cache, "
        "images and done-markers; no parquet (then run --finalize)",
    )
    arr.add_argument(
        "--finalize",
        action="store_true",
        help="after the shards: write parquet, summary and reports from the done-markers, building nothing; fails "
        "naming the documents that have none",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from core.io import refuse_output_dir_over_inputs, refuse_output_over_inputs

    config = config_from_args(args)
    if config.out.exists() and not config.out.is_dir():
        refuse_output_dir_over_inputs(config.out, [])
    for name in ("train.parquet", "val.parquet", "skipped.jsonl", "overlap_report.json", "summary.json"):
        refuse_output_over_inputs(config.out / name, [args.jsonl], flag=f"--out's {name}")
    console = Console()
    result = build(config, console)
    if config.shard is not None:
        failed = sorted({s["doc_no"] for s in result.skipped if s["reason"] == CACHE_FAILED})
        console.print(
            f"shard {config.shard}: {len(result.documents)} documents ({result.docs_from_state} already done), "
            f"{len(result.train_rows)} questions kept; cache: {config.cache_path}"
        )
        if failed:
            console.print(f"[bold red]shard {config.shard}: cache build failed for {', '.join(failed)}; rerun it")
            return 1
        return 0
    print_summary(result.summary, config.out, console)
    if not result.train_rows:
        console.print("[bold red]no training question kept: see skipped.jsonl for the reasons")
        return 1
    console.print(
        f"train: {config.out / 'train.parquet'}  val: {config.out / 'val.parquet'}  cache: {config.cache_path}"
    )
    return 0
