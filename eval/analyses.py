"""Analyses of a scored run (paper Appendices C, F, H, I): residual decomposition, selective prediction,
breakdowns by language / question type / element type / answer correctness, quote fidelity, and the
citation-budget truncation of Appendix H.

All of them read :class:`~eval.metrics.QuestionResult` objects (and, where stated, the blocks of the cache);
boxes are in PDF points, pages 1-based.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from core.errors import InputError
from core.geometry import iou_matrix
from data_prep.document import normalize_text
from data_prep.text import token_f1, tokenize
from data_prep.types import Block
from eval.boxes import containment_matrix
from eval.metrics import BoxScores, QuestionResult, ScoringConfig, get_metric, score_boxes, threshold_key
from eval.schemas import Gold, cited_from_json, gold_from_json

RESIDUAL_CATEGORIES = ("recovered", "rank_limited", "not_retrieved", "parser_unreachable")
"""Exclusive categories of a necessary element, tested in this order (paper Appendix H, Figure 7)."""


@dataclass(frozen=True)
class AnalysisConfig:
    """Knobs of the analyses (defaults follow the paper)."""

    iou: float = 0.5
    """Match threshold of the decomposition and of a citation 'hit'."""
    containment: float = 0.95
    """Second criterion: an element counts as reachable by a block containing at least this share of its area."""
    n_bins: int = 5
    """Similarity bins of the selective-prediction analysis (quintiles)."""
    keep_fractions: tuple[float, ...] = (1.0, 0.8, 0.6, 0.4, 0.2)
    """Shares of the most similar citations kept in the abstention curve."""
    fuzzy_f1: float = 0.8
    """Quote fidelity: a quote is a fuzzy match when its token F1 with some block reaches this."""
    fuzzy: str = "literal"
    """``literal`` (the paper's Appendix F definition): fuzzy = token F1 >= ``fuzzy_f1`` against some block, whether
    or not the quote is also exact (a short exact quote of a long block is exact but not fuzzy); ``exact_counts``:
    every exact quote also counts as fuzzy (our earlier reading)."""
    breakdown_subset: str = "judged"
    """Judged runs: the per-language / per-question-type breakdowns are over the judged subset (``judged``, paper
    Table 6: "judged subsets per condition") or over all questions (``all``). Judge-free runs use all questions."""


BREAKDOWN_SUBSETS: tuple[str, ...] = ("judged", "all")
"""Values of :attr:`AnalysisConfig.breakdown_subset`."""
FUZZY_MODES: tuple[str, ...] = ("literal", "exact_counts")
"""Values of :attr:`AnalysisConfig.fuzzy`."""


# ---------------------------------------------------------------------------------------------- residuals
def _matches(elem_page: int, elem_box, pages: np.ndarray, boxes: np.ndarray, cfg: AnalysisConfig, contain: bool):
    """Boolean per box: same page and IoU >= cfg.iou (or, with ``contain``, the element inside the box)."""
    if len(pages) == 0:
        return np.zeros(0, dtype=bool)
    same = pages == elem_page
    e = np.asarray([elem_box], dtype=np.float64)
    iou = iou_matrix(e, boxes)[0]
    ok = (iou >= cfg.iou - 1e-9) & (iou > 0)
    if contain:
        ok |= containment_matrix(e, boxes)[0] >= cfg.containment
    return same & ok


def residual_decomposition(
    results: Sequence[QuestionResult],
    blocks_of: Callable[[str], Sequence[Block]],
    cfg: AnalysisConfig = AnalysisConfig(),
) -> dict:
    """Every necessary element in exactly one of :data:`RESIDUAL_CATEGORIES`, under two match criteria.

    * recovered: a citation of the run matches it;
    * parser_unreachable: no block of its page matches it;
    * rank_limited: some matching block is among some quote's top-k candidates (``prediction.extra
      ["candidates"]``, written by ``eval resolve``) but the assignment gave it no citation;
    * not_retrieved: otherwise (the model did not quote that evidence).

    Criterion ``iou``: match = same page and IoU >= 0.5. Criterion ``containment``: IoU >= 0.5 or the element
    lies inside the box (containment >= ``cfg.containment``). ``blocks_of(doc_key)`` returns the cached blocks.
    Also reported: the share of IoU-unreachable elements contained in some block, and ``not_retrieved`` counted
    the paper's way (including the unreachable elements, which are in no candidate list either).
    """
    out: dict = {}
    contained_unreachable = 0
    for criterion in ("iou", "containment"):
        counts = dict.fromkeys(RESIDUAL_CATEGORIES, 0)
        contain = criterion == "containment"
        for r in results:
            blocks = blocks_of(r.gold.doc_key)
            bp = np.array([b.page for b in blocks], dtype=np.int64)
            bb = np.array([b.bbox for b in blocks], dtype=np.float64).reshape(-1, 4)
            cits = r.prediction.citations if r.prediction else ()
            cp = np.array([c.page for c in cits], dtype=np.int64)
            cb = np.array([c.bbox for c in cits], dtype=np.float64).reshape(-1, 4)
            cands = set()
            if r.prediction is not None:
                for row in r.prediction.extra.get("candidates") or []:
                    cands.update(int(x) for x in row)
            for e in r.gold.gt_necessary:
                if _matches(e.page, e.bbox, cp, cb, cfg, contain).any():
                    counts["recovered"] += 1
                    continue
                reach = _matches(e.page, e.bbox, bp, bb, cfg, contain)
                if not reach.any():
                    counts["parser_unreachable"] += 1
                    if not contain and len(bp):
                        inside = containment_matrix(np.asarray([e.bbox]), bb[bp == e.page])
                        contained_unreachable += bool(inside.size and inside.max() >= cfg.containment)
                    continue
                hit_ids = {blocks[i].block_id for i in np.flatnonzero(reach)}
                counts["rank_limited" if hit_ids & cands else "not_retrieved"] += 1
        n = sum(counts.values())
        out[criterion] = {
            "n_elements": n,
            "counts": counts,
            **{k: (v / n if n else 0.0) for k, v in counts.items()},
            "not_retrieved_incl_unreachable": (counts["not_retrieved"] + counts["parser_unreachable"]) / n
            if n
            else 0.0,
        }
    unreachable = out["iou"]["counts"]["parser_unreachable"]
    out["unreachable_contained"] = contained_unreachable / unreachable if unreachable else 0.0
    return out


# ---------------------------------------------------------------------------------------------- selective prediction
def selective_prediction(results: Sequence[QuestionResult], cfg: AnalysisConfig = AnalysisConfig()) -> dict | None:
    """Hit rate of citations by similarity bin, and citation precision as low-similarity citations are dropped.

    A citation *hits* when it matches some necessary element of its question (same page, IoU >= 0.5). Bins split
    the citations sorted by similarity into ``n_bins`` groups of (nearly) equal size, lowest first. The curve
    keeps the top ``keep`` share of all citations by similarity and reports the share of kept citations that hit
    (pooled over questions). None when no citation carries a similarity."""
    sims, hits = [], []
    for r in results:
        if r.prediction is None:
            continue
        for c, h in zip(r.prediction.citations, r.boxes.citation_hit, strict=True):
            if c.similarity is not None:
                sims.append(c.similarity)
                hits.append(h)
    if not sims:
        return None
    s = np.asarray(sims, dtype=np.float64)
    h = np.asarray(hits, dtype=np.float64)
    order = np.argsort(s, kind="stable")
    bins = []
    for part in np.array_split(order, cfg.n_bins):
        if len(part) == 0:
            continue
        bins.append(
            {
                "lo": float(s[part].min()),
                "hi": float(s[part].max()),
                "n": int(len(part)),
                "hit_rate": float(h[part].mean()),
            }
        )
    desc = order[::-1]
    curve = []
    for keep in cfg.keep_fractions:
        k = max(1, int(round(keep * len(desc))))
        curve.append(
            {"keep": keep, "n": k, "precision": float(h[desc[:k]].mean()), "min_similarity": float(s[desc[k - 1]])}
        )
    return {"n_citations": int(len(s)), "bins": bins, "retention": curve}


# ---------------------------------------------------------------------------------------------- breakdowns
GROUP_METRICS = ("precision", "f1", "ans", "rel", "saa", "ah", "saa_strict")


def breakdown(
    results: Sequence[QuestionResult],
    key: Callable[[QuestionResult], str],
    judged: bool,
    main_iou=0.5,
    subset: str = "judged",
) -> dict:
    """Metrics per group (``key(result)``): n, recall at every threshold, and the other metrics.

    For a judged run with ``subset="judged"`` (paper Table 6) every metric of a group is over its questions with a
    parsed judge output (``n``; ``n_all`` counts the group's questions); ``subset="all"`` takes the box metrics over
    every question of the group (the judge metrics are over the judged ones either way)."""
    if subset not in BREAKDOWN_SUBSETS:
        raise ValueError(f"breakdown subset {subset!r}: expected one of {BREAKDOWN_SUBSETS}")
    groups: dict[str, list[QuestionResult]] = defaultdict(list)
    for r in results:
        groups[key(r) or "(none)"].append(r)
    out = {}
    for g in sorted(groups):
        rs = groups[g]
        n_all = len(rs)
        if judged and subset == "judged":
            rs = [r for r in rs if r.judge is not None and not r.judge.failed]
            if not rs:
                out[g] = {"n": 0, "n_all": n_all}
                continue
        row: dict = {"n": len(rs), "n_all": n_all}
        for k in rs[0].boxes.recall:
            row[f"recall@{k}"] = float(np.mean([r.boxes.recall[k] for r in rs]))
        for name in GROUP_METRICS:
            m = get_metric(name)
            if m.needs_judge and not judged:
                continue
            row[name] = m.aggregate(rs)
        out[g] = row
    return out


def element_type_recall(results: Sequence[QuestionResult], main_iou: float = 0.5) -> dict | None:
    """Element-level recall by ``gt_types`` (text / table / figure): matched elements / elements of that type,
    pooled over questions (paper Table 7). None when the gold has no ``gt_types``."""
    k = threshold_key(main_iou)
    n: dict[str, int] = defaultdict(int)
    hit: dict[str, int] = defaultdict(int)
    for r in results:
        if r.gold.gt_types is None:
            continue
        for t, h in zip(r.gold.gt_types, r.boxes.necessary_hit[k], strict=True):
            n[t] += 1
            hit[t] += int(h)
    if not n:
        return None
    return {t: {"n_elements": n[t], "recall": hit[t] / n[t]} for t in sorted(n)}


# ---------------------------------------------------------------------------------------------- quote fidelity
def quote_fidelity(
    results: Sequence[QuestionResult],
    blocks_of: Callable[[str], Sequence[Block]],
    cfg: AnalysisConfig = AnalysisConfig(),
) -> dict | None:
    """Share of quotes that are an exact substring of one block's text (both normalised: NFKC, lower case,
    whitespace collapsed) and share with token F1 >= ``cfg.fuzzy_f1`` against some block (paper Table 12 and
    Appendix F, read literally: the two are separate tests, so an exact quote of a much longer block is not fuzzy;
    ``cfg.fuzzy="exact_counts"`` counts every exact quote as fuzzy too).
    Quotes come from the citations' ``quote`` field. None when no citation has a quote."""
    if cfg.fuzzy not in FUZZY_MODES:
        raise ValueError(f"quote fidelity fuzzy mode {cfg.fuzzy!r}: expected one of {FUZZY_MODES}")
    n = exact = fuzzy = 0
    cache: dict[str, tuple[list[str], list[list[str]], np.ndarray]] = {}
    for r in results:
        if r.prediction is None:
            continue
        quotes = [c.quote for c in r.prediction.citations if c.quote]
        if not quotes:
            continue
        dk = r.gold.doc_key
        if dk not in cache:
            blocks = blocks_of(dk)
            toks = [tokenize(b.text) for b in blocks]
            cache[dk] = ([normalize_text(b.text) for b in blocks], toks, np.array([len(t) for t in toks]))
        texts, toks, lens = cache[dk]
        for q in quotes:
            n += 1
            nq = normalize_text(q)
            if nq and any(nq in t for t in texts):
                exact += 1
                if cfg.fuzzy == "exact_counts":
                    fuzzy += 1
                    continue
            qt = tokenize(q)
            if not qt:
                continue
            # F1 >= f needs the shorter/longer token count ratio >= f / (2 - f): skip blocks that cannot reach it.
            ratio = cfg.fuzzy_f1 / (2 - cfg.fuzzy_f1)
            lq = len(qt)
            cand = np.flatnonzero((lens >= lq * ratio) & (lens * ratio <= lq))
            if any(token_f1(qt, toks[j]) >= cfg.fuzzy_f1 for j in cand):
                fuzzy += 1
    if n == 0:
        return None
    return {"n_quotes": n, "exact": exact / n, "fuzzy": fuzzy / n}


