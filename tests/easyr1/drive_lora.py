"""LoRA target selection as EasyR1's FSDP worker makes it, on a tiny random Qwen3-VL.

    drive_lora.py ARGV_JSON MODEL_DIR

Loads the recipe with EasyR1's config loader, the model with the auto class FSDPWorker._build_model_optimizer picks
(AutoModelForImageTextToText for a Qwen3-VL config; eager attention here, flash-attn needs a GPU), then makes the
worker's ``peft.LoraConfig(...)`` call with the same arguments and ``get_peft_model``. Reports every module that
got an adapter, every Linear that did not, and whether the worker's source still makes that call.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import load_config, report, write_tiny_qwen3vl  # noqa: E402


def main() -> None:
    argv, model_dir = json.loads(sys.argv[1]), sys.argv[2]
    write_tiny_qwen3vl(model_dir, with_weights=True)
    config = load_config(argv + [f"worker.actor.model.model_path={model_dir}"])
    import peft
    import torch
    from peft import TaskType, get_peft_model
    from transformers import AutoConfig, AutoModelForImageTextToText
    from verl.workers.fsdp_workers import FSDPWorker

    model_config = config.worker.actor.model
    hf_config = AutoConfig.from_pretrained(model_config.model_path)
    assert type(hf_config) in AutoModelForImageTextToText._model_mapping.keys()
    model = AutoModelForImageTextToText.from_pretrained(
        model_config.model_path, config=hf_config, torch_dtype=torch.float32, attn_implementation="eager"
    )
    # FSDPWorker._build_model_optimizer at b44b311, the LoRA branch:
    if model_config.lora.target_modules == "all-linear":
        target_modules = model_config.lora.target_modules
    else:
        target_modules = [item.strip() for item in model_config.lora.target_modules.split(",") if item.strip()]
    lora_config = peft.LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=model_config.lora.rank,
        lora_alpha=model_config.lora.alpha,
        target_modules=target_modules,
        exclude_modules=model_config.lora.exclude_modules,
    )
    model = get_peft_model(model, lora_config)
    source = inspect.getsource(FSDPWorker._build_model_optimizer)
    adapted = sorted(n for n, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A) > 0)
    plain = sorted(
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and not any(n.startswith(a + ".") for a in adapted) and "lora_" not in n
    )
    report(
        {
            "rank": model_config.lora.rank,
            "exclude_modules": model_config.lora.exclude_modules,
            "adapted": adapted,
            "plain_linear": plain,
            "worker_call_present": all(
                s in source
                for s in (
                    "peft.LoraConfig(",
                    "task_type=TaskType.CAUSAL_LM",
                    "r=model_config.lora.rank",
                    "lora_alpha=model_config.lora.alpha",
                    "target_modules=target_modules",
                    "exclude_modules=model_config.lora.exclude_modules",
                )
            ),
            "peft": peft.__version__,
        }
    )


if __name__ == "__main__":
    main()
