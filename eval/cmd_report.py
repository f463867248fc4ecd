"""``python -m eval report``: ``--runs A B ... --out DIR`` compares several scored runs (one row each, the tables of
:mod:`eval.tables`) and draws them in one recall-vs-IoU figure; ``--score-dir OUT`` redraws one run's
``report.html`` (:mod:`eval.report`)."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval report")

import argparse
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text, read_json
from data_prep.validate import nonneg_int
from eval.report import plot_recall_vs_iou, write_report
from eval.schemas import iter_jsonl
from eval.tables import runs_markdown


def _load_run(d: Path) -> tuple[dict, dict]:
    mf = d / "metrics.json"
    if not mf.exists() and not mf.is_symlink():
        raise InputError(f"{d}: no metrics.json (give `eval score` output folders)")
    metrics = read_json(mf)
    if not isinstance(metrics, dict):
        raise InputError(f"{mf}: expected a JSON object (the metrics of `eval score`), got {type(metrics).__name__}")
    _check_recall(metrics, mf, "recall")
    if metrics.get("judged_subset") is not None:
        if not isinstance(metrics["judged_subset"], dict):
            raise InputError(f"{mf}: field 'judged_subset' is not an object")
        _check_recall(metrics["judged_subset"], mf, "judged_subset.recall")
    af = d / "analyses.json"
    analyses = read_json(af) if af.exists() else {}
    if not isinstance(analyses, dict):
        raise InputError(f"{af}: expected a JSON object, got {type(analyses).__name__}")
    return metrics, analyses


def _check_recall(m: dict, path: Path, field: str) -> None:
    """The field every table and the figure read: recall by threshold, each a number in [0, 1] or null."""
    rec = m.get("recall")
    if not isinstance(rec, dict) or not rec:
        raise InputError(f"{path}: field '{field}' is missing or not an object of recall by threshold "
                         "(is this the metrics.json of `eval score`?)")  # fmt: skip
    for k, v in rec.items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 1):
            raise InputError(f"{path}: field '{field}.{k}' is {v!r}, expected a number in [0, 1] or null")


_ROW_FIELDS = {"index": (int, str), "doc_key": (str,), "question": (str,), "gold_answer": (str,),
               "recall": (dict,), "citations": (list,), "gt_necessary": (list,), "gt_all": (list,)}  # fmt: skip


def _check_row(r: dict, where: str) -> dict:
    """A row of ``per_question.jsonl`` as ``eval score`` writes it: the fields the report reads, of their types (a
    hand-edited or foreign file is one error naming the line and the field, never a traceback)."""
    for key, kinds in _ROW_FIELDS.items():
        if not isinstance(r.get(key), kinds) or isinstance(r.get(key), bool):
            raise InputError(f"{where}: field {key!r} is {str(r.get(key))[:60]!r}, expected "
                             f"{' or '.join(k.__name__ for k in kinds)} (is this eval score's per_question.jsonl?)")  # fmt: skip
    for i, c in enumerate(r["citations"]):
        if not isinstance(c, dict) or not isinstance(c.get("bbox"), list) or "page" not in c:
            raise InputError(f"{where}: citation {i} is not an object with a page and a bbox list")
    for key in ("gt_necessary", "gt_all"):
        for e in r[key]:
            if not isinstance(e, list | tuple) or not e:
                raise InputError(f"{where}: field {key!r} holds {str(e)[:40]!r}, expected [page, ...] entries")
    return r


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=Path, nargs="+", default=None, help="score folders to put side by side")
    parser.add_argument("--labels", nargs="+", default=None, help="names of the runs (default: folder names)")
    parser.add_argument("--score-dir", type=Path, default=None, help="redraw report.html of this score folder")
    parser.add_argument("--cache-dir", type=Path, default=None, help="block cache to draw pages from")
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    parser.add_argument("--limit", type=nonneg_int, default=None, help="questions drawn (default all)")
    parser.add_argument("--out", type=Path, default=None, help="output folder for --runs")


def run(args: argparse.Namespace) -> int:
    if bool(args.runs) == bool(args.score_dir):
        raise InputError("give either --runs DIR... --out DIR (side by side) or --score-dir DIR (one report)")
    if args.runs and args.out:
        from core.io import refuse_output_dir_over_inputs, refuse_output_inside

        refuse_output_dir_over_inputs(args.out, args.runs)
        refuse_output_inside(args.out, args.runs, "the score folder")
        refuse_output_inside(args.out, [args.cache_dir], "the cache folder --cache-dir")
    if args.score_dir:
        metrics, _ = _load_run(args.score_dir)
        path = args.score_dir / "per_question.jsonl"
        rows = [_check_row(d, f"{path}:{n}") for n, d in iter_jsonl(path)]
        docs = None
        if args.cache_dir:
            from data_prep.cache import DocCache

            docs = DocCache(args.cache_dir, parser=args.parser)
        p = write_report(args.score_dir / "report.html", rows, metrics, docs, args.score_dir.name, args.limit)
        print(f"report: {p}")
        return 0
    if not args.out:
        raise InputError("--runs needs --out")
    labels = args.labels or [d.name for d in args.runs]
    if len(labels) != len(args.runs):
        raise InputError(f"{len(labels)} labels for {len(args.runs)} runs")
    seen: dict[str, Path] = {}
    for label, d in zip(labels, args.runs, strict=True):
        if label in seen:  # one row per label: two runs under one label would silently become one row
            raise InputError(f"two runs are labelled {label!r} ({seen[label]} and {d}); give --labels with one "
                             "name per run")  # fmt: skip
        seen[label] = d
    loaded = [(label, *_load_run(d)) for label, d in zip(labels, args.runs, strict=True)]
    runs = [(label, m) for label, m, _ in loaded]
    text = runs_markdown(loaded, {label: d for label, d in zip(labels, args.runs, strict=True)})
    args.out.mkdir(parents=True, exist_ok=True)
    t = atomic_write_text(args.out / "tables.md", text)
    png = plot_recall_vs_iou(runs, args.out / "recall_vs_iou.png")
    print(text)
    print(f"tables: {t}\nfigure: {png}")
    return 0
