"""Resolve quotes to blocks: quote -> citation (page, bbox, block) by similarity and one-to-one assignment.

Candidates are the blocks of the whole document (the paper, Section 3.2: "we consider candidates from the entire
document"; ``pages=None``), or of a 1-based inclusive page window ``pages`` (an option: training's page window
then limits the candidates to what the policy saw). Resolvers score every (quote, block) pair; higher is better:

* ``embedding`` (default, docs/METHOD.md step 4): cosine between the quote embedded as text by the document's
  encoder and the cached block embeddings (unit rows, so a dot product). In [-1, 1].
* ``lexical``: bag-of-tokens F1 between the quote and the block text (:func:`data_prep.text.token_f1`). In [0, 1].
* ``bm25``: Okapi BM25 of the quote (as the query) over the candidates' block texts, from the maintained library
  ``rank_bm25`` (:class:`rank_bm25.BM25Okapi`, ``k1`` = :data:`BM25_K1`, ``b`` = :data:`BM25_B`): IDF
  ``ln((N - df + 0.5) / (df + 0.5))``, so a term in exactly half the candidates weighs 0, and a negative IDF (a term
  in more than half) is floored at ``0.25 x`` the mean IDF of the candidates' vocabulary. Unbounded; >= 0 unless
  most terms occur in most candidates (then the mean IDF, and with it the floor, is negative).
* ``bm25_lucene``: the same BM25 with Lucene's IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
  which stays positive for every term (:func:`bm25_scores`).
* ``fused`` (beyond the paper): reciprocal-rank fusion, quote first, of four rankings of the candidates: the
  quote's ``embedding`` and ``bm25`` rankings (weight 1 each) and, when a *context* is given (the question plus the
  policy's own answer: the reward pipeline and ``eval resolve`` pass it), the context's ``embedding`` and ``bm25``
  rankings (weight :data:`FUSED_CONTEXT_WEIGHT` each). Score ``sum_k w_k / (FUSED_K + rank_k)`` (a BM25 ranking
  counts only blocks that share a term with its query). It uses what the paper's oracle union (quote retrieval OR
  question+answer retrieval) shows is left on the table, while the quote keeps the larger say. Units: RRF points,
  at most ``(2 + 2 w) / (FUSED_K + 1)``; thresholds for this resolver are in those units.

The assignment maximises total similarity with each block taking at most one quote
(``scipy.optimize.linear_sum_assignment`` on negative similarity, the Hungarian algorithm). When quotes
outnumber candidate blocks, each quote falls back to its own best block. A threshold (in the resolver's units)
drops weak citations: the similarity is an abstention signal (paper, Appendix I).
"""

from __future__ import annotations

import inspect
import math
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np
from scipy.optimize import linear_sum_assignment

from core.errors import InputError
from core.geometry import BBox
from core.io import loads_record
from core.registry import Registry
from data_prep.cache import CachedDoc
from data_prep.text import tokenize

BM25_K1 = 1.2
"""BM25 term-frequency saturation."""
BM25_B = 0.75
"""BM25 length normalisation."""
BM25_EPSILON = 0.25
"""Okapi BM25 (``rank_bm25``): a negative IDF is replaced by this share of the mean IDF."""
FUSED_K = 60
"""Reciprocal-rank-fusion constant of the ``fused`` resolver (the usual 60: ranks 1 and 2 differ by little, so
agreement between rankings matters more than the exact rank in any one)."""
FUSED_CONTEXT_WEIGHT = 0.5
"""Weight of each of the context's two rankings in the ``fused`` resolver (the quote's two weigh 1 each)."""


