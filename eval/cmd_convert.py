"""``python -m eval convert``: a rival system's outputs (LAT, MultAttnAttrib) as prediction JSONL
(:mod:`eval.convert`)."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval convert")

import argparse
from pathlib import Path

from data_prep.validate import positive_float
from eval.convert import LAT_BOX_MODES, SYSTEMS, Converter, Documents, _read_json, convert_file, format_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="system", required=True, choices=SYSTEMS, help="the rival system")
    parser.add_argument("--input", type=Path, required=True, help="the system's per-question outputs (JSONL)")
    parser.add_argument("--gold", type=Path, required=True, help="gold JSONL (doc_key per index)")
    parser.add_argument("--out", type=Path, required=True, help="prediction JSONL")
    parser.add_argument("--cache-dir", type=Path, default=None, help="block cache: page sizes, figure blocks")
    parser.add_argument("--pdf-dir", type=Path, default=None, help="or: folder of <doc_key>.pdf (page sizes)")
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--render-pixels",
        type=positive_float,
        default=None,
        help="LAT: document pixel budget the page images were rendered under (eval infer --total-pixels)",
    )
    size.add_argument(
        "--page-images-info", type=Path, default=None, help="LAT: JSON {doc_key: [[width_px, height_px] per page]}"
    )
    parser.add_argument(
        "--max-pixels-per-page", type=positive_float, default=1_000_000, help="per-page cap with --render-pixels (1e6)"
    )
    parser.add_argument(
        "--lat-boxes",
        default="answer",
        choices=LAT_BOX_MODES,
        help="LAT boxes cited: those in <answer> (LAT's own IoU@0.5, default) or every box of the response",
    )
    parser.add_argument(
        "--image-list", type=Path, default=None, help="MultAttnAttrib: JSON {doc_key: [[page, x0, y0, x1, y1], ...]}"
    )


def run(args: argparse.Namespace) -> int:
    from core.io import refuse_output_inside, refuse_output_over_inputs

    refuse_output_over_inputs(args.out, [args.input, args.gold, args.page_images_info, args.image_list])
    refuse_output_inside(args.out, [args.cache_dir], "the cache folder --cache-dir")
    docs = Documents(args.cache_dir, args.pdf_dir, parser=args.parser)
    converter = Converter(
        args.system,
        docs,
        render_pixels=args.render_pixels,
        max_pixels_per_page=args.max_pixels_per_page,
        page_images_info=_read_json(args.page_images_info, "--page-images-info"),
        image_list=_read_json(args.image_list, "--image-list"),
        lat_boxes=args.lat_boxes,
    )
    stats = convert_file(args.input, args.gold, args.out, converter)
    print(format_summary(stats, args.out))
    return 0
