"""``reward_form: lat``: LAT's rule-based Chain-of-Evidence reward (Liu et al., "Look As You Think", arXiv
2511.12003, AAAI 2026) on our EasyR1 stack, so that the LAT baseline trains on the same documents, model and
trainer as our reward.

Sources of every number. Three sources, named in brackets after each number below:

* [paper]: the paper (arXiv 2511.12003), its Stage II reward design, where ``R_acc``, ``R_step``, ``R_ground``
  and ``R_format`` are defined, its implementation details (hyperparameters) and its threshold-sensitivity
  study. Its equation numbers are not cited here: the paper's body text could not be read from this project's
  machines (only its abstract and summaries were reachable), and a wrong number is worse than none. The terms are
  cited by the paper's own symbols.
* [figure]: the paper's framework figure, panel "Rule-based Reward Design" (LAT's repository ships the same
  figure as ``fig/framework.jpg``). It writes the overall reward as ``R = R_step + R_acc + R_ground + R_format``
  (hence unit weights), ``R_acc`` from "EM & Recall (ground-truth answer, answer)", ``R_ground = 1`` when
  ``IoU(ground-truth box, box) > 0.5``, ``R_format = 1`` for ``<think>...</think>\\n<answer>...</answer>``, and
  ``R_step`` from ColQwen2 MaxSim scores of the step crops against the step texts.
* [code]: LAT's released training code (github.com/PolarisLiu1/LAT, ``src/grpo.py``: ``accuracy_reward``,
  ``step_reward``, ``iou_reward``, ``format_reward``), which writes out the constants the paper leaves in words.

Our own constants (not LAT's) say so: :data:`COORD_SCALE`, :data:`MIN_CROP_PT`, ``crop_dpi``, ``max_steps``.

* **Format** ``R_format``: +1 when the whole response is ``<think>...</think>`` then ``<answer>...</answer>``,
  else -1 [paper: +1 for correct ``<think>``/``<answer>`` tagging, -1 otherwise; figure; code:
  ``format_reward``].
* **Accuracy** ``R_acc = 0.5 * EM + 0.5 * Recall``: ``EM`` is LAT's soft exact match (the normalised answer
  contains the normalised gold, or is contained in it), ``Recall`` the share of gold tokens found in the answer
  [paper: the accuracy reward averages exact match and recall, hence the two weights 0.5; figure: "EM & Recall";
  code: ``accuracy_reward``]. Box lines are removed from the answer first. **Loophole closed:** in the released code an
  empty answer is "contained" in every gold answer (``"" in gold`` is true) and earns 0.5; here an answer that
  normalises to nothing earns 0 (:func:`accuracy`).
* **Stepwise attribution** ``R_step`` [paper: each predicted box is cropped, crop and step text are encoded by a
  multimodal retriever, the minimum similarity over the steps must exceed ``tau``, the maximum pairwise IoU of the
  step boxes must stay below a threshold, and the term is zero unless ``R_acc`` reaches ``epsilon``; code:
  ``step_reward``]: each box of ``<think>`` is a step whose text is the last sentence before it; ``0.5`` when there
  are at least ``min_steps`` steps and ``min_i sim(crop_i, text_i) > tau``, another ``0.5`` when moreover no two
  steps on the same page have ``IoU >= overlap_iou`` [code: the two halves of 0.5]; the whole term is 0 when
  ``R_acc < epsilon``. A step whose box cannot be read, lies outside the page image or has no text scores
  similarity 0 [code: ``results.append(0)``]. ``tau = 0.3`` [paper: the default attribution threshold of its
  threshold study, which also tries 0.5; code: ``> 0.3``]; ``overlap_iou = 0.5`` [code:
  ``has_similar_bbox(iou_threshold=0.5)``, compared with ``>=``]; ``epsilon = 0.4`` [code: ``reward_acc < 0.4``
  zeroes the term; the paper names ``epsilon`` without a value in the parts we could check]; ``min_steps = 2``
  [code: ``len(results_iou) > 1``].
* **Grounding** ``R_ground``: 1 when a box of ``<answer>`` has ``IoU > 0.5`` with a gold evidence box on the
  same page and every answer box is also one of the chain's step boxes, else 0 [paper: paid when the answer's box
  has IoU above 0.5 with the ground-truth evidence on the correct page; figure: ``IoU(...) > 0.5``; code:
  ``iou_reward``, including its ``json_str in think`` condition]. Only questions whose ground truth carries evidence boxes can earn it;
  ``ground_known`` says which did.

``R = w_format R_format + w_accuracy R_acc + w_step R_step + w_ground R_ground`` with every weight 1 by default
[figure: ``R = R_step + R_acc + R_ground + R_format``; code: LAT's TRL trainer sums its reward functions with
TRL's default unit weights], so ``R`` lies in [-1, 4]. The weights are the
reward form's ``weights`` (:mod:`reward.scoring`).

Differences forced by our setting, each a setting: the similarity comes from our encoder interface (the reward's
``encoder`` setting, else the encoder the cache was built with; :func:`make_step_embedder`): with ``colqwen2``
(:mod:`data_prep.encoders.colqwen2`) it is LAT's own ColQwen2 MaxSim (:class:`LateInteractionStepEmbedder`); with
the Qwen3-VL-Embedding model the crop is embedded as an image under the document instruction and the step text as
a query, and their single-vector cosine is used (:class:`ImageStepEmbedder`); with a text-only encoder such as
MiniLM the PDF text layer under the box is scored (:class:`TextLayerStepEmbedder`: a CPU counterpart, not LAT's
method). Boxes are on Qwen3-VL's native 0-1000 grid of the page image (LAT's Qwen2.5-VL wrote pixels);
``Image_index`` is 1-based into the pages the policy saw (the ground truth's page window).

Output format the policy is asked for (``recipes/prompts/lat_interface.jinja``)::

    <think>The results are in Table 2. Bounding box: {"bbox_2d": [100, 420, 900, 610], "Image_index": 2}
    Shenzhen has the highest yield. Bounding box: {"bbox_2d": [120, 500, 880, 530], "Image_index": 2}</think>
    <answer>Shenzhen
    Bounding box: {"bbox_2d": [120, 500, 880, 530], "Image_index": 2}</answer>

The ground truth is our packed JSON (:mod:`data_prep.groundtruth`) plus an optional ``evidence`` list of
``{"page": p, "bbox": [x0, y0, x1, y1]}`` (1-based page, display points) for the grounding term.
"""