@dataclass(frozen=True)
class Citation:
    """A quote resolved to a block.

    Attributes:
        page: 1-based page of the block.
        bbox: ``(x0, y0, x1, y1)`` of the block in PDF points, origin top-left of the displayed page.
        block_id: row of the block in the document's cache.
        similarity: the resolver's score for (quote, block); units depend on the resolver (module docstring).
        quote: the (normalised) quote that was resolved.
    """

    page: int
    bbox: BBox
    block_id: int
    similarity: float
    quote: str

    def to_json(self) -> dict:
        d = asdict(self)
        d["bbox"] = [round(float(v), 3) for v in self.bbox]
        d["similarity"] = round(float(self.similarity), 6)
        return d

    @classmethod
    def from_json(cls, d: dict) -> Citation:
        return cls(int(d["page"]), tuple(float(v) for v in d["bbox"]), int(d["block_id"]), float(d["similarity"]),
                   str(d["quote"]))  # fmt: skip


# --------------------------------------------------------------------------------------------- per-doc text index
class _TextIndex:
    """Tokenised block texts of one document, kept per doc key (lexical and BM25 need them on every call)."""

    def __init__(self, cached: CachedDoc) -> None:
        self.tokens = [tokenize(b.text) for b in cached.blocks]
        self.counters = [Counter(t) for t in self.tokens]
        self._okapi = None  # BM25Okapi over every block, built on first use

    def okapi(self, ids: np.ndarray):
        """A :class:`rank_bm25.BM25Okapi` over the blocks ``ids`` and the positions of ``ids`` in it (the
        whole-document index is built once and kept; a page window gets its own, so its statistics are the
        window's). None when no candidate has a token."""
        from rank_bm25 import BM25Okapi

        whole = len(ids) == len(self.tokens) and bool(np.array_equal(ids, np.arange(len(self.tokens))))
        docs = self.tokens if whole else [self.tokens[int(i)] for i in ids]
        if not any(docs):
            return None
        if not whole:
            return BM25Okapi(docs, k1=BM25_K1, b=BM25_B, epsilon=BM25_EPSILON)
        if self._okapi is None:
            self._okapi = BM25Okapi(docs, k1=BM25_K1, b=BM25_B, epsilon=BM25_EPSILON)
        return self._okapi


_INDEX: OrderedDict[str, _TextIndex] = OrderedDict()
_INDEX_LOCK = threading.Lock()
TEXT_INDEX_CACHE = 64
"""Documents whose tokenised block texts stay in memory."""


def _text_index(cached: CachedDoc) -> _TextIndex:
    with _INDEX_LOCK:
        idx = _INDEX.get(cached.key)
        if idx is not None:
            _INDEX.move_to_end(cached.key)
            return idx
    idx = _TextIndex(cached)
    with _INDEX_LOCK:
        _INDEX[cached.key] = idx
        while len(_INDEX) > TEXT_INDEX_CACHE:
            _INDEX.popitem(last=False)
    return idx


