"""``colqwen2``: ColQwen2, the multi-vector (late-interaction) retriever LAT's released code scores its step crops
with, run in this process through transformers' maintained port of it (``ColQwen2ForRetrieval``,
``ColQwen2Processor``; checkpoint ``vidore/colqwen2-v1.0-hf``, the ColPali authors' conversion of
``vidore/colqwen2-v1.0``, which LAT loads).

Why not ``colpali-engine`` (the ColPali authors' library, which LAT imports): version 0.3.18 does install from
PyPI next to this project's CPU torch 2.13.0 without replacing it, but it pulls PyPI's torchvision 0.28.0, whose
x86_64 wheel is a CUDA build (its ``_C.so`` links ``libc10_cuda.so`` and ``libtorch_cuda.so``): beside the CPU
torch, ``import torchvision`` fails ("operator torchvision::nms does not exist") and so does
``from colpali_engine.models import ColQwen2``. transformers, already a dependency, carries the same model and
needs no torchvision (the PIL image processor is used), so there is no optional extra to install.

Two uses:

* :meth:`ColQwen2Encoder.late_interaction`: LAT's step score, ``mean over query tokens of the max cosine over the
  image's tokens`` (LAT's ``score_multi_vector``: MaxSim averaged, not summed, so it lies in [-1, 1] and LAT's
  tau = 0.3 applies). :func:`reward.lat.make_step_embedder` uses it when the reward's ``encoder`` is
  ``colqwen2``.
* The single-vector :class:`~data_prep.encoders.Encoder` interface (a cache, quote resolution): the masked mean of
  the token vectors, L2-normalised. Ours, not ColPali's (ColPali only scores by MaxSim); a block is its crop.

A checkpoint is a local folder or a Hub id; loading from the Hub needs the network (the tests build a tiny random
ColQwen2 in a folder).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from core.errors import InputError
from data_prep.document import Document
from data_prep.encoders import l2_normalize, torch_placement
from data_prep.types import Block

DEFAULT_MODEL = "vidore/colqwen2-v1.0-hf"
DEFAULT_MAX_PIXELS = 768 * 28 * 28
"""ColQwen2 v1.0's image budget (768 visual tokens after Qwen2-VL's 2x2 merge of 14-pixel patches)."""
MAX_ASPECT_RATIO = 200.0
"""Qwen2-VL refuses images more elongated than this; LAT resizes such crops, we pad them (as our block crops)."""


class ColQwen2Encoder:
    name = "colqwen2"

    def __init__(
        self,
        model_path: str = DEFAULT_MODEL,
        device: str = "auto",
        dtype: str = "auto",
        max_pixels: int = DEFAULT_MAX_PIXELS,
        dpi: float = 150.0,
        min_crop_pt: float = 4.0,
        batch_size: int = 4,
    ) -> None:
        checks = [
            (isinstance(model_path, str) and model_path.strip() != "", "model_path must be a folder or a Hub id"),
            (isinstance(max_pixels, int) and max_pixels >= 28 * 28, "max_pixels must be an int >= 784"),
            (dpi > 0, "dpi must be > 0"),
            (min_crop_pt >= 0, "min_crop_pt must be >= 0"),
            (isinstance(batch_size, int) and batch_size >= 1, "batch_size must be an int >= 1"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(f"colqwen2: {msg}")
        self.model_path = model_path
        self.device_name = device
        self.dtype_name = dtype
        self.max_pixels = max_pixels
        self.dpi = float(dpi)
        self.min_crop_pt = float(min_crop_pt)
        self.batch_size = batch_size
        self._lock = threading.RLock()
        self._model = None

    # ------------------------------------------------------------------------------------------- loading
    def _load(self):
        with self._lock:
            if self._model is None:
                from transformers import ColQwen2ForRetrieval, ColQwen2Processor
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
                device, dtype = torch_placement(self.device_name, self.dtype_name, "colqwen2")
                local = Path(self.model_path).expanduser()
                if self.model_path.startswith(("/", ".", "~")) and not (local / "config.json").is_file():
                    raise InputError(
                        f"colqwen2: cannot load {self.model_path!r}: not a checkpoint folder (no config.json)"
                    )
                try:
                    self._processor = ColQwen2Processor.from_pretrained(self.model_path)
                    model = ColQwen2ForRetrieval.from_pretrained(self.model_path, dtype=dtype)
                except (OSError, ValueError) as e:  # no such Hub id / no network / a folder of something else
                    raise InputError(f"colqwen2: cannot load {self.model_path!r} ({e})") from None
                self._device = device
                self._model = model.to(device).eval()
            return self._model

    @property
    def dim(self) -> int:
        """Width of ColQwen2's token vectors (128 for v1.0), read from the checkpoint's config."""
        return int(self._load().config.embedding_dim)

    def fingerprint(self) -> str:
        """``colqwen2:<json settings>`` (the settings that change the vectors), as :mod:`reward.resolve` reads it."""
        key = {"model_path": self.model_path, "max_pixels": self.max_pixels, "dpi": self.dpi,
               "min_crop_pt": self.min_crop_pt}  # fmt: skip
        return "colqwen2:" + json.dumps(key, sort_keys=True)

    # ------------------------------------------------------------------------------------------- token vectors
    def prepare(self, image: Image.Image) -> Image.Image:
        """The image the model sees: at most ``max_pixels``, padded to an aspect ratio Qwen2-VL accepts."""
        from data_prep.encoders.qwen3vl import prepare_image

        return prepare_image(image, self.max_pixels, MAX_ASPECT_RATIO)

    def _tokens(self, batch: dict) -> list[np.ndarray]:
        import torch

        model = self._load()
        batch = {k: v.to(self._device) for k, v in batch.items()}
        with torch.no_grad():
            emb = model(**batch).embeddings.float()
        mask = batch["attention_mask"].bool()
        return [emb[i][mask[i]].cpu().numpy() for i in range(emb.shape[0])]

    def query_tokens(self, texts: list[str]) -> list[np.ndarray]:
        """Per text, its token vectors ``(n_tokens, dim)`` (unit rows; padding left out)."""
        self._load()
        out: list[np.ndarray] = []
        for i in range(0, len(texts), self.batch_size):
            out += self._tokens(self._processor(text=list(texts[i : i + self.batch_size]), return_tensors="pt"))
        return out

    def image_tokens(self, images: list[Image.Image]) -> list[np.ndarray]:
        """Per image, its token vectors ``(n_tokens, dim)`` (unit rows; padding left out)."""
        self._load()
        out: list[np.ndarray] = []
        for i in range(0, len(images), self.batch_size):
            chunk = [self.prepare(im) for im in images[i : i + self.batch_size]]
            out += self._tokens(self._processor(images=chunk, return_tensors="pt"))
        return out

    def late_interaction(self, texts: list[str], images: list[Image.Image]) -> np.ndarray:
        """LAT's score of each (text, image) pair: per query token, the max cosine over the image's tokens; the
        mean over query tokens (:func:`late_interaction_score`). ``(n,)`` float32 in [-1, 1]."""
        if len(texts) != len(images):
            raise ValueError("one image per text")
        qs, ps = self.query_tokens(list(texts)), self.image_tokens(list(images))
        return np.asarray([late_interaction_score(q, p) for q, p in zip(qs, ps, strict=True)], np.float32)

    # ------------------------------------------------------------------------------------------- single vectors
    @staticmethod
    def _pool(tokens: list[np.ndarray], dim: int) -> np.ndarray:
        if not tokens:
            return np.zeros((0, dim), dtype=np.float32)
        return l2_normalize(np.stack([t.mean(axis=0) for t in tokens]))

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """Queries: mean of the token vectors, unit rows ``(len(texts), dim)``."""
        return self._pool(self.query_tokens(list(texts)), self.dim) if texts else self._pool([], self.dim)

    def embed_images(self, images: list[Image.Image]) -> np.ndarray:
        """Images a caller cut itself (a predicted box's region): mean of the token vectors, unit rows."""
        return self._pool(self.image_tokens(list(images)), self.dim) if images else self._pool([], self.dim)

    def embed_blocks(self, doc: Document, blocks: list[Block]) -> np.ndarray:
        """Blocks by their crop at ``dpi`` (a sliver widened to ``min_crop_pt``), as :meth:`embed_images`."""
        from data_prep.encoders.qwen3vl import widen_bbox

        crops = [
            doc.crop(b.page, widen_bbox(b.bbox, doc.page_sizes[b.page - 1], self.min_crop_pt), dpi=self.dpi)
            for b in blocks
        ]
        return self.embed_images(crops)


def late_interaction_score(query: np.ndarray, passage: np.ndarray) -> float:
    """MaxSim averaged over the query's tokens, both sides L2-normalised first (LAT's ``score_multi_vector``).

    >>> round(late_interaction_score(np.eye(2), np.array([[2.0, 0.0], [0.6, 0.8]])), 6)  # (1 + 0.8) / 2
    0.9
    """
    if query.size == 0 or passage.size == 0:
        return 0.0
    q, p = l2_normalize(query), l2_normalize(passage)
    return float((q @ p.T).max(axis=1).mean())
