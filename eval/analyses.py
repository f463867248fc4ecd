"""Analyses of a scored run (paper Appendices C, F, H, I): residual decomposition, selective prediction,
breakdowns by language / question type / element type, and quote fidelity.

All of them read :class:`~eval.metrics.QuestionResult` objects (and, where stated, the blocks of the cache);
boxes are in PDF points, pages 1-based.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from data_prep.document import normalize_text
from data_prep.text import token_f1, tokenize
from data_prep.types import Block
from eval.boxes import containment_matrix, iou_matrix
from eval.metrics import QuestionResult, get_metric, threshold_key

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
    results: Sequence[QuestionResult], key: Callable[[QuestionResult], str], judged: bool, main_iou=0.5
) -> dict:
    """Metrics per group (``key(result)``): n, recall at every threshold, and the other metrics."""
    groups: dict[str, list[QuestionResult]] = defaultdict(list)
    for r in results:
        groups[key(r) or "(none)"].append(r)
    out = {}
    for g in sorted(groups):
        rs = groups[g]
        row: dict = {"n": len(rs)}
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
    whitespace collapsed) and share with token F1 >= ``cfg.fuzzy_f1`` against some block (paper Table 12).
    Quotes come from the citations' ``quote`` field. None when no citation has a quote."""
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
