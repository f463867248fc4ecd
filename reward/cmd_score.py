"""``python -m reward score``: re-score logged rollouts with the training reward (when a reward looks wrong).

Each input line is an EasyR1 reward input ``{"response", "response_length", "ground_truth"}``; each output line
is the plugin's dict plus ``citations`` (``[{page, bbox, block_id, similarity, quote}]``, bbox in PDF points,
origin top-left of the displayed page, pages 1-based). All lines of one ``qid`` are scored in the same batch, so
an unscorable response gets its own group's mean as in training, even when the log holds them apart (EasyR1
reorders a batch to balance sequence lengths before it computes rewards); output lines keep the input order.

The output file is written atomically and replaces an earlier output of that name; an output that is the input
file (however spelled) is refused. A run whose judge produced no score at all (every request refused, timed out,
failed with 5xx/429, or answered with no valid score) writes nothing and exits 2 with one line saying why: every
reward would be 0 or a group mean of nothing. (The training plugin keeps its own outage policy.)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.io import atomic_write_text, finite_float, int_in_range, read_jsonl, refuse_output_over_inputs
from data_prep.types import InputError
from reward.replicas import UrlListAction
from reward.response import DEFAULT_MAX_QUOTES

MAX_QUOTES_OPTION = 1000
"""Upper bound of ``--max-quotes`` (a response with more quotes than this is not a citation answer)."""

BATCH = 160
"""Lines per scoring batch (never splitting a run of one qid): one GRPO step's worth (32 x 5)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", type=Path, required=True, help="JSONL of EasyR1 reward inputs")
    parser.add_argument("--cache-dir", type=Path, required=True, help="block/embedding cache of data preparation")
    parser.add_argument("--out", type=Path, required=True, help="output JSONL (written atomically)")
    parser.add_argument("--encoder", default=None, help="quote encoder (default: each cache's own)")
    parser.add_argument("--embed-url", default=None, help="embedding server for HTTP encoders")
    parser.add_argument("--judge", choices=("http", "lexical"), default="http", help="judge (default: http)")
    parser.add_argument("--judge-url", default=None, action=UrlListAction,
                        help="OpenAI-compatible base URL (env QUOTECITE_JUDGE_URL); several (repeated or "
                        "comma-separated) are replicas")  # fmt: skip
    parser.add_argument("--judge-model", default=None, help="served judge model (env QUOTECITE_JUDGE_MODEL)")
    parser.add_argument("--resolver", default="embedding", help="embedding | fused | bm25 | bm25_lucene | lexical")
    parser.add_argument(
        "--reward-form", default="gated", help="gated | hard_gate | precision | additive | answer_only"
    )
    parser.add_argument(
        "--abstain-threshold", type=finite_float, default=None, help="drop citations below this similarity"
    )
    parser.add_argument("--concurrency", type=int_in_range(1, 4096), default=32, help="judge requests in flight")
    parser.add_argument("--timeout", type=finite_float, default=120.0, help="judge request deadline, seconds")
    parser.add_argument("--retries", type=int_in_range(0, 100), default=3, help="judge retries after timeouts/5xx")
    parser.add_argument(
        "--judge-outage-s", type=finite_float, default=30.0,
        help="seconds to wait out a judge/embedder outage (probing /health) before stopping with an error (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--max-quotes",
        type=int_in_range(1, MAX_QUOTES_OPTION),
        default=DEFAULT_MAX_QUOTES,
        help=f"safety bound on the quotes kept per response, logged when hit (default {DEFAULT_MAX_QUOTES})",
    )


def read_inputs(path: Path) -> list[dict]:
    """Reward inputs of a JSONL file; a bad line raises :class:`InputError` naming the line."""
    rows = []
    for n, row in read_jsonl(path):
        if "response" not in row or "ground_truth" not in row:
            raise InputError(f"{path}:{n}: expected an object with 'response' and 'ground_truth'")
        if not isinstance(row["response"], str):
            raise InputError(f"{path}:{n}: 'response' must be a string, got {type(row['response']).__name__}")
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no reward inputs (an empty file)")
    return rows


