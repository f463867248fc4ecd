"""A metric plug-in: page precision, the share of a response's citations on a page that holds necessary evidence.

A coarser reading of precision than the box metrics: a citation on the right page with a loose box counts. It is
registered with its aggregation (``summary``) and direction (``higher_is_better``); ``eval score`` then reports it
in ``metrics.json`` beside the built-in metrics, for every run.

Use it: ``PYTHONPATH=examples/plugins python -m quotecite plugins --import metric_page_precision`` lists it; in your
own code, ``import metric_page_precision`` before scoring.
"""

from __future__ import annotations

from eval.metrics import METRICS, QuestionResult


@METRICS.register("page_precision", summary="mean over questions with >= 1 citation", higher_is_better=True)
def page_precision(result: QuestionResult) -> float | None:
    """Citations on a page of a necessary element / citations; None (not counted) without a citation."""
    if result.prediction is None or not result.prediction.citations:
        return None
    pages = {e.page for e in result.gold.gt_necessary}
    cited = result.prediction.citations
    return sum(c.page in pages for c in cited) / len(cited)
