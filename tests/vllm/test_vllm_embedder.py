"""Qwen3-VL-Embedding's two transports on one checkpoint: vLLM's pooling server (``--runner pooling``, started with
the launch's command line) and the in-process transformers encoder must give the same vectors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from data_prep.cache import load_cache
from data_prep.encoders.qwen3vl import Qwen3VLEmbeddingEncoder
from tests.vllm.conftest import EMBED_MODEL, REPO

FIXTURE_PDF = REPO.parent / "shared" / "fixtures" / "docling-project_docling" / "2305.03393v1-pg9.pdf"
MIN_COSINE = 0.99


@pytest.fixture(scope="module")
def pdf(sample_pdf) -> Path:
    """A real PDF made by others (the shared fixtures) when present, else the generated sample."""
    return FIXTURE_PDF if FIXTURE_PDF.is_file() else sample_pdf


@pytest.fixture(scope="module")
def served_cache(embed_server, pdf, tmp_path_factory):
    """``data_prep blocks --encoder qwen3-vl-embedding --embed-url`` against the pooling server."""
    cache_dir = tmp_path_factory.mktemp("qwen-cache")
    r = subprocess.run(
        [sys.executable, "-m", "data_prep", "blocks", str(pdf), "--parser", "pdftext", "--encoder",
         "qwen3-vl-embedding", "--embed-url", embed_server.url, "--cache-dir", str(cache_dir)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads([line for line in r.stdout.splitlines() if line.startswith("{")][0])
    return load_cache(cache_dir, record["doc_key"], mmap=False)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def test_block_vectors_of_both_transports_agree(served_cache, checkpoints):
    served = np.asarray(served_cache.embeddings, dtype=np.float32)
    assert served.shape == (len(served_cache.blocks), 128)  # the tiny model's width, from the server's answer
    local = Qwen3VLEmbeddingEncoder(
        transport="transformers", model=EMBED_MODEL, model_path=str(checkpoints["embedder"])
    )
    assert local.fingerprint() == served_cache.manifest["encoder"]["fingerprint"]  # one cache key for both
    with served_cache.open_pdf() as doc:
        mine = local.embed_blocks(doc, served_cache.blocks)
    cos = _cosines(served, mine)
    assert cos.min() >= MIN_COSINE, f"per-block cosine min {cos.min():.4f} (blocks {np.argsort(cos)[:5].tolist()})"


def test_quote_vectors_of_both_transports_agree_and_the_reward_resolves_through_the_server(
    served_cache, embed_server, checkpoints
):
    from data_prep.groundtruth import GroundTruth, pack_ground_truth
    from reward.config import RewardConfig
    from reward.pipeline import RewardScorer

    texts = [b.text for b in served_cache.blocks if b.text.strip()][:4]
    http = Qwen3VLEmbeddingEncoder(url=embed_server.url)
    local = Qwen3VLEmbeddingEncoder(
        transport="transformers", model=EMBED_MODEL, model_path=str(checkpoints["embedder"])
    )
    cos = _cosines(http.embed_texts(texts), local.embed_texts(texts))
    http.close()
    assert cos.min() >= MIN_COSINE, cos
    gt = pack_ground_truth(GroundTruth("q", served_cache.key, "What is shown?", texts[0][:40], None))
    response = json.dumps({"answer": texts[0][:40], "quotes": texts[:2]})
    scorer = RewardScorer(RewardConfig(cache_dir=str(served_cache.path.parent), judge="lexical",
                                       embed_url=embed_server.url))  # fmt: skip
    ((breakdown, citations),) = scorer.score([{"response": response, "response_length": 1, "ground_truth": gt}])
    assert breakdown.unscorable == 0.0 and len(citations) == 2
    assert all(-1.0 <= c.similarity <= 1.0 for c in citations)