# ---------------------------------------------------------------------------------------------- answer correctness
CORRECTNESS_GROUPS = ("correct", "incorrect", "unjudged")
"""Groups of :func:`by_answer_correctness`: Ans >= 4, Ans < 4, judge output did not parse."""


def _correctness(correct: bool | None) -> str:
    return "unjudged" if correct is None else ("correct" if correct else "incorrect")


def by_answer_correctness(results: Sequence[QuestionResult]) -> dict:
    """Recall (every threshold) and the other metrics of a judged run split by its own judge's answer verdict:
    ``correct`` (Ans >= 4), ``incorrect`` (Ans < 4), ``unjudged`` (judge output did not parse). Paper Appendix F:
    quotes beat the q+a control on correctly answered questions, and both fall to the floor on wrong answers."""
    groups = breakdown(results, lambda r: _correctness(r.answer_correct()), judged=True, subset="all")
    return {g: groups[g] for g in CORRECTNESS_GROUPS if g in groups}


def recall_by_reference_correctness(rows: Mapping[str, dict], reference: Mapping[str, dict], key: str = "0.5") -> dict:
    """Recall at ``key`` of one run's per-question rows split by **another** run's answer verdict (paper Appendix
    F: the q, q+a and coordinate runs on the questions the language run answered correctly).

    ``rows`` and ``reference``: index -> ``per_question.jsonl`` record; the reference must be judged
    (``answer_correct``). Questions missing from either run or unjudged in the reference are left out. Returns
    ``{"correct": {"n", "recall"}, "incorrect": {"n", "recall"}}`` (recall None when n is 0)."""
    out = {}
    for group, want in (("correct", True), ("incorrect", False)):
        vals = [
            float(rows[k]["recall"][key])
            for k in rows
            if k in reference and reference[k].get("answer_correct") is want and key in rows[k]["recall"]
        ]
        out[group] = {"n": len(vals), "recall": float(np.mean(vals)) if vals else None}
    return out


