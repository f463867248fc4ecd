"""The recipe plus the exact overrides of the launch, through EasyR1 b44b311's own config loader.

The trainer command is taken from ``bash launch/grpo_8b.sh --dry-run`` (never retyped): its environment assignments
and its arguments after ``-m reward.train`` (EasyR1's ``verl.trainer.main``, same arguments) go to tests/easyr1/drive_config.py, which runs main.py's config path
(structured PPOConfig, merge, to_object, deep_post_init) in .venv-easyr1. This replaces the key list that
tests/reward/test_recipe.py used to keep (tests/data/easyr1_b44b311_config_keys.txt): EasyR1's classes answer directly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.easyr1.conftest import REPO, run_driver
from tests.launch.test_launch_dryrun import step, steps

RECIPE = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
LAT_RECIPE = REPO / "recipes" / "qwen3vl_8b_lat.yaml"


def launch_trainer_command(tmp: Path) -> tuple[dict[str, str], list[str]]:
    """(environment, trainer arguments) of the trainer command the launch prints."""
    trainer = step(steps(tmp, QUOTECITE_MAX_STEPS="8"), "trainer")
    env = {**trainer["env"], "CUDA_VISIBLE_DEVICES": trainer["gpus"]}
    argv = trainer["argv"]
    return env, argv[argv.index("reward.train") + 1 :]  # reward.train hands them to verl.trainer.main unchanged


def load(tmp: Path, cases: list[dict], cwd: Path | None = None, **env: str) -> dict:
    """Run drive_config.py on ``cases`` ({"argv", "unset"}) with the launch's environment ``env``."""
    from tests.easyr1.conftest import easyr1_env

    full = easyr1_env(QUOTECITE_DATA_DIR=str(tmp / "data"), QUOTECITE_CACHE_DIR=str(tmp / "data" / "cache"))
    launch_path = env.pop("PYTHONPATH", None)
    full.update(env)
    if launch_path:  # the launch's own path (the repository), after the stand-in
        full["PYTHONPATH"] += os.pathsep + launch_path
    _, rep = run_driver("drive_config.py", json.dumps(cases), env=full, cwd=cwd)
    assert rep is not None and len(rep["cases"]) == len(cases)
    return rep


def flatten(d: dict, schema: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, dict) and not schema.get(key, {}).get("mapping"):
            out.update(flatten(v, schema, key + "."))
        else:
            out[key] = v
    return out


CASES = {
    "launch": ([], []),
    "misspelt": (["worker.rollout.tensor_paralel_size=1"], []),
    "wrong_type": (["data.max_prompt_length=lots"], []),
    "no_judge_url": ([], ["QUOTECITE_JUDGE_URL"]),
    "relative_paths": (None, []),  # the launch's arguments less its absolute prompt and reward paths
    "lat": ("lat", []),  # the LAT baseline's recipe, with its prompt and the reward as absolute paths
}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """Every case in one driver run, started outside the repository (as a user might start a job)."""
    tmp = tmp_path_factory.mktemp("cfg")
    env, argv = launch_trainer_command(tmp)
    bare = [a for a in argv if not a.startswith(("data.format_prompt=", "worker.reward.reward_function="))]
    lat = [
        f"config={LAT_RECIPE}",
        f"data.format_prompt={REPO}/recipes/prompts/lat_interface.jinja",
        f"worker.reward.reward_function={REPO}/reward/quote_reward.py:compute_score",
    ]
    cases = [
        {"argv": bare if extra is None else lat if extra == "lat" else argv + extra, "unset": unset}
        for extra, unset in CASES.values()
    ]
    rep = load(tmp, cases, cwd=tmp, **env)
    rep["by_case"] = dict(zip(CASES, rep["cases"], strict=True))
    rep["launch"] = rep["by_case"]["launch"]
    return tmp, env, argv, rep


def test_the_trainer_venv_has_the_pins_easyr1_needs(launched):
    from packaging.version import Version

    *_, rep = launched
    assert Version(rep["omegaconf"]) < Version("2.4")  # 2.4.0 fails in OmegaConf.structured(PPOConfig())
    assert Version("4.54") <= Version(rep["transformers"]) < Version("5")


