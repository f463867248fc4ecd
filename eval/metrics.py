"""The evaluation metrics, defined exactly (``docs/METHOD.md``, "Metrics"; paper Section 4 and Appendix H).

Scoring rules
=============

Boxes are ``[x0, y0, x1, y1]`` in PDF points, origin top-left of the displayed page; pages are 1-based.

1. **Boxes.** IoU is computed on the boxes as given (no padding, no clipping). A box with ``x1 < x0`` or
   ``y1 < y0`` is *malformed* (``counts.malformed_citations``, ``counts.malformed_gold``). A malformed
   *citation* matches nothing at any IoU threshold (raw-output semantics: CiteVQA's scorer, which reads the
   model's numbers as written, gives it no overlap) but still names its page; ``--reversed-boxes normalize``
   (:attr:`ScoringConfig.reversed_boxes`) sorts each axis and scores it like any box (our earlier rule). A
   malformed gold element is normalised (an annotation, not a model output). A box with zero area never matches
   anything. A coordinate tag naming a page the document lacks is a citation (it counts in the precision
   denominator and matches nothing; ``eval resolve --drop-missing-pages`` drops it instead).
2. **Match.** A citation matches an annotated element at threshold ``t`` when both are on the same page and
   ``IoU >= t`` (with ``IoU > 0``; a 1e-9 tolerance absorbs float rounding, so IoU exactly ``t`` matches).
   Thresholds: 0.1, 0.3, **0.5** (main), 0.7, and ``page`` (same page only, any overlap or none).
3. **Recall** (per question): necessary elements (``gt_necessary``) matched by at least one citation, divided
   by the number of necessary elements. Aggregation: mean over **all** questions; a question with no citation
   (no parseable response, no quote, nothing resolved) scores 0. ``recall.page`` (same-page recall) is
   CiteVQA's page recall: distinct pages holding necessary elements that some citation names, divided by the
   distinct pages holding necessary elements (two elements on page 1 and one on page 2, a citation on page 1:
   1/2). ``--page-recall elements`` (:attr:`ScoringConfig.page_recall`) counts necessary elements whose page is
   cited instead (2/3 there; our earlier rule). The parser ceiling's ``page`` follows the same setting.
4. **Precision** (per question, CiteVQA "loop semantics"): the number of annotated elements of ``gt_all``
   (necessary + optional) matched by at least one citation, divided by the number of citations (malformed and
   zero-area citations included in the denominator). One box covering two annotated elements adds 2 to the
   numerator and 1 to the denominator, so a question's precision can exceed 1; two citations on one element add
   1. Aggregation: mean over the questions with **at least one citation** (undefined otherwise), at IoU 0.5.
5. **F1** (per question): ``2PR / (P + R)`` from rules 3-4 at IoU 0.5; 0 when P or R is 0 or there is no
   citation. Aggregation: mean over all questions. (Because P can exceed 1, so can a single question's F1.)
6. **Format rate**: share of responses with at least one parseable citation (``len(citations) > 0`` after
   resolution). ``citations_per_response``: mean number of citations over all questions (zeros included).
7. **Missing predictions**: a gold question without a prediction record is scored as an empty response
   (recall 0, F1 0, not formatted) and counted in ``counts.missing_predictions``. A prediction whose index is
   not in the gold file is an error.
8. **Judge metrics** (only with a judge): the judge returns integers 0..5 for answer correctness ``Ans`` and
   evidence relevance ``Rel``; Rel is judged on crops of the cited regions (rendered from the PDF, at most 6),
   never on the raw quotes. ``ans``/``rel`` are the mean scores divided by 5 (tables print x100, i.e. the
   paper's x20). With ``A = Ans >= 4`` and ``E = Rel >= 4 or recall@0.5 >= 0.6``: ``saa`` = share with
   ``A and E``; ``ah`` = among questions with ``A``, the share with ``not E`` (attribution hallucination, lower
   is better); ``saa_strict`` = share with ``A and Rel >= 4``; ``ah_strict`` likewise without the recall
   disjunct. A question whose judge output does not parse is left out of ``ans``/``rel``/``saa``/``ah`` and
   counted in ``judge_failures`` (``{"failed": n, "judged": m}``; ``judged`` is the denominator of the judge
   metrics). ``judged_subset`` repeats recall, precision, F1 and format rate over those ``m`` questions only:
   the paper's Table 1 reports its box metrics on the judged subset, its judge-free tables (2, 4, 10-12) on all
   questions. The judge (``eval score --judge-protocol``) is by default CiteVQA's two calls
   (:class:`eval.citevqa.CiteVQAJudge`, the paper's Section 4 and Appendices J.3/J.4): Ans from the answer-accuracy
   prompt with no image, Rel from the relevance prompt with the crops; a question counts as judged when both replies
   carry a score tag. ``rubric`` is the training reward's one call (:mod:`reward.judge`, answer, relevance and
   coverage in one reply that sees the crops, prompt ``recipes/prompts/judge.txt`` unless ``--judge-prompt``), whose
   Ans/Rel are not comparable with the paper's. ``metrics.json`` ``judge_protocol`` says which ran.
9. **Parser ceiling** (with ``--cache-dir``): recall at each threshold if every parsed block of the
   question's document were cited (rule 3 with the cache's blocks as citations).

How this differs from CiteVQA's released scorer (``eval/run.py`` of opendatalab/CiteVQA)
----------------------------------------------------------------------------------------
* Its judge scores are parsed and multiplied by 1/20 before its SAA test ``qa_acc >= 4 and (rel >= 4 or
  recall >= 0.6)``, so the first two comparisons can never pass and SAA is 0 whatever the model does. We keep
  the 0-5 scores for the test and divide by 5 only for reporting.
* Its relevance judge receives page images from a field (``openai_images``) its inference records lack, so it
  sees no image; ours gets the crops of the regions the citations point to (paper Appendix A). Its judge puts the
  prompt and the filled template together in the system turn; ours sends the template as the user turn (J.3). Its
  reply regex takes the first tag and any integer; ours the one tag (two that disagree: none), 0..5 only.
* It returns no F1 (None, excluded from the mean) when recall + precision is 0; ours scores such a question
  0 and averages F1 over all questions.
* It reads its ground truth from an ``answer_bboxes`` field that its released data does not carry; ours reads
  the gold file above (built by ``python -m data_prep citevqa``).
* Its IoU adds 1e-6 to the union, so an IoU of exactly 0.5 fails its ``>= 0.5``; ours matches (rule 2).
* Its page recall is meant to be the share of distinct gold pages cited (rule 3, our default), but as released
  it returns no value for any question: it splits the text on ``<bbox`` before matching a regex that starts with
  ``<bbox``. Ours computes what it means to.
* Its tag regex needs ``page x1 y1 x2 y2`` in that order, every value quoted and non-negative; our coordinate
  parser (:mod:`eval.coordinate`) also reads unquoted, positional and reordered tags, so a coordinate run's
  format rate can be higher than its scorer would report (a box it reads could count as no citation there).
* Its precision is None without a predicted box and its recall 0 (as ours); its SAA is None when any judge
  score is missing (ours: the question leaves the judge metrics and is counted).
* Recall is scored against ``gt_necessary`` and precision against ``gt_all`` (the paper's protocol choice,
  Appendix H); citations are scored on the page the model names, without correcting page indices.
* Where the two agree by design: a reversed box matches nothing (rule 1), a tag naming a page the document lacks
  is a citation that matches nothing, precision's loop semantics, recall@0.5, Ans and Rel parsed from the same
  replies. ``tests/data_prep/test_citevqa_crosscheck.py`` runs its own scoring functions from the vendored release on the
  same gold and predictions as ``eval score`` and checks every value, and each difference above by a case.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from core.geometry import iou
from core.registry import REQUIRED, Registry
from eval.boxes import match_matrix, matches
from eval.schemas import Cited, Element, Gold, Prediction

PAGE_RECALL_MODES: tuple[str, ...] = ("pages", "elements")
"""Readings of same-page recall (:attr:`ScoringConfig.page_recall`; the first is the default)."""
REVERSED_BOX_MODES: tuple[str, ...] = ("no_match", "normalize")
"""What a reversed citation box does (:attr:`ScoringConfig.reversed_boxes`; the first is the default)."""


@dataclass(frozen=True)
class ScoringConfig:
    """Knobs of the scorer (defaults are the paper's)."""

    thresholds: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7)
    """IoU thresholds reported besides same-page recall."""
    main_iou: float = 0.5
    """The IoU threshold of precision, F1, SAA's recall disjunct and the headline recall."""
    judge_pass: int = 4
    """A judge score (0..5) at or above this passes (Ans >= 4, Rel >= 4)."""
    saa_recall: float = 0.6
    """SAA's recall disjunct: recall at ``main_iou`` at or above this attributes the answer."""
    judge_scale: float = 5.0
    """Judge scores are divided by this for metrics.json (fractions in [0, 1])."""
    page_recall: str = "pages"
    """``pages``: same-page recall over distinct gold pages (CiteVQA, the paper); ``elements``: over necessary
    elements (rule 3)."""
    reversed_boxes: str = "no_match"
    """``no_match``: a citation with x1 < x0 or y1 < y0 matches nothing (raw output, the paper); ``normalize``:
    its axes are sorted and it is scored (rule 1)."""

    def __post_init__(self) -> None:
        if self.page_recall not in PAGE_RECALL_MODES:
            raise ValueError(f"page_recall {self.page_recall!r}: expected one of {PAGE_RECALL_MODES}")
        if self.reversed_boxes not in REVERSED_BOX_MODES:
            raise ValueError(f"reversed_boxes {self.reversed_boxes!r}: expected one of {REVERSED_BOX_MODES}")

    def threshold_keys(self) -> list[str]:
        return ["page", *(threshold_key(t) for t in self.thresholds)]


