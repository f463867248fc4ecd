"""LoRA targets and checkpoint names, from EasyR1 b44b311's own code (drive_lora.py, drive_ckpt.py)."""

from __future__ import annotations

import json
import re

import pytest

from launch import checkpoints, run_files
from tests.easyr1.conftest import easyr1_env, run_driver
from tests.easyr1.test_easyr1_config import launch_trainer_command

LM_LINEAR = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora")
    env, argv = launch_trainer_command(tmp)
    full = easyr1_env(QUOTECITE_DATA_DIR=str(tmp), QUOTECITE_CACHE_DIR=str(tmp), QUOTECITE_CKPT_DIR=str(tmp),
                      QUOTECITE_JUDGE_URL=env["QUOTECITE_JUDGE_URL"], QUOTECITE_EMBED_URL=env["QUOTECITE_EMBED_URL"])  # fmt: skip
    _, rep = run_driver("drive_lora.py", json.dumps(argv), str(tmp / "tiny_qwen3vl"), env=full)
    return rep


def test_the_recipe_adapts_every_linear_layer_of_the_language_model(lora):
    assert lora["worker_call_present"]  # the worker still makes the LoraConfig call the driver repeats
    assert lora["rank"] == 64 and lora["exclude_modules"] == ".*visual.*"
    adapted = lora["adapted"]
    assert adapted and all(".language_model." in n for n in adapted)
    assert {n.rsplit(".", 1)[1] for n in adapted} == LM_LINEAR
    assert len(adapted) == 2 * len(LM_LINEAR)  # two decoder layers in the tiny model


def test_no_adapter_in_the_vision_tower_or_the_output_head(lora):
    assert not any("visual" in n for n in lora["adapted"])
    plain = lora["plain_linear"]
    assert any(".visual." in n for n in plain)  # the vision tower's linears exist and stay plain
    assert [n for n in plain if ".visual." not in n] == [next(n for n in plain if n.endswith("lm_head"))]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ckpt")
    _, rep = run_driver("drive_ckpt.py", str(tmp / "checkpoints"))
    return tmp / "checkpoints", rep


def test_runlog_uses_easyr1s_tracker_and_shard_names(ckpt):
    _, rep = ckpt
    assert rep["CHECKPOINT_TRACKER"] == run_files.CHECKPOINT_TRACKER
    templates = rep["shard_templates"]
    assert sorted(t.split("_world_size")[0] for t in templates) == ["extra_state", "model", "optim"]
    for t in templates:
        name = t.replace("{self.world_size}", "8").replace("{self.rank}", "3")
        m = run_files.SHARD_RE.fullmatch(name)
        assert m and m.groups()[1:] == ("8", "3"), name
    assert rep["lora_files"] == ["adapter_model.safetensors", "adapter_config.json"]
    assert all(
        re.fullmatch(run_files.STEP_DIR_RE.pattern, f) for f in rep["folders"] if f != run_files.CHECKPOINT_TRACKER
    )


def test_runlog_resumes_where_easyr1_would(ckpt):
    path, rep = ckpt
    # save_limit 2: EasyR1 removed step 8 and kept the best (step 4, val 0.3) beside the last (12)
    assert rep["folders"] == ["checkpoint_tracker.json", "global_step_12", "global_step_4"]
    assert rep["tracker"]["last_global_step"] == 12 and rep["latest"].endswith("global_step_12")
    assert checkpoints.check_step_dir(path / "global_step_12") == ""
    point = checkpoints.find_resume_point(path)
    assert (point.step, point.notes) == (12, ())
    assert "global_step_12/actor/lora_adapter/adapter_model.safetensors" in rep["files"]
