"""MultAttnAttrib (the MultAttnAttrib / MultAttrEval paper, Section 3 "MultAttnAttrib: A Training-Free Approach
for Multimodal Attribution", subsections 3.2-3.4) adapted to page images and layout blocks: training-free
attribution of an answer from the prefill attention of the same VLM.

The paper scores images (mean attention over their patch tokens) and text (sliding windows of tokens) of a
document; here the units are the layout blocks of the cache, and a page is one image:

* **Layout of the prompt** (:func:`build_prompt`): the user turn holds every page image (``<|vision_start|>``,
  its ``<|image_pad|>`` tokens, ``<|vision_end|>``), optionally each page's text layer block by block (when the
  prompt carries one), then ``Question: ...`` and ``Answer: ...``. Qwen3-VL merges ``merge x merge`` patches into
  one token, laid out row by row over the resized page, so merged token ``(r, c)`` of a ``rows x cols`` grid covers
  ``[c/cols, (c+1)/cols] x [r/rows, (r+1)/rows]`` of the page (:func:`token_boxes`, display points). A block's image
  tokens are those whose cell centre lies inside it, else the one cell overlapping it most (:func:`block_tokens`);
  its text tokens are the span of its text in the text layer.
* **Prefill attention** (:class:`AttentionRecorder`): a registered attention function that computes the layer's
  output unchanged and, for the text layers, keeps the softmax attention of the *query tokens* (question and answer
  tokens without stopwords or punctuation) averaged over those queries: ``(layers, heads, keys)``. Only those rows
  are computed, so memory stays ``O(queries x keys)`` per layer, not ``O(keys^2)``.
* **Head identification** (Section 3.2): causal mediation (:func:`cma_head_scores`): a clean pass and a pass with
  the evidence replaced (:func:`corrupt_region`: the evidence box of the page image replaced by a region of another
  document resized to it, so the image, its patch grid and every shape stay the same; text spans by an equal-length
  span), Indirect Effect = mean attention to the evidence tokens clean minus corrupted, weighted by ``1 - H_norm``
  of the document-averaged clean attention (heads spreading attention uniformly are suppressed); or mean attention
  scoring (:func:`mas_head_scores`, one pass: mean attention to the evidence over the total over the document).
  Scores are summed over the probes and the top ``k`` heads kept (:func:`select_heads`).
* **Calibration** (Section 3.3): per modality, an F1-maximising threshold over min-max normalised block scores of
  the probes (:func:`f1_threshold_sweep`).
* **Attribution** (Section 3.4): mean attention over the selected heads; each block's image score (mean over its
  image tokens) and text score (mean over its text tokens), min-max normalised per modality over the document;
  blocks at or above a threshold are cited; with none, the best-scoring block (the paper's fallback).

The head set and the thresholds are saved as JSON (:class:`HeadSet`) and reused. Predictions have the format of
every other interface (``interface: "attention"``, citations ``{page, bbox, block_id, similarity}`` in points).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from core.errors import InputError
from core.geometry import BBox
from core.io import atomic_write_text, read_json_object

ATTENTION_INTERFACE = "attention"
RECORDER_NAME = "quotecite_query_attention"
STOPWORDS = frozenset(
    "a an the of in on at to for from by with and or but is are was were be been being it its this that these those "
    "as which what who whom whose when where why how do does did has have had not no than then there their they "
    "he she his her we our you your i me my".split()
)


# ---------------------------------------------------------------------------------------------- geometry
def token_boxes(rows: int, cols: int, page_size: tuple[float, float]) -> np.ndarray:
    """Display-point boxes of the ``rows x cols`` merged image tokens of a page, row by row: ``(rows*cols, 4)``.

    >>> token_boxes(2, 2, (100.0, 50.0)).tolist()
    [[0.0, 0.0, 50.0, 25.0], [50.0, 0.0, 100.0, 25.0], [0.0, 25.0, 50.0, 50.0], [50.0, 25.0, 100.0, 50.0]]
    """
    w, h = page_size
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    r, c = r.ravel().astype(np.float64), c.ravel().astype(np.float64)
    return np.stack([c * w / cols, r * h / rows, (c + 1) * w / cols, (r + 1) * h / rows], axis=1)


def tokens_in_box(boxes: np.ndarray, bbox: Sequence[float]) -> np.ndarray:
    """Indices of the token cells whose centre lies in ``bbox``; if none, the cell overlapping it most."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    x0, y0, x1, y1 = bbox
    inside = np.nonzero((cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1))[0]
    if len(inside):
        return inside
    iw = np.clip(np.minimum(boxes[:, 2], x1) - np.maximum(boxes[:, 0], x0), 0, None)
    ih = np.clip(np.minimum(boxes[:, 3], y1) - np.maximum(boxes[:, 1], y0), 0, None)
    overlap = iw * ih
    return np.array([int(np.argmax(overlap))]) if overlap.max() > 0 else np.zeros(0, int)


