"""``qwen3-vl-embedding``: block crops and quote texts embedded as Qwen3-VL-Embedding-2B does.

The model reads a chat: a system turn holding an *instruction* (one for documents, another for queries) and a
user turn holding the content (a block's crop rendered at 150 dpi, its text, or both, image first; a query's text).
The embedding is the last layer's (final-norm) hidden state at the final token of the prompt rendered with the
generation prompt, i.e. the ``\\n`` after ``<|im_start|>assistant``; no end-of-text token is appended. That is what
the model's own embedder does (``Qwen3VLEmbedder.process``: ``apply_chat_template(..., add_generation_prompt=True)``,
then the last position whose attention mask is 1; its ``PAD_TOKEN = "<|endoftext|>"`` is never used, as issue
QwenLM/Qwen3-VL-Embedding#4 points out), L2-normalised; 2048 dimensions for the 2B model. With ``dim`` below the
model's width the vector is cut to its first ``dim`` components and normalised again (Matryoshka truncation).

Two transports give the same vectors:

* ``transformers``: the model runs in this process (``model_path``: a local checkpoint directory). Prompts of a
  batch are padded on ``padding_side`` and the final *real* token of each row is found from the attention mask,
  so either side pools the same position.
* ``http``: a vLLM server serving the model (``vllm serve Qwen/Qwen3-VL-Embedding-2B --runner pooling``).
  ``POST {url}/embeddings`` with chat-style ``messages`` (vLLM's ``EmbeddingChatRequest``: the
  system instruction, then the user content with the crop as a ``data:image/png;base64`` ``image_url``) and
  ``add_generation_prompt`` set, as the model's own embedder renders its prompts (``add_special_tokens`` stays
  at vLLM's default, false, so nothing is appended after the template). An item with a crop is one request;
  consecutive text-only items go up to ``texts_per_request`` in one (vLLM's ``EmbeddingBatchChatRequest``:
  ``messages`` a list of such conversations, each rendered and pooled on its own, answered in ``data`` by
  ``index``), so a batch's quotes cost a few requests, not one each. Requests run concurrently up
  to ``max_concurrency`` and are retried on 5xx, 429, timeouts and dropped connections. Each answered
  embedding is normalised again here whatever the server did.

Images are prepared identically for both transports before they leave this module: crops larger than
``max_pixels`` are scaled down and very elongated crops are padded with white to ``max_aspect_ratio`` (the
Qwen image processor rejects aspect ratios above 200).
"""

from __future__ import annotations

import base64
import io
import json
import math
import threading
import time
import unicodedata
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
from PIL import Image

from core.errors import InputError
from core.geometry import BBox
from core.io import read_json_object
from data_prep.document import DEFAULT_CROP_DPI, Document
from data_prep.encoders import l2_normalize, torch_placement
from data_prep.encoders.minilm import block_text
from data_prep.types import Block

DEFAULT_MODEL = "Qwen/Qwen3-VL-Embedding-2B"
DEFAULT_DOCUMENT_INSTRUCTION = "Represent the user's input."
DEFAULT_QUERY_INSTRUCTION = (
    "Retrieve the region of a document page (a paragraph, list, table, figure or caption) that contains "
    "this quoted evidence."
)
EMPTY_CONTENT = "NULL"
"""What the model's own embedder sends for an item with neither image nor text."""

BLOCK_CONTENTS = ("image", "text", "image+text")
TRANSPORTS = ("transformers", "http")


class EmbeddingServerError(RuntimeError):
    """The embedding server could not be reached or kept failing after the retries."""


