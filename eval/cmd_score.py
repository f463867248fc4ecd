"""``python -m eval score``: predictions + gold -> metrics.json, per_question.jsonl, tables.md, recall_vs_iou.png,
analyses.json and report.html.

The rules are in :mod:`eval.metrics` (module docstring). With ``--cache-dir`` the scorer also computes the
parser ceiling, the residual decomposition (needs ``candidates`` from ``eval resolve``), quote fidelity, and
draws the pages in the report. With ``--judge-url URL --judge-model M`` (an OpenAI-compatible VLM server) or
``--judge lexical`` (offline, text overlap) it adds the judge metrics; the judge sees the question, the gold
answer, the model's answer and the crops of the cited regions (rendered from the cached PDF), never the quotes.

A judge that has never produced a score and rejects every request of a batch as malformed (HTTP 4xx other than
408/429, a reply that is not a chat completion) stops the run with one line quoting the server's message: a wrong
``--judge-model`` or URL path would otherwise leave every question unjudged. This is the reward's rule, run by the
reward's own code (:func:`reward.pipeline.check_judge_setup`); timeouts, 5xx and refused connections
are outages and never stop the run (those questions are counted in ``judge_failures``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from data_prep.types import InputError
from eval import analyses
from eval.metrics import (
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
from eval.schemas import Gold, Prediction, atomic_write_text, read_gold, read_predictions, write_json, write_jsonl

JUDGE_MAX_CROPS = 6
"""Crops of cited regions sent to the judge per response (paper Appendix A: at most six)."""
JUDGE_CROP_DPI = 150
"""Resolution of the judge's crops (paper Appendix A)."""
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
    """reward Citations for :func:`reward.judge.crop_pngs` and the cited texts for the lexical judge."""
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
    from reward.judge import JudgeRequest, JudgeStats, crop_pngs

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
                    crops = (
                        crop_pngs(cached, cits, max_crops=JUDGE_MAX_CROPS, dpi=JUDGE_CROP_DPI, doc=doc) if cits else ()
                    )
                    reqs[i] = JudgeRequest(
                        question=golds[i].question,
                        gold_answer=golds[i].answer,
                        answer=p.answer if p else "",
                        crops=crops,
                        evidence_texts=tuple(texts[:JUDGE_MAX_CROPS]),
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
    by_key = {p.key: p for p in preds}
    gold_keys = {g.key for g in golds}
    extra = [p.index for p in preds if p.key not in gold_keys]
    if extra:
        raise InputError(f"{pred_path}: prediction index {extra[0]!r} is not in the gold file ({len(extra)} such)")
    return [by_key.get(g.key) for g in golds]


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
            {**c.to_json(), "hit": h, "hit_any": ha}
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
        fid = analyses.quote_fidelity(results, blocks_of, acfg)
        if fid is not None:
            extra["quote_fidelity"] = fid
    sel = analyses.selective_prediction(results, acfg)
    if sel is not None:
        extra["selective_prediction"] = sel
    extra["by_language"] = analyses.breakdown(results, lambda r: r.gold.language, judged)
    extra["by_qtype"] = analyses.breakdown(results, lambda r: r.gold.qtype, judged)
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


def write_outputs(
    run: ScoreRun, out: Path, label: str, docs=None, report: bool = True, report_limit: int | None = None
) -> dict[str, Path]:
    """Write every output file of ``eval score`` into ``out``; returns their paths by name."""
    from eval.report import plot_recall_vs_iou, tables_markdown, write_report

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


def make_judge(args: argparse.Namespace):
    """The judge asked for on the command line, or None."""
    from reward.judge import get_judge

    if args.judge_url and args.judge == "lexical":
        raise InputError("give either --judge-url (HTTP judge) or --judge lexical, not both")
    if args.judge_url:
        if not args.judge_model:
            raise InputError("--judge-url needs --judge-model (the served model name)")
        kwargs = {"base_url": args.judge_url, "model": args.judge_model, "concurrency": args.judge_concurrency}
        if args.judge_prompt:
            kwargs["prompt_path"] = args.judge_prompt
        return get_judge("http", **kwargs)
    if args.judge == "lexical":
        return get_judge("lexical")
    return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gold", type=Path, required=True, help="gold JSONL")
    parser.add_argument("--pred", type=Path, required=True, help="predictions JSONL with citations (eval resolve)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--cache-dir", type=Path, default=None, help="block cache: parser ceiling, analyses, pages")
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    parser.add_argument("--encoder", default=None, help="pick cache entries embedded by this encoder")
    parser.add_argument("--judge-url", default=None, help="OpenAI-compatible judge server, e.g. http://host:8000/v1")
    parser.add_argument("--judge-model", default=None, help="served judge model name")
    parser.add_argument("--judge-prompt", type=Path, default=None, help="judge prompt file (default: the reward's)")
    parser.add_argument("--judge-concurrency", type=int, default=16, help="judge requests in flight")
    parser.add_argument("--judge", default=None, choices=["lexical"], help="offline text-overlap judge")
    parser.add_argument("--label", default=None, help="name of this run in tables and plots (default: pred stem)")
    parser.add_argument("--no-report", action="store_true", help="skip report.html")
    parser.add_argument("--report-limit", type=int, default=None, help="questions drawn in report.html (default all)")


def run(args: argparse.Namespace) -> int:
    from eval.cmd_resolve import DocCache

    t0 = time.perf_counter()
    golds = read_gold(args.gold)
    preds = _join(golds, read_predictions(args.pred), args.pred)
    docs = DocCache(args.cache_dir, parser=args.parser, encoder=args.encoder) if args.cache_dir else None
    judge = make_judge(args)
    if judge is not None and docs is None:
        raise InputError("a judge needs --cache-dir: it sees crops of the cited regions rendered from the cached PDFs")
    label = args.label or args.pred.stem
    result = score(golds, preds, docs=docs, judge=judge)
    paths = write_outputs(result, args.out, label, docs, report=not args.no_report, report_limit=args.report_limit)
    from eval.report import metrics_summary

    print(metrics_summary(result.metrics, label))
    for name, p in paths.items():
        print(f"{name}: {p}")
    print(f"scored {len(golds)} questions in {time.perf_counter() - t0:.1f} s")
    return 0
