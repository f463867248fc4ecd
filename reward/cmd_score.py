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

``--reward-form lat`` scores with LAT's rule-based Chain-of-Evidence reward (:mod:`reward.lat`, a form of the same
scorer, as the plugin does for ``reward_form: lat``): no judge is called, the step similarities come from the
cache's encoder (``--encoder``, ``--embed-url``), ``--lat KEY=VALUE`` overrides a constant of
:class:`reward.lat.LatSettings`, and each output line is the LAT breakdown plus ``citations``: every box of the
chain that lands on a page (``[{page, bbox, role, text}]``, ``role`` ``step`` or ``answer``). ``--recipe`` takes
the reward settings of an EasyR1 recipe (``worker.reward.reward_function_kwargs``, e.g.
``recipes/qwen3vl_8b_lat.yaml``); the options given on the command line override it.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m reward score")

import argparse
import json
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text, read_jsonl, refuse_output_over_inputs
from data_prep.validate import bounded_int, finite
from reward.config import RewardConfig
from reward.judge import CLI_OUTAGE_S, JUDGES, add_judge_mode_arguments, judge_mode_of
from reward.resolve import RESOLVERS
from reward.response import DEFAULT_MAX_QUOTES
from reward.scoring import REWARD_FORMS
from reward.servers import UrlListAction

MAX_QUOTES_OPTION = 1000
"""Upper bound of ``--max-quotes`` (a response with more quotes than this is not a citation answer)."""

_DEFAULTS = RewardConfig.__dataclass_fields__
OPTION_DEFAULTS: dict[str, object] = {
    **{k: _DEFAULTS[k].default for k in ("reward_form", "judge", "resolver", "concurrency", "timeout_s", "retries")},
    "judge_outage_s": CLI_OUTAGE_S,
    "max_quotes": DEFAULT_MAX_QUOTES,
}
"""Settings of a run that neither the options nor the recipe give (``judge_outage_s``: 30 s, not the plugin's 600,
so that a re-scoring stops soon when the judge is down)."""

BATCH = 160
"""Lines per scoring batch (never splitting a run of one qid): one GRPO step's worth (32 x 5)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", type=Path, required=True, help="JSONL of EasyR1 reward inputs")
    parser.add_argument("--cache-dir", type=Path, required=True, help="block/embedding cache of data preparation")
    parser.add_argument("--out", type=Path, required=True, help="output JSONL (written atomically)")
    parser.add_argument("--encoder", default=None, help="quote encoder (default: each cache's own)")
    parser.add_argument("--embed-url", default=None, help="embedding server for HTTP encoders")
    parser.add_argument(
        "--judge", choices=JUDGES.names(), default=None, help=f"judge (default: {OPTION_DEFAULTS['judge']})"
    )
    parser.add_argument("--judge-url", default=None, action=UrlListAction,
                        help="OpenAI-compatible base URL (env QUOTECITE_JUDGE_URL); several (repeated or "
                        "comma-separated) are replicas")  # fmt: skip
    parser.add_argument("--judge-model", default=None, help="served judge model (env QUOTECITE_JUDGE_MODEL)")
    parser.add_argument(
        "--resolver", default=None, choices=RESOLVERS.names(),
        help=f"quote -> block resolver (default: the recipe's, else {OPTION_DEFAULTS['resolver']})",
    )  # fmt: skip
    parser.add_argument(
        "--reward-form", default=None, choices=REWARD_FORMS.names(),
        help=f"reward formula (default: the recipe's, else {OPTION_DEFAULTS['reward_form']})",
    )  # fmt: skip
    parser.add_argument(
        "--recipe", type=Path, default=None,
        help="EasyR1 recipe whose worker.reward.reward_function_kwargs are the settings (the options given override)",
    )  # fmt: skip
    parser.add_argument(
        "--lat", action="append", default=[], metavar="KEY=VALUE",
        help="reward_form lat: override a LAT constant (tau, overlap_iou, epsilon, ground_iou, min_steps, crop_dpi, "
        "max_steps); repeatable",
    )  # fmt: skip
    parser.add_argument("--abstain-threshold", type=finite, default=None, help="drop citations below this similarity")
    parser.add_argument(
        "--concurrency",
        type=bounded_int(1, 4096),
        default=None,
        help=f"judge requests in flight (default: {OPTION_DEFAULTS['concurrency']})",
    )
    parser.add_argument(
        "--timeout",
        type=finite,
        default=None,
        help=f"judge request deadline, seconds (default: {OPTION_DEFAULTS['timeout_s']:g})",
    )
    parser.add_argument(
        "--retries",
        type=bounded_int(0, 100),
        default=None,
        help=f"judge retries after timeouts/5xx (default: {OPTION_DEFAULTS['retries']})",
    )
    parser.add_argument(
        "--judge-outage-s", type=finite, default=None,
        help="seconds to wait out a judge/embedder outage (probing /health) before stopping with an error (0: none; "
        f"default: {CLI_OUTAGE_S:g})",
    )  # fmt: skip
    add_judge_mode_arguments(parser)
    parser.add_argument(
        "--max-quotes",
        type=bounded_int(1, MAX_QUOTES_OPTION),
        default=None,
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


def parse_lat_overrides(items: list[str]) -> dict:
    """``--lat KEY=VALUE`` options as a mapping (values checked by :class:`reward.lat.LatSettings`).

    >>> parse_lat_overrides(["tau=0.5", "min_steps=3"])
    {'tau': '0.5', 'min_steps': '3'}
    """
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InputError(f"--lat {item!r}: expected KEY=VALUE, e.g. tau=0.3")
        out[key.strip()] = value.strip()
    return out


def recipe_reward_settings(path: Path) -> dict:
    """The reward settings of an EasyR1 recipe (its ``worker.reward.reward_function_kwargs``, ``${oc.env:..}``
    resolved; a variable that is not set leaves its setting out). :class:`InputError` when the recipe does not use
    this project's reward plugin."""
    from recipes.reader import Unset
    from reward.preflight import read_recipe

    recipe = read_recipe(path)
    if not recipe.uses_quote_reward:
        raise InputError(
            f"recipe {path}: worker.reward.reward_function is {recipe.reward_function!r}, not reward/quote_reward.py"
        )
    return {k: v for k, v in recipe.reward_kwargs.items() if not isinstance(v, Unset)}


