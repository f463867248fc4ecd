"""``python -m quotecite plugins``: every registry and what is registered in it, with what each entry needs.

Listing imports no plug-in module: entries registered lazily (``"module:object"``) stay unimported, so the list
works where an optional dependency (MinerU, Docling, vLLM) is missing. ``--import MODULE`` imports a plug-in module
of your own first (one that registers its entry when imported), so its entries are listed too.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m quotecite plugins")

import argparse
import json


def registries() -> dict[str, object]:
    """Kind -> registry, from the bottom layer up."""
    from data_prep.encoders import ENCODERS
    from data_prep.parsers import PARSERS
    from eval.interfaces import INTERFACES
    from eval.metrics import METRICS
    from reward.judge import JUDGES
    from reward.resolve import RESOLVERS
    from reward.scoring import REWARD_FORMS

    return {
        "parser": PARSERS,
        "encoder": ENCODERS,
        "resolver": RESOLVERS,
        "judge": JUDGES,
        "reward form": REWARD_FORMS,
        "metric": METRICS,
        "interface": INTERFACES,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", nargs="?", default=None, help="list only this kind (parser, encoder, judge, ...)")
    parser.add_argument("--json", action="store_true", help="one JSON object per entry")
    parser.add_argument(
        "--import", dest="modules", action="append", default=[], metavar="MODULE",
        help="import this plug-in module first (repeatable; it must be importable, e.g. on PYTHONPATH)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import importlib

    from core.errors import InputError

    for module in getattr(args, "modules", []):
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise InputError(f"--import {module}: {e}") from None
    regs = registries()
    if args.kind is not None and args.kind not in regs:
        raise InputError(f"unknown kind {args.kind!r} (known: {', '.join(regs)})")
    for kind, reg in regs.items():
        if args.kind is not None and kind != args.kind:
            continue
        rows = reg.describe()
        if args.json:
            for row in rows:
                print(json.dumps({"kind": kind, **row}))
            continue
        print(f"{kind}s ({len(rows)}):")
        width = max((len(r["name"]) for r in rows), default=0)
        for r in rows:
            needs = f"  [needs: {', '.join(r['needs'])}]" if r["needs"] else ""
            print(f"  {r['name']:<{width}}  {r['summary']}{needs}")
    return 0
