"""Encoders: embed blocks (text or crop) and quotes (text) into one L2-normalised space.

``embed_blocks`` and ``embed_texts`` return float32 arrays of shape ``(n, dim)`` whose rows have unit L2 norm,
so cosine similarity is a dot product.
"""

from __future__ import annotations

import importlib
from typing import Protocol

import numpy as np

from data_prep.document import Document
from data_prep.registry import Registry
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


ENCODERS: Registry[Encoder] = Registry("encoder")

_MODULES = ("data_prep.encoders.minilm", "data_prep.encoders.qwen3vl")


def _load_all() -> None:
    for mod in _MODULES:
        importlib.import_module(mod)


def get_encoder(name: str, **kwargs) -> Encoder:
    """Instantiate a registered encoder (``minilm``, ``qwen3-vl-embedding``)."""
    _load_all()
    return ENCODERS.create(name, **kwargs)


def encoder_names() -> list[str]:
    _load_all()
    return ENCODERS.names()


def l2_normalize(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norms, eps)
