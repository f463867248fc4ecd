"""``colqwen2`` (data_prep/encoders/colqwen2.py) on a tiny randomly initialised ColQwen2 built in a folder: token
vectors, LAT's late-interaction score against transformers' own scorer, the single-vector interface, and the LAT
step reward scored with it (reward/lat.py). No download: the checkpoint is made here."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from core.errors import InputError

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "ColQwen2ForRetrieval"):
    pytest.skip("this transformers has no ColQwen2", allow_module_level=True)

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]  # fmt: skip
WORDS = "query describe image user assistant revenue rose table lists yields shenzhen test site highest".split()
PIXELS = 28 * 28 * 4  # at most 4 visual tokens per image after the 2x2 merge


def _tiny_colqwen2(path) -> None:
    import torch
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import (
        ColQwen2Config,
        ColQwen2ForRetrieval,
        ColQwen2Processor,
        PreTrainedTokenizerFast,
        Qwen2VLConfig,
    )
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    vocab = {t: i for i, t in enumerate(SPECIAL + ["[UNK]"] + sorted(set(WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"), pre_tokenizers.Punctuation()]
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="<|endoftext|>",
                                        extra_special_tokens=SPECIAL[1:])  # fmt: skip
    images = Qwen2VLImageProcessorPil(patch_size=14, merge_size=2, temporal_patch_size=2, min_pixels=28 * 28,
                                      max_pixels=PIXELS)  # fmt: skip
    ColQwen2Processor(image_processor=images, tokenizer=tokenizer).save_pretrained(path)
    vlm = Qwen2VLConfig(
        text_config=dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [1, 1, 2]}),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, num_heads=4, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=vocab["<|image_pad|>"], video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"], vision_end_token_id=vocab["<|vision_end|>"],
    )  # fmt: skip
    torch.manual_seed(0)
    ColQwen2ForRetrieval(ColQwen2Config(vlm_config=vlm, embedding_dim=16)).eval().save_pretrained(path)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-colqwen2")
    _tiny_colqwen2(path)
    return path


@pytest.fixture(scope="module")
def enc(ckpt):
    from data_prep.encoders import get_encoder

    return get_encoder("colqwen2", model_path=str(ckpt), max_pixels=PIXELS, batch_size=2)


IMAGES = [Image.new("RGB", (60, 40), "white"), Image.new("RGB", (30, 90), (20, 40, 200)),
          Image.new("RGB", (50, 50), "black")]  # fmt: skip
TEXTS = ["revenue rose", "the table lists yields", "shenzhen"]


def test_registered_and_settings_checked(ckpt):
    from data_prep.encoders import encoder_names, get_encoder

    assert "colqwen2" in encoder_names()
    with pytest.raises(InputError, match="colqwen2: batch_size"):
        get_encoder("colqwen2", batch_size=0)
    with pytest.raises(InputError, match="colqwen2: max_pixels"):
        get_encoder("colqwen2", max_pixels=10)
    missing = ckpt.parent / "no-such-checkpoint"
    with pytest.raises(InputError, match="colqwen2: cannot load .*no-such-checkpoint"):
        get_encoder("colqwen2", model_path=str(missing)).embed_texts(["x"])
    fp = get_encoder("colqwen2", model_path=str(ckpt)).fingerprint()
    name, settings = fp.split(":", 1)
    assert name == "colqwen2" and json.loads(settings)["model_path"] == str(ckpt)


def test_token_vectors_are_unit_rows_without_padding(enc):
    qs = enc.query_tokens(TEXTS)  # batch_size 2: two batches, the first padded to its longer text
    ps = enc.image_tokens(IMAGES)
    assert [q.shape[1] for q in qs + ps] == [16] * 6
    assert len({q.shape[0] for q in qs}) > 1  # padding left out: lengths differ
    for t in qs + ps:
        np.testing.assert_allclose(np.linalg.norm(t, axis=1), 1.0, atol=1e-5)
    # an image's tokens include its visual tokens (at most 4 after the merge) and the prompt around them
    alone = enc.image_tokens(IMAGES[:1])[0]
    np.testing.assert_allclose(alone, ps[0], atol=1e-5)  # batching does not change an image's vectors


def test_late_interaction_matches_transformers_scorer(enc):
    """LAT's score is transformers' MaxSim sum divided by the query's token count."""
    import torch

    scores = enc.late_interaction(TEXTS, IMAGES)
    assert scores.shape == (3,) and np.all(np.abs(scores) <= 1.0 + 1e-6)
    qs, ps = enc.query_tokens(TEXTS), enc.image_tokens(IMAGES)
    ref = enc._processor.score_retrieval([torch.from_numpy(q) for q in qs], [torch.from_numpy(p) for p in ps])
    expected = np.diag(ref.float().numpy()) / np.array([len(q) for q in qs])
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="one image per text"):
        enc.late_interaction(TEXTS, IMAGES[:2])


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("cq-cache"))


def test_single_vector_interface(enc, cache):
    import dataclasses

    t, i = enc.embed_texts(TEXTS), enc.embed_images(IMAGES)
    assert t.shape == (3, 16) and i.shape == (3, 16) and t.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(np.vstack([t, i]), axis=1), 1.0, atol=1e-5)
    expected = np.mean(enc.query_tokens(TEXTS[:1])[0], axis=0)
    np.testing.assert_allclose(t[0], expected / np.linalg.norm(expected), atol=1e-5)
    assert enc.embed_texts([]).shape == (0, 16)
    sliver = Image.new("RGB", (600, 2), "white")  # 300:1, beyond Qwen2-VL's limit: padded, not refused
    assert enc.embed_images([sliver]).shape == (1, 16)
    b = cache.blocks[0]
    thin = dataclasses.replace(b, bbox=(b.bbox[0], b.bbox[1], b.bbox[2], b.bbox[1] + 0.01))  # widened to 4 pt
    with cache.open_pdf() as doc:
        got = enc.embed_blocks(doc, [b, thin])
        crop = doc.crop(b.page, b.bbox, dpi=enc.dpi)
    assert got.shape == (2, 16)
    np.testing.assert_allclose(got[0], enc.embed_images([crop])[0], atol=1e-5)  # a block is its crop


def test_lat_step_reward_with_colqwen2_is_lats_late_interaction(enc, cache):
    """``reward_form: lat`` with the ColQwen2 encoder: the step similarities are the crops' late-interaction
    scores against the step texts (tau -1: any score passes)."""
    from reward.config import RewardConfig
    from reward.lat import LateInteractionStepEmbedder, locate, make_step_embedder, parse_coe
    from reward.pipeline import RewardScorer
    from tests.reward.test_lat_reward import CAPTION, ROW, block, gt, response

    embedder = make_step_embedder(enc, dpi=72)
    assert isinstance(embedder, LateInteractionStepEmbedder) and embedder.name == "late-interaction:colqwen2"
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    r = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical", lat={"tau": -1.0})
    ((d, _),) = RewardScorer(cfg, step_embedder=embedder).score(
        [{"response": r, "response_length": 1, "ground_truth": gt(cache)}]
    )
    regions = [locate(s, None, cache) for s in parse_coe(r).steps]
    with cache.open_pdf() as doc:
        crops = [doc.crop(x.page, x.bbox, dpi=72) for x in regions]
    expected = enc.late_interaction([x.text for x in regions], crops)
    assert d.min_similarity == pytest.approx(float(expected.min()), abs=1e-5)
    assert (d.step, d.unscorable) == (1.0, 0.0)