# ---------------------------------------------------------------------------------------------- citation budget
TRUNCATION_ORDERS = ("cited", "similarity")
"""How :func:`truncate_to_budget` picks the citations it keeps: the run's own order, or highest similarity first."""


@dataclass(frozen=True)
class TruncationResult:
    """A run rescored with its citations cut to another run's per-question budget.

    Attributes:
        summary: ``n``, ``order``, ``recall`` (threshold key -> mean over all paired questions), ``precision``
            (mean over questions with a kept citation), ``f1`` (mean over all), ``citations_per_response``
            (kept), ``truncated`` (questions that lost citations), ``no_similarity`` (questions whose dropped
            choice had to fall back on citation order because a citation has no similarity).
        boxes: index -> the rescored :class:`~eval.metrics.BoxScores`, in the paired order.
    """

    summary: dict
    boxes: dict[str, BoxScores]


def _row_gold(row: dict, where: str) -> Gold:
    if "gt_necessary" not in row or "gt_all" not in row:
        raise InputError(f"{where}: per-question record has no gt_necessary/gt_all (rescore it with `eval score`)")
    fields = {k: row.get(k, "") for k in ("index", "doc_key", "question", "language", "qtype")}
    fields.update(gt_necessary=row["gt_necessary"], gt_all=row["gt_all"])
    return gold_from_json({**fields, "answer": row.get("gold_answer") or "", "gt_types": row.get("gt_types")}, where)


