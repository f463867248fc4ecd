"""``python -m eval resolve``: turn raw responses into citations (paper Section 3.2 and the Table 2 controls).

Language interface (``--query quotes``, the default): the reward's own parser (:func:`reward.response.
parse_response`) reads ``{"answer", "quotes"}`` and the reward's resolver (:func:`reward.resolve.resolve_quotes`)
assigns each quote to a block of the whole document: one code path with training. The top-``--top-k`` blocks of
every quote are stored as ``candidates`` for the residual decomposition of ``eval score``.

Budget-matched retrieval controls (``--query question`` / ``question+answer``): the question alone, or the
question plus the answer the same model wrote (never the gold answer), is the query of
:func:`reward.resolve.rank_blocks`, and the top ``k`` blocks are cited, where ``k`` is the number of citations
that response's quotes produce (its number of parsed quotes; 0 when it does not parse). ``--budget K`` cites a
fixed K blocks per question instead, whatever the response (Appendix F's fixed-budget retrieval-only baselines).

Coordinate interface: ``<bbox page="N" x1=".." y1=".." x2=".." y2=".."/>`` tags on CiteVQA's 0-1000 scale are
converted to PDF points with the cached page sizes (:mod:`eval.coordinate`); ``--snap`` replaces each box by the
max-IoU block on its page (nearest block when none overlaps; unchanged when the page has no block). A tag naming
a page the document does not have stays a citation (raw-output semantics, as CiteVQA's scorer reads it: it counts
in the precision denominator and matches nothing; its box is converted with the last page's size and it carries
``page_missing: true``); it is counted in ``pages_out_of_range``. ``--drop-missing-pages`` drops such tags instead
(our earlier rule, which raises a coordinate run's precision).

A language response that does not parse cites nothing, and its answer (for the judge) is its text without the
reasoning. Every output record keeps the input fields and gets ``answer``, ``citations`` (page, bbox in points, similarity,
quote, block_id) and ``resolve`` (what was done, and why a response gave no citation).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval resolve")

import argparse
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from core.errors import InputError
from core.io import refuse_output_over_inputs
from data_prep.cache import CachedDoc, DocCache
from data_prep.encoders import MemoEncoder
from data_prep.validate import bounded_int, finite
from eval.interfaces import get_interface
from eval.schemas import Gold, Prediction, read_gold, read_predictions, write_jsonl
from reward.cmd_score import MAX_QUOTES_OPTION
from reward.response import DEFAULT_MAX_QUOTES

log = logging.getLogger("eval")

QUERIES = ("quotes", "question", "question+answer")
"""What is resolved: the response's quotes, or the question (+ the model's answer) as one retrieval query."""


# ---------------------------------------------------------------------------------------------- cache lookup
@dataclass
class Resolver:
    """Resolves predictions against a :class:`DocCache` with one resolver and query mode."""

    docs: DocCache
    resolver: str = "embedding"
    """A resolver of :mod:`reward.resolve`: ``embedding``, ``lexical``, ``bm25``, ``bm25_lucene`` or ``fused``."""
    query: str = "quotes"
    """One of :data:`QUERIES`."""
    snap: bool = False
    """Coordinate interface: replace each box by the max-IoU block on its page."""
    drop_missing_pages: bool = False
    """Coordinate interface: drop a tag naming a page the document lacks (default: keep it as a citation that
    matches nothing, the paper's raw-output scoring)."""
    threshold: float | None = None
    """Drop quote citations whose similarity is below this (resolver units); None keeps all."""
    max_quotes: int = DEFAULT_MAX_QUOTES
    """Safety bound on the quotes kept per response (the reward's parser; the paper has no cap): extra quotes are
    counted in ``quotes_over_bound`` and warned about."""
    dedupe_quotes: bool = False
    """Drop exact repeats of a quote first; default: repeats are separate quotes, as in the paper."""
    budget: int | None = None
    """Question controls only: cite this fixed number of blocks per question, whatever the response (paper
    Appendix F's retrieval-only baselines); None = the response's own citation budget (Table 2)."""
    top_k: int = 5
    """Candidates stored per quote for the residual decomposition (paper Appendix H: top five)."""
    stats: Counter = field(default_factory=Counter)
    _encoders: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from reward.resolve import resolver_names

        if self.resolver not in resolver_names():
            raise InputError(f"unknown resolver {self.resolver!r}; expected one of {resolver_names()}")
        if self.query not in QUERIES:
            raise InputError(f"unknown query {self.query!r}; expected one of {QUERIES}")
        if self.budget is not None and (self.query == "quotes" or self.budget < 1):
            raise InputError("--budget K (K >= 1) is for --query question / question+answer")

    def encoder_for(self, cached: CachedDoc):
        from reward.resolve import resolver_uses_encoder

        if not resolver_uses_encoder(self.resolver):
            return None
        meta = cached.manifest.get("encoder") or {}
        name = meta.get("name")
        if name is None:
            return None  # the reward's resolver raises the clear error
        if name not in self._encoders:
            from data_prep.encoders import get_encoder

            self._encoders[name] = MemoEncoder(get_encoder(name))
        return self._encoders[name]

    def resolve(self, gold: Gold, pred: Prediction) -> dict:
        """The output record of one prediction: its interface cites it (:meth:`eval.interfaces.Interface.cite`,
        which calls one of the ``resolve_*`` methods below or builds the record itself)."""
        cached = self.docs.get(gold.doc_key)
        return get_interface(pred.interface).cite(self, gold, pred, cached)

    def keep_citations(self, gold: Gold, pred: Prediction, cached: CachedDoc) -> dict:
        """The prediction's own citations, as they are (blocks read off the attention, :mod:`eval.attention`)."""
        self.stats["responses"] += 1
        return self.record(pred, pred.answer, [c.to_json() for c in pred.citations], {"interface": pred.interface})

    def resolve_steps(self, gold: Gold, pred: Prediction, cached: CachedDoc) -> dict:
        """LAT's Chain-of-Evidence boxes (:mod:`eval.lat`)."""
        from eval.lat import resolve_lat

        self.stats["responses"] += 1
        return self.record(pred, *resolve_lat(pred, cached))

    def resolve_quotes(self, gold: Gold, pred: Prediction, cached: CachedDoc) -> dict:
        """The response's quotes resolved to blocks (or the question as the query, :attr:`query`)."""
        from reward.resolve import rank_blocks, resolve_quotes, similarity_matrix
        from reward.response import parse_response, strip_reasoning

        parsed = parse_response(pred.response, max_quotes=self.max_quotes, dedupe=self.dedupe_quotes)
        if parsed.dropped:
            if not self.stats["quotes_over_bound"]:
                log.warning("response %s has more than --max-quotes=%d quotes; the extra ones are left out and "
                            "counted in quotes_over_bound", pred.index, self.max_quotes)  # fmt: skip
            self.stats["quotes_over_bound"] += parsed.dropped
        # A response without the JSON contract is still an answer for the judge: its text, reasoning removed.
        answer = parsed.answer or pred.answer or strip_reasoning(pred.response).strip()
        encoder = self.encoder_for(cached)
        info: dict = {"resolver": self.resolver, "query": self.query, "parse_ok": parsed.ok, "reason": parsed.reason}
        info["n_quotes"] = len(parsed.quotes)
        self.stats["responses"] += 1
        self.stats["parsed" if parsed.ok else f"unparsed:{parsed.reason}"] += 1
        citations: list[dict] = []
        extra: dict = {}
        if parsed.ok and self.query == "quotes":
            context = f"{gold.question}\n{answer}"  # read only by the fused resolver (question + own answer)
            cits = resolve_quotes(
                list(parsed.quotes), cached, resolver=self.resolver, encoder=encoder, threshold=self.threshold,
                context=context,
            )  # fmt: skip
            citations = [c.to_json() for c in cits]
            if self.top_k > 0:
                sim, ids = similarity_matrix(
                    list(parsed.quotes), cached, resolver=self.resolver, encoder=encoder, context=context
                )
                k = min(self.top_k, len(ids))
                order = np.argsort(-sim, axis=1, kind="stable")[:, :k] if len(ids) else np.zeros((len(sim), 0), int)
                extra["candidates"] = [[int(ids[j]) for j in row] for row in order]
        if self.query == "quotes":
            # Citations a converter fixed without a quote (a rival system's image citations, eval convert) are
            # the model's own: they stand next to the resolved quotes.
            citations += [dict(c) for c in pred.extra.get("fixed_citations", [])]
        elif self.query != "quotes" and (parsed.ok or self.budget is not None):
            budget = len(parsed.quotes) if self.budget is None else self.budget
            query = gold.question if self.query == "question" else f"{gold.question}\n{answer}"
            ranked = rank_blocks(query, cached, resolver=self.resolver, encoder=encoder)[:budget]
            for bid, score in ranked:
                b = cached.blocks[bid]
                citations.append(
                    {"page": b.page, "bbox": [round(v, 3) for v in b.bbox], "block_id": bid, "similarity": score}
                )
            info["budget"] = budget
        self.stats["citations"] += len(citations)
        return self.record(pred, answer, citations, info, extra)

    def resolve_boxes(self, gold: Gold, pred: Prediction, cached: CachedDoc) -> dict:
        """The response's coordinate tags as citations in points (snapped to blocks with :attr:`snap`)."""
        from eval.coordinate import parse_coordinate_response, snap, to_points

        parsed = parse_coordinate_response(pred.response)
        info: dict = {"interface": "coordinate", "snap": self.snap, "n_tags": len(parsed.boxes)}
        info["n_unparsed_tags"] = parsed.n_unparsed
        self.stats["responses"] += 1
        self.stats["unparsed_tags"] += parsed.n_unparsed
        citations: list[dict] = []
        dropped = 0
        for cb in parsed.boxes:
            if cb.page > cached.n_pages:
                dropped += 1
                if self.drop_missing_pages:
                    continue
                bbox = to_points(cb.box, cached.page_sizes[-1])
                citations.append({"page": cb.page, "bbox": [round(v, 3) for v in bbox], "page_missing": True})
                continue
            bbox = to_points(cb.box, cached.page_sizes[cb.page - 1])
            cit: dict = {"page": cb.page, "bbox": [round(v, 3) for v in bbox]}
            if self.snap:
                block = snap(cb.page, bbox, cached.blocks)
                if block is not None:
                    cit = {"page": block.page, "bbox": [round(v, 3) for v in block.bbox], "block_id": block.block_id}
            citations.append(cit)
        info["pages_out_of_range"] = dropped
        self.stats["pages_out_of_range"] += dropped
        self.stats["parsed" if citations else "no_citation"] += 1
        self.stats["citations"] += len(citations)
        return self.record(pred, parsed.answer or pred.answer, citations, info)

    @staticmethod
    def record(pred: Prediction, answer: str, citations: list[dict], info: dict, extra: dict | None = None) -> dict:
        """The output record: the prediction with its ``answer``, ``citations``, ``resolve`` (``info``) and the
        fields of ``extra``."""
        d = pred.to_json()
        d.pop("candidates", None)
        d["answer"] = answer
        d["citations"] = citations
        d["resolve"] = info
        d.update(extra or {})
        return d


def resolve_file(gold_path: Path, pred_path: Path, out_path: Path, resolver: Resolver) -> Counter:
    """Resolve every prediction of ``pred_path`` and write ``out_path`` atomically; returns the counters."""
    golds = {g.key: g for g in read_gold(gold_path)}
    preds = read_predictions(pred_path)
    unknown = [p.index for p in preds if p.key not in golds]
    if unknown:
        raise InputError(f"{pred_path}: prediction index {unknown[0]!r} is not in {gold_path}")
    # Grouped by document so each cache entry is loaded once.
    order = sorted(range(len(preds)), key=lambda i: golds[preds[i].key].doc_key)
    out: dict[int, dict] = {}
    for i in tqdm(order, desc=f"resolve ({resolver.query}, {resolver.resolver})", unit="q", disable=None):
        out[i] = resolver.resolve(golds[preds[i].key], preds[i])
    rows = [out[i] for i in range(len(preds))]
    write_jsonl(out_path, rows)
    return resolver.stats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pred", type=Path, required=True, help="predictions JSONL (raw responses)")
    parser.add_argument("--gold", type=Path, required=True, help="gold JSONL (doc_key and question per index)")
    parser.add_argument("--cache-dir", type=Path, required=True, help="block cache (python -m data_prep blocks)")
    from reward.resolve import resolver_names

    parser.add_argument("--resolver", default="embedding", choices=resolver_names())
    parser.add_argument("--query", default="quotes", choices=QUERIES, help="what is resolved (default: quotes)")
    parser.add_argument("--snap", action="store_true", help="coordinate interface: snap boxes to blocks")
    parser.add_argument(
        "--drop-missing-pages",
        action="store_true",
        help="coordinate interface: drop tags naming a page the document lacks (default: keep them as citations "
        "that match nothing, as the paper scores raw output)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="question controls: a fixed number of blocks per question (default: the response's)",
    )
    parser.add_argument("--threshold", type=finite, default=None, help="drop quote citations below this similarity")
    parser.add_argument(
        "--max-quotes",
        type=bounded_int(1, MAX_QUOTES_OPTION),
        default=DEFAULT_MAX_QUOTES,
        help=f"safety bound on the quotes kept per response, logged when hit (default {DEFAULT_MAX_QUOTES}; earlier 8)",
    )
    parser.add_argument(
        "--dedupe-quotes", action="store_true", help="drop exact repeats of a quote (the earlier rule; default: keep)"
    )
    parser.add_argument(
        "--top-k", type=bounded_int(0, 1000), default=5, help="candidates kept per quote for the residual analysis"
    )
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    parser.add_argument("--encoder", default=None, help="pick cache entries embedded by this encoder")
    parser.add_argument("--out", type=Path, required=True, help="output predictions JSONL with citations")


def run(args: argparse.Namespace) -> int:
    refuse_output_over_inputs(args.out, [args.pred, args.gold])
    docs = DocCache(args.cache_dir, parser=args.parser, encoder=args.encoder)
    resolver = Resolver(
        docs,
        resolver=args.resolver,
        query=args.query,
        snap=args.snap,
        drop_missing_pages=args.drop_missing_pages,
        threshold=args.threshold,
        max_quotes=args.max_quotes,
        dedupe_quotes=args.dedupe_quotes,
        top_k=args.top_k,
        budget=args.budget,
    )
    stats = resolve_file(args.gold, args.pred, args.out, resolver)
    parts = ", ".join(f"{k}: {v}" for k, v in sorted(stats.items()))
    print(f"resolved {stats['responses']} responses -> {args.out} ({parts})")
    return 0