def settings_of(args: argparse.Namespace) -> dict:
    """The reward settings of a run: the recipe's (``--recipe``) under the options; an option left at its default
    does not replace a recipe's value."""
    given = {
        "cache_dir": str(args.cache_dir),
        "encoder": args.encoder,
        "reward_form": args.reward_form,
        "embed_url": args.embed_url,
        "judge_url": args.judge_url,
        "judge_model": args.judge_model,
        "abstain_threshold": args.abstain_threshold,
        "judge": args.judge,
        "resolver": args.resolver,
        "concurrency": args.concurrency,
        "timeout_s": args.timeout,
        "retries": args.retries,
        "judge_outage_s": args.judge_outage_s,
        "max_quotes": args.max_quotes,
        **{"judge_" + k: v for k, v in judge_mode_of(args).items()},
    }
    settings = recipe_reward_settings(args.recipe) if args.recipe is not None else {}
    settings.update({k: v for k, v in given.items() if v is not None})
    for key, value in OPTION_DEFAULTS.items():
        settings.setdefault(key, value)
    lat = parse_lat_overrides(args.lat)
    if lat:
        if not REWARD_FORMS.needs(settings["reward_form"], "steps"):
            raise InputError(f"--lat applies to --reward-form lat, not {settings['reward_form']!r}")
        settings["lat"] = {**(settings.get("lat") or {}), **lat}
    return settings


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from tqdm import tqdm

    from data_prep.groundtruth import unpack_ground_truth
    from reward.config import RewardConfig
    from reward.judge import no_score_error
    from reward.pipeline import RewardScorer

    config = RewardConfig.from_kwargs(**settings_of(args))
    refuse_output_over_inputs(args.out, [args.inputs])
    rows = read_inputs(args.inputs)
    qids = []
    for n, row in enumerate(rows, 1):
        try:
            qids.append(unpack_ground_truth(row["ground_truth"]).qid)
        except InputError as e:
            raise InputError(f"{args.inputs}: input {n}: {e}") from None
    scorer = RewardScorer(config)
    by_steps = scorer.steps is not None  # the form needs "steps" (registry): scored by reward.lat.StepTerms
    order = group_order(qids)
    grouped_rows, grouped_qids = [rows[i] for i in order], [qids[i] for i in order]
    out_lines: list[str] = [""] * len(rows)
    examples: dict[str, str] = {}
    desc = f"scoring ({scorer.form.name})" if by_steps else "scoring"
    with tqdm(total=len(rows), desc=desc, unit="response", disable=None) as bar:
        for start, end in batches(grouped_rows, grouped_qids):
            try:
                scored = scorer.score(grouped_rows[start:end])
            except InputError as e:
                raise InputError(_name_input_line(str(e), args.inputs, order, start)) from None
            for k, (breakdown, citations) in enumerate(scored, start):
                d = breakdown.to_dict()
                d["citations"] = (
                    step_citations(scorer, grouped_rows[k - start]) if by_steps else [c.to_json() for c in citations]
                )
                out_lines[order[k]] = json.dumps(d, ensure_ascii=False)
            for kind, example in (getattr(scorer.judge, "failure_examples", None) or {}).items():
                examples.setdefault(kind, example)
            bar.update(end - start)
    err = no_score_error(scorer.total.judge, scorer.judge, examples)  # None when no judge was asked
    if err is not None:
        raise InputError(f"{err}; no rewards written to {args.out}")
    atomic_write_text(args.out, "".join(line + "\n" for line in out_lines))
    ds = [json.loads(line) for line in out_lines]  # the lines this command just wrote itself, for the summary
    Console(stderr=True).print((steps_summary if by_steps else judged_summary)(scorer, ds, args.out))
    return 0