def test_recipe_with_the_launch_overrides_loads_in_easyr1(launched):
    tmp, env, argv, rep = launched
    case = rep["launch"]
    assert case["ok"], case.get("error")
    cfg = case["config"]
    assert argv[0] == f"config={RECIPE}"
    run = Path(env["QUOTECITE_CKPT_DIR"])
    assert cfg["trainer"]["save_checkpoint_path"] == str(run)
    assert cfg["trainer"]["max_steps"] == 8 and cfg["trainer"]["find_last_checkpoint"] is True
    assert cfg["data"]["train_files"] == f"{tmp}/data/train.parquet"
    kwargs = cfg["worker"]["reward"]["reward_function_kwargs"]
    assert kwargs["judge_url"] == env["QUOTECITE_JUDGE_URL"] and kwargs["embed_url"] == env["QUOTECITE_EMBED_URL"]
    # post_init derived these from the data section; the recipe must not set them itself
    assert cfg["worker"]["rollout"]["prompt_length"] == cfg["data"]["max_prompt_length"]
    assert cfg["worker"]["actor"]["global_batch_size"] == 16
    assert case["reward_config"]["judge"] == "http" and case["reward_config"]["cache_dir"] == f"{tmp}/data/cache"
    assert "reward_config_error" not in case


def test_prompt_and_reward_resolve_wherever_the_trainer_starts(launched):
    """EasyR1 turns a format_prompt or reward file it cannot find into None (it only prints "not found"); the
    launch passes absolute paths, so they resolve from any working directory."""
    *_, rep = launched
    cfg = rep["launch"]["config"]
    prompt, reward = cfg["data"]["format_prompt"], cfg["worker"]["reward"]["reward_function"]
    assert prompt is not None and Path(prompt).is_absolute() and Path(prompt).is_file()
    assert reward is not None and Path(reward).is_absolute() and Path(reward).is_file()
    assert cfg["worker"]["reward"]["reward_function_name"] == "compute_score"


def test_every_recipe_key_is_an_easyr1_key_and_none_is_owned_by_post_init(launched):
    *_, rep = launched
    schema = rep["schema"]
    flat = flatten(yaml.safe_load(RECIPE.read_text()), schema)
    assert [k for k in flat if k not in schema] == []
    assert [k for k in flat if not schema[k]["init"]] == []
    assert schema["worker.rollout.prompt_length"]["init"] is False  # the check can fail: such fields exist
    assert len(schema) > 150 and {k.split(".")[0] for k in schema} == {"data", "worker", "algorithm", "trainer"}


def test_the_lat_recipe_loads_in_easyr1_and_builds_the_lat_reward(launched):
    *_, rep = launched
    case = rep["by_case"]["lat"]
    assert case["ok"], case.get("error")
    assert case["reward_config"]["reward_form"] == "lat" and "reward_config_error" not in case
    schema = rep["schema"]
    flat = flatten(yaml.safe_load(LAT_RECIPE.read_text()), schema)
    assert [k for k in flat if k not in schema] == [] and [k for k in flat if not schema[k]["init"]] == []


def test_without_the_absolute_paths_easyr1_silently_drops_prompt_and_reward(launched):
    """Why the launch passes absolute paths: the recipe's relative ones resolve only from the repository root."""
    *_, rep = launched
    case = rep["by_case"]["relative_paths"]
    assert case["ok"]  # EasyR1 raises nothing ...
    assert case["config"]["data"]["format_prompt"] is None  # ... it trains without our prompt
    assert case["config"]["worker"]["reward"]["reward_function"] is None  # ... and without our reward


@pytest.mark.parametrize(
    "case,error_type,message",
    [
        ("misspelt", "ConfigKeyError", "tensor_paralel_size"),
        ("wrong_type", "ValidationError", "max_prompt_length"),
        ("no_judge_url", "InterpolationResolutionError", "QUOTECITE_JUDGE_URL"),
    ],
)
def test_a_bad_key_value_or_missing_server_url_stops_easyr1_at_start_up(launched, case, error_type, message):
    *_, rep = launched
    out = rep["by_case"][case]
    assert not out["ok"] and out["error_type"] == error_type and message in out["error"]
