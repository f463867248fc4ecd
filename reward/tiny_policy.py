"""A tiny random Qwen3-VL policy made offline, for GRPO on a CPU (the demo, the TRL tests and benchmarks).

Nothing downloads: the tokenizer is a byte-level BPE trained here, in process, on the text it will meet (the
project's prompts, the documents' text, well-formed ``{"answer", "quotes"}`` responses), with the special tokens of
Qwen's tokenizer; the model is a seeded random ``Qwen3VLForConditionalGeneration`` (text hidden 128 in 4 heads of 32,
2 layers; vision depth 2), about 1 M parameters. The vLLM tier's tiny checkpoints (``tests/support/tiny_vllm.py``)
share the tokenizer builder, the chat template and the dimensions.

The processor is image-only: transformers' ``Qwen3VLProcessor`` builds a video processor that needs torchvision,
which does not load beside the CPU torch; pages are images, so :func:`load_processor` pairs the tokenizer with
``Qwen2VLImageProcessorPil`` (PIL only) and no video processor.

:func:`warm_start` is the short supervised start (TRL's ``SFTTrainer``) a random policy needs before GRPO: it scores
0 on the reward (it writes no JSON), every advantage is 0 and GRPO never moves it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
    "<|video_pad|>", "<think>", "</think>",
]  # fmt: skip
"""Qwen's special tokens (``<|endoftext|>`` pads, ``<|im_end|>`` ends a turn)."""

TEXT = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=65536,
    rope_scaling={"rope_type": "default", "mrope_section": [8, 4, 4], "mrope_interleaved": True},
    rope_theta=10000.0,
    tie_word_embeddings=False,
)
"""The text model's dimensions (vLLM's CPU attention needs a head_dim of 32 or more)."""
VISION = dict(
    depth=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=2,
    out_hidden_size=128,
    num_position_embeddings=256,
    deepstack_visual_indexes=[1],
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
"""The vision tower's dimensions (one merged token per 32 x 32 pixels)."""

CONTENT_MACRO = (
    "{% macro content(c) %}"
    "{% if c is string %}{{ c }}"
    "{% else %}{% for part in c %}"
    "{% if part.type == 'image' or part.type == 'image_url' or 'image' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}"
    "{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endmacro %}"
)
TURNS = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ content(m.content) }}<|im_end|>\n{% endfor %}"
QWEN3_VL_TEMPLATE = CONTENT_MACRO + TURNS + "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
"""Qwen3-VL's chat template, structure only: turns in ``<|im_start|>role ... <|im_end|>``, an image placeholder per
image part, the generation prompt ``<|im_start|>assistant\\n``. ``CONTENT_MACRO`` (a message's content, an image
placeholder per image part) and ``TURNS`` (the turns) are its parts, shared with the vLLM tier's judge template."""

POLICY_VOCAB = 1200
"""BPE size of the policy's tokenizer: room for the documents' words, so a quote is a few dozen tokens."""
MIN_PIXELS = 4 * 32 * 32
"""Smallest page area the policy's image processor makes (4 image tokens)."""
POLICY_MAX_PIXELS = 16 * 32 * 32
"""Largest page area the tiny policy's image processor makes: 16 image tokens a page keep a CPU step short."""


def write_bpe_tokenizer(path: str | Path, texts: list[str], vocab_size: int, chat_template: str | None = None) -> int:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``texts`` with :data:`SPECIAL`, saved in ``path``
    (with ``chat_template`` when given); returns its size (the embedding rows a model needs)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", extra_special_tokens=SPECIAL[1:]
    )
    if chat_template is not None:
        fast.chat_template = chat_template
    fast.save_pretrained(path)
    return tok.get_vocab_size()


