"""Qwen3-VL image-token arithmetic (data_prep/qwen_tokens.py), checked by hand and against transformers."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

from data_prep.qwen_tokens import (
    QWEN3_VL,
    PromptBudget,
    VisionSpec,
    choose_page_budget,
    estimate_text_tokens,
    fitted_size,
    image_pad_tokens,
    image_tokens,
    smart_resize,
    window_image_tokens,
)

LETTER = (612.0, 792.0)  # US letter page, points
A4 = (595.276, 841.89)

# (width, height) in pixels -> resized (width, height), worked out by hand from the formula in the module docstring
SMART_RESIZE_CASES = [
    ((816, 1224), (832, 1216)),  # 816/32 = 25.5 rounds to the even 26; 1224/32 = 38.25 -> 38
    ((800, 1200), (800, 1216)),  # 25 exactly; 1200/32 = 37.5 rounds to the even 38
    ((1000, 1000), (992, 992)),  # 31.25 -> 31 on both sides
    ((48, 1600), (64, 1600)),  # 1.5 rounds to the even 2; 64 * 1600 = 102,400 is above min_pixels
    ((32, 32), (256, 256)),  # below min_pixels 65,536: beta = 8, ceil(32 * 8 / 32) * 32 = 256
    ((100, 50), (384, 192)),  # beta = sqrt(65536 / 5000) = 3.62: ceil(11.31) = 12 cells, ceil(5.66) = 6 cells
    ((1, 200), (32, 3648)),  # width rounds to 0 cells: upscaled, ceil(0.57) = 1 cell, ceil(113.1) = 114 cells
    ((5000, 4000), (4576, 3648)),  # above max_pixels 16,777,216: beta = 1.0918, floor(143.1) = 143, floor(114.5) = 114
]


@pytest.mark.parametrize("size,expected", SMART_RESIZE_CASES)
def test_smart_resize_matches_the_worked_examples(size, expected):
    assert smart_resize(*size) == expected


@pytest.mark.parametrize(
    "width,height,tokens",
    [
        (816, 1224, 26 * 38 + 2),  # a 1 MP letter-shaped page: 990 tokens
        (1000, 1000, 31 * 31 + 2),  # 963
        (32, 32, 8 * 8 + 2),  # upscaled to 256 x 256
        (5000, 4000, 143 * 114 + 2),  # downscaled to 4576 x 3648
    ],
)
def test_image_tokens_are_32_pixel_cells_plus_the_two_vision_markers(width, height, tokens):
    assert image_tokens(width, height) == tokens
    assert image_pad_tokens(width, height) == tokens - 2


def test_extreme_aspect_ratio_is_rejected_like_the_processor():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2010)


def _image_processor(spec: VisionSpec):
    pytest.importorskip("transformers")  # absent: nothing to compare with; present: the module must be there
    # A transformers release that moves or renames this processor fails here instead of skipping.
    mod = importlib.import_module("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    # Qwen3-VL-8B-Instruct's preprocessor_config.json: patch 16, merge 2, temporal patch 2, these pixel bounds.
    return mod.Qwen2VLImageProcessorPil(
        patch_size=spec.patch_size,
        merge_size=spec.merge_size,
        temporal_patch_size=2,
        size={"shortest_edge": spec.min_pixels, "longest_edge": spec.max_pixels},
    )


SMALL_MAX = VisionSpec(max_pixels=500_000)  # the downscale branch without a 17-megapixel test image


@pytest.mark.parametrize(
    "width,height,spec",
    [
        (816, 1224, QWEN3_VL),  # 1 MP portrait page
        (1224, 816, QWEN3_VL),  # landscape
        (707, 1000, QWEN3_VL),  # A4 at about 0.7 MP
        (120, 90, QWEN3_VL),  # tiny: upscaled to min_pixels
        (33, 1500, QWEN3_VL),  # narrow strip
        (999, 1001, QWEN3_VL),  # just off the 32-pixel grid
        (816, 1224, SMALL_MAX),  # over max_pixels: downscaled
        (1500, 400, SMALL_MAX),  # over max_pixels, landscape strip
    ],
)
def test_token_count_equals_the_transformers_image_processor(width, height, spec):
    from PIL import Image

    proc = _image_processor(spec)
    img = Image.fromarray(np.full((height, width, 3), 255, dtype=np.uint8))
    out = proc(images=[img], return_tensors="np")
    t, gh, gw = (int(v) for v in out["image_grid_thw"][0])
    # processing_qwen3_vl.replace_image_token: grid_thw.prod() // merge_size**2 <|image_pad|> tokens
    assert image_pad_tokens(width, height, spec) == t * gh * gw // 4
    assert smart_resize(width, height, spec) == (gw * 16, gh * 16)
    assert image_pad_tokens(width, height, spec) == proc.get_number_of_image_patches(height, width) // 4


@pytest.mark.parametrize(
    "page_pt,max_pixels",
    [
        (LETTER, 1_000_000),
        (A4, 1_000_000),
        ((842.0, 595.0), 1_000_000),  # landscape A4
        (LETTER, 40_000),
        ((100.0, 3000.0), 250_000),  # long strip
        ((612.0, 792.0), 123_457),  # a budget that is no product of nice numbers
    ],
)
def test_fitted_size_stays_within_the_budget_and_keeps_the_aspect_ratio(page_pt, max_pixels):
    w, h = fitted_size(*page_pt, max_pixels)
    assert w * h <= max_pixels
    # one pixel more on either side would break the budget or the aspect ratio by more than rounding
    assert (w + 1) * (h + 1) > max_pixels
    assert abs(w / h - page_pt[0] / page_pt[1]) < 2.0 / min(w, h)


def test_fitted_size_of_a_letter_page_at_one_megapixel():
    # scale = sqrt(1e6 / (612 * 792)) = 1.43658 px/pt: 879.19 x 1137.77 pixels, floored
    assert fitted_size(*LETTER, 1e6) == (879, 1137)


@pytest.mark.parametrize(
    "text,tokens",
    [
        ("", 0),  # nothing
        ("abc", 1),  # 3 ASCII characters = 1 token at 3 characters a token
        ("abcd", 2),  # rounds up
        ("营业收入", 4),  # every CJK character is a token
        ("Revenue 营收", 5),  # 8 ASCII characters -> ceil(8 / 3) = 3, plus 2 CJK
    ],
)
def test_text_token_estimate(text, tokens):
    assert estimate_text_tokens(text) == tokens


def test_thirty_letter_pages_fit_48000_tokens_at_the_evaluation_budget():
    choice = choose_page_budget([LETTER] * 30, text_tokens=500)
    assert choice is not None and not choice.lowered
    assert choice.max_pixels == 1_000_000
    assert choice.image_sizes == ((879, 1137),) * 30
    # 879 x 1137 -> smart_resize 864 x 1152 (27.47 -> 27 cells, 35.53 -> 36 cells)
    assert choice.image_tokens == 30 * image_tokens(879, 1137) == 30 * (27 * 36 + 2)
    assert choice.prompt_tokens == 30 * 974 + 500


def test_budget_is_lowered_until_the_window_fits_and_no_further():
    budget = PromptBudget(max_prompt_length=12_000, headroom_tokens=500)
    pages = [LETTER] * 30
    choice = choose_page_budget(pages, text_tokens=300, budget=budget)
    assert choice is not None and choice.lowered
    assert choice.image_tokens + 300 + 500 <= 12_000
    # the step before (one factor of 0.9 higher) did not fit
    _, tokens_before = window_image_tokens(pages, choice.max_pixels / budget.step)
    assert tokens_before + 300 + 500 > 12_000
    assert choice.max_pixels == pytest.approx(1e6 * 0.9 ** round(math.log(choice.max_pixels / 1e6, 0.9)))


def test_budget_starts_from_the_total_pixel_budget_when_it_is_smaller():
    budget = PromptBudget(total_pixels=6e6)
    choice = choose_page_budget([LETTER] * 10, text_tokens=0, budget=budget)
    assert choice.max_pixels == 600_000 and not choice.lowered


def test_window_that_cannot_fit_at_the_floor_returns_none():
    budget = PromptBudget(max_prompt_length=3_000)
    # at the 65,536-pixel floor a letter page is 225 x 291 pixels, upscaled to 256 x 320: 8 * 10 + 2 = 82 tokens;
    # 30 pages = 2,460 tokens, plus the 1,024 headroom, exceed 3,000
    assert window_image_tokens([LETTER] * 30, 65_536)[1] == 2_460
    assert choose_page_budget([LETTER] * 30, text_tokens=0, budget=budget) is None


def test_vision_spec_defaults_are_qwen3_vl():
    assert QWEN3_VL == VisionSpec(16, 2, 65536, 16777216, 2)
    assert QWEN3_VL.factor == 32
