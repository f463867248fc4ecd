"""``python -m data_prep blocks PDF... --parser P --cache-dir DIR``: parse PDFs into blocks, embed them, cache them.

Prints one JSON line per document on stdout::

    {"pdf": "a.pdf", "doc_key": "...", "n_pages": 4, "n_blocks": 57, "cache_path": "cache/...", "types": {...}}

``types`` counts the document's blocks per type. A progress bar over the documents and a closing summary go to
stderr. An entry that is already in the cache and passes every check is reused, also from a read-only cache
(``--force`` rebuilds it); a damaged or edited entry (zero-byte, NaN or reordered embeddings, an edited manifest) is
rebuilt. Bad input (a missing, non-PDF, encrypted or empty file, a parser output of another PDF or with NaN or
off-page boxes, an unwritable cache dir, a full disk, an unreachable embedding server) stops the run with one line
``error: ...`` and exit status 2; the documents before it keep their complete entries, and no partial entry is ever
left. Warnings print one line each, but repeated ones (2,000 blank pages) are summarised (:class:`WarningSummary`).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m data_prep blocks")

import argparse
import collections
import contextlib
import json
import logging
import re
import sys
import time
import warnings
from pathlib import Path

from data_prep.encoders import ENCODERS
from data_prep.parsers import PARSERS

NO_ENCODER = "none"
"""``--encoder none``: store blocks only, no embeddings."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pdfs", nargs="+", type=Path, metavar="PDF", help="PDF files to parse")
    p.add_argument(
        "--parser",
        required=True,
        metavar="{" + ",".join(PARSERS.names()) + "}",
        help="layout parser (pdftext runs anywhere; `python -m quotecite plugins` lists them)",
    )
    p.add_argument(
        "--parser-output",
        type=Path,
        metavar="FILE",
        help="an existing output file of the parser (MinerU middle.json, Docling JSON) to convert; one PDF only",
    )
    p.add_argument(
        "--encoder",
        default="minilm",
        metavar="{" + ",".join([*ENCODERS.names(), NO_ENCODER]) + "}",
        help="block encoder (default: minilm, on the CPU); none stores blocks only",
    )
    p.add_argument(
        "--embed-url",
        metavar="URL",
        help="qwen3-vl-embedding over HTTP: base URL of the vLLM server, e.g. http://node1:8001/v1",
    )
    p.add_argument("--embed-model", metavar="NAME", help="qwen3-vl-embedding: model name (served name; cache key)")
    p.add_argument(
        "--embed-model-path", metavar="DIR", help="qwen3-vl-embedding in-process: local checkpoint directory"
    )
    p.add_argument("--cache-dir", required=True, type=Path, metavar="DIR", help="cache directory (created if absent)")
    p.add_argument("--force", action="store_true", help="rebuild entries that are already cached")