@dataclass(frozen=True)
class Qwen3VLEmbeddingSettings:
    """Knobs of the ``qwen3-vl-embedding`` encoder. Fields marked (key) change the vectors and so the cache key."""

    model: str = DEFAULT_MODEL
    """(key) Model identity: the name the vLLM server serves, and what the cache key records for both transports."""
    transport: str | None = None
    """``transformers`` (in-process) or ``http`` (a vLLM server at ``url``); None: ``http`` when ``url`` is set,
    else ``transformers``."""
    model_path: str | None = None
    """Local checkpoint directory for the ``transformers`` transport (default: ``model``, if it is a directory)."""
    url: str | None = None
    """Base URL of the vLLM OpenAI-compatible server for ``http``, e.g. ``http://node1:8001/v1``."""
    api_key: str | None = None
    """Bearer token for the server, if it was started with ``--api-key``."""
    dim: int | None = None
    """(key) Output dimensions; None: the model's hidden size (2048 for the 2B model). Smaller cuts (Matryoshka)."""
    document_instruction: str = DEFAULT_DOCUMENT_INSTRUCTION
    """(key) System-turn instruction for blocks (the model's default instruction)."""
    query_instruction: str = DEFAULT_QUERY_INSTRUCTION
    """(key) System-turn instruction for query texts (quotes, questions)."""
    block_content: str = "image"
    """(key) What a block contributes: ``image`` (its crop), ``text`` (its text only) or ``image+text``."""
    dpi: float = DEFAULT_CROP_DPI
    """(key) Resolution at which block crops are rendered."""
    min_crop_pt: float = 4.0
    """(key) Crop boxes thinner than this (points) are widened around their centre, so no crop is empty."""
    min_pixels: int = 4 * 32 * 32
    """(key) Smallest image area the model sees (pixels; the model's own default)."""
    max_pixels: int = 1800 * 32 * 32
    """(key) Largest image area the model sees (pixels; the model's own default); larger crops are scaled down."""
    max_aspect_ratio: float = 100.0
    """(key) Crops more elongated than this are padded with white (the image processor rejects > 200)."""
    batch_size: int = 8
    """``transformers``: items per forward pass."""
    padding_side: str = "right"
    """``transformers``: side on which a batch is padded (pooling finds the last real token either way)."""
    device: str = "auto"
    """``transformers``: torch device; ``auto`` picks CUDA when available."""
    dtype: str = "auto"
    """``transformers``: torch dtype name; ``auto`` is bfloat16 on CUDA and float32 on a CPU."""
    max_concurrency: int = 8
    """``http``: requests in flight at once."""
    texts_per_request: int = 8
    """``http``: text-only items (quotes, text blocks) sent together in one request, as vLLM's batched chat
    embeddings (``messages`` a list of conversations, each rendered and pooled as if sent alone); an item with a
    crop goes alone. 1: one request per item."""
    timeout_s: float = 120.0
    """``http``: seconds before one request is abandoned (and retried)."""
    max_retries: int = 3
    """``http``: further attempts after a 5xx, 429, timeout or dropped connection."""
    retry_backoff_s: float = 1.0
    """``http``: wait before the first retry; doubled for each further one."""

    def __post_init__(self) -> None:
        if self.transport is None:
            object.__setattr__(self, "transport", "http" if self.url else "transformers")
        if self.transport not in TRANSPORTS:
            raise InputError(f"qwen3-vl-embedding: transport {self.transport!r} is not one of {TRANSPORTS}")
        if self.block_content not in BLOCK_CONTENTS:
            raise InputError(
                f"qwen3-vl-embedding: block_content {self.block_content!r} is not one of {BLOCK_CONTENTS}"
            )
        if self.padding_side not in ("left", "right"):
            raise InputError(f"qwen3-vl-embedding: padding_side must be 'left' or 'right', got {self.padding_side!r}")
        if self.transport == "http" and not self.url:
            raise InputError("qwen3-vl-embedding: the http transport needs the server's url (--embed-url)")
        if self.dim is not None and self.dim < 1:
            raise InputError(f"qwen3-vl-embedding: dim must be positive, got {self.dim}")
        if self.max_concurrency < 1 or self.batch_size < 1 or self.texts_per_request < 1 or self.max_retries < 0:
            raise InputError(
                "qwen3-vl-embedding: max_concurrency, batch_size and texts_per_request must be >= 1, max_retries >= 0"
            )

    def key_fields(self) -> dict:
        """The settings that change the vectors (transport-independent): they go into the fingerprint."""
        keep = (
            "model",
            "document_instruction",
            "query_instruction",
            "block_content",
            "dpi",
            "min_crop_pt",
            "min_pixels",
            "max_pixels",
            "max_aspect_ratio",
        )
        d = asdict(self)
        return {k: d[k] for k in keep}