def threshold_key(t: float | None) -> str:
    """``None`` -> ``"page"``; ``0.5`` -> ``"0.5"``."""
    return "page" if t is None else f"{t:g}"


# ---------------------------------------------------------------------------------------------- per question
@dataclass(frozen=True)
class BoxScores:
    """Box metrics of one question.

    Attributes:
        n_citations: number of citations (malformed and zero-area ones included).
        n_malformed: citations whose box had x1 < x0 or y1 < y0.
        recall: threshold key -> recall.
        precision: at ``main_iou``; None when there is no citation.
        f1: at ``main_iou`` (0 without citations).
        necessary_hit: threshold key -> per necessary element, matched by some citation.
        citation_hit: per citation, matches some necessary element at ``main_iou``.
        citation_hit_all: per citation, matches some ``gt_all`` element at ``main_iou``.
    """

    n_citations: int
    n_malformed: int
    recall: dict[str, float]
    precision: float | None
    f1: float
    necessary_hit: dict[str, tuple[bool, ...]]
    citation_hit: tuple[bool, ...]
    citation_hit_all: tuple[bool, ...]


def _arrays(items: Sequence[Element] | Sequence[Cited]) -> tuple[np.ndarray, np.ndarray]:
    pages = np.array([e.page for e in items], dtype=np.int64)
    boxes = np.array([e.bbox for e in items], dtype=np.float64).reshape(-1, 4)
    return pages, boxes