# --------------------------------------------------------------------------------------------- resolvers
class Scorer(Protocol):
    """A resolver: ``scorer(quotes, cached, ids, encoder) -> (len(quotes), len(ids))`` scores of each quote
    against each candidate block ``ids`` of ``cached``. Its registry entry says what it needs: ``encoder`` (the
    document's embeddings and a quote encoder; ``encoder`` is None otherwise), ``context`` (it is also given
    ``context=``, str or None: the question and answer)."""

    def __call__(self, quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray: ...


RESOLVERS: Registry[Scorer] = Registry(
    "resolver", base=Scorer, needs=("encoder", "context"), arguments={"context": "context"}
)
"""Registration line: ``@RESOLVERS.register("name", summary=..., needs=(...))`` on the scorer function."""


def resolver_uses_encoder(name: str) -> bool:
    """Whether resolver ``name`` embeds the quotes (needs a cache with embeddings and a quote encoder)."""
    return RESOLVERS.needs(name, "encoder")


def resolver_uses_context(name: str) -> bool:
    """Whether resolver ``name`` also ranks the blocks against the question and answer (``context=``)."""
    return RESOLVERS.needs(name, "context")


def make_quote_encoder(cached: CachedDoc, name: str | None = None, embed_url: str | None = None):
    """A new encoder for the quotes of ``cached``: ``name`` (default: the cache's encoder) with the settings the
    cache's encoder fingerprint records (``"<name>:<json settings>"``), served over HTTP at ``embed_url`` (default:
    env ``QUOTECITE_EMBED_URL``) when the encoder takes a ``url``. Raises :class:`InputError` when the result's
    fingerprint differs from the cache's (its vectors would live in another space)."""
    from data_prep.encoders import ENCODERS, get_encoder

    meta = cached.manifest.get("encoder") or {}
    name = name or meta.get("name")
    if not name:
        raise InputError(f"cache {cached.key} was built without an encoder; use resolver 'lexical' or 'bm25'")
    embed_url = embed_url if embed_url is not None else os.environ.get("QUOTECITE_EMBED_URL")
    try:
        factory = ENCODERS.get(name)
    except KeyError as e:
        raise InputError(f"quote encoder: {e.args[0]}") from None
    params = inspect.signature(factory).parameters
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    same = name == meta.get("name")
    fingerprint = (meta.get("fingerprint") or "") if same else ""
    kwargs = {}
    if fingerprint.startswith(name + ":"):
        try:  # the cache manifest's fingerprint of the resolver's settings, through the one record parser
            settings = loads_record(fingerprint[len(name) + 1 :], "cache manifest fingerprint")
        except ValueError:
            settings = None
        if isinstance(settings, dict):
            kwargs.update({k: v for k, v in settings.items() if open_kwargs or k in params})
    if embed_url and ENCODERS.needs(name, "url"):
        kwargs["url"] = embed_url  # served: the encoder talks to the server
    encoder = get_encoder(name, **kwargs)
    if fingerprint and encoder.fingerprint() != fingerprint:
        raise InputError(
            f"cache {cached.key}: quote encoder {encoder.fingerprint()} differs from the cache's {fingerprint}; "
            "rebuild the cache or fix the encoder settings"
        )
    return encoder


def quote_encoder(cached: CachedDoc, encoder=None):
    """The encoder for quotes of ``cached``: ``encoder`` if given (checked against the cache's name and
    dimension), else :func:`make_quote_encoder`."""
    enc_meta = cached.manifest.get("encoder")
    if not enc_meta or cached.embeddings is None:
        raise InputError(
            f"cache {cached.key} has no block embeddings (built without an encoder); "
            "use resolver 'lexical' or 'bm25', or rebuild the cache with an encoder"
        )
    if encoder is None:
        encoder = make_quote_encoder(cached)
    if getattr(encoder, "name", None) != enc_meta["name"] or int(encoder.dim) != int(enc_meta["dim"]):
        raise InputError(
            f"cache {cached.key} was embedded with {enc_meta['name']} ({enc_meta['dim']}-d) but quotes would be "
            f"embedded with {getattr(encoder, 'name', encoder)} ({getattr(encoder, 'dim', '?')}-d)"
        )
    return encoder


@RESOLVERS.register(
    "embedding", summary="cosine similarity of quote and block embeddings (the paper's)", needs=("encoder",)
)
def _embedding_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    encoder = quote_encoder(cached, encoder)
    q = np.asarray(encoder.embed_texts(list(quotes)), dtype=np.float32)
    blocks = np.asarray(cached.embeddings[ids], dtype=np.float32)
    return q @ blocks.T


@RESOLVERS.register("lexical", summary="token overlap of quote and block text (no model)")
def _lexical_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    index = _text_index(cached)
    out = np.zeros((len(quotes), len(ids)), dtype=np.float32)
    for i, quote in enumerate(quotes):
        qc = Counter(tokenize(quote))
        nq = sum(qc.values())
        if not nq:
            continue
        for j, bid in enumerate(ids):
            bc = index.counters[bid]
            common = sum((qc & bc).values())
            if common:
                p, r = common / nq, common / len(index.tokens[bid])
                out[i, j] = 2 * p * r / (p + r)
    return out


def bm25_scores(queries: Sequence[Sequence[str]], docs: Sequence[Sequence[str]], k1: float = BM25_K1,
                b: float = BM25_B) -> np.ndarray:  # fmt: skip
    """BM25 with Lucene's IDF (the ``bm25_lucene`` resolver) of each tokenised query against each tokenised
    document, ``(len(queries), len(docs))``.

    IDF is Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))``: positive for every term, including one that occurs in
    half or more of the documents (where Okapi's IDF is zero or negative). The ``bm25`` resolver is plain Okapi
    from ``rank_bm25`` (:func:`okapi_scores`).

    >>> s = bm25_scores([["cat"]], [["cat"], ["dog"]])
    >>> bool(s[0, 0] > s[0, 1] == 0.0)
    True
    """
    n = len(docs)
    out = np.zeros((len(queries), n), dtype=np.float32)
    if n == 0:
        return out
    counters = [Counter(d) for d in docs]
    lengths = np.array([len(d) for d in docs], dtype=np.float64)
    avgdl = max(lengths.mean(), 1e-9)
    df: Counter[str] = Counter()
    for c in counters:
        df.update(c.keys())
    norm = k1 * (1 - b + b * lengths / avgdl)
    for i, query in enumerate(queries):
        for term, qtf in Counter(query).items():
            if term not in df:
                continue
            idf = math.log(1.0 + (n - df[term] + 0.5) / (df[term] + 0.5))
            tf = np.array([c.get(term, 0) for c in counters], dtype=np.float64)
            out[i] += (qtf * idf * tf * (k1 + 1) / (tf + norm)).astype(np.float32)
    return out


def okapi_scores(queries: Sequence[Sequence[str]], cached: CachedDoc, ids: np.ndarray) -> np.ndarray:
    """Okapi BM25 (:class:`rank_bm25.BM25Okapi`) of each tokenised query against the blocks ``ids`` of ``cached``,
    with the candidates as the collection, ``(len(queries), len(ids))``."""
    out = np.zeros((len(queries), len(ids)), dtype=np.float32)
    if not len(ids):
        return out
    index = _text_index(cached)
    bm = index.okapi(ids)
    if bm is None:
        return out
    positions = list(range(len(ids)))
    for i, query in enumerate(queries):
        if query:
            out[i] = np.asarray(bm.get_batch_scores(list(query), positions), dtype=np.float32)
    return out


@RESOLVERS.register("bm25", summary="Okapi BM25 of the quote over the document's blocks (no model)")
def _bm25_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    return okapi_scores([tokenize(q) for q in quotes], cached, ids)


@RESOLVERS.register("bm25_lucene", summary="BM25 with Lucene's idf and length norm (no model)")
def _bm25_lucene_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    index = _text_index(cached)
    return bm25_scores([tokenize(q) for q in quotes], [index.tokens[i] for i in ids])


def _rrf(scores: np.ndarray, weight: float, only_positive: bool) -> np.ndarray:
    """``weight / (FUSED_K + rank)`` per entry of each row (rank 1 = best; equal scores share the best rank of
    their tie, so a tie stays a tie); entries that are not positive get 0 when ``only_positive``."""
    ranks = np.empty(scores.shape, dtype=np.float64)
    for i, row in enumerate(scores):
        desc = np.sort(-row)
        ranks[i] = np.searchsorted(desc, -row, side="left") + 1
    out = weight / (FUSED_K + ranks)
    if only_positive:
        out[scores <= 0] = 0.0
    return out


@RESOLVERS.register(
    "fused", summary="rank fusion of embedding and BM25, with the question and answer", needs=("encoder", "context")
)
def _fused_scores(
    quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder, context: str | None = None
) -> np.ndarray:
    texts = list(quotes) + ([context] if context and context.strip() else [])
    emb = np.asarray(_embedding_scores(texts, cached, ids, encoder), dtype=np.float64)
    lex = np.asarray(okapi_scores([tokenize(t) for t in texts], cached, ids), dtype=np.float64)
    n = len(quotes)
    fused = _rrf(emb[:n], 1.0, False) + _rrf(lex[:n], 1.0, True)
    if len(texts) > n:
        ctx = _rrf(emb[n:], FUSED_CONTEXT_WEIGHT, False) + _rrf(lex[n:], FUSED_CONTEXT_WEIGHT, True)
        fused = fused + ctx  # one row, the same for every quote
    return fused.astype(np.float32)


def resolver_names() -> list[str]:
    return RESOLVERS.names()


# --------------------------------------------------------------------------------------------- public API
def similarity_matrix(
    quotes: Sequence[str],
    cached: CachedDoc,
    *,
    resolver: str = "embedding",
    encoder=None,
    pages: tuple[int, int] | None = None,
    context: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(S, block_ids)``: ``S[i, j]`` scores quote ``i`` against block ``block_ids[j]`` (the candidates of the
    1-based inclusive page window ``pages``, or all blocks). ``S`` is float32 ``(len(quotes), len(block_ids))``.
    ``context`` (the question and the policy's answer) is read only by resolvers that use one (``fused``)."""
    scorer = RESOLVERS.get(resolver)
    ids = np.asarray(cached.block_ids_on_pages(pages), dtype=np.int64)
    if not len(quotes) or not len(ids):
        return np.zeros((len(quotes), len(ids)), dtype=np.float32), ids
    kwargs = {"context": context} if RESOLVERS.needs(resolver, "context") else {}
    s = np.asarray(scorer(list(quotes), cached, ids, encoder, **kwargs), dtype=np.float32)
    if s.shape != (len(quotes), len(ids)):
        raise RuntimeError(f"resolver {resolver} returned shape {s.shape}, expected {(len(quotes), len(ids))}")
    return np.nan_to_num(s, nan=-1.0), ids


def assign(sim: np.ndarray) -> list[int]:
    """Column chosen for each row of ``sim``: one-to-one (Hungarian, maximum total) when rows <= columns,
    else each row's own argmax. Empty list when there are no columns.

    >>> assign(np.array([[0.9, 0.8], [0.85, 0.1]]))
    [1, 0]
    """
    n_q, n_b = sim.shape
    if n_b == 0 or n_q == 0:
        return []
    if n_q > n_b:
        return [int(j) for j in np.argmax(sim, axis=1)]
    rows, cols = linear_sum_assignment(-sim.astype(np.float64))
    out = [0] * n_q
    for r, c in zip(rows, cols, strict=True):
        out[int(r)] = int(c)
    return out


def resolve_quotes(
    quotes: Sequence[str],
    cached: CachedDoc,
    *,
    resolver: str = "embedding",
    encoder=None,
    pages: tuple[int, int] | None = None,
    threshold: float | None = None,
    context: str | None = None,
) -> list[Citation]:
    """Citations for ``quotes`` in quote order, each quote resolved to a block of the window ``pages``
    (1-based inclusive; None = whole document, the paper's rule). Citations with similarity below ``threshold``
    are dropped. Repeated quotes are separate quotes: the assignment gives them distinct blocks. ``context``: see
    :func:`similarity_matrix`."""
    sim, ids = similarity_matrix(quotes, cached, resolver=resolver, encoder=encoder, pages=pages, context=context)
    out = []
    for i, j in enumerate(assign(sim)):
        s = float(sim[i, j])
        if threshold is not None and s < threshold:
            continue
        block = cached.blocks[int(ids[j])]
        out.append(Citation(block.page, tuple(float(v) for v in block.bbox), block.block_id, s, quotes[i]))
    return out


def rank_blocks(
    query: str,
    cached: CachedDoc,
    *,
    resolver: str = "embedding",
    encoder=None,
    pages: tuple[int, int] | None = None,
) -> list[tuple[int, float]]:
    """Every candidate block as ``(block_id, score)``, best first (ties by block id): the query-only retrieval
    used by the top-k residual analysis and the question / question+answer controls."""
    sim, ids = similarity_matrix([query], cached, resolver=resolver, encoder=encoder, pages=pages)
    if not len(ids):
        return []
    row = sim[0]
    order = np.lexsort((ids, -row))
    return [(int(ids[k]), float(row[k])) for k in order]
