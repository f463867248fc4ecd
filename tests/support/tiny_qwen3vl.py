"""Randomly initialised Qwen3-VL checkpoints for the tests and benchmarks that run the real transformers code on a
CPU: a word-level tokenizer with Qwen's special tokens, the image processor's config, a model config and (unless
asked not to) its weights, written to one folder.

``write_checkpoint(path)`` is the tiny model of the encoder, reward and attention tests (2 text layers of 4 heads,
hidden size 32). ``text``/``vision`` override the config's dimensions; :data:`QWEN3_VL_8B` holds the shapes of
Qwen3-VL-8B-Instruct (8,767,123,696 parameters with its LM head, as published), for cost measurements that need the
real shapes but not the real weights.
"""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
WORDS = (
    "\n system user assistant represent the input retrieve region of a document page paragraph list table figure "
    "or caption that contains this quoted evidence revenue grew by 12 % in 2023 net income fell sales rose . , ' "
    "( ) : - null text title"
).split(" ")
HIDDEN = 32
MERGE = 2
SMALL_PIXELS = 32 * 32 * 12  # keeps the tiny model's image token count small (at most 12)

TINY_TEXT = dict(
    hidden_size=HIDDEN,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
)
TINY_VISION = dict(
    depth=2,
    hidden_size=32,
    intermediate_size=64,
    num_heads=4,
    out_hidden_size=HIDDEN,
    num_position_embeddings=64,
    deepstack_visual_indexes=[1],
)

QWEN3_VL_8B = {
    "text": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_section": [24, 20, 20]},
    ),
    "vision": dict(
        depth=27,
        hidden_size=1152,
        intermediate_size=4304,
        num_heads=16,
        out_hidden_size=4096,
        num_position_embeddings=2304,
        deepstack_visual_indexes=[8, 16, 24],
    ),
}
"""Qwen3-VL-8B-Instruct's dimensions (its config.json); with them ``Qwen3VLForConditionalGeneration`` has
8,767,123,696 parameters, the published 8.77B (checked in tests/eval/test_attention_attrib.py)."""


def write_tokenizer(path: str | Path) -> dict[str, int]:
    """The word-level tokenizer and the image processor's config; returns the vocabulary."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    vocab = {t: i for i, t in enumerate(SPECIAL + ["[UNK]"] + sorted({w for w in WORDS if w}))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    # "\n" stays a token (as in Qwen's BPE), so the prompt's final token is the "\n" after "assistant".
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[ \t]+"), behavior="removed"),
            pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
            pre_tokenizers.Punctuation(),
        ]
    )
    PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="<|endoftext|>", extra_special_tokens=SPECIAL[1:]
    ).save_pretrained(path)
    Qwen2VLImageProcessorPil(patch_size=16, merge_size=MERGE, temporal_patch_size=2).save_pretrained(path)
    return vocab


def config(vocab: dict[str, int], text: dict | None = None, vision: dict | None = None):
    """A ``Qwen3VLConfig`` whose special token ids are the tokenizer's; ``text``/``vision`` replace the tiny
    dimensions (a ``vocab_size`` in ``text`` may exceed the tokenizer's: the extra rows are never looked up)."""
    from transformers import Qwen3VLConfig

    text_cfg = {"vocab_size": len(vocab), **(TINY_TEXT if text is None else text)}
    vision_cfg = {
        "patch_size": 16,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": 2,
        **(TINY_VISION if vision is None else vision),
    }
    return Qwen3VLConfig(
        text_config=text_cfg,
        vision_config=vision_cfg,
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["[UNK]"],
        vision_start_token_id=vocab["<|vision_start|>"],
        vision_end_token_id=vocab["<|vision_end|>"],
        tie_word_embeddings=bool(text_cfg.get("tie_word_embeddings", False)),
    )


def write_checkpoint(path: str | Path, text: dict | None = None, vision: dict | None = None) -> tuple[object, dict]:
    """Tokenizer, image processor, config and seeded random weights in ``path``; returns ``(model, vocab)``."""
    import torch
    from transformers import Qwen3VLModel

    vocab = write_tokenizer(path)
    torch.manual_seed(0)
    model = Qwen3VLModel(config(vocab, text, vision)).eval()
    model.save_pretrained(path)
    return model, vocab
