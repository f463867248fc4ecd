"""Randomly initialised Qwen3-VL checkpoints that a real vLLM (the CPU build in ``.venv-vllm``) can serve, made offline.

vLLM's CPU attention rejects a text ``head_dim`` of 8 (:mod:`tests.support.tiny_qwen3vl`'s tiny model), and its
structured outputs need a byte-level BPE tokenizer (a word-level one makes the grammar reject every token). So these
checkpoints have a text model of hidden size 128 in 4 heads of 32 and a 600-token byte-level BPE trained here, in
process, on the project's own prompt text, with the special tokens of Qwen's tokenizer.

One checkpoint per role, each with a chat template of the same structure as the real model's:

* ``judge``: Qwen3.5's thinking template. ``enable_thinking`` (default true) is honoured: with it on, the generation
  prompt opens ``<think>\\n`` so the reply starts inside the reasoning with no opening tag; off, the prompt carries an
  empty ``<think>\\n\\n</think>\\n\\n`` block and the reply is the answer.
* ``embedder``: Qwen3-VL-Embedding's instruction format: the system turn holds the instruction, the user turn the
  image then the text, and the prompt ends with the generation prompt (the embedding is taken at its last token).
* ``policy``: Qwen3-VL's template: one ``<|vision_start|><|image_pad|><|vision_end|>`` per image, in order.

``write_checkpoint(path, role)`` is run by ``.venv-vllm``'s Python (:func:`build`), so the files are written by the
transformers version vLLM itself reads; the project's ``.venv`` (a newer transformers) loads them too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reward.tiny_policy import (  # the policy's tokenizer builder, template and dimensions are the product's
    CONTENT_MACRO,
    QWEN3_VL_TEMPLATE,
    SPECIAL,
    TEXT,
    TURNS,
    VISION,
    write_bpe_tokenizer,
)

VOCAB_SIZE = 600
ROLES = ("judge", "embedder", "policy")

MIN_PIXELS = 4 * 32 * 32
"""The image processor's smallest area (the embedding encoder's default ``min_pixels``)."""
MAX_PIXELS = 1800 * 32 * 32
"""The image processor's largest area (the embedding encoder's default ``max_pixels``)."""

QWEN35_THINKING_TEMPLATE = (
    CONTENT_MACRO + TURNS + "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
"""Qwen3.5's thinking template, structure only: thinking is on unless ``enable_thinking`` is false; on, the
generation prompt opens ``<think>`` (the reply has no opening tag); off, it closes an empty reasoning block."""
TEMPLATES = {"judge": QWEN35_THINKING_TEMPLATE, "embedder": QWEN3_VL_TEMPLATE, "policy": QWEN3_VL_TEMPLATE}


def _corpus() -> list[str]:
    """Text the BPE is trained on: the project's prompts and a few document words and digits."""
    root = Path(__file__).resolve().parents[2]
    texts = [p.read_text(encoding="utf-8") for p in sorted((root / "recipes" / "prompts").glob("*"))]
    texts += [
        '{"answer": 5, "relevance": 4, "coverage": 3, "crop_relevance": [1, 0]}',
        "<qa_acc>4</qa_acc> <relevance_score>3</relevance_score> 0 1 2 3 4 5 6 7 8 9",
        "Revenue grew by 12% in 2023. Net income fell. Represent the user's input. Retrieve the region of a page.",
    ]
    return texts


def write_tokenizer(path: str | Path) -> int:
    """A byte-level BPE of :data:`VOCAB_SIZE` tokens with Qwen's special tokens, saved in ``path``; returns its
    size (the embedding rows the model needs)."""
    return write_bpe_tokenizer(path, _corpus(), VOCAB_SIZE)


def write_checkpoint(path: str | Path, role: str) -> None:
    """Tokenizer, processor (image and video), chat template, config and seeded random weights of ``role`` in
    ``path`` (run with ``.venv-vllm``'s Python: :func:`build`)."""
    import torch
    from transformers import (
        AutoTokenizer,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    if role not in ROLES:
        raise ValueError(f"role {role!r} is not one of {ROLES}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    n_vocab = write_tokenizer(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL}
    cfg = Qwen3VLConfig(
        text_config={**TEXT, "vocab_size": n_vocab, "eos_token_id": ids["<|im_end|>"]},
        vision_config=VISION,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    cfg.eos_token_id = ids["<|im_end|>"]
    torch.manual_seed({"judge": 1, "embedder": 2, "policy": 3}[role])
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.save_pretrained(path)
    size = {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}
    image = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, size=size)
    video = Qwen3VLVideoProcessor(patch_size=16, merge_size=2, temporal_patch_size=2)
    processor = Qwen3VLProcessor(
        image_processor=image, tokenizer=tokenizer, video_processor=video, chat_template=TEMPLATES[role]
    )
    processor.save_pretrained(path)
    tokenizer.chat_template = TEMPLATES[role]
    tokenizer.save_pretrained(path)
    (path / "chat_template.jinja").write_text(TEMPLATES[role], encoding="utf-8")
    (path / "tiny_vllm_role.json").write_text(json.dumps({"role": role}), encoding="utf-8")


def build(python: str | Path, path: str | Path, role: str, timeout_s: float = 600) -> Path:
    """Write the ``role`` checkpoint into ``path`` by running :func:`write_checkpoint` under ``python`` (the vLLM
    venv's interpreter); returns ``path``. Raises ``RuntimeError`` with the child's stderr when it fails."""
    path = Path(path)
    if (path / "tiny_vllm_role.json").is_file():
        return path
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from tests.support.tiny_vllm import write_checkpoint; write_checkpoint(sys.argv[2], sys.argv[3])"
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [str(python), "-c", code, str(root), str(path), role], capture_output=True, text=True, timeout=timeout_s
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the tiny {role} checkpoint failed:\n{proc.stderr[-4000:]}")
    return path


if __name__ == "__main__":  # python -m tests.support.tiny_vllm DIR ROLE (with .venv-vllm's python)
    write_checkpoint(sys.argv[1], sys.argv[2])