# ---------------------------------------------------------------------------------------------- prompt layout
@dataclass
class PromptLayout:
    """Where things are in the token sequence of one prompt."""

    input_ids: np.ndarray
    image_spans: list[tuple[int, int]]
    """Token ``[start, end)`` of each page image's ``<|image_pad|>`` tokens."""
    grids: list[tuple[int, int]]
    """Merged-token grid ``(rows, cols)`` of each page image."""
    pages: list[int]
    """PDF page (1-based) of each image."""
    text_spans: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Block id -> token ``[start, end)`` of its text in the text layer (empty without one)."""
    query: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    """Positions of the query tokens (question and answer, stopwords and punctuation left out)."""
    document: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    """Positions of the document tokens (image tokens and text-layer tokens)."""

    def block_tokens(self, blocks, page_sizes) -> dict[int, dict[str, np.ndarray]]:
        """Block id -> ``{"image": positions, "text": positions}`` (:func:`tokens_in_box`)."""
        out: dict[int, dict[str, np.ndarray]] = {}
        cells = {}
        for page, (rows, cols), (start, _) in zip(self.pages, self.grids, self.image_spans, strict=True):
            cells[page] = (start, token_boxes(rows, cols, page_sizes[page - 1]))
        for b in blocks:
            d = {"image": np.zeros(0, int), "text": np.zeros(0, int)}
            if b.page in cells:
                start, boxes = cells[b.page]
                d["image"] = start + tokens_in_box(boxes, b.bbox)
            if b.block_id in self.text_spans:
                s, e = self.text_spans[b.block_id]
                d["text"] = np.arange(s, e)
            out[b.block_id] = d
        return out


def block_tokens(layout: PromptLayout, blocks, page_sizes) -> dict[int, dict[str, np.ndarray]]:
    return layout.block_tokens(blocks, page_sizes)


def _query_token(piece: str) -> bool:
    w = re.sub(r"[^\w]", "", piece.lower().replace("Ġ", "").replace("▁", ""))
    return bool(w) and w not in STOPWORDS


def build_prompt(
    tokenizer,
    grids: Sequence[tuple[int, int]],
    pages: Sequence[int],
    question: str,
    answer: str,
    text_layer: Sequence[tuple[int, int, str]] | None = None,
) -> PromptLayout:
    """Token ids and layout of the attribution prompt. ``grids``: merged-token ``(rows, cols)`` of each page image
    (from the image processor's ``image_grid_thw`` divided by the merge size); ``text_layer``: ``(page, block_id,
    text)`` in reading order, written after the images, one block per line."""
    pieces: list[tuple[str, str, int | None]] = [("<|im_start|>user\n", "other", None)]
    for rows, cols in grids:
        pieces.append(("<|vision_start|>", "other", None))
        pieces.append(("<|image_pad|>" * (rows * cols), "image", None))
        pieces.append(("<|vision_end|>", "other", None))
    for _, bid, text in text_layer or ():
        pieces.append((text.strip().replace("\n", " ") + "\n", "text", bid))
    pieces.append(("Question: ", "other", None))
    pieces.append((question.strip() + "\n", "query", None))
    pieces.append(("Answer: ", "other", None))
    pieces.append((answer.strip(), "query", None))
    pieces.append(("<|im_end|>\n", "other", None))
    ids: list[int] = []
    image_spans, text_spans, query, document = [], {}, [], []
    for text, kind, bid in pieces:
        piece_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        start = len(ids)
        ids.extend(piece_ids)
        if kind == "image":
            image_spans.append((start, len(ids)))
            document.extend(range(start, len(ids)))
        elif kind == "text":
            text_spans[bid] = (start, len(ids))
            document.extend(range(start, len(ids)))
        elif kind == "query":
            toks = tokenizer.convert_ids_to_tokens(piece_ids)
            query.extend(start + i for i, t in enumerate(toks) if _query_token(str(t)))
    for (rows, cols), (s, e) in zip(grids, image_spans, strict=True):
        if e - s != rows * cols:
            raise InputError(f"the tokenizer split <|image_pad|> x {rows * cols} into {e - s} tokens")
    if not query:
        raise InputError(f"no query token in question {question!r} / answer {answer!r} (only stopwords?)")
    return PromptLayout(
        np.asarray(ids, np.int64),
        image_spans,
        list(grids),
        list(pages),
        text_spans,
        np.asarray(query),
        np.asarray(document),
    )


# ---------------------------------------------------------------------------------------------- recording
class AttentionRecorder:
    """Records, per text layer, the softmax attention of ``query_positions`` to every key, averaged over those
    queries: :attr:`rows` ``{layer: (heads, keys)}``. Install it on a loaded model with :meth:`install`; the
    layer outputs are those of ``inner`` (``eager`` or ``sdpa``), so the forward pass is unchanged."""

    def __init__(self, inner: str = "sdpa") -> None:
        if inner not in ("eager", "sdpa"):
            raise InputError(f"attention recorder: inner implementation {inner!r} is not 'eager' or 'sdpa'")
        self.inner = inner
        self.query_positions = None
        self.rows: dict[int, np.ndarray] = {}

    def install(self, model) -> None:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

        AttentionInterface.register(RECORDER_NAME, self._attention)
        AttentionMaskInterface.register(RECORDER_NAME, eager_mask if self.inner == "eager" else sdpa_mask)
        model.set_attn_implementation({"text_config": RECORDER_NAME})

    def _attention(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        import torch
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.models.qwen3_vl.modeling_qwen3_vl import eager_attention_forward, repeat_kv

        if self.inner == "eager":
            out = eager_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout)
        else:
            out = sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                         **kwargs)  # fmt: skip
        layer = getattr(module, "layer_idx", None)
        if self.query_positions is not None and layer is not None and getattr(module, "is_causal", True):
            with torch.no_grad():
                qpos = torch.as_tensor(self.query_positions, device=query.device, dtype=torch.long)
                q = query[0, :, qpos, :].float()  # (heads, n_query, d)
                k = repeat_kv(key, query.shape[1] // key.shape[1])[0].float()  # (heads, keys, d)
                scale = scaling if scaling is not None else query.shape[-1] ** -0.5
                s = torch.einsum("hqd,hkd->hqk", q, k) * scale
                n_keys = k.shape[1]
                causal = torch.arange(n_keys, device=s.device)[None, :] > qpos[:, None]
                s = s.masked_fill(causal[None], float("-inf"))
                if attention_mask is not None and attention_mask.dim() == 4:
                    m = attention_mask[0, 0][qpos][:, :n_keys]
                    s = s.masked_fill(~m[None], float("-inf")) if m.dtype == torch.bool else s + m[None].float()
                p = torch.softmax(s, dim=-1).mean(dim=1)  # mean over the query tokens: (heads, keys)
                self.rows[int(layer)] = p.cpu().numpy()
        return out

    def take(self) -> np.ndarray:
        """The recorded rows as ``(layers, heads, keys)`` (and clears them)."""
        if not self.rows:
            raise RuntimeError("no attention recorded: set query_positions and run a forward pass first")
        out = np.stack([self.rows[k] for k in sorted(self.rows)])
        self.rows = {}
        return out


# ---------------------------------------------------------------------------------------------- head scores
def _normalised_entropy(att: np.ndarray, doc: np.ndarray) -> np.ndarray:
    p = att[..., doc]
    p = p / np.clip(p.sum(-1, keepdims=True), 1e-12, None)
    h = -(p * np.log(np.clip(p, 1e-12, None))).sum(-1)
    return h / math.log(len(doc)) if len(doc) > 1 else np.zeros(h.shape)


def mas_head_scores(att: np.ndarray, gt: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """Mean attention scoring: per head, the mean attention to the evidence tokens ``gt`` over the total attention
    to the document tokens ``doc``. ``att``: ``(layers, heads, keys)``; returns ``(layers, heads)``."""
    total = att[..., doc].sum(-1)
    return att[..., gt].mean(-1) / np.clip(total, 1e-12, None)


def cma_head_scores(clean: np.ndarray, corrupt: np.ndarray, gt: np.ndarray, doc: np.ndarray) -> np.ndarray:
    """Causal mediation: Indirect Effect ``mean attn(gt) clean - mean attn(gt) corrupted`` per head, weighted by
    ``1 - H_norm`` of the clean attention over the document (uniform heads get weight 0). ``(layers, heads)``."""
    if clean.shape != corrupt.shape:
        raise InputError(
            f"causal mediation: the clean and corrupted passes must have the same shape, got {clean.shape} and "
            f"{corrupt.shape} (the corruption must keep the token count and the patch grid)"
        )
    ie = clean[..., gt].mean(-1) - corrupt[..., gt].mean(-1)
    return ie * (1.0 - _normalised_entropy(clean, doc))


def select_heads(scores: np.ndarray, k: int) -> list[tuple[int, int]]:
    """The ``k`` heads of highest score, best first, as ``(layer, head)``."""
    flat = np.argsort(-scores, axis=None, kind="stable")[:k]
    return [(int(i // scores.shape[1]), int(i % scores.shape[1])) for i in flat]


def corrupt_region(page, box_px: Sequence[float], donor):
    """The page image with the pixel box ``box_px`` replaced by ``donor`` resized to it: same size and so the same
    patch grid and token count as the clean page (the paper resizes corrupted images to the originals)."""
    x0, y0, x1, y1 = (int(round(v)) for v in box_px)
    x0, y0 = max(0, x0), max(0, y0)
    x1, y1 = min(page.width, x1), min(page.height, y1)
    if x1 <= x0 or y1 <= y0:
        raise InputError(f"corruption box {list(box_px)} is empty on a {page.width}x{page.height} page image")
    out = page.copy()
    out.paste(donor.convert(page.mode).resize((x1 - x0, y1 - y0)), (x0, y0))
    return out


def corrupt_span(ids: np.ndarray, span: tuple[int, int], donor_ids: Sequence[int]) -> np.ndarray:
    """``ids`` with ``[start, end)`` replaced by the first ``end - start`` donor tokens (same length)."""
    s, e = span
    if len(donor_ids) < e - s:
        raise InputError(f"donor text has {len(donor_ids)} tokens, the evidence span needs {e - s}")
    out = ids.copy()
    out[s:e] = np.asarray(donor_ids[: e - s], dtype=ids.dtype)
    return out


# ---------------------------------------------------------------------------------------------- calibration
def f1_threshold_sweep(scores: Sequence[float], labels: Sequence[bool]) -> tuple[float, float]:
    """The threshold ``t`` (predict positive when ``score >= t``) maximising F1 over the observed scores, and its
    F1; ties go to the higher threshold (fewer citations). ``(inf, 0)`` without a positive label.

    >>> f1_threshold_sweep([0.9, 0.8, 0.3, 0.1], [True, True, False, False])
    (0.8, 1.0)
    """
    s = np.asarray(scores, np.float64)
    y = np.asarray(labels, bool)
    if len(s) != len(y):
        raise ValueError("one label per score")
    if not y.any():
        return math.inf, 0.0
    best = (math.inf, 0.0)
    for t in np.unique(s)[::-1]:
        pred = s >= t
        tp = int((pred & y).sum())
        p = tp / max(int(pred.sum()), 1)
        r = tp / int(y.sum())
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        if f1 > best[1] + 1e-12:
            best = (float(t), f1)
    return best


# ---------------------------------------------------------------------------------------------- attribution
def minmax(x: np.ndarray) -> np.ndarray:
    """Min-max normalised to [0, 1] (all zeros when constant)."""
    x = np.asarray(x, np.float64)
    span = x.max() - x.min() if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


def block_scores(att: np.ndarray, tokens: dict[int, dict[str, np.ndarray]], heads) -> dict[str, dict[int, float]]:
    """Per modality, block id -> mean attention of the selected ``heads`` over the block's tokens (min-max
    normalised over the document's blocks that have tokens of that modality)."""
    vec = np.mean([att[layer, head] for layer, head in heads], axis=0)
    out: dict[str, dict[int, float]] = {}
    for modality in ("image", "text"):
        ids = [b for b, t in tokens.items() if len(t[modality])]
        raw = np.array([vec[tokens[b][modality]].mean() for b in ids])
        out[modality] = dict(zip(ids, minmax(raw).tolist(), strict=True)) if ids else {}
    return out


