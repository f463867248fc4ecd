"""``python -m eval score``: predictions + gold -> metrics.json, per_question.jsonl, tables.md, recall_vs_iou.png,
analyses.json and report.html.

The rules are in :mod:`eval.metrics` (module docstring). With ``--cache-dir`` the scorer also computes the
parser ceiling, the residual decomposition (needs ``candidates`` from ``eval resolve``), quote fidelity, and
draws the pages in the report. With ``--judge-url URL --judge-model M`` (an OpenAI-compatible VLM server) or
``--judge lexical`` (offline, text overlap) it adds the judge metrics; the judge never sees the quotes.

``--judge-protocol citevqa`` (the default, the paper's Section 4 and Appendices J.3/J.4) is CiteVQA's two-call
judge (:class:`eval.citevqa.CiteVQAJudge`): answer accuracy from the question, gold answer and model answer with
**no** image (``eval_qa_acc_*`` prompts), relevance with the crops of the cited regions (``eval_rel_*``), both
read from your CiteVQA checkout (``--citevqa-dir`` or ``$QUOTECITE_CITEVQA_DIR``). ``--judge-protocol rubric`` is
the training reward's one call (:mod:`reward.judge`: answer, relevance and coverage from one reply that sees the
crops; ``--judge-prompt`` swaps its prompt); its Ans and Rel are not comparable with the paper's tables.

A judge that has never produced a score and rejects every request of a batch as malformed (HTTP 4xx other than
408/429, a reply that is not a chat completion) stops the run with one line quoting the server's message: a wrong
``--judge-model`` or URL path would otherwise leave every question unjudged. This is the reward's rule, run by the
reward's own code (:func:`reward.pipeline.check_judge_setup`). Timeouts, 5xx and refused connections are outages:
a batch in an outage (:mod:`reward.judge`) waits for the judge's ``/health`` for at most ``--judge-outage-s``
seconds (default 30) and is then judged for real, or the run stops with one line naming the URL and the time
waited; single failed calls while the server answers are counted in ``judge_failures``. A run whose judge produced
no score at all stops with one line and writes nothing: its judge metrics would be empty.

Inputs are checked before anything is scored: an empty prediction file, one that holds gold records (the gold file
given as ``--pred``) or an index the gold lacks are refused; questions without a prediction score 0 and their count
and share are printed. With ``--cache-dir`` the gold boxes are checked against the cached page counts and sizes: a
page the document does not have, or a box wholly off its page, is refused; a box running off the page edge is
counted (``metrics.json: gold_geometry``) and reported.

Outputs: the folder is built beside ``--out`` and swapped in as one unit (:func:`core.io.atomic_dir`), so a
reused folder keeps no stale report image and a killed run leaves the previous complete set. An ``--out`` that is a
file, holds an input, or holds files ``eval score`` does not write is refused.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval score")

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from core.errors import InputError
from core.io import atomic_dir, atomic_write_text, refuse_output_dir_over_inputs
from data_prep.validate import bounded_int, finite
from eval import analyses
from eval.metrics import (
    PAGE_RECALL_MODES,
    REVERSED_BOX_MODES,
    BoxScores,
    JudgeOutcome,
    QuestionResult,
    ScoringConfig,
    aggregate,
    get_metric,
    parser_ceiling_question,
    score_boxes,
    threshold_key,
)
from eval.schemas import Gold, Prediction, read_gold, read_predictions, write_json, write_jsonl
from reward.judge import CLI_OUTAGE_S, DEFAULT_JUDGE, JUDGES, JudgeSettings, add_judge_mode_arguments
from reward.servers import UrlListAction

JUDGE_BATCH = 64
"""Questions per judge batch (progress is reported per batch)."""


@dataclass
class ScoreRun:
    """The scored questions and what was computed from them."""

    results: list[QuestionResult]
    metrics: dict
    analyses: dict
    per_question: list[dict]


# ---------------------------------------------------------------------------------------------- judge
def _evidence(cached, doc, citations) -> tuple[list, list[str]]:
    """reward Citations for :func:`data_prep.crops.crop_pngs` and the cited texts for the lexical judge."""
    from reward.resolve import Citation

    cits, texts = [], []
    for i, c in enumerate(citations):
        bid = c.block_id if c.block_id is not None and 0 <= c.block_id < len(cached.blocks) else None
        # Boxes that are not blocks get distinct negative ids so crop_pngs does not merge them.
        cits.append(Citation(c.page, c.bbox, bid if bid is not None else -(i + 1), c.similarity or 0.0, c.quote or ""))
        if bid is not None:
            texts.append(cached.blocks[bid].text)
        elif doc is not None and 1 <= c.page <= doc.n_pages and c.bbox[2] > c.bbox[0] and c.bbox[3] > c.bbox[1]:
            texts.append(doc.text_in_bbox(c.page, c.bbox))
        else:
            texts.append("")
    return cits, texts


class JudgeSetupCheck:
    """The reward's judge-misconfiguration rule (:func:`reward.pipeline.check_judge_setup`) for a judge used
    outside the reward: ``check(stats)`` after each ``score_batch`` raises :class:`InputError` when a judge that has
    never produced a score failed every distinct request of the batch with a configuration failure."""

    def __init__(self, judge) -> None:
        self.judge = judge
        self.answered = False

    def check(self, stats) -> None:
        """``stats``: the :class:`reward.judge.JudgeStats` of the batch just judged."""
        from reward.pipeline import check_judge_setup

        self.answered = check_judge_setup(stats, self.judge, self.answered, hint="--judge-url and --judge-model")


def run_judge(golds: Sequence[Gold], preds: Sequence[Prediction | None], judge, docs) -> list[JudgeOutcome]:
    """Judge every question (a missing prediction is judged as an empty answer with no crops).

    Raises :class:`InputError` when the judge is misconfigured (:class:`JudgeSetupCheck`); outages only leave the
    questions they hit unjudged."""
    from data_prep.crops import crop_pngs
    from reward.judge import JudgeRequest, JudgeSettings, JudgeStats

    settings = JudgeSettings()  # the crops: at most six at 150 dpi (Appendix A), as the reward's judge sees them

    by_doc: dict[str, list[int]] = {}
    for i, g in enumerate(golds):
        by_doc.setdefault(g.doc_key, []).append(i)
    reqs: list = [None] * len(golds)
    with tqdm(total=len(golds), desc="judge inputs (crops)", unit="q", disable=None) as bar:
        for doc_key, idxs in by_doc.items():
            cached = docs.get(doc_key)
            doc = cached.open_pdf() if any(preds[i] and preds[i].citations for i in idxs) else None
            try:
                for i in idxs:
                    p = preds[i]
                    citations = p.citations if p else ()
                    cits, texts = _evidence(cached, doc, citations)
                    crops = crop_pngs(cached, cits, settings.max_crops, settings.crop_dpi, doc=doc) if cits else ()
                    reqs[i] = JudgeRequest(
                        question=golds[i].question,
                        gold_answer=golds[i].answer,
                        answer=p.answer if p else "",
                        crops=crops,
                        evidence_texts=tuple(texts[: settings.max_crops]),
                    )
                    bar.update(1)
            finally:
                if doc is not None:
                    doc.close()
    out: list[JudgeOutcome] = []
    setup = JudgeSetupCheck(judge)
    for start in tqdm(range(0, len(reqs), JUDGE_BATCH), desc="judge", unit="batch", disable=None):
        scores = judge.score_batch(reqs[start : start + JUDGE_BATCH])
        stats = getattr(judge, "stats", None)
        if isinstance(stats, JudgeStats):
            setup.check(stats)
        for s in scores:
            out.append(
                JudgeOutcome(None, None, None) if s is None else JudgeOutcome(s.answer, s.relevance, s.coverage)
            )
    return out


# ---------------------------------------------------------------------------------------------- scoring
def _join(golds: list[Gold], preds: list[Prediction], pred_path: Path | str) -> list[Prediction | None]:
    """Predictions aligned with ``golds`` (None = missing). An empty prediction file, one holding gold records
    (the gold file passed as ``--pred``) or one with an index the gold lacks is refused."""
    if not preds:
        raise InputError(f"{pred_path}: no prediction records (an empty file); every question would score as missing")
    golden = [p for p in preds if "gt_necessary" in p.extra or "gt_all" in p.extra]
    if golden:
        raise InputError(
            f"{pred_path}: holds gold records (index {golden[0].index!r} has gt_necessary/gt_all): is it the gold "
            "file? --pred takes predictions with citations (eval resolve)"
        )
    by_key = {p.key: p for p in preds}
    gold_keys = {g.key for g in golds}
    extra = [p.index for p in preds if p.key not in gold_keys]
    if extra:
        raise InputError(f"{pred_path}: prediction index {extra[0]!r} is not in the gold file ({len(extra)} such)")
    return [by_key.get(g.key) for g in golds]


def missing_warning(preds: Sequence[Prediction | None], pred_path: Path | str) -> str | None:
    """The console line for questions without a prediction (they score 0), or None when none is missing."""
    k, n = sum(p is None for p in preds), len(preds)
    if not k:
        return None
    return (
        f"warning: {k} of {n} questions ({k / n:.0%}) have no prediction in {pred_path}; they score 0 "
        "(counts.missing_predictions)"
    )


GOLD_EDGE_TOLERANCE_PT = 2.0
"""How far a gold box may run past the page edge (points) before it is counted as running off the page."""


def check_gold_geometry(golds: Sequence[Gold], docs, gold_path: Path | str) -> dict:
    """Gold elements against the cached documents' page counts and sizes.

    A page the document does not have, or a box wholly outside its page, raises :class:`InputError` (the gold is
    for another document or another coordinate space: every score would be wrong). A box running more than
    :data:`GOLD_EDGE_TOLERANCE_PT` past an edge is counted (``boxes_off_page``, with the first one named) and
    reported on the console; it is scored as written."""
    off, first = 0, None
    checked = 0
    for g in golds:
        cached = docs.get(g.doc_key)
        n_pages, sizes = cached.n_pages, cached.page_sizes
        for name, elements in (("gt_necessary", g.gt_necessary), ("gt_all", g.gt_all)):
            for i, e in enumerate(elements):
                where = f"{gold_path}: question {g.index!r}: {name}[{i}]"
                if e.page > n_pages:
                    raise InputError(
                        f"{where} is on page {e.page}, but document {g.doc_key} has {n_pages} pages (cache "
                        f"{cached.key}): is the gold for another document?"
                    )
                w, h = sizes[e.page - 1]
                x0, y0, x1, y1 = e.bbox
                if x0 >= w or y0 >= h or x1 <= 0 or y1 <= 0:
                    raise InputError(
                        f"{where} box {[round(v, 1) for v in e.bbox]} lies outside page {e.page} "
                        f"({w:.0f} x {h:.0f} pt): are the boxes in PDF points, origin top-left?"
                    )
                checked += 1
                tol = GOLD_EDGE_TOLERANCE_PT
                if x0 < -tol or y0 < -tol or x1 > w + tol or y1 > h + tol:
                    off += 1
                    if first is None:
                        first = f"{where} {[round(v, 1) for v in e.bbox]} on a {w:.0f} x {h:.0f} pt page"
    return {"boxes_checked": checked, "boxes_off_page": off, "first_off_page": first}


def per_question_row(r: QuestionResult, ceiling: dict | None) -> dict:
    """The per_question.jsonl record of one question (everything the report and ``compare`` need)."""
    g, p, b = r.gold, r.prediction, r.boxes
    k = threshold_key(r.cfg.main_iou)
    row = {
        "index": g.index,
        "doc_key": g.doc_key,
        "question": g.question,
        "gold_answer": g.answer,
        "language": g.language,
        "qtype": g.qtype,
        "interface": p.interface if p else None,
        "answer": p.answer if p else None,
        "missing": p is None,
        "n_citations": b.n_citations,
        "n_malformed": b.n_malformed,
        "recall": b.recall,
        "precision": b.precision,
        "f1": b.f1,
        "necessary_hit": list(b.necessary_hit[k]),
        "citations": [
            {**c.to_json(), "hit": h, "hit_any": ha, **({"malformed": True} if c.malformed else {})}
            for c, h, ha in zip(p.citations if p else (), b.citation_hit, b.citation_hit_all, strict=True)
        ],
        "gt_necessary": [e.to_json() for e in g.gt_necessary],
        "gt_all": [e.to_json() for e in g.gt_all],
        "gt_types": list(g.gt_types) if g.gt_types is not None else None,
    }
    if p is not None and "resolve" in p.extra:
        row["resolve"] = p.extra["resolve"]
    if ceiling is not None:
        row["parser_ceiling"] = ceiling
    if r.judge is not None:
        row["judge"] = None if r.judge.failed else {"answer": r.judge.answer, "relevance": r.judge.relevance,
                                                     "coverage": r.judge.coverage}  # fmt: skip
        row["answer_correct"] = r.answer_correct()
        row["attributed"] = r.attributed()
        row["attributed_strict"] = r.attributed(strict=True)
        for name in ("saa", "ah", "saa_strict", "ah_strict"):
            row[name] = get_metric(name).per_question(r)
    return row


def score(
    golds: list[Gold],
    preds: list[Prediction | None],
    cfg: ScoringConfig = ScoringConfig(),
    docs=None,
    judge=None,
    acfg: analyses.AnalysisConfig = analyses.AnalysisConfig(),
) -> ScoreRun:
    """Score aligned gold/prediction lists (``preds[i]`` None = missing). ``docs``: a
    :class:`~eval.cmd_resolve.DocCache` (parser ceiling, residuals, quote fidelity, judge crops)."""
    boxes: list[BoxScores] = [score_boxes(g, p.citations if p else (), cfg) for g, p in zip(golds, preds, strict=True)]
    judged = judge is not None
    outcomes = run_judge(golds, preds, judge, docs) if judged else [None] * len(golds)
    results = [QuestionResult(g, p, b, o, cfg) for g, p, b, o in zip(golds, preds, boxes, outcomes, strict=True)]
    metrics = aggregate(results, cfg, judged=judged)
    metrics["scoring"] = {"page_recall": cfg.page_recall, "reversed_boxes": cfg.reversed_boxes}
    if judged:
        metrics["judge_protocol"] = getattr(judge, "protocol", "rubric" if getattr(judge, "url", None) else "lexical")
        if getattr(judge, "citevqa_dir", None) is not None:
            metrics["judge_prompts"] = str(judge.citevqa_dir / "prompts")  # the CiteVQA checkout's prompt files
    ceilings: list[dict | None] = [None] * len(golds)
    extra: dict = {}
    if docs is not None:
        block_arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for i, g in enumerate(golds):
            if g.doc_key not in block_arrays:
                blocks = docs.get(g.doc_key).blocks
                block_arrays[g.doc_key] = (
                    np.array([bl.page for bl in blocks], dtype=np.int64),
                    np.array([bl.bbox for bl in blocks], dtype=np.float64).reshape(-1, 4),
                )
            ceilings[i] = parser_ceiling_question(g, *block_arrays[g.doc_key], cfg)
        metrics["parser_ceiling"] = {k: float(np.mean([c[k] for c in ceilings])) for k in cfg.threshold_keys()}

        def blocks_of(doc_key: str):
            return docs.get(doc_key).blocks

        if any(p is not None and p.extra.get("candidates") is not None for p in preds):
            extra["residuals"] = analyses.residual_decomposition(results, blocks_of, acfg)
        from eval.multattreval import multattreval

        extra["multattreval"] = multattreval(golds, preds, docs)  # MultAttrEval's P/R/F1 (eval/multattreval.py)
        fid = analyses.quote_fidelity(results, blocks_of, acfg)
        if fid is not None:
            extra["quote_fidelity"] = fid
    from eval.lat import lat_metrics

    extra["lat"] = lat_metrics(golds, preds, docs)  # LAT's soft EM, IoU@0.5 and Stepwise Attribution (eval/lat.py)
    sel = analyses.selective_prediction(results, acfg)
    if sel is not None:
        extra["selective_prediction"] = sel
    extra["by_language"] = analyses.breakdown(results, lambda r: r.gold.language, judged, subset=acfg.breakdown_subset)
    extra["by_qtype"] = analyses.breakdown(results, lambda r: r.gold.qtype, judged, subset=acfg.breakdown_subset)
    et = analyses.element_type_recall(results, cfg.main_iou)
    if et is not None:
        extra["by_element_type"] = et
    if judged:
        extra["by_answer_correctness"] = analyses.by_answer_correctness(results)
        stats = getattr(judge, "total", None)
        if stats is not None and hasattr(stats, "to_dict"):
            extra["judge_stats"] = stats.to_dict()
    rows = [per_question_row(r, c) for r, c in zip(results, ceilings, strict=True)]
    return ScoreRun(results, metrics, extra, rows)


SCORE_OUTPUTS: tuple[str, ...] = (
    "metrics.json", "analyses.json", "per_question.jsonl", "tables.md", "recall_vs_iou.png", "report.html",
    "report_files",
)  # fmt: skip
"""Every name :func:`write_outputs` writes in its folder. ``eval score`` builds the folder beside ``--out`` and
swaps it in as one unit (:func:`core.io.atomic_dir`); an ``--out`` folder holding anything else is refused."""


def write_outputs(
    run: ScoreRun, out: Path, label: str, docs=None, report: bool = True, report_limit: int | None = None
) -> dict[str, Path]:
    """Write every output file of ``eval score`` into ``out`` (names: :data:`SCORE_OUTPUTS`); returns their paths
    by name."""
    from eval.report import plot_recall_vs_iou, write_report
    from eval.tables import tables_markdown

    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "metrics": write_json(out / "metrics.json", run.metrics),
        "analyses": write_json(out / "analyses.json", run.analyses),
        "per_question": write_jsonl(out / "per_question.jsonl", run.per_question),
    }
    paths["tables"] = atomic_write_text(out / "tables.md", tables_markdown(run.metrics, run.analyses, label))
    paths["recall_vs_iou"] = plot_recall_vs_iou([(label, run.metrics)], out / "recall_vs_iou.png")
    if report:
        paths["report"] = write_report(out / "report.html", run.per_question, run.metrics, docs, label, report_limit)
    return paths


JUDGE_PROTOCOLS = ("citevqa", "rubric")
"""``--judge-protocol`` values: CiteVQA's two calls (default, the paper) or the reward's one rubric call."""


def make_judge(args: argparse.Namespace):
    """The judge asked for on the command line, or None: ``--judge NAME`` (any registered judge; one that needs a
    server URL takes ``--judge-url``, which alone means the default judge)."""
    from reward.judge import DEFAULT_JUDGE, JUDGES, JudgeSettings, build_judge, judge_mode_of

    name = args.judge or (DEFAULT_JUDGE if args.judge_url else None)
    if name is None:
        return None
    needs_url = JUDGES.needs(name, "url")
    if args.judge_url and not needs_url:
        raise InputError(f"give either --judge-url (a judge server) or --judge {name}, not both")
    if needs_url and not args.judge_url:
        raise InputError(f"--judge {name} needs --judge-url (its server)")
    if not needs_url:
        return build_judge(name)
    if not args.judge_model:
        raise InputError("--judge-url needs --judge-model (the served model name)")
    settings = JudgeSettings(
        concurrency=args.judge_concurrency,
        outage_s=args.judge_outage_s,
        prompt_path=str(args.judge_prompt) if args.judge_prompt else None,
        **judge_mode_of(args),
    )
    if getattr(args, "judge_protocol", "citevqa") == "citevqa":
        from eval.citevqa import CiteVQAJudge

        if args.judge_prompt:
            raise InputError(
                "--judge-prompt is the rubric judge's prompt; the CiteVQA judge reads its prompts from "
                "--citevqa-dir (add --judge-protocol rubric to use --judge-prompt)"
            )
        return CiteVQAJudge(
            citevqa_dir=getattr(args, "citevqa_dir", None),
            base_url=args.judge_url,
            model=args.judge_model,
            **settings.client_kwargs(),
        )
    return build_judge(name, args.judge_url, args.judge_model, settings)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", type=Path, required=True, help="gold JSONL")
    parser.add_argument("--pred", type=Path, required=True, help="predictions JSONL with citations (eval resolve)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--cache-dir", type=Path, default=None, help="block cache: parser ceiling, analyses, pages")
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    parser.add_argument("--encoder", default=None, help="pick cache entries embedded by this encoder")
    parser.add_argument("--judge-url", default=None, action=UrlListAction,
                        help="OpenAI-compatible judge server, e.g. http://host:8000/v1; several (repeated or "
                        "comma-separated) are replicas")  # fmt: skip
    parser.add_argument("--judge-model", default=None, help="served judge model name")
    parser.add_argument(
        "--judge-protocol",
        default="citevqa",
        choices=JUDGE_PROTOCOLS,
        help="citevqa: CiteVQA's answer call (no image) + relevance call (crops), the paper's (default); "
        "rubric: the reward's one three-score call",
    )
    parser.add_argument(
        "--citevqa-dir", type=Path, default=None, help="your CiteVQA checkout (its prompts/; the citevqa judge)"
    )
    parser.add_argument(
        "--judge-prompt", type=Path, default=None, help="rubric judge prompt file (default: the reward's)"
    )
    parser.add_argument(
        "--page-recall",
        default=ScoringConfig.page_recall,
        choices=PAGE_RECALL_MODES,
        help="same-page recall over distinct gold pages (CiteVQA, default) or over necessary elements",
    )
    parser.add_argument(
        "--reversed-boxes",
        default=ScoringConfig.reversed_boxes.replace("_", "-"),
        choices=[m.replace("_", "-") for m in REVERSED_BOX_MODES],
        help="a citation with x1 < x0 or y1 < y0: matches nothing (raw output, default) or is normalised",
    )
    parser.add_argument(
        "--breakdown-subset",
        default="judged",
        choices=analyses.BREAKDOWN_SUBSETS,
        help="judged runs: box metrics of the per-language/per-type breakdowns over the judged subset (paper "
        "Table 6, default) or over all questions",
    )
    parser.add_argument(
        "--judge-concurrency", type=bounded_int(1, 4096), default=JudgeSettings.concurrency,
        help="judge requests in flight",
    )  # fmt: skip
    add_judge_mode_arguments(parser)
    parser.add_argument(
        "--judge-outage-s", type=finite, default=CLI_OUTAGE_S,
        help="seconds to wait out a judge outage (probing /health) before stopping with an error (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--judge", default=None, choices=JUDGES.names(),
        help="; ".join(f"{e['name']}: {e['summary']}" for e in JUDGES.describe()) + " (default: none, or "
        f"{DEFAULT_JUDGE} with --judge-url)",
    )  # fmt: skip
    parser.add_argument("--label", default=None, help="name of this run in tables and plots (default: pred stem)")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    parser.add_argument(
        "--report-limit",
        type=bounded_int(0, 10**9),
        default=None,
        help="questions drawn in report.html (default all)",
    )


def run(args: argparse.Namespace) -> int:
    from data_prep.cache import DocCache

    t0 = time.perf_counter()
    refuse_output_dir_over_inputs(args.out, [args.gold, args.pred, args.cache_dir, args.judge_prompt])
    golds = read_gold(args.gold)
    preds = _join(golds, read_predictions(args.pred), args.pred)
    warn = missing_warning(preds, args.pred)
    if warn:
        print(warn, file=sys.stderr)
    docs = DocCache(args.cache_dir, parser=args.parser, encoder=args.encoder) if args.cache_dir else None
    geometry = check_gold_geometry(golds, docs, args.gold) if docs is not None else None
    if geometry and geometry["boxes_off_page"]:
        print(
            f"warning: {geometry['boxes_off_page']} of {geometry['boxes_checked']} gold boxes run off their page "
            f"(first: {geometry['first_off_page']}); scored as written",
            file=sys.stderr,
        )
    judge = make_judge(args)
    if judge is not None and docs is None:
        raise InputError("a judge needs --cache-dir: it sees crops of the cited regions rendered from the cached PDFs")
    label = args.label or args.pred.stem
    cfg = ScoringConfig(page_recall=args.page_recall, reversed_boxes=args.reversed_boxes.replace("-", "_"))
    acfg = analyses.AnalysisConfig(breakdown_subset=args.breakdown_subset)
    result = score(golds, preds, cfg=cfg, docs=docs, judge=judge, acfg=acfg)
    if judge is not None:
        from reward.judge import JudgeStats, no_score_error

        total = getattr(judge, "total", None)
        err = no_score_error(total, judge) if isinstance(total, JudgeStats) else None
        if err is not None:
            raise InputError(f"{err}; nothing written to {args.out}")
    if geometry is not None:
        result.metrics["gold_geometry"] = {k: v for k, v in geometry.items() if k != "first_off_page"}
    with atomic_dir(args.out, SCORE_OUTPUTS) as tmp:
        built = write_outputs(result, tmp, label, docs, report=not args.no_report, report_limit=args.report_limit)
    paths = {name: args.out / Path(p).relative_to(tmp) for name, p in built.items()}
    from eval.tables import metrics_summary

    print(metrics_summary(result.metrics, label))
    for name, p in paths.items():
        print(f"{name}: {p}")
    print(f"scored {len(golds)} questions in {time.perf_counter() - t0:.1f} s")
    return 0
