"""Is a training document one of the evaluation documents? Whole-text fingerprints and MinHash near-duplicates.

Two checks, both on the PDF's text layer (so a re-saved file with other bytes still matches):

* **exact**: sha256 of the whole normalised text (:meth:`data_prep.document.Document.text_fingerprint`) is equal;
* **near-duplicate**: the Jaccard similarity of the two documents' sets of ``k``-word shingles, estimated with
  MinHash, is at least a threshold (catches a revised edition, an added cover page, a trimmed appendix).

MinHash: every shingle is hashed to a 32-bit integer ``x`` (blake2b), and each of ``num_perm`` random
permutations ``h_i(x) = (a_i * x + b_i) mod p`` (``p = 2**32 - 5``, prime; ``a_i``, ``b_i`` drawn from a seeded
generator) keeps its minimum over the document. The share of equal minima between two signatures is an unbiased
estimate of the Jaccard similarity, with standard error ``sqrt(J (1 - J) / num_perm)`` (0.035 at J = 0.5 for 128
permutations). Words are :func:`data_prep.text.tokenize` tokens, so Chinese text shingles per character.

A document without a text layer (a scan) has no fingerprint: :func:`find_overlaps` reports it as unverifiable
(and compares its bytes) instead of matching every other scan through the hash of an empty text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep.document import Document, normalize_text
from data_prep.text import tokenize

MERSENNE_LIKE_PRIME = 4_294_967_291
"""``2**32 - 5``: the largest prime below 2**32, so ``a * x + b`` stays below 2**64 in uint64 arithmetic."""


@dataclass(frozen=True)
class MinHashConfig:
    """Settings of the near-duplicate check."""

    num_perm: int = 128
    """Hash permutations per signature (estimate error about 0.5 / sqrt(num_perm))."""
    shingle_words: int = 5
    """Words per shingle."""
    seed: int = 20240521
    """Seed of the permutations: signatures are comparable only when built with the same seed."""
    threshold: float = 0.5
    """Estimated Jaccard at or above which two documents are near-duplicates."""
    chunk: int = 4096
    """Shingles hashed per numpy step (bounds memory at ``num_perm * chunk`` uint64)."""


def word_shingles(text: str, k: int) -> set[str]:
    """The set of ``k``-token windows of ``text`` (tokens from :func:`data_prep.text.tokenize`).

    A text shorter than ``k`` tokens but not empty is one shingle; an empty text has none.

    >>> sorted(word_shingles("a b c d", 3))
    ['a b c', 'b c d']
    """
    if k < 1:
        raise ValueError("shingle size must be at least 1")
    tokens = tokenize(text)
    if not tokens:
        return set()
    if len(tokens) <= k:
        return {" ".join(tokens)}
    return {" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1)}


class MinHasher:
    """Builds MinHash signatures with fixed permutations (:class:`MinHashConfig`)."""

    def __init__(self, config: MinHashConfig = MinHashConfig()) -> None:
        self.config = config
        rng = np.random.default_rng(config.seed)
        self._a = rng.integers(1, MERSENNE_LIKE_PRIME, size=config.num_perm, dtype=np.uint64)
        self._b = rng.integers(0, MERSENNE_LIKE_PRIME, size=config.num_perm, dtype=np.uint64)

    @staticmethod
    def _hash32(shingles: set[str]) -> np.ndarray:
        return np.fromiter(
            (
                int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=4).digest(), "little")
                for s in sorted(shingles)
            ),
            dtype=np.uint64,
            count=len(shingles),
        )

    def signature_of_shingles(self, shingles: set[str]) -> np.ndarray:
        """``(num_perm,)`` uint64 minima; all ``p`` (an impossible hash) for an empty set."""
        sig = np.full(self.config.num_perm, MERSENNE_LIKE_PRIME, dtype=np.uint64)
        x = self._hash32(shingles) % np.uint64(MERSENNE_LIKE_PRIME)
        for start in range(0, len(x), self.config.chunk):
            part = x[start : start + self.config.chunk]
            h = (self._a[:, None] * part[None, :] + self._b[:, None]) % np.uint64(MERSENNE_LIKE_PRIME)
            sig = np.minimum(sig, h.min(axis=1))
        return sig

    def signature(self, text: str) -> np.ndarray:
        """Signature of a text's ``shingle_words``-word shingles."""
        return self.signature_of_shingles(word_shingles(text, self.config.shingle_words))