def _iou_table(
    elements: Sequence[Element], citations: Sequence[Cited], raw_reversed: bool = True
) -> list[list[float | None]]:
    """IoU of each element with each citation; None when they are on different pages; 0 for a malformed citation
    when ``raw_reversed`` (rule 1). Questions have a handful of boxes, so plain Python beats array code here (see
    benchmarks/bench_eval.py)."""
    return [
        [
            (0.0 if raw_reversed and c.malformed else iou(e.bbox, c.bbox)) if e.page == c.page else None
            for c in citations
        ]
        for e in elements
    ]


def page_recall_distinct(gold: Gold, cited_pages: set[int]) -> float:
    """CiteVQA's page recall: distinct pages of ``gt_necessary`` among ``cited_pages`` / distinct pages."""
    pages = {e.page for e in gold.gt_necessary}
    return len(pages & cited_pages) / len(pages)


def _hit(v: float | None, t: float | None) -> bool:
    return v is not None and (t is None or matches(v, t))


def score_boxes(gold: Gold, citations: Sequence[Cited], cfg: ScoringConfig = ScoringConfig()) -> BoxScores:
    """Rules 1-5 of the module docstring for one question."""
    n_nec, n_cit = len(gold.gt_necessary), len(citations)
    raw = cfg.reversed_boxes == "no_match"
    nec = _iou_table(gold.gt_necessary, citations, raw)
    recall: dict[str, float] = {}
    nec_hit: dict[str, tuple[bool, ...]] = {}
    thresholds = [None, *cfg.thresholds]
    if cfg.main_iou not in cfg.thresholds:
        thresholds.append(cfg.main_iou)
    for t in thresholds:
        hit = tuple(any(_hit(v, t) for v in row) for row in nec)
        nec_hit[threshold_key(t)] = hit
        recall[threshold_key(t)] = sum(hit) / n_nec
    if cfg.page_recall == "pages":
        recall["page"] = page_recall_distinct(gold, {c.page for c in citations})
    main_k = threshold_key(cfg.main_iou)
    if n_cit:
        alls = _iou_table(gold.gt_all, citations, raw)
        precision: float | None = sum(any(_hit(v, cfg.main_iou) for v in row) for row in alls) / n_cit
        cit_hit = tuple(any(_hit(row[j], cfg.main_iou) for row in nec) for j in range(n_cit))
        cit_hit_all = tuple(any(_hit(row[j], cfg.main_iou) for row in alls) for j in range(n_cit))
    else:
        precision, cit_hit, cit_hit_all = None, (), ()
    r = recall[main_k]
    f1 = 0.0 if not precision or not r else 2 * precision * r / (precision + r)
    return BoxScores(
        n_citations=n_cit,
        n_malformed=sum(c.malformed for c in citations),
        recall=recall,
        precision=precision,
        f1=f1,
        necessary_hit=nec_hit,
        citation_hit=cit_hit,
        citation_hit_all=cit_hit_all,
    )


