"""The trainer's side of one prompt: EasyR1's own processor loader on a checkpoint, the prompt's token ids.

    drive_tokens.py SPEC_JSON

SPEC: {"model_dir": checkpoint folder, "messages": OpenAI-style chat messages (the system text, then the user turn's
``image_url`` parts as ``data:image/jpeg;base64`` URLs and its text), as ``eval infer`` sends them to vLLM}.
Loads the processor with ``verl.utils.tokenizer.get_processor`` (what EasyR1's ``main`` calls on
``worker.actor.model.model_path``), renders the messages with its chat template (an ``image_url`` part becomes the
``{"type": "image"}`` part EasyR1's dataset writes) and runs the processor on the text and the decoded images, as
EasyR1's ``RLHFDataset`` does. Reports the prompt's token count and ids.
"""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import report  # noqa: E402


def main() -> None:
    from PIL import Image
    from verl.utils.tokenizer import get_processor

    spec = json.loads(Path(sys.argv[1]).read_text())
    processor = get_processor(spec["model_dir"])
    images, messages = [], []
    for m in spec["messages"]:
        if isinstance(m["content"], str):
            messages.append(m)
            continue
        parts = []
        for part in m["content"]:
            if part["type"] == "image_url":
                data = part["image_url"]["url"].split(",", 1)[1]
                images.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
                parts.append({"type": "image"})
            else:
                parts.append(part)
        messages.append({"role": m["role"], "content": parts})
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = processor(text=[text], images=images or None, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    report({"ok": True, "prompt_tokens": int(ids.shape[0]), "ids": [int(i) for i in ids], "images": len(images)})


if __name__ == "__main__":
    main()
