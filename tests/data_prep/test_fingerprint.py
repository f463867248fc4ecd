"""Whole-text fingerprints and MinHash near-duplicate detection (data_prep/fingerprint.py)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from data_prep.fingerprint import (
    MERSENNE_LIKE_PRIME,
    MinHashConfig,
    MinHasher,
    find_overlaps,
    fingerprint_pdf,
    fingerprint_text,
    jaccard_estimate,
    jaccard_exact,
    word_shingles,
)


@pytest.mark.parametrize(
    "text,k,expected",
    [
        ("", 3, set()),  # no text, no shingle
        ("one two", 3, {"one two"}),  # shorter than k: the whole text is one shingle
        ("a b c d", 3, {"a b c", "b c d"}),  # sliding window
        ("A, b; C!", 2, {"a b", "b c"}),  # punctuation and case do not matter (tokenize)
        ("营收增长", 2, {"营 收", "收 增", "增 长"}),  # Chinese shingles per character
        ("x x x x", 2, {"x x"}),  # a set: repeats collapse
    ],
)
def test_word_shingles(text, k, expected):
    assert word_shingles(text, k) == expected


def _words(rng: random.Random, n: int) -> list[str]:
    return [f"w{rng.randrange(50_000)}" for _ in range(n)]


def test_identical_texts_estimate_one_and_unrelated_texts_zero():
    hasher = MinHasher()
    rng = random.Random(1)
    a, b = " ".join(_words(rng, 2000)), " ".join(_words(rng, 2000))
    assert jaccard_estimate(hasher.signature(a), hasher.signature(a)) == 1.0
    assert jaccard_estimate(hasher.signature(a), hasher.signature(b)) == 0.0


@pytest.mark.parametrize("keep", [0.9, 0.7, 0.5, 0.2])
def test_minhash_estimate_is_within_four_standard_errors_of_the_exact_jaccard(keep):
    hasher = MinHasher(MinHashConfig(num_perm=256))
    universe = [f"s{i}" for i in range(4000)]
    a = set(universe[:2000])
    shared = int(2000 * keep)
    b = set(universe[:shared]) | set(universe[2000 : 2000 + (2000 - shared)])
    exact = jaccard_exact(a, b)
    est = jaccard_estimate(hasher.signature_of_shingles(a), hasher.signature_of_shingles(b))
    se = np.sqrt(exact * (1 - exact) / 256)
    assert abs(est - exact) <= 4 * se + 1e-9, (keep, exact, est)


def test_signature_does_not_depend_on_the_chunk_size_or_the_instance():
    text = " ".join(_words(random.Random(3), 5000))
    big = MinHasher(MinHashConfig(chunk=4096)).signature(text)
    small = MinHasher(MinHashConfig(chunk=7)).signature(text)
    assert np.array_equal(big, small)
    assert big.dtype == np.uint64 and big.shape == (128,)
    assert not np.array_equal(big, MinHasher(MinHashConfig(seed=2)).signature(text))


def test_empty_text_has_no_fingerprint_and_matches_nothing_but_its_own_bytes():
    hasher = MinHasher()
    scan_a = fingerprint_text("a.pdf", "sha-a", "  \n ", hasher)
    scan_b = fingerprint_text("b.pdf", "sha-b", "", hasher)
    assert scan_a.text_sha256 is None and scan_a.n_shingles == 0
    assert np.all(scan_a.minhash == MERSENNE_LIKE_PRIME)
    assert jaccard_estimate(scan_a.minhash, scan_b.minhash) == 0.0
    assert find_overlaps(scan_a, [scan_b], threshold=0.5) == []  # two scans are not the same document
    same_bytes = fingerprint_text("c.pdf", "sha-a", "", hasher)
    assert [o.kind for o in find_overlaps(scan_a, [same_bytes], threshold=0.5)] == ["bytes"]


def test_find_overlaps_orders_bytes_then_text_then_near_matches():
    hasher = MinHasher()
    words = _words(random.Random(5), 3000)
    text = " ".join(words)
    near_words = list(words)
    for i in range(0, 3000, 60):  # change one word in 60: most 5-word shingles survive
        near_words[i] = "changed"
    train = fingerprint_text("train.pdf", "sha-train", text, hasher)
    evals = [
        fingerprint_text("other.pdf", "sha-other", " ".join(_words(random.Random(6), 3000)), hasher),
        fingerprint_text("near.pdf", "sha-near", " ".join(near_words), hasher),
        fingerprint_text("resaved.pdf", "sha-resaved", text.upper() + "  ", hasher),  # same normalised text
        fingerprint_text("copy.pdf", "sha-train", text, hasher),
    ]
    found = find_overlaps(train, evals, threshold=0.5)
    assert [(o.eval, o.kind) for o in found] == [("copy.pdf", "bytes"), ("resaved.pdf", "text"), ("near.pdf", "near")]
    near = found[2].jaccard
    assert 0.5 <= near < 1.0
    assert find_overlaps(train, evals[:2], threshold=0.99) == []


def test_fingerprint_pdf_reads_the_text_layer(sample_pdf):
    from data_prep.document import Document

    fp = fingerprint_pdf(sample_pdf, MinHasher())
    with Document.open(sample_pdf) as doc:
        assert fp.text_sha256 == doc.text_fingerprint()
        assert fp.sha256 == doc.sha256
    assert fp.n_shingles > 50
