"""How many prompt tokens Qwen3-VL spends on page images, and the per-page pixel budget that fits a prompt.

The count follows the Qwen3-VL processor (transformers ``Qwen2VLImageProcessor`` with Qwen3-VL's
``preprocessor_config.json``: ``patch_size=16``, ``merge_size=2``, ``size={"shortest_edge": 65536,
"longest_edge": 16777216}``; checked against transformers 5.24's ``image_processing_qwen2_vl.py`` /
``processing_qwen3_vl.py`` and, in ``tests/data_prep/test_qwen_tokens.py``, against the real image processor):

1. ``smart_resize``: with ``f = patch_size * merge_size = 32`` pixels, ``h' = round(h / f) * f`` and
   ``w' = round(w / f) * f`` (Python's ``round``: halves go to the even integer). If ``h' * w' > max_pixels``:
   ``beta = sqrt(h * w / max_pixels)``, ``h' = max(f, floor(h / beta / f) * f)``, ``w'`` likewise. Else if
   ``h' * w' < min_pixels``: ``beta = sqrt(min_pixels / (h * w))``, ``h' = ceil(h * beta / f) * f``, ``w'``
   likewise. An aspect ratio above 200 is an error.
2. The vision encoder cuts ``(h' / 16) x (w' / 16)`` patches and merges each 2 x 2 block into one token, so an
   image costs ``(h' / 32) * (w' / 32)`` ``<|image_pad|>`` tokens.
3. The chat template wraps every image as ``<|vision_start|><|image_pad|><|vision_end|>``: 2 more tokens.

So ``tokens(image) = (h' / 32) * (w' / 32) + 2``. One megapixel (the evaluation cap) is about 980 tokens a page,
so a 30-page window needs about 29,500 image tokens of the 48,000-token prompt.

Sizes here are image pixels ``(width, height)``; page sizes are PDF points ``(width, height)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class VisionSpec:
    """The image-processor settings that decide the token count (Qwen3-VL's defaults)."""

    patch_size: int = 16
    """Pixels per side of one ViT patch."""
    merge_size: int = 2
    """Patches per side merged into one language-model token."""
    min_pixels: int = 65536
    """``size["shortest_edge"]``: smaller images are upscaled to at least this many pixels."""
    max_pixels: int = 16777216
    """``size["longest_edge"]``: larger images are downscaled to at most this many pixels."""
    special_tokens_per_image: int = 2
    """``<|vision_start|>`` and ``<|vision_end|>`` around every image in the chat template."""

    @property
    def factor(self) -> int:
        """Side of the pixel square that becomes one token (32 for Qwen3-VL)."""
        return self.patch_size * self.merge_size


QWEN3_VL = VisionSpec()
"""Qwen3-VL-8B-Instruct's image processor settings."""


def smart_resize(width: int, height: int, spec: VisionSpec = QWEN3_VL) -> tuple[int, int]:
    """The ``(width, height)`` in pixels the processor resizes a ``width x height`` image to (formula above)."""
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width} x {height}")
    if max(width, height) / min(width, height) > 200:
        raise ValueError(f"absolute aspect ratio must be smaller than 200, got {width} x {height}")
    f = spec.factor
    h, w = round(height / f) * f, round(width / f) * f
    if h * w > spec.max_pixels:
        beta = math.sqrt(height * width / spec.max_pixels)
        h = max(f, math.floor(height / beta / f) * f)
        w = max(f, math.floor(width / beta / f) * f)
    elif h * w < spec.min_pixels:
        beta = math.sqrt(spec.min_pixels / (height * width))
        h = math.ceil(height * beta / f) * f
        w = math.ceil(width * beta / f) * f
    return w, h