def _make_encoder(args: argparse.Namespace):
    from core.errors import InputError
    from data_prep.encoders import get_encoder

    if args.encoder == NO_ENCODER:
        flags = [f for f, v in (("--embed-url", args.embed_url), ("--embed-model", args.embed_model),
                                ("--embed-model-path", args.embed_model_path)) if v]  # fmt: skip
        if flags:
            raise InputError(f"{', '.join(flags)} do not apply to --encoder {NO_ENCODER}")
        return None
    if args.encoder not in ENCODERS:
        import difflib

        known = [*ENCODERS.names(), NO_ENCODER]
        close = difflib.get_close_matches(args.encoder, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(f"unknown encoder {args.encoder!r}{hint} (known: {', '.join(known)})")
    kwargs: dict = {}
    for flag, need, key, value in (
        ("--embed-url", "url", "url", args.embed_url),
        ("--embed-model", "url", "model", args.embed_model),
        ("--embed-model-path", "model_path", "model_path", args.embed_model_path),
    ):
        if value:
            if not ENCODERS.needs(args.encoder, need):
                takers = ", ".join(ENCODERS.with_need(need))
                raise InputError(f"{flag} only applies to --encoder {takers} (got --encoder {args.encoder})")
            kwargs[key] = value
    return get_encoder(args.encoder, **kwargs)


class WarningSummary:
    """Prints warnings as one line each (``warning: ...``, above the progress bar), but only the first
    :attr:`show` of each kind: messages that differ only in their numbers ("page 7 has no text layer", "page 8
    ...") are one kind. :meth:`flush` (after each document and at the end) prints one line per kind that had more,
    so 2,000 blank pages make 4 lines, not 2,000. Library warnings (:mod:`warnings`) and ``data_prep`` log records
    of level WARNING and up both come here."""

    def __init__(self, show: int = 3, file=None) -> None:
        self.show = show
        self.file = file
        self.seen: collections.Counter[str] = collections.Counter()
        self.example: dict[str, str] = {}
        self.total = 0

    def _write(self, text: str) -> None:
        from tqdm import tqdm

        tqdm.write(text, file=self.file or sys.stderr)

    def warn(self, message: str) -> None:
        message = " ".join(str(message).split())
        kind = re.sub(r"\d+(?:\.\d+)?", "#", message)
        self.seen[kind] += 1
        self.total += 1
        if self.seen[kind] <= self.show:
            self._write(f"warning: {message}")
        else:
            self.example[kind] = message

    def flush(self) -> None:
        for kind, n in self.seen.items():
            if n > self.show:
                self._write(f"warning: ... and {n - self.show} more like this (last: {self.example[kind]})")
        self.seen.clear()
        self.example.clear()

    def showwarning(self, message, category, filename, lineno, file=None, line=None) -> None:
        self.warn(str(message))

    def handler(self) -> logging.Handler:
        summary = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                summary.warn(record.getMessage())

        h = _Handler(logging.WARNING)
        return h


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from core.errors import InputError
    from data_prep.cache import build_cache
    from data_prep.encoders.qwen3vl import EmbeddingServerError
    from data_prep.parsers import get_parser

    if args.parser_output is not None and len(args.pdfs) != 1:
        raise InputError(f"--parser-output {args.parser_output} belongs to one PDF; got {len(args.pdfs)} PDFs")
    parser = get_parser(args.parser)
    encoder = _make_encoder(args)

    t0 = time.monotonic()
    n_pages = n_blocks = 0
    summary = WarningSummary()
    log_handler = summary.handler()
    data_log = logging.getLogger("data_prep")
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        # Every occurrence of ours is counted (WarningSummary decides what is printed); library deprecations stay
        # hidden as by default.
        warnings.filterwarnings("always", category=UserWarning)
        warnings.showwarning = summary.showwarning
        data_log.addHandler(log_handler)
        stack.callback(data_log.removeHandler, log_handler)
        stack.callback(summary.flush)
        bar = tqdm(args.pdfs, desc="blocks", unit="doc", file=sys.stderr, disable=None, dynamic_ncols=True)
        for pdf in bar:
            bar.set_postfix_str(pdf.name)
            try:
                entry = build_cache(pdf, parser, encoder, args.cache_dir, args.parser_output, force=args.force)
            except EmbeddingServerError as e:
                raise InputError(f"{pdf}: {e}") from None
            finally:
                summary.flush()
            types = collections.Counter(b.type for b in entry.blocks)
            record = {
                "pdf": str(pdf),
                "doc_key": entry.key,
                "n_pages": entry.n_pages,
                "n_blocks": len(entry.blocks),
                "cache_path": str(entry.path),
                "types": dict(sorted(types.items())),
            }
            print(json.dumps(record, ensure_ascii=False), flush=True)
            n_pages += entry.n_pages
            n_blocks += len(entry.blocks)
        bar.close()
    enc_name = "no encoder" if encoder is None else encoder.name
    print(
        f"{len(args.pdfs)} document(s), {n_pages} pages, {n_blocks} blocks ({parser.name} + {enc_name}) "
        f"in {time.monotonic() - t0:.1f} s -> {args.cache_dir}",
        file=sys.stderr,
    )
    return 0