from __future__ import annotations

import logging
import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Protocol

import numpy as np

from core.errors import InputError
from core.geometry import BBox, iou
from core.io import loads_record
from data_prep.cache import CachedDoc
from data_prep.groundtruth import GroundTruth
from data_prep.text import normalize_for_compare
from reward.servers import through_outages

log = logging.getLogger("reward.lat")

COORD_SCALE = 1000.0
"""Ours, not LAT's: boxes are written on a 0-1000 grid of the page image (Qwen3-VL's grounding convention; LAT's
Qwen2.5-VL wrote pixels)."""

MIN_CROP_PT = 4.0
"""Ours, not LAT's: step boxes thinner than this (points) are widened around their centre before cropping (the
rule of our block crops), so no crop is empty."""


@dataclass(frozen=True)
class LatSettings:
    """The constants of LAT's reward (see the module docstring for where each comes from)."""

    tau: float = 0.3
    """Step attribution threshold: every step's crop/text similarity must exceed it [paper: default tau = 0.3 of
    its threshold study; code: ``> 0.3``]."""
    overlap_iou: float = 0.5
    """Two step boxes on one page with IoU at or above this are redundant [paper: the overlap constraint on the
    maximum pairwise IoU; code: ``has_similar_bbox(iou_threshold=0.5)``]."""
    epsilon: float = 0.4
    """``R_step`` is paid only when ``R_acc >= epsilon`` [paper: the ``R_acc >= epsilon`` condition of
    ``R_step``; code: ``reward_acc < 0.4`` zeroes it]."""
    ground_iou: float = 0.5
    """An answer box grounds the answer when its IoU with a gold evidence box is above this [paper: ``R_ground``,
    IoU above 0.5 on the correct page; figure: ``IoU(ground-truth box, box) > 0.5``; code: ``iou_reward``,
    ``> 0.5``]."""
    min_steps: int = 2
    """Fewest steps a chain needs for ``R_step`` [code: ``len(results_iou) > 1``]."""
    crop_dpi: float = 150.0
    """Ours, not LAT's (LAT crops the page image it was given): resolution at which a step's region is rendered
    for the encoder, that of our block crops."""
    max_steps: int = 16
    """Ours, not LAT's (a cost bound: LAT embeds every step): steps embedded per response; the rest score 0, which
    fails the min-similarity condition."""

    def __post_init__(self) -> None:
        checks = [
            (0.0 <= self.overlap_iou <= 1.0, "overlap_iou must be in [0, 1]"),
            (0.0 <= self.ground_iou <= 1.0, "ground_iou must be in [0, 1]"),
            (-1.0 <= self.tau <= 1.0, "tau must be in [-1, 1] (a cosine similarity)"),
            (0.0 <= self.epsilon <= 1.0, "epsilon must be in [0, 1] (R_acc's range)"),
            (self.min_steps >= 1, "min_steps must be >= 1"),
            (self.max_steps >= self.min_steps, "max_steps must be >= min_steps"),
            (self.crop_dpi > 0, "crop_dpi must be > 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(f"reward setting lat: {msg}")

    @classmethod
    def from_dict(cls, d: Mapping | None) -> LatSettings:
        """From the ``lat`` reward setting (a mapping of field names); unknown names raise :class:`InputError`."""
        d = dict(d or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise InputError(f"reward setting lat: unknown key(s) {unknown}; known: {sorted(known)}")
        out = {}
        for k, v in d.items():
            want = int if known[k].type in ("int", int) else float
            try:
                if isinstance(v, bool):
                    raise ValueError(v)
                out[k] = want(v)
            except (TypeError, ValueError):
                raise InputError(f"reward setting lat.{k}: expected a number, got {v!r}") from None
        return cls(**out)


# ---------------------------------------------------------------------------------------------- answer text
def normalize_answer(text: str) -> str:
    """LAT's answer normalisation (SQuAD style): lower case, thousands separators joined, punctuation and
    symbols removed, articles removed, white space collapsed.

    >>> normalize_answer("The  1,024 Apples!"), normalize_answer("Shenzhen\u200b")
    ('1024 apples', 'shenzhen')

    The project's one comparison normalisation (:func:`data_prep.text.normalize_for_compare`: NFKC, invisible and
    bidi characters removed, whitespace folded) comes first, so a zero-width space never changes the score.
    Not :func:`data_prep.document.normalize_text` (document text for fingerprints: NFKC, lower case, white space).
    """
    text = re.sub(r"(\d),(\d)", r"\1\2", normalize_for_compare(text).lower())
    text = "".join(" " if unicodedata.category(ch)[0] in "PS" else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return re.sub(r"\s+", " ", text).strip()


def soft_exact_match(pred: str, gold: str) -> float:
    """LAT's soft EM: 1 when the normalised prediction contains the normalised gold or is contained in it. An
    empty prediction never matches (the released code's loophole: ``"" in gold`` is true).

    >>> soft_exact_match("Shenzhen, China", "shenzhen"), soft_exact_match("", "shenzhen")
    (1.0, 0.0)
    """
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not p or not g:
        return 0.0
    return 1.0 if (g in p or p in g) else 0.0


def token_recall(pred: str, gold: str) -> float:
    """Share of the gold's normalised tokens found in the prediction (multiset overlap / gold tokens).

    >>> token_recall("12 percent growth", "growth of 12 percent")
    0.75
    """
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return 0.0
    return sum((Counter(p) & Counter(g)).values()) / len(g)


def accuracy(pred: str, gold: str) -> float:
    """``R_acc = 0.5 * soft EM + 0.5 * recall``, in [0, 1]."""
    return 0.5 * soft_exact_match(pred, gold) + 0.5 * token_recall(pred, gold)


# ---------------------------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class CoEBox:
    """One ``{"bbox_2d": [...], "Image_index": k}`` object: ``image`` 1-based (None when absent or unreadable),
    ``box`` on the 0-1000 grid (None when unreadable), ``text`` the step text before it, ``raw`` as written."""

    image: int | None
    box: BBox | None
    text: str
    raw: str


@dataclass(frozen=True)
class CoEResponse:
    """A parsed Chain-of-Evidence response."""

    format_ok: bool
    """The whole response is ``<think>...</think>`` followed by ``<answer>...</answer>``."""
    answer: str
    """The ``<answer>`` text without its box lines ("" when there is no ``<answer>``)."""
    steps: tuple[CoEBox, ...]
    """Boxes of ``<think>`` in order, each with the last sentence before it."""
    answer_boxes: tuple[CoEBox, ...]
    """Boxes of ``<answer>``."""


_SEAM_RE = re.compile(r"</think>\s*<answer>")
MAX_OVERLAP_STEPS = 256
"""Ours: the pairwise step-overlap check looks at the first this many placed steps (logged when a response has
more); steps beyond ``max_steps`` score similarity 0, so the cap cannot change a reward."""


def _format_ok(text: str) -> bool:
    r"""Whether ``text`` is, as a whole, ``<think>...</think>`` (white space) ``<answer>...</answer>``: the regex
    ``<think>(.*?)</think>\s*<answer>(.*?)</answer>`` fullmatched, in one linear scan (the regex is quadratic on
    a response of repeated tags)."""
    if not (text.startswith("<think>") and text.endswith("</answer>")):
        return False
    last = len(text) - len("</answer>")
    return any(m.start() >= len("<think>") and m.end() <= last for m in _SEAM_RE.finditer(text))


def _between(text: str, open_tag: str, close_tag: str) -> str | None:
    """The text between the first ``open_tag`` and the first ``close_tag`` after it (what the lazy regex
    ``open(.*?)close`` finds with ``search``), in linear time; None when there is no such pair."""
    i = text.find(open_tag)
    if i < 0:
        return None
    j = text.find(close_tag, i + len(open_tag))
    return None if j < 0 else text[i + len(open_tag) : j]


_BOX_RE = re.compile(r"(?:Bounding box:\s*)?(\{[^{}]*\})", re.IGNORECASE)
_SENTENCE_SPLIT_RE = re.compile(r"\. |\n")


def _read_box(raw: str) -> tuple[int | None, BBox | None] | None:
    """``(image, box)`` of a ``{...}`` span; None when the span is not a box object at all."""
    if "bbox" not in raw.lower():
        return None
    try:
        obj = loads_record(raw.replace("'", '"'), "box")
    except InputError:
        return (None, None)
    if not isinstance(obj, dict):
        return (None, None)
    keys = {str(k).lower(): v for k, v in obj.items()}
    box = keys.get("bbox_2d", keys.get("bbox"))
    ok = (
        isinstance(box, list)
        and len(box) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in box)
    )
    image = keys.get("image_index")
    if (
        isinstance(image, bool)
        or not isinstance(image, int | float)
        or not math.isfinite(image)
        or image != int(image)
    ):
        image = None
    return (None if image is None else int(image), tuple(float(v) for v in box) if ok else None)


def _boxes(segment: str) -> list[CoEBox]:
    out: list[CoEBox] = []
    prev = 0
    for m in _BOX_RE.finditer(segment):
        got = _read_box(m.group(1))
        if got is None:
            continue
        preceding = segment[prev : m.start()].strip()
        prev = m.end()
        parts = [s.strip() for s in _SENTENCE_SPLIT_RE.split(preceding)]
        text = parts[-1] if parts else ""
        out.append(CoEBox(got[0], got[1], text, m.group(1)))
    return out


def parse_coe(text: str) -> CoEResponse:
    """Parse a LAT response.

    >>> r = parse_coe('<think>Look at it. Revenue rose. Bounding box: {"bbox_2d": [1, 2, 30, 40], "Image_index": 1}'
    ...               '</think><answer>12% Bounding box: {"bbox_2d": [1, 2, 30, 40], "Image_index": 1}</answer>')
    >>> r.format_ok, r.answer, [(s.image, s.box, s.text) for s in r.steps], len(r.answer_boxes)
    (True, '12%', [(1, (1.0, 2.0, 30.0, 40.0), 'Revenue rose.')], 1)
    """
    text = text if isinstance(text, str) else ""
    format_ok = _format_ok(text.strip())
    think = _between(text, "<think>", "</think>")
    answer = _between(text, "<answer>", "</answer>")
    steps = _boxes(think) if think is not None else []
    answer_boxes = _boxes(answer) if answer is not None else []
    answer_text = ""
    if answer is not None:
        answer_text = re.sub(r"Bounding box:\s*", " ", _BOX_RE.sub(" ", answer), flags=re.IGNORECASE)
        answer_text = re.sub(r"\s+", " ", answer_text).strip().strip(".").strip()
    return CoEResponse(format_ok, answer_text, tuple(steps), tuple(answer_boxes))


# ---------------------------------------------------------------------------------------------- boxes
def grid_to_points(box: Sequence[float], page_size: tuple[float, float]) -> BBox:
    """A 0-1000 grid box -> display points of a ``page_size`` page.

    >>> grid_to_points([100, 500, 200, 1000], (600.0, 800.0))
    (60.0, 400.0, 120.0, 800.0)
    """
    w, h = page_size
    return (box[0] * w / COORD_SCALE, box[1] * h / COORD_SCALE, box[2] * w / COORD_SCALE, box[3] * h / COORD_SCALE)


def valid_grid_box(box: Sequence[float] | None) -> bool:
    """A box with positive area inside the 0-1000 page grid (LAT crops only boxes inside the image)."""
    return box is not None and 0 <= box[0] < box[2] <= COORD_SCALE and 0 <= box[1] < box[3] <= COORD_SCALE


@dataclass(frozen=True)
class Region:
    """A step's evidence: 1-based ``page`` of the document and ``bbox`` in display points, with its ``text``."""

    page: int
    bbox: BBox
    text: str


def locate(box: CoEBox, window: tuple[int, int] | None, cached: CachedDoc) -> Region | None:
    """The page region a box names, or None when its image index or box cannot be placed."""
    if box.image is None or not valid_grid_box(box.box):
        return None
    first, last = window if window is not None else (1, cached.n_pages)
    page = first + box.image - 1
    if not first <= page <= last:
        return None
    return Region(page, grid_to_points(box.box, cached.page_sizes[page - 1]), box.text)


# ---------------------------------------------------------------------------------------------- the terms
def format_reward(parsed: CoEResponse) -> float:
    """``R_format``: +1 or -1."""
    return 1.0 if parsed.format_ok else -1.0


@dataclass(frozen=True)
class StepResult:
    reward: float
    """``R_step`` in {0, 0.5, 1}."""
    min_similarity: float
    """Minimum over steps (0 without steps)."""
    max_iou: float
    """Maximum IoU over pairs of steps on one page (0 with fewer than two)."""


def step_reward(
    similarities: Sequence[float],
    regions: Sequence[Region | None],
    acc: float,
    settings: LatSettings,
) -> StepResult:
    """``R_step`` from each step's similarity (0 for a step that could not be placed) and region.

    >>> s = LatSettings()
    >>> r = [Region(1, (0, 0, 10, 10), "a"), Region(1, (20, 0, 30, 10), "b")]
    >>> step_reward([0.5, 0.4], r, 1.0, s).reward, step_reward([0.5, 0.2], r, 1.0, s).reward
    (1.0, 0.0)
    """
    if len(similarities) != len(regions):
        raise ValueError("one similarity per step")
    sims = [float(s) if r is not None else 0.0 for s, r in zip(similarities, regions, strict=True)]
    min_sim = min(sims) if sims else 0.0
    placed = [r for r in regions if r is not None]
    if len(placed) > MAX_OVERLAP_STEPS:
        log.warning("LAT overlap check: %d placed steps, checking the first %d", len(placed), MAX_OVERLAP_STEPS)
        placed = placed[:MAX_OVERLAP_STEPS]
    max_iou = 0.0
    for i in range(len(placed)):
        for j in range(i + 1, len(placed)):
            if placed[i].page == placed[j].page:
                max_iou = max(max_iou, iou(placed[i].bbox, placed[j].bbox))
    reward = 0.0
    if len(sims) >= settings.min_steps and min_sim > settings.tau:
        reward = 0.5
        if max_iou < settings.overlap_iou:
            reward = 1.0
    if acc < settings.epsilon:
        reward = 0.0
    return StepResult(reward, min_sim, max_iou)


def ground_reward(
    parsed: CoEResponse,
    answer_regions: Sequence[Region | None],
    step_regions: Sequence[Region | None],
    evidence: Sequence[tuple[int, BBox]],
    settings: LatSettings,
) -> float:
    """``R_ground``: 1 when an answer box overlaps a gold evidence box on its page with IoU above ``ground_iou``
    and every answer box is one of the chain's steps (same page and box), else 0."""
    if not parsed.answer_boxes or not evidence:
        return 0.0
    steps = {(r.page, r.bbox) for r in step_regions if r is not None}
    if any(r is None or (r.page, r.bbox) not in steps for r in answer_regions):
        return 0.0
    for r in answer_regions:
        for page, box in evidence:
            if r.page == page and iou(r.bbox, box) > settings.ground_iou:
                return 1.0
    return 0.0


# ---------------------------------------------------------------------------------------------- embedders
class StepEmbedder(Protocol):
    """Scores how well each region supports its step text: cosine similarity in [-1, 1], one per region."""

    name: str

    def similarities(self, cached: CachedDoc, regions: Sequence[Region], doc) -> np.ndarray:
        """``doc`` is the open :class:`~data_prep.document.Document` of ``cached``."""


def region_crops(doc, regions: Sequence[Region], dpi: float) -> list:
    """The regions rendered at ``dpi``; a sliver of a box is widened around its centre (as block crops are), so
    no crop is empty."""
    from data_prep.encoders.qwen3vl import widen_bbox

    return [doc.crop(r.page, widen_bbox(r.bbox, doc.page_sizes[r.page - 1], MIN_CROP_PT), dpi=dpi) for r in regions]


class ImageStepEmbedder:
    """LAT's attribution with our multimodal encoder: the region rendered at ``dpi`` and embedded as an image
    (``encoder.embed_images``), the step text as a query (``encoder.embed_texts``); similarity = dot product of
    the unit vectors."""

    def __init__(self, encoder, dpi: float = 150.0) -> None:
        if not hasattr(encoder, "embed_images"):
            raise InputError(f"encoder {getattr(encoder, 'name', encoder)!r} cannot embed images")
        self.encoder = encoder
        self.dpi = dpi
        self.name = f"image:{encoder.name}"

    def similarities(self, cached: CachedDoc, regions: Sequence[Region], doc) -> np.ndarray:
        if not regions:
            return np.zeros(0, np.float32)
        img = np.asarray(self.encoder.embed_images(region_crops(doc, regions, self.dpi)), np.float32)
        txt = np.asarray(self.encoder.embed_texts([r.text for r in regions]), np.float32)
        return np.einsum("nd,nd->n", img, txt)


class TextLayerStepEmbedder:
    """CPU counterpart for a text-only encoder (MiniLM): the PDF text layer under the region, embedded as text,
    against the step text. Not LAT's method (a scan has no text layer: its regions score 0); an ablation and the
    offline test path."""

    def __init__(self, encoder) -> None:
        self.encoder = encoder
        self.name = f"text-layer:{encoder.name}"

    def similarities(self, cached: CachedDoc, regions: Sequence[Region], doc) -> np.ndarray:
        if not regions:
            return np.zeros(0, np.float32)
        under = [doc.text_in_bbox(r.page, r.bbox).strip() for r in regions]
        keep = [i for i, t in enumerate(under) if t]
        out = np.zeros(len(regions), np.float32)
        if keep:
            a = np.asarray(self.encoder.embed_texts([under[i] for i in keep]), np.float32)
            b = np.asarray(self.encoder.embed_texts([regions[i].text for i in keep]), np.float32)
            out[keep] = np.einsum("nd,nd->n", a, b)
        return out


class LateInteractionStepEmbedder:
    """LAT's own attribution: the region rendered at ``dpi``, scored against the step text by a multi-vector
    retriever's late interaction (``encoder.late_interaction(texts, images)``: MaxSim averaged over the text's
    tokens, LAT's ``score_multi_vector``), e.g. :class:`data_prep.encoders.colqwen2.ColQwen2Encoder`, the ColQwen2
    LAT's code uses."""

    def __init__(self, encoder, dpi: float = 150.0) -> None:
        if not hasattr(encoder, "late_interaction"):
            raise InputError(f"encoder {getattr(encoder, 'name', encoder)!r} has no late interaction")
        self.encoder = encoder
        self.dpi = dpi
        self.name = f"late-interaction:{encoder.name}"

    def similarities(self, cached: CachedDoc, regions: Sequence[Region], doc) -> np.ndarray:
        if not regions:
            return np.zeros(0, np.float32)
        crops = region_crops(doc, regions, self.dpi)
        return np.asarray(self.encoder.late_interaction([r.text for r in regions], crops), np.float32)


def vectors(call: Callable, *args) -> np.ndarray:
    """``call(*args)`` as float32 vectors: an embedder's answer that is no array fails its call (the outage rule of
    :func:`reward.servers.through_outages` then decides), never the batch."""
    return np.asarray(call(*args), dtype=np.float32)


def make_step_embedder(encoder, dpi: float = 150.0) -> StepEmbedder:
    """LAT's late interaction when ``encoder`` has one (``colqwen2``), else image attribution when it embeds
    images (``qwen3-vl-embedding``), else the text-layer counterpart (``minilm``)."""
    if hasattr(encoder, "late_interaction"):
        return LateInteractionStepEmbedder(encoder, dpi)
    if hasattr(encoder, "embed_images"):
        return ImageStepEmbedder(encoder, dpi)
    return TextLayerStepEmbedder(encoder)


# ---------------------------------------------------------------------------------------------- breakdown
@dataclass(frozen=True)
class LatBreakdown:
    """What the plugin returns for one response under ``reward_form: lat`` (every value a number)."""

    overall: float
    format: float
    accuracy: float
    step: float
    ground: float
    format_ok: float
    n_steps: float
    n_placed_steps: float
    min_similarity: float
    max_step_iou: float
    ground_known: float
    """1 when the ground truth has evidence boxes (the grounding term can pay), else 0."""
    unscorable: float
    """1 when the step embedder failed (outage): the reward is the mean of the response's group."""
    embed_s: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


LAT_KEYS: tuple[str, ...] = tuple(LatBreakdown.__dataclass_fields__)


def read_evidence(raw, qid: str) -> list[tuple[int, BBox]]:
    """The optional ``evidence`` of a packed ground truth: ``[{"page": p, "bbox": [x0, y0, x1, y1]}]``."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(f"ground truth {qid!r}: evidence must be a list of {{page, bbox}}, got {raw!r}")
    out = []
    for i, e in enumerate(raw):
        page = e.get("page") if isinstance(e, dict) else None
        box = e.get("bbox") if isinstance(e, dict) else None
        if (
            not isinstance(page, int)
            or isinstance(page, bool)
            or page < 1
            or not isinstance(box, list | tuple)
            or len(box) != 4
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in box)
            or not (box[0] < box[2] and box[1] < box[3])
        ):
            raise InputError(
                f"ground truth {qid!r}: evidence[{i}] must be {{'page': 1-based int, 'bbox': [x0, y0, x1, y1] "
                f"with x0 < x1, y0 < y1}}, got {e!r}"
            )
        out.append((page, tuple(float(v) for v in box)))
    return out


@dataclass
class StepItem:
    """One response under a ``steps`` reward form, as the pipeline's scorer carries it through a batch: ``gt`` and
    ``cached`` (set by the pipeline) plus what LAT's terms read and compute."""

    gt: GroundTruth
    evidence: list
    parsed: CoEResponse
    cached: CachedDoc | None = None
    step_regions: list = field(default_factory=list)
    answer_regions: list = field(default_factory=list)
    sims: np.ndarray | None = None
    acc: float = 0.0
    failed: str | None = None
    """``embed`` when the step embedder failed for this response (it is unscorable), else None."""


class StepTerms:
    """LAT's part of the reward for :class:`reward.pipeline.RewardScorer` (the reward form needs ``steps``): the
    response format, the step parsing, the step embedders and the four terms. The scorer does the rest (input
    checks, documents, the page window, the group mean of an unscorable response, counters).

    ``embedder``: inject one (any :class:`StepEmbedder`); default: :func:`make_step_embedder` of the encoder the
    cache was built with (or the ``encoder`` setting), served at ``embed_url`` when set, one per encoder."""

    def __init__(self, config, weights: Mapping[str, float], embedder: StepEmbedder | None = None) -> None:
        self.config = config
        self.settings = LatSettings.from_dict(getattr(config, "lat", None))
        self.weights = dict(weights)
        self.embedder = embedder
        self._embedders: dict[str, StepEmbedder] = {}

    def item(self, gt: GroundTruth, raw_gt, response) -> StepItem:
        """Read one reward input: the ground truth's optional ``evidence`` (:class:`InputError` when malformed) and
        the Chain-of-Evidence response."""
        d = raw_gt if isinstance(raw_gt, dict) else loads_record(raw_gt, "ground truth")
        return StepItem(gt, read_evidence(d.get("evidence"), gt.qid), parse_coe(response))

    def format_ok(self, it: StepItem) -> bool:
        return it.parsed.format_ok

    def embedder_for(self, cached: CachedDoc) -> StepEmbedder:
        if self.embedder is not None:
            return self.embedder
        from reward.resolve import make_quote_encoder

        meta = cached.manifest.get("encoder") or {}
        name = self.config.encoder or meta.get("name")
        if not name:
            raise InputError(
                f"cache {cached.key} has no encoder; the LAT step reward needs one (set the reward's encoder)"
            )
        key = f"{name}|{meta.get('fingerprint') or ''}"
        if key not in self._embedders:
            enc = make_quote_encoder(cached, name=name, embed_url=self.config.embed_url)
            self._embedders[key] = make_step_embedder(enc, self.settings.crop_dpi)
        return self._embedders[key]

    def embedder_names(self) -> list[str]:
        """The step embedders in use (the injected one, else those made so far)."""
        return [self.embedder.name] if self.embedder is not None else sorted(self._embedders)

    def place(self, items: Sequence[StepItem]) -> None:
        """Each box of each response on its page of the document (None where it cannot be placed, or where a step
        has no text)."""
        for it in items:
            steps = [locate(b, it.gt.pages, it.cached) for b in it.parsed.steps]
            it.step_regions = [r if r is None or r.text else None for r in steps]
            it.answer_regions = [locate(b, it.gt.pages, it.cached) for b in it.parsed.answer_boxes]

    def embed(self, items: Sequence[StepItem], await_outage=lambda error, again: False) -> None:
        """Similarities of every placed step (up to ``max_steps``): one PDF open and one embedder call per document
        (its responses' steps together, as the quote reward batches its quotes); when that call fails, each
        response's steps alone, so only the responses whose steps cannot be embedded are unscorable.
        ``await_outage(error, again)``: the scorer's outage wait (:func:`reward.servers.through_outages`)."""
        by_doc: dict[str, list[StepItem]] = defaultdict(list)
        for it in items:
            it.acc = accuracy(it.parsed.answer, it.gt.answer)
            n = len(it.step_regions)
            it.sims = np.zeros(n, np.float32)
            # The similarities cannot change the reward of a chain that is too short or whose answer is wrong.
            if n >= self.settings.min_steps and it.acc >= self.settings.epsilon and any(it.step_regions):
                by_doc[it.cached.key].append(it)
        for its in by_doc.values():
            cached = its[0].cached
            # an embedding server that cannot be reached: unscorable, never a crash
            embedder, error = through_outages(await_outage, self.embedder_for, cached)
            if error is not None:
                log.warning("LAT step embedder for %s unavailable: %s", cached.key, error)
                for it in its:
                    it.failed = "embed"
                continue
            idx = [
                [k for k, r in enumerate(it.step_regions[: self.settings.max_steps]) if r is not None] for it in its
            ]
            flat = [it.step_regions[k] for it, ks in zip(its, idx, strict=True) for k in ks]
            with cached.open_pdf() as doc:
                sims, error = through_outages(await_outage, vectors, embedder.similarities, cached, flat, doc)
                if error is None:
                    parts = np.split(sims, np.cumsum([len(ks) for ks in idx])[:-1])
                else:
                    log.warning("LAT step similarities of %s failed (%s); embedding per response", cached.key, error)
                    parts = [self._one(embedder, cached, doc, it, ks) for it, ks in zip(its, idx, strict=True)]
            for it, ks, part in zip(its, idx, parts, strict=True):
                if part is not None:
                    it.sims[ks] = part

    @staticmethod
    def _one(embedder, cached, doc, it: StepItem, ks: list[int]) -> np.ndarray | None:
        try:
            return np.asarray(embedder.similarities(cached, [it.step_regions[k] for k in ks], doc), np.float32)
        except InputError:
            raise
        except Exception as e:
            log.warning("LAT step similarities of %s failed: %s", it.gt.qid, e)
            it.failed = "embed"
            return None

    def breakdown(self, it: StepItem, embed_s: float) -> LatBreakdown:
        """The four terms of one response and their weighted sum."""
        s, w = self.settings, self.weights
        fmt, acc = format_reward(it.parsed), it.acc
        step = step_reward(list(it.sims), it.step_regions, acc, s)
        ground = ground_reward(it.parsed, it.answer_regions, it.step_regions, it.evidence, s)
        return LatBreakdown(
            overall=w["format"] * fmt + w["accuracy"] * acc + w["step"] * step.reward + w["ground"] * ground,
            format=fmt,
            accuracy=acc,
            step=step.reward,
            ground=ground,
            format_ok=1.0 if it.parsed.format_ok else 0.0,
            n_steps=float(len(it.step_regions)),
            n_placed_steps=float(sum(r is not None for r in it.step_regions)),
            min_similarity=step.min_similarity,
            max_step_iou=step.max_iou,
            ground_known=1.0 if it.evidence else 0.0,
            unscorable=0.0,
            embed_s=embed_s,
        )

    @staticmethod
    def unscorable(b: LatBreakdown, overall: float) -> LatBreakdown:
        """An unscorable response's breakdown: the group's mean reward, no step term."""
        return replace(b, overall=overall, step=0.0, unscorable=1.0)

    @staticmethod
    def counts(rows: Sequence[LatBreakdown]) -> dict[str, int]:
        """The batch's counters of LAT's terms (beside the scorer's own)."""
        return {"step_paid": sum(int(b.step > 0) for b in rows), "ground_paid": sum(int(b.ground > 0) for b in rows)}