def _name_input_line(msg: str, inputs: Path, order: list[int], start: int) -> str:
    """A scorer's "reward input i: ..." (i counts within the batch starting at grouped row ``start``) as the input
    file's line."""
    if msg.startswith("reward input "):
        k, _, rest = msg[len("reward input ") :].partition(":")
        if k.isdigit():
            return f"{inputs}: input {order[start + int(k)] + 1}:{rest}"
    return msg


def judged_summary(scorer, ds: list[dict], out: Path) -> str:
    """The one summary line of a run of a form over judge scores (``ds``: the output lines)."""
    total = scorer.total
    n = max(total.responses, 1)
    mean = sum(d["overall"] for d in ds) / n
    return (
        f"scored {total.responses} responses -> {out}: mean reward {mean:.3f}, "
        f"format {total.format_ok / n:.1%} (rejects {dict(total.reject_reasons) or 'none'}), "
        f"unscorable {total.unscorable} ({dict(total.unscorable_reasons) or 'none'}), "
        f"groups with none scorable {total.groups_all_unscorable}, judge {total.judge.to_dict()}"
    )


def steps_summary(scorer, ds: list[dict], out: Path) -> str:
    """The one summary line of a run of a form scored from the response's steps (LAT's four terms)."""
    n = len(ds)

    def mean(key: str) -> float:
        return sum(d[key] for d in ds) / n

    return (
        f"scored {n} responses (reward_form {scorer.form.name}, embedder "
        f"{', '.join(scorer.steps.embedder_names()) or 'none needed'}) -> "
        f"{out}: mean reward {mean('overall'):.3f} (format {mean('format'):.3f}, accuracy {mean('accuracy'):.3f}, "
        f"step {mean('step'):.3f}, ground {mean('ground'):.3f}), format ok {mean('format_ok'):.1%}, "
        f"unscorable {int(sum(d['unscorable'] for d in ds))}"
    )


def step_citations(scorer, row: dict) -> list[dict]:
    """Every box of a Chain-of-Evidence response (a form that needs ``steps``) that lands on a page of the
    document: ``{page, bbox (points), role, text}``."""
    from data_prep.groundtruth import unpack_ground_truth
    from reward.lat import locate, parse_coe

    gt = unpack_ground_truth(row["ground_truth"])
    parsed = parse_coe(row["response"])
    cached = scorer.doc(gt.doc_key)
    out = []
    for role, boxes in (("step", parsed.steps), ("answer", parsed.answer_boxes)):
        for b in boxes:
            r = locate(b, gt.pages, cached)
            if r is not None:
                out.append({"page": r.page, "bbox": [round(v, 3) for v in r.bbox], "role": role, "text": r.text})
    return out