def attribute(scores: dict[str, dict[int, float]], thresholds: dict[str, float]) -> list[tuple[int, str, float]]:
    """Blocks whose normalised score reaches its modality's threshold, best first, as ``(block_id, modality,
    score)``; with none, the single best-scoring block (the paper's fallback)."""
    hits = [(b, m, s) for m, d in scores.items() for b, s in d.items() if s >= thresholds.get(m, math.inf)]
    if not hits:
        every = [(b, m, s) for m, d in scores.items() for b, s in d.items()]
        hits = [max(every, key=lambda x: x[2])] if every else []
    best: dict[int, tuple[int, str, float]] = {}
    for b, m, s in hits:
        if b not in best or s > best[b][2]:
            best[b] = (b, m, s)
    return sorted(best.values(), key=lambda x: (-x[2], x[0]))


def prediction(index, answer: str, cited: list[tuple[int, str, float]], blocks_by_id: dict) -> dict:
    """A prediction line in the common format (``interface: "attention"``)."""
    citations = []
    for bid, modality, s in cited:
        b = blocks_by_id[bid]
        citations.append({"page": b.page, "bbox": [round(v, 3) for v in b.bbox], "block_id": bid,
                          "similarity": round(float(s), 6), "modality": modality})  # fmt: skip
    response = json.dumps({"answer": answer, "attributed_blocks": [c["block_id"] for c in citations]})
    return {"index": index, "interface": ATTENTION_INTERFACE, "response": response, "answer": answer,
            "citations": citations}  # fmt: skip


