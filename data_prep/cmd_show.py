"""``python -m data_prep show DOC_KEY --cache-dir DIR [--page N] [--dpi D] --out PNG``.

Draws a cached document's blocks over its rendered page(s), coloured by type with block ids and a legend, so a
person can check a parse by eye. Without ``--page`` all pages are drawn side by side in a grid (size capped).
``DOC_KEY`` may be a unique prefix of a key in the cache directory.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m data_prep show")

import argparse
from pathlib import Path

from data_prep.cache import CacheError, list_cache, load_cache
from data_prep.show import ShowConfig, show_document
from data_prep.validate import bounded_float, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "doc_key", help="doc_key of a cache entry (as printed by `data_prep blocks`), or a unique prefix"
    )
    parser.add_argument("--cache-dir", type=Path, required=True, help="the cache directory")
    parser.add_argument(
        "--page", type=positive_int, default=None, help="1-based page to draw (default: all pages in a grid)"
    )
    parser.add_argument(
        "--dpi",
        type=bounded_float(0, 1200, lo_open=True),
        default=ShowConfig.dpi,
        help="resolution of a single page (default 100)",
    )
    parser.add_argument("--out", type=Path, required=True, help="output PNG file")


def resolve_key(cache_dir: Path, key: str) -> str:
    """``key`` itself when it is an entry of ``cache_dir``, else the one entry it is a prefix of."""
    keys = list_cache(cache_dir)
    if key in keys:
        return key
    matches = [k for k in keys if k.startswith(key)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(keys[:5]) + (" ..." if len(keys) > 5 else "") if keys else "none"
        raise CacheError(f"{cache_dir}: no cache entry {key!r} (entries: {known})")
    raise CacheError(f"{cache_dir}: {key!r} is a prefix of {len(matches)} entries; give more of the key")


def run(args: argparse.Namespace) -> int:
    if args.dpi <= 0:
        raise CacheError(f"--dpi must be positive, got {args.dpi}")
    from core.io import refuse_output_inside, refuse_output_over_inputs

    refuse_output_over_inputs(args.out, [])
    refuse_output_inside(args.out, [args.cache_dir], "the cache folder --cache-dir")
    cached = load_cache(args.cache_dir, resolve_key(args.cache_dir, args.doc_key))
    out = show_document(cached, args.out, page=args.page, config=ShowConfig(dpi=args.dpi))
    on = "all pages" if args.page is None else f"page {args.page}"
    n = len(cached.blocks) if args.page is None else sum(b.page == args.page for b in cached.blocks)
    print(f"{out}  ({n} blocks, {on} of {cached.pdf_path.name})")
    return 0