def batches(rows: list[dict], qids: list[str], size: int = BATCH) -> list[tuple[int, int]]:
    """``[start, end)`` ranges of about ``size`` rows that never split a run of equal qids."""
    out, start = [], 0
    while start < len(rows):
        end = min(start + size, len(rows))
        while end < len(rows) and qids[end] == qids[end - 1]:
            end += 1
        out.append((start, end))
        start = end
    return out


def group_order(qids: list[str]) -> list[int]:
    """Row indices with each qid's rows brought together (qids in order of first appearance, rows in input order
    within a qid), so :func:`batches` never splits a group.

    >>> group_order(["a", "b", "a", "c", "b"])
    [0, 2, 1, 4, 3]
    """
    first: dict[str, int] = {}
    for i, q in enumerate(qids):
        first.setdefault(q, i)
    return sorted(range(len(qids)), key=lambda i: (first[qids[i]], i))


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from tqdm import tqdm

    from reward.config import RewardConfig
    from reward.groundtruth import unpack_ground_truth
    from reward.pipeline import RewardScorer

    settings = {
        "cache_dir": str(args.cache_dir),
        "encoder": args.encoder,
        "judge": args.judge,
        "resolver": args.resolver,
        "reward_form": args.reward_form,
        "abstain_threshold": args.abstain_threshold,
        "concurrency": args.concurrency,
        "timeout_s": args.timeout,
        "retries": args.retries,
        "judge_outage_s": args.judge_outage_s,
        "max_quotes": args.max_quotes,
    }
    for key, value in (
        ("embed_url", args.embed_url),
        ("judge_url", args.judge_url),
        ("judge_model", args.judge_model),
    ):
        if value is not None:
            settings[key] = value
    config = RewardConfig.from_kwargs(**settings)
    refuse_output_over_inputs(args.out, [args.inputs])
    rows = read_inputs(args.inputs)
    qids = []
    for n, row in enumerate(rows, 1):
        try:
            qids.append(unpack_ground_truth(row["ground_truth"]).qid)
        except InputError as e:
            raise InputError(f"{args.inputs}: input {n}: {e}") from None
    scorer = RewardScorer(config)
    order = group_order(qids)
    grouped_rows, grouped_qids = [rows[i] for i in order], [qids[i] for i in order]
    out_lines: list[str] = [""] * len(rows)
    examples: dict[str, str] = {}
    with tqdm(total=len(rows), desc="scoring", unit="response", disable=None) as bar:
        for start, end in batches(grouped_rows, grouped_qids):
            for k, (breakdown, citations) in enumerate(scorer.score(grouped_rows[start:end]), start):
                d = breakdown.to_dict()
                d["citations"] = [c.to_json() for c in citations]
                out_lines[order[k]] = json.dumps(d, ensure_ascii=False)
            for kind, example in (getattr(scorer.judge, "failure_examples", None) or {}).items():
                examples.setdefault(kind, example)
            bar.update(end - start)
    from reward.judge import no_score_error

    err = no_score_error(scorer.total.judge, scorer.judge, examples)
    if err is not None:
        raise InputError(f"{err}; no rewards written to {args.out}")
    atomic_write_text(args.out, "".join(line + "\n" for line in out_lines))
    total = scorer.total
    n = max(total.responses, 1)
    mean = sum(json.loads(line)["overall"] for line in out_lines) / n
    Console(stderr=True).print(
        f"scored {total.responses} responses -> {args.out}: mean reward {mean:.3f}, "
        f"format {total.format_ok / n:.1%} (rejects {dict(total.reject_reasons) or 'none'}), "
        f"unscorable {total.unscorable} ({dict(total.unscorable_reasons) or 'none'}), "
        f"groups with none scorable {total.groups_all_unscorable}, judge {total.judge.to_dict()}"
    )
    return 0
