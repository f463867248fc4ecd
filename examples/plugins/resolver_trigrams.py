"""A resolver plug-in: character-trigram overlap of a quote and a block's text, no model.

Scores are the Jaccard index of the two sets of character trigrams (after the project's text normalisation), so
a quote with a typo or a dropped word still scores close to its block, and a language without spaces between
words (Chinese) is handled like any other. The reward and ``eval resolve`` then pair quotes and blocks
one-to-one (Hungarian) on these scores, as for every resolver.

Use it: ``PYTHONPATH=examples/plugins python -m quotecite plugins --import resolver_trigrams`` lists it; in your own
code, ``import resolver_trigrams`` before resolving with ``resolver="trigrams"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from data_prep.cache import CachedDoc
from data_prep.text import normalize_for_compare
from reward.resolve import RESOLVERS


def trigrams(text: str) -> set[str]:
    """The character trigrams of the normalised, lower-cased ``text`` (the text itself when shorter)."""
    t = normalize_for_compare(text).lower()
    return {t[i : i + 3] for i in range(len(t) - 2)} or ({t} if t else set())


@RESOLVERS.register("trigrams", summary="Jaccard of character trigrams of quote and block text (no model)")
def trigram_scores(quotes: Sequence[str], cached: CachedDoc, ids: np.ndarray, encoder) -> np.ndarray:
    """``(len(quotes), len(ids))`` Jaccard indices of the quotes' and the candidate blocks' trigram sets."""
    blocks = [trigrams(cached.blocks[int(i)].text) for i in ids]
    out = np.zeros((len(quotes), len(ids)), dtype=np.float32)
    for qi, quote in enumerate(quotes):
        q = trigrams(quote)
        for bi, b in enumerate(blocks):
            if q and b:
                out[qi, bi] = len(q & b) / len(q | b)
    return out