# ---------------------------------------------------------------------------------------------- saved head set
@dataclass
class HeadSet:
    """Selected heads and calibrated thresholds, saved once and reused for inference."""

    model: str
    method: str
    """``cma`` or ``mas``."""
    heads: list[tuple[int, int]]
    thresholds: dict[str, float]
    """Per modality (``image``, ``text``): the F1-maximising threshold on normalised block scores."""
    n_probes: int
    scores: list[list[float]] | None = None
    """The accumulated ``(layers, heads)`` head scores."""
    f1: dict[str, float] = field(default_factory=dict)
    """Probe-set F1 at each threshold."""

    def save(self, path: str | Path) -> Path:
        d = asdict(self)
        d["heads"] = [list(h) for h in self.heads]
        d["thresholds"] = {k: (None if math.isinf(v) else v) for k, v in self.thresholds.items()}
        return atomic_write_text(Path(path), json.dumps(d, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> HeadSet:
        try:
            d = read_json_object(path, "head set")  # a regular file, bounded JSON, an object
        except (OSError, ValueError) as e:
            raise InputError(f"{path}: cannot read the head set ({e})") from None
        missing = [k for k in ("model", "method", "heads", "thresholds", "n_probes") if k not in d]
        if missing:
            raise InputError(f"{path}: head set lacks {', '.join(missing)}")
        if d["method"] not in ("cma", "mas") or not d["heads"]:
            raise InputError(f"{path}: head set needs method 'cma' or 'mas' and at least one head")
        d["heads"] = [tuple(int(x) for x in h) for h in d["heads"]]
        d["thresholds"] = {k: (math.inf if v is None else float(v)) for k, v in d["thresholds"].items()}
        return cls(**d)


# ---------------------------------------------------------------------------------------------- the model
class AttentionModel:
    """A Qwen3-VL checkpoint read through :class:`AttentionRecorder` (transformers, in process; the GPU run is
    described in ``eval/gpu_attention.md``). ``inner``: the attention kernel that computes the layer outputs.
    :meth:`from_parts` wraps a model already in memory (the cost benchmark's randomly initialised one)."""

    def __init__(self, model_path: str | Path, device: str = "auto", dtype: str = "auto", inner: str = "sdpa") -> None:
        from transformers import AutoTokenizer, Qwen3VLModel
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        from data_prep.encoders import torch_placement

        dev, dt = torch_placement(device, dtype, "attention interface")
        model = Qwen3VLModel.from_pretrained(model_path, dtype=dt, attn_implementation=inner).to(dev)
        self._setup(
            model, AutoTokenizer.from_pretrained(model_path), Qwen2VLImageProcessorPil.from_pretrained(model_path),
            inner, str(model_path),
        )  # fmt: skip

    @classmethod
    def from_parts(
        cls, model, tokenizer, image_processor, inner: str = "sdpa", name: str = "in-memory"
    ) -> AttentionModel:
        am = cls.__new__(cls)
        am._setup(model, tokenizer, image_processor, inner, name)
        return am

    def _setup(self, model, tokenizer, image_processor, inner: str, name: str) -> None:
        self.name = name
        self.tokenizer, self.image_processor = tokenizer, image_processor
        self.model = model.eval()
        self.device = next(model.parameters()).device
        self.recorder = AttentionRecorder(inner)
        self.recorder.install(self.model)
        self.merge = int(self.image_processor.merge_size)

    def inputs(
        self, images, pages, question: str, answer: str, text_layer=None, corrupt_spans=(), donor_ids=()
    ) -> tuple[PromptLayout, dict]:
        """The prompt's layout and the model's input tensors for one prefill. ``corrupt_spans``: token spans replaced
        by ``donor_ids`` (same length; the text corruption of CMA)."""
        import torch

        feats = self.image_processor(list(images), return_tensors="pt")
        grids = [(int(g[1]) // self.merge, int(g[2]) // self.merge) for g in feats["image_grid_thw"]]
        layout = build_prompt(self.tokenizer, grids, pages, question, answer, text_layer)
        input_ids = layout.input_ids
        offset = 0
        for span in corrupt_spans:
            n = span[1] - span[0]
            input_ids = corrupt_span(input_ids, span, list(donor_ids)[offset : offset + n])
            offset += n
        ids = torch.tensor(input_ids, device=self.device)[None]
        batch = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "pixel_values": feats["pixel_values"].to(self.device, self.model.dtype),
            "image_grid_thw": feats["image_grid_thw"].to(self.device),
            "mm_token_type_ids": (ids == self.model.config.image_token_id).int(),
        }
        return layout, batch

    def record(self, layout: PromptLayout, batch: dict) -> np.ndarray:
        """One prefill of ``batch``; the query tokens' attention ``(layers, heads, keys)``."""
        import torch

        self.recorder.query_positions = layout.query
        try:
            with torch.inference_mode():
                self.model(**batch, use_cache=False)
        finally:
            self.recorder.query_positions = None
        return self.recorder.take()

    def attention(
        self, images, pages, question: str, answer: str, text_layer=None, corrupt_spans=(), donor_ids=()
    ) -> tuple[PromptLayout, np.ndarray]:
        """One prefill: the layout of the prompt and the query tokens' attention ``(layers, heads, keys)``."""
        layout, batch = self.inputs(images, pages, question, answer, text_layer, corrupt_spans, donor_ids)
        return layout, self.record(layout, batch)


# ---------------------------------------------------------------------------------------------- probes -> head set
@dataclass
class Probe:
    """A labelled question: its pages rendered, its cached blocks, the answer to attribute, its evidence."""

    index: object
    images: list
    pages: list[int]
    page_sizes: list[tuple[float, float]]
    blocks: list
    question: str
    answer: str
    evidence: list[tuple[int, BBox]]
    text_layer: list[tuple[int, int, str]] | None = None


def load_probe(gold, cached, total_pixels: float, max_pixels_per_page: float = 1_000_000, text_layer=False) -> Probe:
    """A gold question with its document's pages rendered as ``eval infer`` renders them (every page)."""
    from data_prep.document import Document

    with Document.open(cached.pdf_path) as doc:
        budget = Document.page_pixel_budget(doc.n_pages, total_pixels, max_pixels_per_page)
        images = [doc.render_page(p, max_pixels=budget) for p in range(1, doc.n_pages + 1)]
    pages = list(range(1, len(images) + 1))
    layer = [(b.page, b.block_id, b.text) for b in cached.blocks if b.text.strip()] if text_layer else None
    evidence = [(e.page, tuple(e.bbox)) for e in gold.gt_necessary or gold.gt_all]
    return Probe(gold.index, images, pages, list(cached.page_sizes), list(cached.blocks), gold.question, gold.answer,
                 evidence, layer)  # fmt: skip


def evidence_positions(layout: PromptLayout, probe: Probe) -> np.ndarray:
    """Token positions of the evidence: image tokens under each evidence box, text tokens of blocks inside it."""
    cells = {page: (s, token_boxes(r, c, probe.page_sizes[page - 1]))
             for page, (r, c), (s, _) in zip(layout.pages, layout.grids, layout.image_spans, strict=True)}  # fmt: skip
    pos: list[int] = []
    for page, box in probe.evidence:
        if page in cells:
            start, boxes = cells[page]
            pos.extend((start + tokens_in_box(boxes, box)).tolist())
    for b in probe.blocks:
        if b.block_id in layout.text_spans and any(p == b.page and _covers(box, b.bbox) for p, box in probe.evidence):
            s, e = layout.text_spans[b.block_id]
            pos.extend(range(s, e))
    return np.unique(np.asarray(pos, int))


def _covers(evidence_box, block_box) -> bool:
    from eval.boxes import containment, iou

    return containment(block_box, evidence_box) >= 0.5 or iou(block_box, evidence_box) >= 0.5


def corrupt_probe(probe: Probe, donor: Probe) -> list:
    """The probe's page images with every evidence box replaced by a donor page region of the same box (resized)."""
    images = list(probe.images)
    donor_img = donor.images[0]
    for page, (x0, y0, x1, y1) in probe.evidence:
        k = probe.pages.index(page) if page in probe.pages else None
        if k is None:
            continue
        w, h = probe.page_sizes[page - 1]
        sx, sy = images[k].width / w, images[k].height / h
        dw, dh = donor_img.width / w, donor_img.height / h
        region = donor_img.crop((int(x0 * dw), int(y0 * dh), max(int(x1 * dw), int(x0 * dw) + 1),
                                 max(int(y1 * dh), int(y0 * dh) + 1)))  # fmt: skip
        images[k] = corrupt_region(images[k], (x0 * sx, y0 * sy, x1 * sx, y1 * sy), region)
    return images


def identify_heads(am: AttentionModel, probes: Sequence[Probe], method: str = "cma", progress=None) -> np.ndarray:
    """Head scores ``(layers, heads)`` summed over the probes (``cma``: two passes per probe, the corrupted one
    with a donor from the next probe; ``mas``: one pass)."""
    if method not in ("cma", "mas"):
        raise InputError(f"head method {method!r}: expected 'cma' or 'mas'")
    if method == "cma" and len(probes) < 2:
        raise InputError("causal mediation needs at least two probes (one donates the corrupting content)")
    total = None
    for i, probe in enumerate(probes):
        layout, clean = am.attention(probe.images, probe.pages, probe.question, probe.answer, probe.text_layer)
        gt = evidence_positions(layout, probe)
        if len(gt) == 0:
            raise InputError(f"probe {probe.index!r}: no evidence box falls on the pages shown")
        if method == "mas":
            s = mas_head_scores(clean, gt, layout.document)
        else:
            donor = probes[(i + 1) % len(probes)]
            bad_images = corrupt_probe(probe, donor)
            spans = [layout.text_spans[b.block_id] for b in probe.blocks if b.block_id in layout.text_spans
                     and any(p == b.page and _covers(box, b.bbox) for p, box in probe.evidence)]  # fmt: skip
            donor_text = " ".join(t for _, _, t in donor.text_layer or ())
            donor_ids = am.tokenizer(donor_text, add_special_tokens=False)["input_ids"] if spans else []
            bad_layout, bad = am.attention(bad_images, probe.pages, probe.question, probe.answer, probe.text_layer,
                                           spans, donor_ids)  # fmt: skip
            if len(bad_layout.input_ids) != len(layout.input_ids):
                raise InputError(f"probe {probe.index!r}: the corrupted prompt changed its length")
            s = cma_head_scores(clean, bad, gt, layout.document)
        total = s if total is None else total + s
        if progress is not None:
            progress(1)
    return total


def calibrate(am: AttentionModel, probes: Sequence[Probe], heads) -> tuple[dict[str, float], dict[str, float]]:
    """Per modality, the F1-maximising threshold over the probes' normalised block scores (labels: blocks
    covering an evidence box) and its F1."""
    scores: dict[str, list[float]] = {"image": [], "text": []}
    labels: dict[str, list[bool]] = {"image": [], "text": []}
    for probe in probes:
        layout, att = am.attention(probe.images, probe.pages, probe.question, probe.answer, probe.text_layer)
        by_block = block_scores(att, layout.block_tokens(probe.blocks, probe.page_sizes), heads)
        pos = {
            b.block_id for b in probe.blocks if any(p == b.page and _covers(box, b.bbox) for p, box in probe.evidence)
        }
        for modality, d in by_block.items():
            for bid, s in d.items():
                scores[modality].append(s)
                labels[modality].append(bid in pos)
    thresholds, f1 = {}, {}
    for modality in ("image", "text"):
        if scores[modality]:
            thresholds[modality], f1[modality] = f1_threshold_sweep(scores[modality], labels[modality])
    return thresholds, f1


def attribute_question(am: AttentionModel, probe: Probe, heads: HeadSet) -> list[tuple[int, str, float]]:
    layout, att = am.attention(probe.images, probe.pages, probe.question, probe.answer, probe.text_layer)
    return attribute(
        block_scores(att, layout.block_tokens(probe.blocks, probe.page_sizes), heads.heads), heads.thresholds
    )


# ---------------------------------------------------------------------------------------------- CLI (eval infer)
def add_arguments(parser) -> None:
    """``eval infer --interface attention`` options."""
    g = parser.add_argument_group("attention interface (MultAttnAttrib, eval/attention.py)")
    g.add_argument("--heads", type=Path, default=None, help="head set JSON: read it, or write it with --probes")
    g.add_argument("--probes", type=Path, default=None, help="labelled probe gold JSONL for head identification")
    g.add_argument("--head-method", default="cma", choices=["cma", "mas"], help="causal mediation or mean attention")
    g.add_argument("--top-k", type=int, default=20, help="heads kept (provisional: the paper does not fix k)")
    g.add_argument("--answers", type=Path, default=None,
                   help="predictions whose answers are attributed (default: the gold answers, as the paper)")  # fmt: skip
    g.add_argument("--text-layer", action="store_true", help="put each page's text layer in the prompt too")
    g.add_argument("--attention-kernel", default="sdpa", choices=["sdpa", "eager"])


def run_cli(args) -> int:
    """``eval infer --interface attention``: build (``--probes``) or read the head set, then attribute every gold
    question's answer and append one prediction line per question (resumable)."""
    import time

    from tqdm import tqdm

    from data_prep.cache import DocCache
    from eval.infer import InferConfig, done_indices
    from eval.schemas import append_jsonl, read_gold, read_predictions

    if args.cache_dir is None:
        raise InputError("--interface attention needs --cache-dir (the layout blocks it attributes to)")
    if args.heads is None:
        raise InputError("--interface attention needs --heads (a head set to read, or to write with --probes)")
    if args.lora:
        raise InputError("--interface attention loads one checkpoint: merge the LoRA adapter into the model first")
    t0 = time.perf_counter()
    docs = DocCache(args.cache_dir)
    golds = read_gold(args.gold)[: args.limit]
    answers = None
    if args.answers is not None:
        answers = {p.key: p.answer for p in read_predictions(args.answers)}
    cfg = InferConfig(total_pixels=args.total_pixels)
    am = AttentionModel(args.model, inner=args.attention_kernel)

    def probe_of(g):
        return load_probe(g, docs.get(g.doc_key), cfg.total_pixels, cfg.max_pixels_per_page, args.text_layer)

    if args.probes is not None:
        probes = [probe_of(g) for g in read_gold(args.probes)]
        with tqdm(total=len(probes), desc=f"heads ({args.head_method})", unit="probe", disable=None) as bar:
            scores = identify_heads(am, probes, args.head_method, bar.update)
        heads = select_heads(scores, args.top_k)
        thresholds, f1 = calibrate(am, probes, heads)
        hs = HeadSet(am.name, args.head_method, heads, thresholds, len(probes), scores.tolist(), f1)
        hs.save(args.heads)
        print(f"head set: {len(heads)} {args.head_method} heads, thresholds {thresholds} (F1 {f1}) -> {args.heads}")
    hs = HeadSet.load(args.heads)
    done = done_indices(args.out, ATTENTION_INTERFACE)
    todo = [g for g in golds if g.key not in done]
    for g in tqdm(todo, desc="attribute (attention)", unit="q", disable=None):
        probe = probe_of(g)
        if answers is not None:
            if g.key not in answers:
                raise InputError(f"{args.answers}: no answer for question {g.index!r}")
            probe.answer = answers[g.key] or g.answer
        cited = attribute_question(am, probe, hs)
        row = prediction(g.index, probe.answer, cited, {b.block_id: b for b in probe.blocks})
        row.update(model=am.name, heads=str(args.heads), answer_source="predictions" if answers else "gold")
        append_jsonl(args.out, row)
    print(f"{len(todo)} attributed, {len(golds) - len(todo)} already done -> {args.out} "
          f"({time.perf_counter() - t0:.0f} s)")  # fmt: skip
    return 0
