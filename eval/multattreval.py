"""MultAttrEval's attribution metric (the MultAttnAttrib / MultAttrEval paper, Appendix 11) as an ``eval score``
metric: macro precision, recall and F1 of text-span and image citations.

Per question, the gold citations ``G`` are text spans and images, the predicted ones ``C`` likewise:

* **Images** score by exact match: a predicted image counts for precision when it is a gold image, a gold image
  counts for recall when it was predicted.
* **Text spans** score by fuzzy substring similarity ``s* = partial_ratio(pred, gold) / 100`` (rapidfuzz's
  ``fuzz.partial_ratio``: the best-matching substring alignment), discretised in three tiers (Eq. 1): ``d = 1`` when
  ``s* >= 0.9``, ``0.5`` when ``0.6 <= s* < 0.9``, else 0; then penalised by the length ratio: precision
  ``d * min(1, |gold| / |pred|)`` (over-quoting), recall ``d * min(1, |pred| / |gold|)`` (under-quoting). With
  several gold (predicted) spans a predicted (gold) span takes its best-scoring counterpart.
* ``P`` is the mean score over ``C``, ``R`` over ``G``, ``F1 = 2PR / (P + R)`` (0 when ``P + R = 0``; ``P = 0``
  when nothing is predicted); macro averages over the questions.

Lengths ``|.|`` are in words (the paper's spans are token sequences; whitespace words are the tokenizer-free
count); ``length_unit="chars"`` counts characters. Text is compared after Unicode NFKC normalisation, lower case and
collapsed white space.

On our evaluation (``eval score``, key ``multattreval`` of ``analyses.json``): the gold text spans are the PDF text
layer under each necessary evidence element that is not a figure (``gt_types``; all elements when the gold has no
types), the gold images are the figure elements, identified by the cached ``figure`` block they cover; the predicted
spans are the quotes of a language-interface response (MultAttnAttrib's converted spans included), else the text
layer under each cited box, and a citation whose box is a figure block (IoU >= 0.5) is a predicted image.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz

HIGH, LOW = 0.9, 0.6
"""The tier boundaries of Eq. 1."""


def _norm(text: str) -> str:
    """The project's comparison normalisation (:func:`data_prep.text.normalize_for_compare`: NFKC, invisible and bidi
    characters removed, whitespace folded), lower-cased: a span of only invisible characters is empty (dropped)."""
    from data_prep.text import normalize_for_compare

    return normalize_for_compare(text).lower()


def similarity(pred: str, gold: str) -> float:
    """``s*``: rapidfuzz ``partial_ratio`` of the normalised texts, in [0, 1].

    >>> similarity("The Shenzhen site", "the shenzhen site produced the most")
    1.0
    """
    a, b = _norm(pred), _norm(gold)
    if not a or not b:
        return 0.0
    return fuzz.partial_ratio(a, b) / 100.0


def tier(s: float) -> float:
    """Eq. 1: 1 for ``s >= 0.9``, 0.5 for ``0.6 <= s < 0.9``, else 0.

    >>> tier(0.95), tier(0.9), tier(0.75), tier(0.6), tier(0.59)
    (1.0, 1.0, 0.5, 0.5, 0.0)
    """
    return 1.0 if s >= HIGH else 0.5 if s >= LOW else 0.0


def length(text: str, unit: str = "words") -> int:
    t = _norm(text)
    return len(t.split()) if unit == "words" else len(t)


@dataclass(frozen=True)
class ItemScore:
    precision: float
    recall: float
    f1: float
    n_pred: int
    n_gold: int


def score_item(
    pred_spans: Sequence[str],
    gold_spans: Sequence[str],
    pred_images: Sequence = (),
    gold_images: Sequence = (),
    length_unit: str = "words",
) -> ItemScore:
    """P, R and F1 of one question (Appendix 11).

    >>> s = score_item(["revenue grew by 12% in 2023 and more"], ["revenue grew by 12% in 2023"])
    >>> round(s.precision, 3), s.recall  # over-quoting: 6 gold words / 8 predicted
    (0.75, 1.0)
    """
    if length_unit not in ("words", "chars"):
        raise ValueError(f"length_unit {length_unit!r}: expected 'words' or 'chars'")
    pred_spans = [s for s in pred_spans if _norm(s)]
    gold_spans = [s for s in gold_spans if _norm(s)]
    sim = np.array([[similarity(p, g) for g in gold_spans] for p in pred_spans]).reshape(
        len(pred_spans), len(gold_spans)
    )
    plen = [length(p, length_unit) for p in pred_spans]
    glen = [length(g, length_unit) for g in gold_spans]
    gold_img, pred_img = set(gold_images), set(pred_images)
    p_scores = [
        max((tier(sim[i, j]) * min(1.0, glen[j] / plen[i]) for j in range(len(gold_spans))), default=0.0)
        for i in range(len(pred_spans))
    ] + [1.0 if im in gold_img else 0.0 for im in pred_img]
    r_scores = [
        max((tier(sim[i, j]) * min(1.0, plen[i] / glen[j]) for i in range(len(pred_spans))), default=0.0)
        for j in range(len(gold_spans))
    ] + [1.0 if im in pred_img else 0.0 for im in gold_img]
    p = float(np.mean(p_scores)) if p_scores else 0.0
    r = float(np.mean(r_scores)) if r_scores else 0.0
    f1 = 2 * p * r / (p + r) if p + r > 0 else 0.0
    return ItemScore(p, r, f1, len(p_scores), len(r_scores))


def macro(items: Sequence[ItemScore]) -> dict:
    """Macro-averaged P, R, F1 over questions."""
    if not items:
        return {"n": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    return {
        "n": len(items),
        "precision": float(np.mean([s.precision for s in items])),
        "recall": float(np.mean([s.recall for s in items])),
        "f1": float(np.mean([s.f1 for s in items])),
    }


# ---------------------------------------------------------------------------------------------- on our runs
def _figure_block(cached, page: int, bbox) -> int | None:
    from eval.boxes import iou

    best, best_iou = None, 0.0
    for b in cached.blocks:
        if b.page == page and b.type == "figure":
            v = iou(b.bbox, bbox)
            if v > best_iou:
                best, best_iou = b.block_id, v
    return best if best_iou >= 0.5 else None


def multattreval(golds, preds, docs, length_unit: str = "words") -> dict:
    """The metric over aligned gold/prediction lists (``preds[i]`` None = missing: P = R = 0) with the cache
    ``docs`` (:class:`~eval.cmd_resolve.DocCache`) for text layers and figure blocks (module docstring)."""
    from eval.interfaces import DEFAULT_INTERFACE, INTERFACES
    from reward.response import parse_response

    items: list[ItemScore] = []
    open_docs: dict = {}
    try:
        for g, p in zip(golds, preds, strict=True):
            cached = docs.get(g.doc_key)
            if g.doc_key not in open_docs:
                open_docs[g.doc_key] = cached.open_pdf()
            doc = open_docs[g.doc_key]
            elements = g.gt_necessary or g.gt_all
            types = g.gt_types if g.gt_types is not None and len(g.gt_types) == len(elements) else None
            gold_spans, gold_images = [], []
            for k, e in enumerate(elements):
                fig = _figure_block(cached, e.page, e.bbox) if types is None or types[k] == "figure" else None
                if fig is not None or (types is not None and types[k] == "figure"):
                    gold_images.append(fig if fig is not None else ("element", e.page, tuple(e.bbox)))
                else:
                    gold_spans.append(doc.text_in_bbox(e.page, tuple(e.bbox)))
            if p is None:
                items.append(score_item([], gold_spans, [], gold_images, length_unit))
                continue
            pred_spans: list[str] = []
            quotes = INTERFACES.needs(p.interface or DEFAULT_INTERFACE, "quotes")  # its quotes are the spans
            if quotes:
                pred_spans = list(parse_response(p.response).quotes)
            pred_images = []
            for c in p.citations:
                fig = _figure_block(cached, c.page, c.bbox) if 1 <= c.page <= cached.n_pages else None
                if fig is not None:
                    pred_images.append(fig)
                elif not quotes and 1 <= c.page <= cached.n_pages:
                    pred_spans.append(doc.text_in_bbox(c.page, tuple(c.bbox)))
            items.append(score_item(pred_spans, gold_spans, pred_images, gold_images, length_unit))
    finally:
        for d in open_docs.values():
            d.close()
    return {**macro(items), "length_unit": length_unit}
