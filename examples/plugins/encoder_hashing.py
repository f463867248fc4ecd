"""An encoder plug-in: feature hashing of the words of a text, no model.

Each word (the project's tokenizer) adds 1 to one of ``dim`` coordinates, chosen by a stable hash (blake2b; never
Python's ``hash``, which changes between processes and would break the cache); rows are L2-normalised, so the
resolver's cosine is a dot product. A quote and a block with the same words get cosine 1. The fingerprint
``hashing:{"dim": N}`` goes into the cache key, and the reward rebuilds the quote encoder from it.

Use it: ``PYTHONPATH=examples/plugins python -m quotecite plugins --import encoder_hashing`` lists it; in your own
code, ``import encoder_hashing`` before ``data_prep.encoders.get_encoder("hashing")``.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from data_prep.document import Document
from data_prep.encoders import ENCODERS
from data_prep.text import tokenize
from data_prep.types import Block


@ENCODERS.register("hashing", summary="hashed bag of words over block text (CPU, no model)")
class HashingEncoder:
    """Hashed bag-of-words vectors of the block text and the quotes."""

    name = "hashing"

    def __init__(self, dim: int = 256) -> None:
        self.dim = int(dim)

    def fingerprint(self) -> str:
        return f"{self.name}:{json.dumps({'dim': self.dim})}"

    def _bucket(self, word: str) -> int:
        return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little") % self.dim

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in tokenize(text):
                out[i, self._bucket(word)] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    def embed_blocks(self, doc: Document, blocks: list[Block]) -> np.ndarray:
        return self.embed_texts([b.text for b in blocks])