def qwen3vl_config(tokenizer, text: dict | None = None, vision: dict | None = None):
    """A ``Qwen3VLConfig`` of :data:`TEXT` / :data:`VISION` whose special token ids are ``tokenizer``'s."""
    from transformers import Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    cfg = Qwen3VLConfig(
        text_config={
            **(TEXT if text is None else text),
            "vocab_size": len(tokenizer),
            "eos_token_id": ids["<|im_end|>"],
        },
        vision_config=VISION if vision is None else vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    cfg.eos_token_id = ids["<|im_end|>"]
    cfg.pad_token_id = ids["<|endoftext|>"]
    return cfg


def random_model(tokenizer, seed: int):
    """A seeded random ``Qwen3VLForConditionalGeneration`` for ``tokenizer``, its generation ending at
    ``<|im_end|>``."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    cfg = qwen3vl_config(tokenizer)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(cfg)
    model.generation_config.eos_token_id = cfg.eos_token_id
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model


def image_processor(min_pixels: int = MIN_PIXELS, max_pixels: int = POLICY_MAX_PIXELS):
    """Qwen2-VL's PIL image processor (no torchvision) with Qwen3-VL's patching and these area bounds."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    return Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, temporal_patch_size=2, size=size)


def load_processor(path: str | Path, min_pixels: int | None = None, max_pixels: int | None = None):
    """The image-only Qwen3-VL processor of the checkpoint at ``path``: its tokenizer and chat template with
    ``Qwen2VLImageProcessorPil`` (its saved size bounds unless given) and no video processor."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    try:
        image = Qwen2VLImageProcessorPil.from_pretrained(path)
    except OSError:  # no preprocessor_config.json: the defaults
        image = image_processor()
    if min_pixels is not None or max_pixels is not None:
        size = dict(image.size or {})
        size["shortest_edge"] = min_pixels or size.get("shortest_edge", MIN_PIXELS)
        size["longest_edge"] = max_pixels or size.get("longest_edge", POLICY_MAX_PIXELS)
        image.size = size
    template = tokenizer.chat_template or QWEN3_VL_TEMPLATE
    return _image_only_class()(image, tokenizer, chat_template=template)


_CLASSES: dict[str, type] = {}


def _image_only_class() -> type:
    """``Qwen3VLProcessor`` without its video processor: transformers' processor takes its parts from its
    ``__init__``'s parameters, so this subclass's has none for video."""
    cls = _CLASSES.get("processor")
    if cls is None:
        from transformers import Qwen3VLProcessor

        class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
            def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
                super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)

        cls = _CLASSES["processor"] = ImageOnlyQwen3VLProcessor
    return cls


def policy_corpus(texts: list[str] = ()) -> list[str]:
    """The policy tokenizer's training text: the project's prompt files, ``texts`` (documents, questions,
    answers) and JSON response skeletons."""
    from recipes import prompt_path

    folder = Path(prompt_path("language_interface.jinja")).parent
    out = [p.read_text(encoding="utf-8") for p in sorted(folder.glob("*")) if p.is_file()]
    out += list(texts)
    out += ['{"answer": "", "quotes": ["", ""]}', "0 1 2 3 4 5 6 7 8 9 % . , : ; ( ) - | MWh"]
    return out


def write_policy(path: str | Path, texts: list[str] = (), seed: int = 0) -> Path:
    """A random tiny policy checkpoint in ``path``: tokenizer (BPE over :func:`policy_corpus` of ``texts``), chat
    template, image processor config, model config and seeded weights. Returns ``path``."""
    from transformers import AutoTokenizer

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_bpe_tokenizer(path, policy_corpus(texts), POLICY_VOCAB, QWEN3_VL_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(path)
    random_model(tokenizer, seed).save_pretrained(path)
    image_processor().save_pretrained(path)
    (path / "chat_template.jinja").write_text(QWEN3_VL_TEMPLATE, encoding="utf-8")
    return path


def warmup_responses(
    gold: tuple[str, list[str]], others: list[tuple[str, list[str]]], n: int, gold_share: float, rng: random.Random
) -> list[str]:
    """``n`` well-formed responses to one question for the warm-start: the gold answer with its evidence quotes
    ``gold_share`` of the time, else a random candidate of ``others`` (answers and quotes of other questions):
    the policy learns the format and a spread of answers for GRPO to sort out.

    >>> r = warmup_responses(("A", ["q"]), [("B", ["p"])], 4, 0.5, random.Random(0))
    >>> sorted(set(r)) == ['{"answer": "A", "quotes": ["q"]}', '{"answer": "B", "quotes": ["p"]}']
    True
    """
    out = []
    for _ in range(n):
        answer, quotes = gold if rng.random() < gold_share or not others else rng.choice(others)
        out.append(json.dumps({"answer": answer, "quotes": quotes}, ensure_ascii=False))
    return out


def warm_start(model_path: str | Path, rows: list[dict], out: str | Path, steps: int, seed: int, lr: float = 3e-3,
               batch_size: int = 8, log=None) -> Path:  # fmt: skip
    """Supervised warm-start of the full policy at ``model_path`` with TRL's ``SFTTrainer`` on ``rows``
    (``{"prompt": messages, "completion": messages, "images": [PIL images]}``, conversational prompt-completion
    pairs: the loss is on the completion only) for ``steps`` optimizer steps; saves the warm policy (weights,
    tokenizer, image processor) to ``out`` and returns it. ``log(step, loss)`` is called per logged step."""
    from datasets import Dataset
    from transformers import Qwen3VLForConditionalGeneration, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    out = Path(out)
    processor = load_processor(model_path)
    model = Qwen3VLForConditionalGeneration.from_pretrained(model_path)

    class _Log(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if log is not None and logs and "loss" in logs:
                log(state.global_step, float(logs["loss"]))

    args = SFTConfig(
        output_dir=str(out / "_sft"),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=lr,
        lr_scheduler_type="constant",
        logging_steps=max(1, steps // 10),
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        use_cpu=True,
        bf16=False,
        max_length=None,
        dataset_num_proc=None,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=processor,
        callbacks=[_Log()],
    )  # fmt: skip
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # ``log`` reports the loss
    trainer.train()
    model.save_pretrained(out)
    processor.tokenizer.save_pretrained(out)
    processor.image_processor.save_pretrained(out)
    (out / "chat_template.jinja").write_text(processor.tokenizer.chat_template or QWEN3_VL_TEMPLATE, encoding="utf-8")
    return out
