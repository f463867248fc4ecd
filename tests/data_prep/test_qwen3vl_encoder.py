"""The ``qwen3-vl-embedding`` encoder's in-process (transformers) transport, on a tiny random Qwen3-VL built here.

The checkpoint (config, weights, a word-level tokenizer with Qwen's special tokens, the image processor's config)
is written to a temporary directory once per module and loaded through the encoder's real loading code.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from reportlab.pdfgen import canvas

from core.errors import InputError
from data_prep.document import Document
from data_prep.encoders import get_encoder
from data_prep.encoders.qwen3vl import (
    Qwen3VLEmbeddingEncoder,
    normalize_instruction,
    prepare_image,
    render_prompt,
    widen_bbox,
)
from data_prep.types import Block
from tests.support.tiny_qwen3vl import HIDDEN, MERGE, SMALL_PIXELS, write_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-qwen3-vl")
    model, vocab = write_checkpoint(path)
    return path, model, vocab


@pytest.fixture(scope="module")
def pdf(tmp_path_factory):
    """A one-page PDF with three text lines of different lengths and a filled rectangle."""
    path = tmp_path_factory.mktemp("q3pdf") / "blocks.pdf"
    c = canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    c.setFont("Helvetica", 12)
    c.drawString(20, 270, "Revenue grew by 12% in 2023.")
    c.drawString(20, 240, "Net income fell.")
    c.drawString(20, 210, "Sales rose sharply in every region of the document.")
    c.rect(250, 40, 120, 90, fill=1)
    c.showPage()
    c.save()
    return path


BLOCKS = [
    Block(0, 1, (18, 18, 200, 34), "text", "Revenue grew by 12% in 2023."),
    Block(1, 1, (18, 48, 120, 64), "text", "Net income fell."),
    Block(2, 1, (18, 78, 330, 94), "text", "Sales rose sharply in every region of the document."),
    Block(3, 1, (250, 170, 370, 260), "figure", ""),
]
QUERIES = ["revenue grew", "net income fell by 12 % in 2023", "table", ""]


def _encoder(checkpoint, **kw) -> Qwen3VLEmbeddingEncoder:
    path, _, _ = checkpoint
    kw.setdefault("max_pixels", SMALL_PIXELS)
    kw.setdefault("model", "tiny-qwen3-vl")
    return get_encoder("qwen3-vl-embedding", model_path=str(path), **kw)


def test_dim_comes_from_the_checkpoint_config(checkpoint):
    assert _encoder(checkpoint).dim == HIDDEN


def test_block_and_query_vectors_have_unit_norm(checkpoint, pdf):
    enc = _encoder(checkpoint)
    with Document.open(pdf) as doc:
        emb = enc.embed_blocks(doc, BLOCKS)
    q = enc.embed_texts(QUERIES)
    assert emb.shape == (4, HIDDEN) and emb.dtype == np.float32
    assert q.shape == (4, HIDDEN)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-6)
    assert enc.embed_texts([]).shape == (0, HIDDEN)


def test_pooled_vector_is_the_final_prompt_token_of_a_manual_forward_pass(checkpoint, pdf):
    path, model, vocab = checkpoint
    enc = _encoder(checkpoint, batch_size=4, padding_side="right")
    with Document.open(pdf) as doc:
        got = enc.embed_blocks(doc, BLOCKS)
        crop = prepare_image(doc.crop(1, BLOCKS[1].bbox, dpi=150), SMALL_PIXELS, 100.0)
    backend = enc.backend
    feats = backend.image_processor(
        [crop], size={"shortest_edge": 4 * 32 * 32, "longest_edge": SMALL_PIXELS}, return_tensors="pt"
    )
    n_img = int(feats["image_grid_thw"][0].prod()) // MERGE**2
    prompt = render_prompt("Represent the user's input.", n_img, None)
    ids = backend.tokenizer(prompt, return_tensors="pt")["input_ids"]
    assert ids[0, -1].item() == vocab["\n"]  # the final token is the "\n" after "assistant"
    with torch.no_grad():
        out = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            pixel_values=feats["pixel_values"],
            image_grid_thw=feats["image_grid_thw"],
            mm_token_type_ids=(ids == vocab["<|image_pad|>"]).int(),
            use_cache=False,
        )
    manual = out.last_hidden_state[0, -1].numpy()
    np.testing.assert_allclose(got[1], manual / np.linalg.norm(manual), atol=1e-5)

    # In that right-padded batch, block 1 is shorter than block 2: the batch's last column is padding, and pooling
    # there would give a different vector. This is what the mask-based gather avoids.
    with Document.open(pdf) as doc:
        mask = backend.encode_batch([enc.block_item(doc, b) for b in BLOCKS])["attention_mask"]
    assert mask[1, -1].item() == 0 and mask[1].sum() < mask.shape[1]


@pytest.mark.parametrize("side", ["right", "left"])
def test_batched_vectors_equal_one_at_a_time_on_either_padding_side(checkpoint, pdf, side):
    batched = _encoder(checkpoint, batch_size=4, padding_side=side)
    single = _encoder(checkpoint, batch_size=1)
    with Document.open(pdf) as doc:
        b_blocks, s_blocks = batched.embed_blocks(doc, BLOCKS), single.embed_blocks(doc, BLOCKS)
    # The rows really have different lengths, so padding is exercised.
    with Document.open(pdf) as doc:
        mask = batched.backend.encode_batch([batched.block_item(doc, b) for b in BLOCKS])["attention_mask"]
    assert len(set(mask.sum(1).tolist())) > 1
    np.testing.assert_allclose(b_blocks, s_blocks, atol=1e-5)
    # Text-only batches take the other code path (positions numbered from the attention mask).
    np.testing.assert_allclose(batched.embed_texts(QUERIES), single.embed_texts(QUERIES), atol=1e-5)


def test_left_padded_rows_start_with_padding_and_pool_the_same_token(checkpoint):
    enc = _encoder(checkpoint, padding_side="left")
    batch = enc.backend.encode_batch([enc.query_item(q) for q in QUERIES])
    assert batch["attention_mask"][2, 0].item() == 0  # the short query is padded on the left
    assert batch["attention_mask"][:, -1].tolist() == [1, 1, 1, 1]


def test_system_instruction_is_in_the_rendered_prompt(checkpoint):
    enc = _encoder(checkpoint, query_instruction="Find the quoted table row")
    assert render_prompt("Find the quoted table row", None, "revenue grew") == (
        "<|im_start|>system\nFind the quoted table row.<|im_end|>\n"
        "<|im_start|>user\nrevenue grew<|im_end|>\n<|im_start|>assistant\n"
    )
    batch = enc.backend.encode_batch([enc.query_item("revenue grew")])
    tokens = enc.backend.tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    assert tokens[:3] == ["<|im_start|>", "system", "\n"]
    assert tokens[tokens.index("<|im_end|>") - 1] == "."  # instruction ends with the added full stop
    assert "table" in tokens[: tokens.index("<|im_end|>")]


@pytest.mark.parametrize(
    "instruction, text, n_image, user",
    [
        ("Represent the user's input.", None, 3, "<|vision_start|>" + "<|image_pad|>" * 3 + "<|vision_end|>"),
        ("Represent", "a b", 1, "<|vision_start|><|image_pad|><|vision_end|>a b"),  # image then text
        ("Represent", "", None, "NULL"),  # neither image nor text: the model's embedder sends "NULL"
    ],
)
def test_render_prompt_layout(instruction, text, n_image, user):
    assert render_prompt(instruction, n_image, text) == (
        f"<|im_start|>system\n{normalize_instruction(instruction)}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Represent the user's input.", "Represent the user's input."),  # already punctuated
        ("  Find the row  ", "Find the row."),  # stripped, full stop added
        ("找到证据。", "找到证据。"),  # CJK full stop counts as punctuation
        ("What matches?", "What matches?"),
        ("", "Represent the user's input."),  # empty: the model's default instruction, as its embedder does
        ("   ", "Represent the user's input."),  # blank after stripping: the same
    ],
)
def test_normalize_instruction(raw, expected):
    assert normalize_instruction(raw) == expected


def test_matryoshka_dim_is_the_normalised_prefix_of_the_full_vector(checkpoint):
    full = _encoder(checkpoint).embed_texts(QUERIES)
    cut = _encoder(checkpoint, dim=16).embed_texts(QUERIES)
    prefix = full[:, :16] / np.linalg.norm(full[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, prefix, atol=1e-5)
    with pytest.raises(InputError, match="exceeds the model's 32 dimensions"):
        _ = _encoder(checkpoint, dim=64).dim


def test_text_block_content_embeds_the_block_text_not_the_crop(checkpoint, pdf):
    image = _encoder(checkpoint)
    text = _encoder(checkpoint, block_content="text")
    with Document.open(pdf) as doc:
        assert text.block_item(doc, BLOCKS[0]).image is None
        assert text.block_item(doc, BLOCKS[3]).text == "figure"  # image-only block: its type name
        a, b = image.embed_blocks(doc, BLOCKS[:1]), text.embed_blocks(doc, BLOCKS[:1])
    assert float(a[0] @ b[0]) < 0.999


def test_fingerprint_follows_the_settings_that_change_vectors(checkpoint):
    base = _encoder(checkpoint).fingerprint()
    assert _encoder(checkpoint).fingerprint() == base
    for change in (
        {"document_instruction": "Represent this region."},
        {"query_instruction": "Find it."},
        {"dpi": 200},
        {"dim": 16},
        {"block_content": "text"},
        {"model": "other-model"},
    ):
        assert _encoder(checkpoint, **change).fingerprint() != base, change
    # Transport and batching knobs do not change vectors, so they do not change the key.
    assert _encoder(checkpoint, batch_size=1, padding_side="left").fingerprint() == base
    http = get_encoder(
        "qwen3-vl-embedding",
        model="tiny-qwen3-vl",
        transport="http",
        url="http://127.0.0.1:9/v1",
        dim=HIDDEN,
        max_pixels=SMALL_PIXELS,
    )
    assert http.fingerprint() == base


def test_missing_checkpoint_is_a_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match="not a local checkpoint directory"):
        get_encoder("qwen3-vl-embedding", model_path=str(tmp_path / "nope"))
    with pytest.raises(InputError, match="unknown settings"):
        get_encoder("qwen3-vl-embedding", model_path=str(tmp_path), batchsize=3)
    with pytest.raises(InputError, match="needs the server's url"):
        get_encoder("qwen3-vl-embedding", transport="http")


@pytest.mark.parametrize(
    "size, max_pixels, ratio, expected",
    [
        ((100, 50), 10_000, 100.0, (100, 50)),  # within both limits: unchanged
        ((400, 100), 10_000, 100.0, (200, 50)),  # too many pixels: scaled down, aspect kept
        ((1000, 2), 10_000_000, 100.0, (1000, 10)),  # a hairline: padded to 100:1
        ((3, 900), 10_000_000, 100.0, (9, 900)),  # a tall sliver: padded sideways
    ],
)
def test_prepare_image_limits_pixels_and_aspect(size, max_pixels, ratio, expected):
    img = prepare_image(Image.new("RGB", size, (0, 0, 0)), max_pixels, ratio)
    assert img.size == expected
    if size[1] == 2:  # padding is white, the original stays centred
        px = np.asarray(img)
        assert px[0, 0].tolist() == [255, 255, 255] and px[5, 500].tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    "bbox, expected",
    [
        ((10, 10, 50, 30), (10, 10, 50, 30)),  # large enough: unchanged
        ((10, 20, 50, 20), (10, 18, 50, 22)),  # zero height: grown to 4 pt around its centre
        ((0, 0, 0, 0), (0, 0, 4, 4)),  # at the corner: grown inside the page
        ((99, 99, 100, 100), (96, 96, 100, 100)),  # at the far corner
    ],
)
def test_widen_bbox_keeps_crops_non_empty_and_inside_the_page(bbox, expected):
    assert widen_bbox(bbox, (100.0, 100.0), 4.0) == pytest.approx(expected)
