"""Resolve quotes to blocks: quote -> citation (page, bbox, block) by similarity and one-to-one assignment.

Candidates are the blocks of the page window the policy saw (``pages``, 1-based inclusive) or of the whole
document. Three resolvers score every (quote, block) pair; higher is better:

* ``embedding`` (default, SPEC step 4): cosine between the quote embedded as text by the document's encoder and
  the cached block embeddings (unit rows, so a dot product). In [-1, 1].
* ``lexical``: bag-of-tokens F1 between the quote and the block text (:func:`data_prep.text.token_f1`). In [0, 1].
* ``bm25``: Okapi BM25 of the quote (as the query) over the window's block texts, with Lucene's IDF
  ``ln(1 + (N - df + 0.5) / (df + 0.5))``, which stays positive. Plain Okapi IDF ``ln((N - df + 0.5)/(df + 0.5))``
  (``rank_bm25.BM25Okapi``) is exactly 0 for a term in half the blocks and negative above that, so a block
  containing a common quote term could score *below* one that lacks it. Unbounded, >= 0.

The assignment maximises total similarity with each block taking at most one quote
(``scipy.optimize.linear_sum_assignment`` on negative similarity, the Hungarian algorithm). When quotes
outnumber candidate blocks, each quote falls back to its own best block. A threshold (in the resolver's units)
drops weak citations: the similarity is an abstention signal (paper, Appendix I).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from data_prep.cache import CachedDoc
from data_prep.registry import Registry
from data_prep.text import tokenize
from data_prep.types import InputError

BM25_K1 = 1.2
"""BM25 term-frequency saturation."""
BM25_B = 0.75
"""BM25 length normalisation."""


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
    bbox: tuple[float, float, float, float]
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
Scorer = Callable[[Sequence[str], CachedDoc, np.ndarray, object], np.ndarray]
RESOLVERS: Registry[Scorer] = Registry("resolver")


def make_quote_encoder(cached: CachedDoc, name: str | None = None, embed_url: str | None = None):
    """A new encoder for the quotes of ``cached``: ``name`` (default: the cache's encoder) with the settings the
    cache's encoder fingerprint records (``"<name>:<json settings>"``), served over HTTP at ``embed_url`` (default:
    env ``QUOTECITE_EMBED_URL``) when the encoder takes a ``url``. Raises :class:`InputError` when the result's
    fingerprint differs from the cache's (its vectors would live in another space)."""
    from data_prep.encoders import ENCODERS, encoder_names, get_encoder

    meta = cached.manifest.get("encoder") or {}
    name = name or meta.get("name")
    if not name:
        raise InputError(f"cache {cached.key} was built without an encoder; use resolver 'lexical' or 'bm25'")
    embed_url = embed_url if embed_url is not None else os.environ.get("QUOTECITE_EMBED_URL")
    encoder_names()  # imports every encoder module, so the registry is complete
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
        try:
            settings = json.loads(fingerprint[len(name) + 1 :])
        except ValueError:
            settings = None
        if isinstance(settings, dict):
            kwargs.update({k: v for k, v in settings.items() if open_kwargs or k in params})
    if embed_url and (open_kwargs or "url" in params):
        kwargs["url"] = embed_url
        if open_kwargs or "transport" in params:
            kwargs["transport"] = "http"
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


@RESOLVERS.register("embedding")
def _embedding_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    encoder = quote_encoder(cached, encoder)
    q = np.asarray(encoder.embed_texts(list(quotes)), dtype=np.float32)
    blocks = np.asarray(cached.embeddings[ids], dtype=np.float32)
    return q @ blocks.T


@RESOLVERS.register("lexical")
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
    """Okapi BM25 of each tokenised query against each tokenised document, ``(len(queries), len(docs))``.

    IDF is Lucene's ``ln(1 + (N - df + 0.5) / (df + 0.5))``: positive for every term, including one that occurs in
    half or more of the documents (where Okapi's IDF is zero or negative).

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


@RESOLVERS.register("bm25")
def _bm25_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    index = _text_index(cached)
    return bm25_scores([tokenize(q) for q in quotes], [index.tokens[i] for i in ids])


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
) -> tuple[np.ndarray, np.ndarray]:
    """``(S, block_ids)``: ``S[i, j]`` scores quote ``i`` against block ``block_ids[j]`` (the candidates of the
    1-based inclusive page window ``pages``, or all blocks). ``S`` is float32 ``(len(quotes), len(block_ids))``."""
    scorer = RESOLVERS.get(resolver)
    ids = np.asarray(cached.block_ids_on_pages(pages), dtype=np.int64)
    if not len(quotes) or not len(ids):
        return np.zeros((len(quotes), len(ids)), dtype=np.float32), ids
    s = np.asarray(scorer(list(quotes), cached, ids, encoder), dtype=np.float32)
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
) -> list[Citation]:
    """Citations for ``quotes`` in quote order, each quote resolved to a block of the window ``pages``
    (1-based inclusive; None = whole document). Citations with similarity below ``threshold`` are dropped."""
    sim, ids = similarity_matrix(quotes, cached, resolver=resolver, encoder=encoder, pages=pages)
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