def truncate_to_budget(
    rows: Mapping[str, dict],
    budget_rows: Mapping[str, dict],
    order: str = "cited",
    cfg: ScoringConfig = ScoringConfig(),
) -> TruncationResult:
    """Cut each question's citations in ``rows`` to the number of citations the same question has in
    ``budget_rows``, and rescore (paper Appendix H: does the trained model keep its recall advantage at the base
    model's citation budget?).

    ``rows``, ``budget_rows``: index -> ``per_question.jsonl`` record (what :func:`eval.compare.load_per_question`
    returns); only indices in both count. ``order="cited"`` keeps the first citations in the run's own order;
    ``"similarity"`` keeps the most similar (stable: ties in citation order; citations without a similarity rank
    last). A question with fewer citations than the budget keeps them all; a budget of 0 leaves none (recall 0).
    Scoring is :func:`eval.metrics.score_boxes` (rules 1-5 of :mod:`eval.metrics`, boxes in PDF points)."""
    if order not in TRUNCATION_ORDERS:
        raise InputError(f"unknown truncation order {order!r}; expected one of {TRUNCATION_ORDERS}")
    keys = sorted(set(rows) & set(budget_rows), key=lambda k: (len(k), k))
    if not keys:
        raise InputError("the two runs share no question index")
    boxes: dict[str, BoxScores] = {}
    truncated = no_similarity = 0
    for k in keys:
        where = f"question {k}"
        gold = _row_gold(rows[k], where)
        cits = [
            # The row's box is normalised; ``malformed`` keeps a reversed box a non-match (metrics rule 1).
            dataclasses.replace(cited_from_json(c, where, i), malformed=bool(c.get("malformed")))
            for i, c in enumerate(rows[k].get("citations") or [])
        ]
        budget = int(budget_rows[k].get("n_citations", len(budget_rows[k].get("citations") or [])))
        if len(cits) > budget:
            truncated += 1
            if order == "similarity":
                no_similarity += any(c.similarity is None for c in cits)
                cits = sorted(cits, key=lambda c: -c.similarity if c.similarity is not None else float("inf"))
            cits = cits[:budget]
        boxes[k] = score_boxes(gold, cits, cfg)
    bs = list(boxes.values())
    precisions = [b.precision for b in bs if b.precision is not None]
    summary = {
        "n": len(keys),
        "order": order,
        "recall": {t: float(np.mean([b.recall[t] for b in bs])) for t in bs[0].recall},
        "precision": float(np.mean(precisions)) if precisions else None,
        "f1": float(np.mean([b.f1 for b in bs])),
        "citations_per_response": float(np.mean([b.n_citations for b in bs])),
        "truncated": truncated,
        "no_similarity": no_similarity,
    }
    return TruncationResult(summary, boxes)