@dataclass(frozen=True)
class JudgeOutcome:
    """The judge's integer scores 0..5 for one question; None where its output did not parse."""

    answer: int | None
    relevance: int | None
    coverage: int | None = None

    @property
    def failed(self) -> bool:
        return self.answer is None or self.relevance is None


@dataclass(frozen=True)
class QuestionResult:
    """Everything scored about one question: the metric functions read only this."""

    gold: Gold
    prediction: Prediction | None
    boxes: BoxScores
    judge: JudgeOutcome | None = None
    cfg: ScoringConfig = field(default_factory=ScoringConfig)

    @property
    def recall_main(self) -> float:
        return self.boxes.recall[threshold_key(self.cfg.main_iou)]

    def answer_correct(self) -> bool | None:
        if self.judge is None or self.judge.failed:
            return None
        return self.judge.answer >= self.cfg.judge_pass

    def attributed(self, strict: bool = False) -> bool | None:
        """``Rel >= 4`` (strict) or ``Rel >= 4 or recall@0.5 >= 0.6``; None without a parsed judge output."""
        if self.judge is None or self.judge.failed:
            return None
        rel_ok = self.judge.relevance >= self.cfg.judge_pass
        return rel_ok if strict else rel_ok or self.recall_main >= self.cfg.saa_recall - 1e-12


# ---------------------------------------------------------------------------------------------- metric registry
class MetricFn(Protocol):
    """A metric: its value for one question (None: the question does not count in the mean)."""

    def __call__(self, result: QuestionResult) -> float | None: ...


@dataclass(frozen=True)
class Metric:
    """A per-question value (None = the question does not count) and how it is aggregated."""

    name: str
    per_question: MetricFn
    aggregation: str
    higher_is_better: bool
    needs_judge: bool = False

    def aggregate(self, results: Sequence[QuestionResult]) -> float | None:
        """Mean of the per-question values that are not None; None when no question counts."""
        vals = [v for v in (self.per_question(r) for r in results) if v is not None]
        return float(np.mean(vals)) if vals else None


METRICS: Registry[MetricFn] = Registry(
    "metric", base=MetricFn, needs=("judge",), options={"higher_is_better": REQUIRED}
)
"""Registration line: ``@METRICS.register("name", summary="<how it is aggregated>", higher_is_better=...)`` on the
per-question function (``needs=("judge",)``: it reads the judge's scores, so only ``eval score`` with a judge
reports it). ``metrics.json`` reports every registered metric, in registration order."""


def get_metric(name: str) -> Metric:
    """The registered metric ``name`` (KeyError with a did-you-mean hint otherwise)."""
    entry = METRICS.entry(name)
    fn = METRICS.get(name)
    return Metric(name, fn, entry.summary, METRICS.option(name, "higher_is_better"), METRICS.needs(name, "judge"))


def recall_metric(key: str) -> Metric:
    """Recall at a threshold key (``"page"``, ``"0.5"``, ...): mean over all questions, higher is better."""
    return Metric(f"recall@{key}", lambda r: r.boxes.recall[key], "mean over all questions", True)


@METRICS.register("precision", summary="mean over questions with >= 1 citation", higher_is_better=True)
def _precision(r: QuestionResult) -> float | None:
    return r.boxes.precision


@METRICS.register("f1", summary="mean over all questions (0 without citation)", higher_is_better=True)
def _f1(r: QuestionResult) -> float | None:
    return r.boxes.f1


@METRICS.register("format_rate", summary="share of all questions with >= 1 citation", higher_is_better=True)
def _format_rate(r: QuestionResult) -> float | None:
    return float(r.boxes.n_citations > 0)


@METRICS.register("citations_per_response", summary="mean over all questions", higher_is_better=False)
def _cpr(r: QuestionResult) -> float | None:
    return float(r.boxes.n_citations)


@METRICS.register(
    "ans", summary="mean Ans / 5 over questions with a parsed judge output", higher_is_better=True, needs=("judge",)
)
def _ans(r: QuestionResult) -> float | None:
    if r.judge is None or r.judge.failed:
        return None
    return r.judge.answer / r.cfg.judge_scale


