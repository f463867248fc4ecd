"""``python -m reward check``: the training set against the reward settings before a run
(:func:`reward.preflight.check_training_set`), with the recipe read by :mod:`recipes.reader`."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m reward check")

import argparse
import sys

from core.errors import InputError
from recipes.reader import Unset as _Unset
from reward.preflight import (
    FAILURE_PREFIX,
    URL_SETTINGS,
    CheckReport,
    Problem,
    check_training_set,
    missing_paths,
    read_recipe,
)
from reward.servers import UrlListAction


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", action="append", default=[], metavar="PARQUET",
                        help="data file (repeatable); default: the recipe's data.train_files and data.val_files")  # fmt: skip
    parser.add_argument("--recipe", help="EasyR1 recipe: reward settings and data keys (${oc.env:...} resolved)")
    parser.add_argument("--cache-dir", help="block cache (overrides the recipe's cache_dir)")
    parser.add_argument("--judge-url", action=UrlListAction,
                        help="judge base URL, e.g. http://127.0.0.1:8000/v1: sends one probe; several (repeated or "
                        "comma-separated) are replicas")  # fmt: skip
    parser.add_argument("--judge-model", help="model name the judge serves")
    parser.add_argument("--embed-url", help="embedding server base URL (for an HTTP encoder): probed")
    parser.add_argument("--image-dir", help="folder image paths are relative to (default: the recipe's "
                        "data.image_dir, else each data file's folder)")  # fmt: skip
    parser.add_argument("--max-examples", type=int, default=3, help="examples shown per problem kind (default 3)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="EasyR1 overrides applied to the recipe (the launch passes the trainer's)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from reward.config import RewardConfig

    if not args.recipe and not args.cache_dir:
        raise InputError("give --recipe (its reward settings) or --cache-dir")
    kwargs: dict = {}
    pre: list[Problem] = []
    notes: list[str] = []
    data, image_dir, keys, fmt = list(args.data), args.image_dir, {}, None
    if args.recipe:
        recipe = read_recipe(args.recipe, overrides=args.overrides)
        if not recipe.uses_quote_reward and not args.cache_dir:
            print(f"reward check: recipe {args.recipe} does not use reward/quote_reward.py; nothing to check")
            return 0
        for k, v in recipe.reward_kwargs.items():
            if isinstance(v, _Unset):
                if k in URL_SETTINGS:
                    notes.append(f"{k}: env {v.name} is not set here (the launch sets it)")
                else:
                    pre.append(Problem("config", f"reward setting {k}", f"{v!r}: env {v.name} is not set", rows=0))
                continue
            kwargs[k] = v
        if not data:
            data = recipe.data_files
        for spec in data:
            if isinstance(spec, _Unset):
                pre.append(Problem("config", "data files", f"{spec!r}: env {spec.name} is not set", rows=0))
        data = [d for d in data if not isinstance(d, _Unset)]
        if image_dir is None and isinstance(recipe.image_dir, str):
            image_dir = recipe.image_dir
        elif image_dir is None and isinstance(recipe.image_dir, _Unset):
            pre.append(Problem("config", "data.image_dir", f"{recipe.image_dir!r}: env not set", rows=0))
        keys = {"prompt_key": recipe.prompt_key, "answer_key": recipe.answer_key, "image_key": recipe.image_key}
        fmt = recipe.format_prompt if isinstance(recipe.format_prompt, str) else None
        missing = missing_paths(recipe)
        pre.extend(missing)
        if any(m.where == "data.format_prompt" for m in missing):
            fmt = None  # reported once, above
    for name in ("cache_dir", "judge_url", "judge_model", "embed_url"):
        if getattr(args, name):
            kwargs[name] = getattr(args, name)
    if not data:
        pre.append(Problem("data", "data files", "no data file: give --data or a recipe with data.train_files",
                           rows=0))  # fmt: skip
    try:
        config = RewardConfig.from_kwargs(**kwargs)
    except InputError as e:
        report = CheckReport(problems=[*pre, Problem("config", "reward settings", str(e), rows=0)])
    else:
        report = check_training_set(data, config, image_dir=image_dir, format_prompt=fmt, **keys)
        report.problems[:0] = pre
    report.notes[:0] = notes
    print(report.format(args.max_examples), flush=True)
    if report.ok:
        print("reward check: ok")
        return 0
    for line in report.failure_lines():
        print(f"{FAILURE_PREFIX}{line}", file=sys.stderr)
    return 1
