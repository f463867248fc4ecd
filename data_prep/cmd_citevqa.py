"""``python -m data_prep citevqa``: rehydrate and verify the CiteVQA evaluation subset into gold JSONL
(:mod:`data_prep.citevqa`)."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m data_prep citevqa")

import argparse
from pathlib import Path

from core.errors import InputError
from data_prep.citevqa import (
    BlockTypes,
    VerifyConfig,
    convert_raw,
    default_pdf_source,
    format_funnel,
    load_citevqa,
    load_pdf_source,
    rehydrate,
)
from data_prep.validate import bounded_float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--citevqa", type=Path, required=True, help="CiteVQA records (data/validation/CiteVQA.json)")
    parser.add_argument("--pdf-dir", type=Path, required=True, help="folder of the CiteVQA PDFs (<stem>.pdf)")
    parser.add_argument("--out", type=Path, required=True, help="gold JSONL to write")
    parser.add_argument("--release", type=Path, default=None, help="verified release JSONL: rehydrate it")
    parser.add_argument("--release-space", default="max-pixels:1000000", help="units of the release's boxes")
    parser.add_argument("--min-text-recall", type=bounded_float(0, 1), default=VerifyConfig.min_text_recall)
    parser.add_argument(
        "--pdf-source",
        type=Path,
        default=None,
        help="CiteVQA's data/download/pdf_source.csv for byte verification (default: beside --citevqa's data/)",
    )
    parser.add_argument(
        "--no-byte-check", action="store_true", help="skip byte verification (keep PDFs of another version)"
    )
    parser.add_argument(
        "--types-cache", type=Path, default=None, help="block cache typing elements the annotations do not type"
    )


def run(args: argparse.Namespace) -> int:
    from core.io import atomic_write_json as write_json
    from core.io import atomic_write_jsonl as write_jsonl
    from core.io import read_jsonl as iter_jsonl

    if not args.pdf_dir.is_dir():
        raise InputError(f"{args.pdf_dir}: PDF folder not found")
    from core.io import refuse_output_over_inputs

    funnel_path = args.out.with_name(args.out.name + ".funnel.json")
    from core.io import refuse_cache_entry

    refuse_cache_entry(args.out.parent, args.out)
    refuse_output_over_inputs(args.out, [args.citevqa, args.release])
    refuse_output_over_inputs(funnel_path, [args.citevqa, args.release], flag="the funnel file")
    citevqa = load_citevqa(args.citevqa)
    sources = None
    if not args.no_byte_check:
        csv_path = args.pdf_source or default_pdf_source(args.citevqa)
        if not csv_path.is_file():
            raise InputError(
                f"{csv_path}: CiteVQA's PDF list not found; byte verification (paper Appendix B) needs it: give "
                "--pdf-source data/download/pdf_source.csv of your CiteVQA checkout, or --no-byte-check"
            )
        sources = load_pdf_source(csv_path)
    block_types = BlockTypes(args.types_cache) if args.types_cache is not None else None
    if args.release is not None:
        release = [d for _, d in iter_jsonl(args.release)]
        rows, funnel = rehydrate(
            release, citevqa, args.pdf_dir, args.release_space, sources=sources, block_types=block_types
        )
    else:
        rows, funnel = convert_raw(
            citevqa, args.pdf_dir, cfg=VerifyConfig(min_text_recall=args.min_text_recall), sources=sources,
            block_types=block_types,
        )  # fmt: skip
    write_jsonl(args.out, rows)
    write_json(funnel_path, dict(funnel))
    print(format_funnel(funnel))
    print(f"wrote {len(rows)} gold records to {args.out}")
    if funnel["box outside page"] and funnel["box outside page"] >= funnel["kept"]:
        print("warning: most boxes fall outside their page; check --release-space (or the box order)")
    return 0