def image_pad_tokens(width: int, height: int, spec: VisionSpec = QWEN3_VL) -> int:
    """``<|image_pad|>`` tokens of one image: ``(h' / 32) * (w' / 32)`` after :func:`smart_resize`."""
    w, h = smart_resize(width, height, spec)
    return (h // spec.factor) * (w // spec.factor)


def image_tokens(width: int, height: int, spec: VisionSpec = QWEN3_VL) -> int:
    """Prompt tokens of one image including its vision start/end tokens.

    >>> image_tokens(816, 1224)  # resized to 832 x 1216: 26 * 38 + 2
    990
    """
    return image_pad_tokens(width, height, spec) + spec.special_tokens_per_image


def fitted_size(width_pt: float, height_pt: float, max_pixels: float) -> tuple[int, int]:
    """Pixel size ``(width, height)`` of a page of ``width_pt x height_pt`` points rendered under ``max_pixels``.

    The largest size with the page's aspect ratio whose ``width * height <= max_pixels`` (floors, so never over
    the budget); the builder brings every rendered page to exactly this size."""
    if width_pt <= 0 or height_pt <= 0:
        raise ValueError(f"page size must be positive, got {width_pt} x {height_pt} pt")
    scale = math.sqrt(max_pixels / (width_pt * height_pt))
    w, h = max(1, math.floor(width_pt * scale)), max(1, math.floor(height_pt * scale))
    while w * h > max_pixels and max(w, h) > 1:  # only float error at the boundary can get here
        if w >= h:
            w -= 1
        else:
            h -= 1
    return w, h


def estimate_text_tokens(text: str, chars_per_token: float = 3.0) -> int:
    """A deliberately high estimate of a text's token count without the tokenizer.

    ASCII characters count ``1 / chars_per_token`` each (Qwen's BPE averages about 4 characters a token on
    English; 3 leaves room), every other character (CJK, accented letters) one token each.

    >>> estimate_text_tokens("abcdef") , estimate_text_tokens("营收 up")
    (2, 3)
    """
    ascii_chars = sum(1 for c in text if ord(c) < 128)
    return math.ceil(ascii_chars / chars_per_token) + (len(text) - ascii_chars)


@dataclass(frozen=True)
class PromptBudget:
    """How the per-page pixel budget of a window is chosen."""

    max_prompt_length: int = 48_000
    """``data.max_prompt_length`` of the recipe: image tokens + text tokens must fit it."""
    max_pixels_per_page: float = 1_000_000
    """The evaluation cap: one megapixel per page."""
    total_pixels: float | None = None
    """The evaluation's total pixel budget over the pages shown (None: only the per-page cap applies)."""
    min_pixels_per_page: float = 65_536
    """Lowest per-page budget tried; below Qwen3-VL's ``min_pixels`` upscaling would undo the saving."""
    headroom_tokens: int = 1_024
    """Tokens kept free for the estimate's error (chat template, tokenizer differences)."""
    step: float = 0.9
    """Factor the per-page budget is multiplied by at each lowering."""

    def start_pixels(self, n_pages: int) -> float:
        """The evaluation budget for ``n_pages`` pages: ``min(max_pixels_per_page, total_pixels / n_pages)``."""
        if n_pages <= 0:
            raise ValueError("n_pages must be positive")
        if self.total_pixels is None:
            return float(self.max_pixels_per_page)
        return min(float(self.max_pixels_per_page), float(self.total_pixels) / n_pages)


@dataclass(frozen=True)
class BudgetChoice:
    """The per-page pixel budget picked for a window and what it costs."""

    max_pixels: float
    """Per-page pixel budget (pixels)."""
    image_sizes: tuple[tuple[int, int], ...]
    """``(width, height)`` in pixels of every page image at that budget."""
    image_tokens: int
    """Sum of :func:`image_tokens` over the pages."""
    text_tokens: int
    """The text estimate given to :func:`choose_page_budget`."""
    lowered: bool
    """True when the budget is below the evaluation budget."""

    @property
    def prompt_tokens(self) -> int:
        """Estimated prompt tokens (images + text, without the headroom)."""
        return self.image_tokens + self.text_tokens


def window_image_tokens(
    page_sizes_pt: list[tuple[float, float]], max_pixels: float, spec: VisionSpec = QWEN3_VL
) -> tuple[tuple[tuple[int, int], ...], int]:
    """Image sizes (pixels) and total image tokens of pages (sizes in points) rendered under ``max_pixels``."""
    sizes = tuple(fitted_size(w, h, max_pixels) for w, h in page_sizes_pt)
    return sizes, sum(image_tokens(w, h, spec) for w, h in sizes)


def choose_page_budget(
    page_sizes_pt: list[tuple[float, float]],
    text_tokens: int,
    budget: PromptBudget = PromptBudget(),
    spec: VisionSpec = QWEN3_VL,
) -> BudgetChoice | None:
    """Start from the evaluation budget and lower it by ``budget.step`` until image tokens + ``text_tokens`` +
    ``budget.headroom_tokens`` fit ``budget.max_prompt_length``; None when even ``min_pixels_per_page`` does not.

    ``page_sizes_pt``: ``(width, height)`` in points of each page of the window."""
    if not page_sizes_pt:
        raise ValueError("a window needs at least one page")
    start = budget.start_pixels(len(page_sizes_pt))
    pixels = start
    while True:
        sizes, tokens = window_image_tokens(page_sizes_pt, pixels, spec)
        if tokens + text_tokens + budget.headroom_tokens <= budget.max_prompt_length:
            return BudgetChoice(pixels, sizes, tokens, text_tokens, lowered=pixels < start)
        if pixels <= budget.min_pixels_per_page:
            return None
        pixels = max(budget.min_pixels_per_page, pixels * budget.step)
