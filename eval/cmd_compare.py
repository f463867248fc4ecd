"""``python -m eval compare``: paired bootstrap on recall and exact McNemar on SAA between two scored runs
(:mod:`eval.compare`)."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval compare")

import argparse
from pathlib import Path

from core.errors import InputError
from core.io import refuse_output_over_inputs
from data_prep.validate import bounded_int, seed
from eval.compare import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MAX_RESAMPLES,
    RECALL_PAIRS,
    compare,
    format_comparison,
    load_per_question,
)
from eval.schemas import write_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", type=Path, help="score folder (or per_question.jsonl) of run A (baseline)")
    parser.add_argument("b", type=Path, help="score folder (or per_question.jsonl) of run B")
    parser.add_argument("--iou", default="0.5", help="recall threshold key: page, 0.1, 0.3, 0.5, 0.7 (default 0.5)")
    parser.add_argument(
        "--resamples",
        type=bounded_int(1, MAX_RESAMPLES),
        default=DEFAULT_RESAMPLES,
        help="bootstrap resamples (10000)",
    )
    parser.add_argument("--seed", type=seed, default=DEFAULT_SEED, help="bootstrap seed (fixed by default)")
    parser.add_argument(
        "--truncate-to-budget",
        action="store_true",
        help="also rescore B with its citations cut to A's count per question (own order and by similarity)",
    )
    parser.add_argument(
        "--recall-pairs",
        default="judged",
        choices=RECALL_PAIRS,
        help="recall bootstrap over the questions judged in both runs (paper Table 8, default; judge-free runs "
        "use all) or over every shared question",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the comparison as JSON here")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.resamples <= MAX_RESAMPLES:
        raise InputError(f"--resamples must be from 1 to {MAX_RESAMPLES}, got {args.resamples}")
    if args.out is not None:
        inputs = [args.a, args.b, Path(args.a) / "per_question.jsonl", Path(args.b) / "per_question.jsonl"]
        refuse_output_over_inputs(args.out, inputs)
    c = compare(
        load_per_question(args.a), load_per_question(args.b), args.iou, args.resamples, args.seed,
        truncate=args.truncate_to_budget, recall_pairs=args.recall_pairs,
    )  # fmt: skip
    print(format_comparison(c, str(args.a), str(args.b)))
    if args.out:
        write_json(args.out, c)
        print(f"wrote {args.out}")
    return 0
