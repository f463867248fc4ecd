"""``eval infer --lora`` takes both layouts: EasyR1's and a TRL run's (eval.infer.lora_adapter_dir)."""

from __future__ import annotations

import pytest


def test_lora_layouts(tmp_path):
    """``--lora`` takes an adapter folder, EasyR1's step folder and a TRL run folder; anything else is one line."""
    from core.errors import InputError
    from eval.infer import lora_adapter_dir

    for sub in ("global_step_4/actor/lora_adapter", "trl_run/adapter", "trl_run/checkpoints/checkpoint-2"):
        (tmp_path / sub).mkdir(parents=True)
        (tmp_path / sub / "adapter_config.json").write_text("{}")
    assert lora_adapter_dir(tmp_path / "global_step_4") == tmp_path / "global_step_4/actor/lora_adapter"
    assert lora_adapter_dir(tmp_path / "trl_run") == tmp_path / "trl_run/adapter"
    step = tmp_path / "trl_run/checkpoints/checkpoint-2"
    assert lora_adapter_dir(step) == step
    with pytest.raises(InputError, match="not a LoRA adapter folder"):
        lora_adapter_dir(tmp_path)
