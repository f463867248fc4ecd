"""The LAT interface in evaluation: Chain-of-Evidence responses -> citations, and LAT's own metrics.

``eval infer --interface lat`` asks for LAT's output (``recipes/prompts/lat_interface.jinja``, parsed by
:func:`reward.lat.parse_coe`): ``<think>`` steps each followed by ``Bounding box: {"bbox_2d": [x1, y1, x2, y2],
"Image_index": N}`` on the 0-1000 grid of page image N, then ``<answer>`` with the answer and its box. ``eval
infer`` shows every page of the document in order, so ``Image_index`` N is PDF page N unless the prediction
records the ``pages`` it showed. ``eval resolve`` turns the boxes into citations in points
(:func:`lat_citations`: every box, the chain's and the answer's, exact duplicates once; ``answer`` mode only the
answer's), so every metric of ``eval score`` applies.

LAT's metrics (its ``src/evaluation.py``), reported by ``eval score`` beside ours (``analyses.json``, key ``lat``):

* ``soft_em``: the answer contains the gold answer or is contained in it, after LAT's normalisation
  (:func:`reward.lat.soft_exact_match`; an empty answer never matches, unlike LAT's script). Every interface.
* ``iou50``: a box of the answer overlaps a gold evidence element (``gt_all``) on its page with IoU above 0.5.
  LAT interface: the ``<answer>`` boxes; other interfaces: their citations (what they offer as the answer's source).
* ``stepwise_attribution`` (SA): LAT's step score per response, ungated by accuracy as in its evaluation: 0.5 when
  every step's region/text similarity exceeds tau (0.3), plus 0.5 when there are at least two steps and no two
  overlap (IoU >= 0.5 on one page); the mean over LAT-interface predictions. Needs the cache (crops) and its
  encoder (:func:`reward.lat.make_step_embedder`; a text-only encoder scores the PDF text layer under the box,
  and ``sa_embedder`` says which ran). None for other interfaces.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from core.errors import InputError
from core.geometry import iou
from reward.lat import (
    COORD_SCALE,
    CoEResponse,
    LatSettings,
    Region,
    grid_to_points,
    make_step_embedder,
    parse_coe,
    soft_exact_match,
    valid_grid_box,
)

log = logging.getLogger("eval.lat")

LAT_INTERFACE = "lat"
CITATION_MODES: tuple[str, ...] = ("all", "answer")
"""Which boxes of a LAT response become citations."""


def shown_pages(pred, n_pages: int) -> list[int] | None:
    """The PDF page of each image a LAT-interface prediction was shown (its ``pages`` field, written by ``eval
    infer``), None when absent (image N is page N); a field that is not a list of whole page numbers of the
    document (a string, an object, 0, past the last page) is one :class:`InputError` naming the prediction."""
    pages = pred.extra.get("pages")
    if pages is None:
        return None
    ok = isinstance(pages, list) and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= n_pages
                                         for x in pages)  # fmt: skip
    if not ok:
        raise InputError(f"prediction {getattr(pred, 'index', '?')}: field 'pages' is {str(pages)[:80]!r}; expected "
                         f"a list of page numbers 1..{n_pages} of its document (the pages eval infer showed)")  # fmt: skip
    return pages


def _page_of(image: int | None, pages: Sequence[int] | None, n_pages: int) -> int | None:
    if image is None:
        return None
    if pages is not None:
        return pages[image - 1] if 1 <= image <= len(pages) else None
    return image if 1 <= image <= n_pages else None


def _region(b, pages, page_sizes) -> Region | None:
    page = _page_of(b.image, pages, len(page_sizes))
    if page is None or not valid_grid_box(b.box):
        return None
    return Region(page, grid_to_points(b.box, page_sizes[page - 1]), b.text)


def lat_citations(
    parsed: CoEResponse,
    page_sizes: Sequence[tuple[float, float]],
    pages: Sequence[int] | None = None,
    mode: str = "all",
) -> tuple[list[dict], dict]:
    """Citations ``{"page", "bbox"}`` (points) of a parsed LAT response and counts of what was dropped.

    ``pages``: the PDF page of each image shown (None: image N is page N). Boxes off the grid, without an image
    index or naming an image not shown are dropped (``unplaced``); repeats of a page and box once (``duplicate``).

    >>> cits, info = lat_citations(parse_coe('<think>See. {"bbox_2d": [0, 0, 500, 500], "Image_index": 2}</think>'
    ...     '<answer>x {"bbox_2d": [0, 0, 500, 500], "Image_index": 2}</answer>'), [(100.0, 200.0)] * 2)
    >>> cits, info
    ([{'page': 2, 'bbox': [0.0, 0.0, 50.0, 100.0]}], {'n_boxes': 2, 'unplaced': 0, 'duplicate': 1})
    """
    if mode not in CITATION_MODES:
        raise ValueError(f"LAT citation mode {mode!r}: expected one of {CITATION_MODES}")
    boxes = list(parsed.answer_boxes) if mode == "answer" else [*parsed.steps, *parsed.answer_boxes]
    out: list[dict] = []
    seen: set = set()
    info = {"n_boxes": len(boxes), "unplaced": 0, "duplicate": 0}
    for b in boxes:
        r = _region(b, pages, page_sizes)
        if r is None:
            info["unplaced"] += 1
            continue
        bbox = [round(v, 3) for v in r.bbox]
        key = (r.page, tuple(bbox))
        if key in seen:
            info["duplicate"] += 1
            continue
        seen.add(key)
        out.append({"page": r.page, "bbox": bbox})
    return out, info


def stepwise_attribution(sims: Sequence[float], regions: Sequence[Region | None], settings: LatSettings) -> float:
    """LAT's evaluation step score (ungated): 0.5 when ``min(sims) > tau`` (0 without steps), +0.5 when moreover
    there are at least two steps and no pair on one page has ``IoU >= overlap_iou``.

    >>> s = LatSettings()
    >>> a, b = Region(1, (0, 0, 10, 10), "a"), Region(1, (20, 0, 30, 10), "b")
    >>> stepwise_attribution([0.5], [a], s), stepwise_attribution([0.5, 0.6], [a, b], s)
    (0.5, 1.0)
    >>> stepwise_attribution([0.5, 0.6], [a, a], s), stepwise_attribution([0.5, 0.1], [a, b], s)
    (0.5, 0.0)
    """
    vals = [float(x) if r is not None else 0.0 for x, r in zip(sims, regions, strict=True)]
    if not vals or min(vals) <= settings.tau:
        return 0.0
    placed = [r for r in regions if r is not None]
    overlap = any(
        placed[i].page == placed[j].page and iou(placed[i].bbox, placed[j].bbox) >= settings.overlap_iou
        for i in range(len(placed))
        for j in range(i + 1, len(placed))
    )
    return 1.0 if len(vals) >= 2 and not overlap else 0.5


def answer_iou50(answer_boxes: Sequence[tuple[int, Sequence[float]]], gold_elements, threshold: float = 0.5) -> float:
    """1 when one ``(page, bbox)`` answer box overlaps a gold element on its page with IoU above ``threshold``."""
    for page, box in answer_boxes:
        for e in gold_elements:
            if e.page == page and iou(box, e.bbox) > threshold:
                return 1.0
    return 0.0


def lat_metrics(golds, preds, docs=None, settings: LatSettings = LatSettings(), embedder=None) -> dict:
    """LAT's metrics over aligned gold/prediction lists (``preds[i]`` None = missing, scored 0); see the module
    docstring. ``docs``: a :class:`~eval.cmd_resolve.DocCache` (needed for SA and for LAT boxes); ``embedder``:
    a :class:`reward.lat.StepEmbedder` (default: the one of each document's cache encoder)."""
    em, iou50, sa = [], [], []
    sa_name = why = None
    embedders: dict[str, object] = {}
    for g, p in zip(golds, preds, strict=True):
        if p is None:
            em.append(0.0)
            iou50.append(0.0)
            continue
        em.append(soft_exact_match(p.answer or "", g.answer))
        if p.interface != LAT_INTERFACE:
            iou50.append(answer_iou50([(c.page, c.bbox) for c in p.citations], g.gt_all))
            continue
        parsed = parse_coe(p.response)
        if docs is None:
            iou50.append(answer_iou50([(c.page, c.bbox) for c in p.citations], g.gt_all))
            continue
        cached = docs.get(g.doc_key)
        pages = shown_pages(p, len(cached.page_sizes))
        answer = [_region(b, pages, cached.page_sizes) for b in parsed.answer_boxes]
        iou50.append(answer_iou50([(r.page, r.bbox) for r in answer if r is not None], g.gt_all))
        regions = [_region(b, pages, cached.page_sizes) for b in parsed.steps]
        regions = [r if r is not None and r.text else None for r in regions]
        placed = [k for k, r in enumerate(regions) if r is not None]
        sims = np.zeros(len(regions), np.float32)
        if placed:
            emb = embedder
            if emb is None:
                key = (cached.manifest.get("encoder") or {}).get("fingerprint") or ""
                if key not in embedders:
                    from reward.resolve import make_quote_encoder

                    try:
                        embedders[key] = make_step_embedder(make_quote_encoder(cached), settings.crop_dpi)
                    except Exception as e:  # no encoder, or its server is down: SA cannot be measured
                        log.warning("LAT stepwise attribution: no step embedder for %s: %s", cached.key, e)
                        embedders[key] = None
                emb = embedders[key]
            if emb is None:
                why = "no step embedder for the cache's encoder"
                continue
            sa_name = emb.name
            with cached.open_pdf() as doc:
                sims[placed] = np.asarray(emb.similarities(cached, [regions[k] for k in placed], doc), np.float32)
        sa.append(stepwise_attribution(list(sims), regions, settings))
    return _finish(em, iou50, None if why else sa, sa_name, why)


def _finish(em, iou50, sa, sa_name, why) -> dict:
    out = {
        "n": len(em),
        "soft_em": float(np.mean(em)) if em else 0.0,
        "iou50": float(np.mean(iou50)) if iou50 else 0.0,
        "stepwise_attribution": float(np.mean(sa)) if sa else None,
        "n_lat": len(sa) if sa else 0,
        "sa_embedder": sa_name,
        "coord_scale": COORD_SCALE,
    }
    if why:
        out["sa_missing"] = why
    return out


def resolve_lat(pred, cached, mode: str = "all") -> tuple[str, list[dict], dict]:
    """``eval resolve`` of a LAT-interface prediction: ``(answer, citations, info)`` (:func:`lat_citations`)."""
    parsed = parse_coe(pred.response)
    citations, info = lat_citations(parsed, cached.page_sizes, shown_pages(pred, len(cached.page_sizes)), mode)
    info = {"interface": LAT_INTERFACE, "format_ok": parsed.format_ok, "n_steps": len(parsed.steps), **info}
    return parsed.answer or pred.answer, citations, info
