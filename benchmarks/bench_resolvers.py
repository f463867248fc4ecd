"""Resolver benchmark (``make bench``): top-1 block accuracy of each resolver on real fixture PDFs.

Quotes come from the three English Docling fixture PDFs (``../shared/fixtures``), parsed with pdftext and embedded
with MiniLM, as in ``tests/reward/test_reward_resolve.py``: every block of >= 8 words whose text no other block has is a
source; its longest sentence (<= 40 words) is the *verbatim* quote; the *paraphrased* quote drops every fifth word
and swaps common words for synonyms; the *truncated* quote keeps the verbatim quote's first
:data:`TRUNCATED_WORDS` words (a quote cut short, which often fits several blocks). Sources are grouped four to a
response and resolved together over the whole document (one-to-one assignment), as the reward does.

The ``fused`` resolver also reads a context: the response's question and answer. Fixture PDFs come without
questions, so each response gets a synthetic one built from its four source blocks (never from the quote itself):
the question names the two longest words of each block ("What does the document say about X, Y, ...?") and the
answer is :data:`ANSWER_WORDS` consecutive words from the end of each block. It stands for a policy whose answer
restates its evidence; with a context, ``fused`` is measured as it runs in the reward and in ``eval resolve``.
Accuracy: the share of quotes resolved to their source block.
"""

from __future__ import annotations

import time

import pytest

from benchmarks.report import print_table
from tests.reward.test_reward_resolve import paraphrase, quote_sources, verbatim_quote

RESOLVERS = ("embedding", "bm25", "bm25_lucene", "lexical", "fused")
TRUNCATED_WORDS = 5
ANSWER_WORDS = 8
GROUP = 4


def truncated(text: str) -> str:
    return " ".join(verbatim_quote(text).split()[:TRUNCATED_WORDS])


QUOTE_KINDS = {
    "verbatim": verbatim_quote,
    "paraphrased": lambda t: paraphrase(verbatim_quote(t)),
    "truncated": truncated,
}


def context_for(group) -> str:
    """A synthetic question and answer for a response citing ``group`` (module docstring)."""
    names = []
    answer = []
    for b in group:
        words = b.text.split()
        names.extend(sorted(words, key=lambda w: (-len(w), w))[:2])
        answer.append(" ".join(words[-ANSWER_WORDS:]))
    return f"What does the document say about {', '.join(names)}?\n" + " ".join(answer)


@pytest.fixture(scope="module")
def fixture_docs(tmp_path_factory):
    return quote_sources(tmp_path_factory.mktemp("bench-resolvers"), GROUP)


def accuracy(encoder, docs, make_quote, resolver: str, with_context: bool = True) -> tuple[int, int, float]:
    """(hits, quotes, seconds) of ``resolver`` on every response of ``docs``."""
    from reward.resolve import resolve_quotes, resolver_uses_encoder

    hits = total = 0
    t0 = time.perf_counter()
    for cached, groups in docs:
        for group in groups:
            quotes = [make_quote(b.text) for b in group]
            cits = resolve_quotes(
                quotes,
                cached,
                resolver=resolver,
                encoder=encoder if resolver_uses_encoder(resolver) else None,
                context=context_for(group) if with_context else None,
            )
            hits += sum(c.block_id == b.block_id for c, b in zip(cits, group, strict=True))
            total += len(group)
    return hits, total, time.perf_counter() - t0


def bench_resolver_top1_accuracy(fixture_docs):
    encoder, docs = fixture_docs
    encoder.embed_texts(["warm-up"])
    columns = [*RESOLVERS, "fused (no context)"]
    results: dict[tuple[str, str], tuple[int, int, float]] = {}
    for kind, make in QUOTE_KINDS.items():
        for resolver in RESOLVERS:
            results[kind, resolver] = accuracy(encoder, docs, make, resolver)
        results[kind, "fused (no context)"] = accuracy(encoder, docs, make, "fused", with_context=False)
    n = results["verbatim", "embedding"][1]
    rows = []
    for kind in QUOTE_KINDS:
        rows.append([kind, *(f"{results[kind, r][0] / results[kind, r][1]:.1%}" for r in columns)])
    mean = [sum(results[k, r][0] for k in QUOTE_KINDS) / sum(results[k, r][1] for k in QUOTE_KINDS) for r in columns]
    rows.append(["all", *(f"{m:.1%}" for m in mean)])
    ms = [
        1000 * sum(results[k, r][2] for k in QUOTE_KINDS) / sum(results[k, r][1] for k in QUOTE_KINDS) for r in columns
    ]
    rows.append(["ms/quote", *(f"{m:.2f}" for m in ms)])
    print_table(
        f"top-1 block accuracy per resolver: {n} quotes per kind from {len(docs)} English Docling fixture PDFs "
        f"(pdftext blocks, MiniLM), {GROUP} quotes per response, whole-document candidates",
        ["quotes", *columns],
        rows,
    )
    assert n >= 50
    # The table is the result; these only catch a resolver that broke.
    assert results["verbatim", "embedding"][0] / n >= 0.9 and results["verbatim", "bm25"][0] / n >= 0.9