@METRICS.register(
    "rel", summary="mean Rel / 5 over questions with a parsed judge output", higher_is_better=True, needs=("judge",)
)
def _rel(r: QuestionResult) -> float | None:
    if r.judge is None or r.judge.failed:
        return None
    return r.judge.relevance / r.cfg.judge_scale


@METRICS.register(
    "saa",
    summary="share of judged questions: Ans>=4 and (Rel>=4 or recall@0.5>=0.6)",
    higher_is_better=True,
    needs=("judge",),
)
def _saa(r: QuestionResult) -> float | None:
    a, e = r.answer_correct(), r.attributed()
    return None if a is None else float(a and e)


@METRICS.register(
    "ah", summary="among judged questions with Ans>=4: share not attributed", higher_is_better=False, needs=("judge",)
)
def _ah(r: QuestionResult) -> float | None:
    a, e = r.answer_correct(), r.attributed()
    return None if not a else float(not e)


@METRICS.register(
    "saa_strict", summary="share of judged questions: Ans>=4 and Rel>=4", higher_is_better=True, needs=("judge",)
)
def _saa_strict(r: QuestionResult) -> float | None:
    a, e = r.answer_correct(), r.attributed(strict=True)
    return None if a is None else float(a and e)


@METRICS.register(
    "ah_strict",
    summary="among judged questions with Ans>=4: share with Rel<4",
    higher_is_better=False,
    needs=("judge",),
)
def _ah_strict(r: QuestionResult) -> float | None:
    a, e = r.answer_correct(), r.attributed(strict=True)
    return None if not a else float(not e)


# ---------------------------------------------------------------------------------------------- aggregation
def aggregate(results: Sequence[QuestionResult], cfg: ScoringConfig = ScoringConfig(), judged: bool = False) -> dict:
    """The metrics.json dictionary (without ``parser_ceiling``): fractions in [0, 1] (precision can exceed 1
    only when citations cover several annotated elements each)."""
    out: dict = {"n": len(results)}
    out["recall"] = {k: recall_metric(k).aggregate(results) or 0.0 for k in cfg.threshold_keys()}
    for name in METRICS.in_order():  # every registered metric; one that reads the judge only with a judge
        if judged or not METRICS.needs(name, "judge"):
            out[name] = get_metric(name).aggregate(results)
    if judged:
        failed = sum(1 for r in results if r.judge is None or r.judge.failed)
        out["judge_failures"] = {"failed": failed, "judged": len(results) - failed}
        # Paper Table 1 reports the box metrics on the judged subset too (Section 4, Appendix B).
        ok = [r for r in results if r.judge is not None and not r.judge.failed]
        out["judged_subset"] = {
            "n": len(ok),
            "recall": {k: recall_metric(k).aggregate(ok) or 0.0 for k in cfg.threshold_keys()},
            **{name: get_metric(name).aggregate(ok) for name in ("precision", "f1", "format_rate")},
        }
    out["counts"] = {
        "with_citation": sum(r.boxes.n_citations > 0 for r in results),
        "citations": sum(r.boxes.n_citations for r in results),
        "malformed_citations": sum(r.boxes.n_malformed for r in results),
        "malformed_gold": sum(e.malformed for r in results for e in (*r.gold.gt_necessary, *r.gold.gt_all)),
        "missing_predictions": sum(r.prediction is None for r in results),
        "necessary_elements": sum(len(r.gold.gt_necessary) for r in results),
    }
    return out


def parser_ceiling_question(gold: Gold, block_pages: np.ndarray, block_boxes: np.ndarray, cfg: ScoringConfig) -> dict:
    """Recall per threshold key if every block (pages 1-based, boxes in points) were cited."""
    nec_p, nec_b = _arrays(gold.gt_necessary)
    out = {}
    for t in (None, *cfg.thresholds):
        m = match_matrix(nec_p, nec_b, block_pages, block_boxes, t)
        out[threshold_key(t)] = float(m.any(axis=1).sum()) / len(gold.gt_necessary) if len(block_pages) else 0.0
    if cfg.page_recall == "pages":
        out["page"] = page_recall_distinct(gold, {int(p) for p in block_pages})
    return out


def metric_docs() -> list[dict]:
    """Name, aggregation and direction of every registered metric (for the docs and the report)."""
    return [
        {"name": m.name, "aggregation": m.aggregation, "higher_is_better": m.higher_is_better}
        for m in (get_metric(n) for n in METRICS.in_order())
    ]