def jaccard_estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    """Share of equal minima: the MinHash estimate of the Jaccard similarity (0 when either set was empty)."""
    if sig_a.shape != sig_b.shape:
        raise ValueError(f"signatures of different lengths {sig_a.shape} and {sig_b.shape}")
    empty = np.uint64(MERSENNE_LIKE_PRIME)
    if np.all(sig_a == empty) or np.all(sig_b == empty):
        return 0.0
    return float(np.mean(sig_a == sig_b))


def jaccard_exact(a: set[str], b: set[str]) -> float:
    """Exact Jaccard similarity of two shingle sets (0 when both are empty)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


@dataclass(frozen=True)
class DocFingerprint:
    """What the overlap check keeps of one PDF."""

    path: str
    """The PDF's path."""
    sha256: str
    """sha256 of the file's bytes."""
    text_sha256: str | None
    """sha256 of the whole normalised text; None when the PDF has no text layer."""
    minhash: np.ndarray
    """MinHash signature of the text's word shingles (uint64, ``num_perm``)."""
    n_shingles: int
    """Number of distinct shingles (0 without text)."""


def fingerprint_text(path: str, sha256: str, text: str, hasher: MinHasher) -> DocFingerprint:
    """Fingerprint of a document given its whole text."""
    norm = normalize_text(text)
    shingles = word_shingles(norm, hasher.config.shingle_words)
    text_sha = hashlib.sha256(norm.encode("utf-8")).hexdigest() if norm else None
    return DocFingerprint(str(path), sha256, text_sha, hasher.signature_of_shingles(shingles), len(shingles))


def fingerprint_pdf(path: str | Path, hasher: MinHasher) -> DocFingerprint:
    """Open a PDF and fingerprint its text layer. Raises :class:`~core.errors.InputError` when unreadable."""
    with Document.open(path) as doc:
        return fingerprint_text(str(path), doc.sha256, doc.full_text(), hasher)


@dataclass(frozen=True)
class Overlap:
    """A training document that matches an evaluation document."""

    train: str
    """Training PDF path."""
    eval: str
    """Evaluation PDF path."""
    kind: str
    """``bytes`` (identical files), ``text`` (identical normalised text) or ``near`` (MinHash >= threshold)."""
    jaccard: float
    """MinHash Jaccard estimate (1.0 for ``bytes``/``text`` matches of texts with shingles)."""


def find_overlaps(train: DocFingerprint, evals: list[DocFingerprint], threshold: float) -> list[Overlap]:
    """Every evaluation document that ``train`` duplicates, best match first.

    Byte-identical files always match; identical text matches only when there is text (an empty text is not
    evidence of identity); near-duplicates need an estimated Jaccard of at least ``threshold``."""
    out: list[Overlap] = []
    for ev in evals:
        jac = jaccard_estimate(train.minhash, ev.minhash)
        if train.sha256 == ev.sha256:
            out.append(Overlap(train.path, ev.path, "bytes", jac))
        elif train.text_sha256 is not None and train.text_sha256 == ev.text_sha256:
            out.append(Overlap(train.path, ev.path, "text", jac))
        elif jac >= threshold:
            out.append(Overlap(train.path, ev.path, "near", jac))
    order = {"bytes": 0, "text": 1, "near": 2}
    return sorted(out, key=lambda o: (order[o.kind], -o.jaccard))
