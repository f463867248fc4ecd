"""``python -m reward score``: re-score logged rollouts with the training reward (when a reward looks wrong).

Each input line is an EasyR1 reward input ``{"response", "response_length", "ground_truth"}``; each output line
is the plugin's dict plus ``citations`` (``[{page, bbox, block_id, similarity, quote}]``, bbox in PDF points,
origin top-left of the displayed page, pages 1-based). All lines of one ``qid`` are scored in the same batch, so
an unscorable response gets its own group's mean as in training, even when the log holds them apart (EasyR1
reorders a batch to balance sequence lengths before it computes rewards); output lines keep the input order.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from data_prep.io import atomic_write_text
from data_prep.types import InputError

BATCH = 160
"""Lines per scoring batch (never splitting a run of one qid): one GRPO step's worth (32 x 5)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", type=Path, required=True, help="JSONL of EasyR1 reward inputs")
    parser.add_argument("--cache-dir", type=Path, required=True, help="block/embedding cache of data preparation")
    parser.add_argument("--out", type=Path, required=True, help="output JSONL (written atomically)")
    parser.add_argument("--encoder", default=None, help="quote encoder (default: each cache's own)")
    parser.add_argument("--embed-url", default=None, help="embedding server for HTTP encoders")
    parser.add_argument("--judge", choices=("http", "lexical"), default="http", help="judge (default: http)")
    parser.add_argument("--judge-url", default=None, help="OpenAI-compatible base URL (env QUOTECITE_JUDGE_URL)")
    parser.add_argument("--judge-model", default=None, help="served judge model (env QUOTECITE_JUDGE_MODEL)")
    parser.add_argument("--resolver", default="embedding", help="embedding | lexical | bm25")
    parser.add_argument("--reward-form", default="gated", help="gated | additive | answer_only")
    parser.add_argument("--abstain-threshold", type=float, default=None, help="drop citations below this similarity")
    parser.add_argument("--concurrency", type=int, default=32, help="judge requests in flight")
    parser.add_argument("--timeout", type=float, default=120.0, help="judge request deadline, seconds")
    parser.add_argument("--retries", type=int, default=3, help="judge retries after timeouts/5xx")
    parser.add_argument("--max-quotes", type=int, default=8, help="quotes kept per response")


def read_inputs(path: Path) -> list[dict]:
    """Reward inputs of a JSONL file; a bad line raises :class:`InputError` naming the line."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{n}: not JSON ({e})") from None
            if not isinstance(row, dict) or "response" not in row or "ground_truth" not in row:
                raise InputError(f"{path}:{n}: expected an object with 'response' and 'ground_truth'")
            rows.append(row)
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
    with tqdm(total=len(rows), desc="scoring", unit="response", disable=None) as bar:
        for start, end in batches(grouped_rows, grouped_qids):
            for k, (breakdown, citations) in enumerate(scorer.score(grouped_rows[start:end]), start):
                d = breakdown.to_dict()
                d["citations"] = [c.to_json() for c in citations]
                out_lines[order[k]] = json.dumps(d, ensure_ascii=False)
            bar.update(end - start)
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