# ---------------------------------------------------------------------------------------------- prompt pieces
@dataclass(frozen=True)
class EmbedItem:
    """One input to embed: an optional image and an optional text, under a system instruction."""

    instruction: str
    image: Image.Image | None = None
    text: str | None = None


def normalize_instruction(instruction: str) -> str:
    """Strip, and end with punctuation (the model's embedder appends a full stop when there is none); an empty
    instruction is the model's default one, as in its embedder (``instruction or default_instruction``)."""
    instruction = instruction.strip() or DEFAULT_DOCUMENT_INSTRUCTION
    if instruction and not unicodedata.category(instruction[-1]).startswith("P"):
        instruction += "."
    return instruction


def render_prompt(instruction: str, n_image_tokens: int | None, text: str | None) -> str:
    """The prompt Qwen3-VL's chat template renders for a system turn and one user turn of [image][text], with the
    generation prompt. ``n_image_tokens``: number of ``<|image_pad|>`` tokens of the image, None without one."""
    user = ""
    if n_image_tokens is not None:
        user += "<|vision_start|>" + "<|image_pad|>" * n_image_tokens + "<|vision_end|>"
    if text:
        user += text
    if not user:
        user = EMPTY_CONTENT
    return (
        f"<|im_start|>system\n{normalize_instruction(instruction)}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def chat_messages(instruction: str, image_url: str | None, text: str | None) -> list[dict]:
    """OpenAI chat ``messages`` for one item, as vLLM's chat-style embedding request takes them."""
    content: list[dict] = []
    if image_url is not None:
        content.append({"type": "image_url", "image_url": {"url": image_url}})
    if text:
        content.append({"type": "text", "text": text})
    if not content:
        content.append({"type": "text", "text": EMPTY_CONTENT})
    return [
        {"role": "system", "content": normalize_instruction(instruction)},
        {"role": "user", "content": content},
    ]


def prepare_image(img: Image.Image, max_pixels: int, max_aspect_ratio: float) -> Image.Image:
    """RGB image the model will see: scaled down to at most ``max_pixels`` (aspect kept), and padded with white
    (centred) so that neither side is more than ``max_aspect_ratio`` times the other."""
    img = img.convert("RGB")
    w, h = img.size
    if w * h > max_pixels:
        s = math.sqrt(max_pixels / (w * h))
        w, h = max(1, int(w * s)), max(1, int(h * s))
        img = img.resize((w, h), Image.Resampling.BICUBIC)
    tw, th = w, h
    if w > h * max_aspect_ratio:
        th = math.ceil(w / max_aspect_ratio)
    elif h > w * max_aspect_ratio:
        tw = math.ceil(h / max_aspect_ratio)
    if (tw, th) != (w, h):
        canvas = Image.new("RGB", (tw, th), (255, 255, 255))
        canvas.paste(img, ((tw - w) // 2, (th - h) // 2))
        img = canvas
    return img


def image_data_uri(img: Image.Image) -> str:
    """``data:image/png;base64,...`` of an image (lossless, so both transports see the same pixels)."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def widen_bbox(bbox: BBox, page_size: tuple[float, float], min_side: float) -> BBox:
    """Grow a display bbox (points) around its centre to at least ``min_side`` points each way, inside the page."""
    w, h = page_size
    x0, y0, x1, y1 = bbox

    def grow(a: float, b: float, limit: float) -> tuple[float, float]:
        side = min(min_side, limit)
        if b - a >= side:
            return a, b
        c = (a + b) / 2
        a, b = c - side / 2, c + side / 2
        if a < 0:
            a, b = 0.0, side
        if b > limit:
            a, b = limit - side, limit
        return a, b

    x0, x1 = grow(x0, x1, w)
    y0, y1 = grow(y0, y1, h)
    return (x0, y0, x1, y1)


def last_token_pool(hidden, attention_mask):
    """Hidden state at the last position whose attention mask is 1, per row (works for left or right padding).

    ``hidden``: ``(batch, seq, dim)`` tensor; ``attention_mask``: ``(batch, seq)`` of 0/1."""
    import torch

    seq = attention_mask.shape[1]
    last = seq - 1 - attention_mask.flip(dims=[1]).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def _finish(vectors: np.ndarray, dim: int, source: str) -> np.ndarray:
    """Cut to ``dim`` columns (Matryoshka) and L2-normalise; reject non-finite or zero vectors."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] < dim:
        raise EmbeddingServerError(f"{source}: got embeddings of shape {vectors.shape}, need at least {dim} columns")
    vectors = vectors[:, :dim]
    norms = np.linalg.norm(vectors, axis=1)
    if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
        raise EmbeddingServerError(f"{source}: returned a non-finite or all-zero embedding")
    return l2_normalize(vectors)


# ---------------------------------------------------------------------------------------------- transformers
class TransformersBackend:
    """Runs the model in this process. Loaded on first use; safe to call from several threads (one at a time)."""

    def __init__(self, settings: Qwen3VLEmbeddingSettings) -> None:
        self.settings = settings
        path = settings.model_path or settings.model
        self.path = Path(path)
        if not (self.path / "config.json").is_file():
            raise InputError(
                f"qwen3-vl-embedding: {path} is not a local checkpoint directory (no config.json); set model_path, "
                "or serve the model with vLLM and use the http transport (--embed-url)"
            )
        self._lock = threading.RLock()
        self._loaded = False

    def native_dim(self) -> int:
        """Hidden size of the language model, read from ``config.json`` without loading the weights."""
        cfg = read_json_object(self.path / "config.json", "model config")
        text = cfg.get("text_config") or cfg
        if "hidden_size" not in text:
            raise InputError(f"{self.path / 'config.json'}: no hidden_size in text_config; not a Qwen3-VL checkpoint?")
        return int(text["hidden_size"])

    def ensure_loaded(self) -> None:
        """Load tokenizer, image processor and model on first use."""
        with self._lock:
            if not self._loaded:
                self._load()

    def _load(self) -> None:
        from transformers import AutoTokenizer, Qwen3VLModel
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no per-weight loading bar on stderr
        s = self.settings
        self.device, dtype = torch_placement(s.device, s.dtype, "qwen3-vl-embedding")
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        # The PIL image processor needs no torchvision; the checkpoint's preprocessor_config.json sets its patch sizes.
        self.image_processor = Qwen2VLImageProcessorPil.from_pretrained(self.path)
        self.model = Qwen3VLModel.from_pretrained(self.path, dtype=dtype).to(self.device).eval()
        cfg = self.model.config
        self.image_token_id = int(cfg.image_token_id)
        pad_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        if pad_id != self.image_token_id:
            raise InputError(
                f"{self.path}: tokenizer maps <|image_pad|> to {pad_id} but the model expects {self.image_token_id}"
            )
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = "<|endoftext|>"
        self.merge = int(self.image_processor.merge_size)
        self._loaded = True

    def embed_iter(self, items, n: int) -> np.ndarray:
        """Raw (unnormalised) last-token hidden states of ``n`` items from an iterator, ``(n, hidden)`` float32.

        Items are taken ``batch_size`` at a time, so only one batch of crops is in memory."""
        out: list[np.ndarray] = []
        with self._lock:
            self.ensure_loaded()
            batch: list[EmbedItem] = []
            for item in items:
                batch.append(item)
                if len(batch) == self.settings.batch_size:
                    out.append(self._forward(batch))
                    batch = []
            if batch:
                out.append(self._forward(batch))
        raw = np.concatenate(out, axis=0) if out else np.zeros((0, self.native_dim()), np.float32)
        if raw.shape[0] != n:
            raise RuntimeError(f"qwen3-vl-embedding: embedded {raw.shape[0]} items, expected {n}")
        return raw

    def encode_batch(self, items: list[EmbedItem]) -> dict:
        """Model inputs for a batch: token ids, attention mask, image patches, and modality ids per token."""
        self.ensure_loaded()
        s = self.settings
        images = [it.image for it in items if it.image is not None]
        feats = {}
        n_tokens: list[int] = []
        if images:
            feats = self.image_processor(
                images, size={"shortest_edge": s.min_pixels, "longest_edge": s.max_pixels}, return_tensors="pt"
            )
            n_tokens = [int(g.prod()) // (self.merge**2) for g in feats["image_grid_thw"]]
        prompts, k = [], 0
        for it in items:
            n = None
            if it.image is not None:
                n, k = n_tokens[k], k + 1
            prompts.append(render_prompt(it.instruction, n, it.text))
        enc = self.tokenizer(prompts, padding=True, padding_side=s.padding_side, return_tensors="pt")
        batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        batch["mm_token_type_ids"] = (enc["input_ids"] == self.image_token_id).int()
        if images:
            batch["pixel_values"] = feats["pixel_values"]
            batch["image_grid_thw"] = feats["image_grid_thw"]
        else:
            # Text-only: the model would number positions 0..L-1 regardless of padding. RoPE is shift-invariant, so
            # that is nearly harmless, but numbering the real tokens gives a left-padded row exactly the positions
            # it has alone (3 M-RoPE axes, all equal for text).
            mask = enc["attention_mask"]
            pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
            batch["position_ids"] = pos.unsqueeze(0).expand(3, -1, -1)
        return batch

    def _forward(self, items: list[EmbedItem]) -> np.ndarray:
        import torch

        batch = self.encode_batch(items)
        batch = {k: v.to(self.device) for k, v in batch.items()}
        if "pixel_values" in batch:
            batch["pixel_values"] = batch["pixel_values"].to(self.model.dtype)
        with torch.inference_mode():
            out = self.model(**batch, use_cache=False)
        pooled = last_token_pool(out.last_hidden_state, batch["attention_mask"])
        return pooled.float().cpu().numpy()


# ---------------------------------------------------------------------------------------------- http (vLLM)
class HTTPBackend:
    """Posts chat-style embedding requests to a vLLM server, ``max_concurrency`` at a time: one per item with a crop,
    up to ``texts_per_request`` text-only items in one."""

    def __init__(self, settings: Qwen3VLEmbeddingSettings) -> None:
        import httpx

        self.settings = settings
        self.endpoint = settings.url.rstrip("/") + "/embeddings"
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self.client = httpx.Client(
            timeout=settings.timeout_s,
            headers=headers,
            limits=httpx.Limits(max_connections=settings.max_concurrency),
        )
        self._native_dim: int | None = None

    def close(self) -> None:
        self.client.close()

    def request_body(self, item: EmbedItem) -> dict:
        image_url = image_data_uri(item.image) if item.image is not None else None
        return {
            "model": self.settings.model,
            "messages": chat_messages(item.instruction, image_url, item.text),
            "encoding_format": "float",
            "add_generation_prompt": True,
        }

    def batch_body(self, items: list[EmbedItem]) -> dict:
        """One request for ``items``: a single item's body as :meth:`request_body`, several as vLLM's batched chat
        embeddings (``messages``: one conversation per item)."""
        if len(items) == 1:
            return self.request_body(items[0])
        return {**self.request_body(items[0]), "messages": [self.request_body(it)["messages"] for it in items]}

    def _post(self, body: dict, what: str, abort: threading.Event | None = None, n: int = 1) -> np.ndarray:
        """Post ``body`` (``n`` items); their vectors, ``(n, width)`` in item order (the answer's ``index``)."""
        import httpx

        s = self.settings
        last = ""
        for attempt in range(s.max_retries + 1):
            if attempt:
                time.sleep(s.retry_backoff_s * 2 ** (attempt - 1))
            if abort is not None and abort.is_set():
                raise EmbeddingServerError(f"{self.endpoint}: {what} abandoned after another item failed")
            try:
                r = self.client.post(self.endpoint, json=body)
            except httpx.TimeoutException:
                last = f"timed out after {s.timeout_s:g} s"
                continue
            except httpx.TransportError as e:
                last = f"connection failed ({type(e).__name__}: {e})"
                continue
            if r.status_code >= 500 or r.status_code == 429:
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                continue
            if r.status_code != 200:
                raise EmbeddingServerError(
                    f"{self.endpoint}: {what} rejected with HTTP {r.status_code}: {r.text[:300]}"
                )
            try:
                data = r.json()["data"]
                if n == 1:
                    rows = [data[0]["embedding"]]
                else:
                    by_index = {int(d["index"]): d["embedding"] for d in data}
                    rows = [by_index[i] for i in range(n)]
                vecs = [np.asarray(v, dtype=np.float32) for v in rows]
            except (ValueError, KeyError, IndexError, TypeError) as e:
                need = "data[0].embedding" if n == 1 else f"embedding for every index 0..{n - 1}"
                raise EmbeddingServerError(f"{self.endpoint}: {what}: answer has no {need} ({e})") from None
            if any(v.ndim != 1 or v.size == 0 for v in vecs) or len({v.size for v in vecs}) != 1:
                raise EmbeddingServerError(f"{self.endpoint}: {what}: embedding is not a flat list of numbers")
            return np.stack(vecs)
        raise EmbeddingServerError(f"{self.endpoint}: {what} failed after {s.max_retries + 1} attempts; last: {last}")

    def native_dim(self) -> int:
        """Width of the server's vectors, from the answer to one probe request (asked once)."""
        if self._native_dim is None:
            probe = EmbedItem(self.settings.query_instruction, None, "dimension probe")
            self._native_dim = int(self._post(self.request_body(probe), "dimension probe").shape[1])
        return self._native_dim

    def embed_iter(self, items, n: int) -> np.ndarray:
        """Embed ``n`` items from an iterator (consumed in this thread, e.g. rendering crops, while earlier items are
        in flight); raw vectors in input order."""
        s = self.settings
        out: list[np.ndarray | None] = [None] * n
        window: deque[tuple[int, Future]] = deque()
        abort = threading.Event()  # set when one item fails, so the others stop retrying

        def take() -> None:
            j, fut = window.popleft()
            for k, vec in enumerate(fut.result()):
                out[j + k] = vec

        with ThreadPoolExecutor(max_workers=s.max_concurrency, thread_name_prefix="embed-http") as pool:

            def send(first: int, group: list[EmbedItem]) -> None:
                while len(window) >= 2 * s.max_concurrency:
                    take()
                what = f"item {first}" if len(group) == 1 else f"items {first}..{first + len(group) - 1}"
                body = self.batch_body(group)
                window.append((first, pool.submit(self._post, body, what, abort, len(group))))

            try:
                texts: list[EmbedItem] = []  # consecutive text-only items not sent yet, from index i - len(texts)
                i = 0
                for i, item in enumerate(items):
                    if item.image is not None:
                        if texts:
                            send(i - len(texts), texts)
                            texts = []
                        send(i, [item])
                        continue
                    texts.append(item)
                    if len(texts) == s.texts_per_request:
                        send(i + 1 - len(texts), texts)
                        texts = []
                if texts:
                    send(i + 1 - len(texts), texts)
                while window:
                    take()
            except BaseException:
                abort.set()
                for _, fut in window:
                    fut.cancel()
                raise
        if any(v is None for v in out):
            raise RuntimeError(f"qwen3-vl-embedding: {sum(v is None for v in out)} of {n} items were not embedded")
        widths = {v.shape[0] for v in out}
        if len(widths) > 1:
            raise EmbeddingServerError(f"{self.endpoint}: embeddings of different widths {sorted(widths)}")
        if self._native_dim is None and out:
            self._native_dim = int(out[0].shape[0])
        return np.stack(out) if out else np.zeros((0, self.native_dim()), np.float32)


# ---------------------------------------------------------------------------------------------- the encoder
class Qwen3VLEmbeddingEncoder:
    """The ``qwen3-vl-embedding`` encoder; keyword arguments are :class:`Qwen3VLEmbeddingSettings` fields."""

    name = "qwen3-vl-embedding"

    def __init__(self, settings: Qwen3VLEmbeddingSettings | None = None, **kwargs) -> None:
        known = {f.name for f in fields(Qwen3VLEmbeddingSettings)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise InputError(f"qwen3-vl-embedding: unknown settings {unknown}; known: {sorted(known)}")
        self.settings = replace(settings, **kwargs) if settings is not None else Qwen3VLEmbeddingSettings(**kwargs)
        s = self.settings
        self.backend = TransformersBackend(s) if s.transport == "transformers" else HTTPBackend(s)
        self._dim: int | None = None

    @property
    def dim(self) -> int:
        """Output dimensions: ``settings.dim``, else the model's width (config.json, or the server's first answer)."""
        if self._dim is None:
            if self.settings.dim and isinstance(self.backend, HTTPBackend):
                # Trusted without asking the server; answers narrower than this are rejected when they arrive.
                self._dim = self.settings.dim
                return self._dim
            native = self.backend.native_dim()
            want = self.settings.dim or native
            if want > native:
                raise InputError(f"qwen3-vl-embedding: dim {want} exceeds the model's {native} dimensions")
            self._dim = want
        return self._dim

    def close(self) -> None:
        """Release the HTTP connections (the in-process model stays loaded until the encoder is dropped)."""
        if isinstance(self.backend, HTTPBackend):
            self.backend.close()

    def fingerprint(self) -> str:
        key = self.settings.key_fields()
        key["dim"] = self.dim
        return "qwen3-vl-embedding:" + json.dumps(key, sort_keys=True, separators=(",", ":"))

    # -------------------------------------------------------------------------------------------- items
    def query_item(self, text: str) -> EmbedItem:
        return EmbedItem(self.settings.query_instruction, None, text)

    def block_item(self, doc: Document, block: Block) -> EmbedItem:
        """A block as the model sees it: its crop (display points -> pixels at ``dpi``) and/or its text."""
        s = self.settings
        image = text = None
        if s.block_content in ("image", "image+text"):
            box = widen_bbox(block.bbox, doc.page_sizes[block.page - 1], s.min_crop_pt)
            crop = doc.crop(block.page, box, dpi=s.dpi)
            image = prepare_image(crop, s.max_pixels, s.max_aspect_ratio)
        if s.block_content in ("text", "image+text"):
            text = block_text(block) if s.block_content == "text" else block.text.strip() or None
        return EmbedItem(s.document_instruction, image, text)

    def _embed(self, items, n: int) -> np.ndarray:
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        raw = self.backend.embed_iter(items, n)
        source = self.backend.endpoint if isinstance(self.backend, HTTPBackend) else str(self.backend.path)
        return _finish(raw, self.dim, source)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """Queries (quotes, questions) under the query instruction: ``(len(texts), dim)`` float32, unit rows."""
        return self._embed((self.query_item(t) for t in texts), len(texts))

    def embed_blocks(self, doc: Document, blocks: list[Block]) -> np.ndarray:
        """Blocks under the document instruction: ``(len(blocks), dim)`` float32, unit rows, row i = block i."""
        return self._embed((self.block_item(doc, b) for b in blocks), len(blocks))

    def embed_images(self, images: list[Image.Image]) -> np.ndarray:
        """Images a caller cut itself (e.g. the region of a predicted box, :mod:`reward.lat`) under the document
        instruction, prepared as block crops are: ``(len(images), dim)`` float32, unit rows."""
        s = self.settings
        items = (
            EmbedItem(s.document_instruction, prepare_image(im, s.max_pixels, s.max_aspect_ratio)) for im in images
        )
        return self._embed(items, len(images))
