"""recipes/qwen3vl_8b_grpo.yaml: EasyR1's start-up constraints, the paper's values, the files it names.

Whether every key exists in EasyR1 b44b311, has EasyR1's type and loads with the launch's overrides is answered
by EasyR1's own config classes in the `easyr1` tier (tests/easyr1/test_easyr1_config.py, in .venv-easyr1); the
constraints below are the ones EasyR1 raises on (verl/trainer/ray_trainer.py, verl/workers/fsdp_workers.py,
verl/workers/rollout/vllm_rollout_spmd.py) and run here without EasyR1.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
RECIPES = {"grpo": RECIPE, "lat": REPO / "recipes" / "qwen3vl_8b_lat.yaml"}
"""Every recipe: tests marked :func:`both_recipes` run on each (the LAT baseline's own values: test_recipe_lat.py)."""
# EasyR1's dict-typed fields (open mappings: any sub-key is valid), flattened as one leaf each.
OPEN_MAPPINGS = {
    "worker.actor.model.override_config",
    "worker.critic.model.override_config",
    "worker.reward.reward_function_kwargs",
    "worker.rollout.val_override_config",
}
# EasyR1's keys as read from its source once (types, defaults). The quote recipe's keys are checked by EasyR1's own
# classes in the easyr1 tier; this list remains only for tests/reward/test_recipe_lat.py until that moves to the tier.
KEYS_FILE = REPO / "tests" / "data" / "easyr1_b44b311_config_keys.txt"
N_GPUS = 2  # the trainer's GPUs (the third serves the judge and the embedder outside Ray)
ENV = {
    "QUOTECITE_DATA_DIR": "/data/ldu",
    "QUOTECITE_CACHE_DIR": "/data/ldu/cache",
    "QUOTECITE_CKPT_DIR": "/ckpt/run1",
    "QUOTECITE_JUDGE_URL": "http://judge:8000/v1",
    "QUOTECITE_EMBED_URL": "http://judge:8001",
}


@dataclasses.dataclass(frozen=True)
class KeySpec:
    key: str
    type: str
    default: str
    auto: bool

    @property
    def open_mapping(self) -> bool:
        return self.type.startswith("dict")


def load_keys() -> dict[str, KeySpec]:
    out = {}
    for line in KEYS_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        out[parts[0]] = KeySpec(parts[0], parts[1], parts[2], len(parts) > 3 and parts[3] == "auto")
    return out


KEYS = load_keys()


def load_recipe() -> dict:
    return yaml.safe_load(RECIPE.read_text())


def flatten(d: dict, keys: dict | None = None, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of the leaves; an open mapping is a leaf (``keys`` is accepted for old callers, unused)."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in OPEN_MAPPINGS:
            out.update(flatten(v, None, key + "."))
        else:
            out[key] = v
    return out


FLAT = flatten(load_recipe())


def both_recipes(fn):
    """Run this test on every recipe of :data:`RECIPES` (the others check the quote recipe only)."""
    fn.both_recipes = True
    return fn


def pytest_generate_tests(metafunc):
    if getattr(metafunc.function, "both_recipes", False):
        metafunc.parametrize("recipe", list(RECIPES), indirect=True)


@pytest.fixture(autouse=True)
def recipe(request, monkeypatch):
    """Points RECIPE and FLAT (what :func:`get` reads) at the recipe under test; the quote recipe by default."""
    name = getattr(request, "param", "grpo")
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "RECIPE", RECIPES[name])
    monkeypatch.setattr(module, "FLAT", flatten(yaml.safe_load(RECIPES[name].read_text())))
    return name


def get(key: str):
    return FLAT[key]


# ---------------------------------------------------------------------------------------------------- constraints
@both_recipes
def test_easyr1_batch_constraints_hold():
    rollout_batch, n = get("data.rollout_batch_size"), get("worker.rollout.n")
    gbs = get("worker.actor.global_batch_size")
    micro_update = get("worker.actor.micro_batch_size_per_device_for_update")
    micro_exp = get("worker.actor.micro_batch_size_per_device_for_experience")
    ulysses = get("worker.actor.ulysses_size")
    tp = get("worker.rollout.tensor_parallel_size")
    assert get("trainer.n_gpus_per_node") * get("trainer.nnodes") == N_GPUS
    assert rollout_batch % gbs == 0  # ray_trainer: rollout batch divisible by actor global batch
    assert rollout_batch * n % micro_exp == 0  # ray_trainer: rollout batch * n by the experience micro batch
    assert n > 1  # GRPO needs a group
    per_device = gbs * n // (N_GPUS // ulysses)  # fsdp_workers: global batch * n spread over the data ranks
    assert per_device >= 1 and per_device % micro_update == 0
    assert N_GPUS % tp == 0 and tp <= N_GPUS  # fsdp_workers / vllm_rollout: tensor parallel size divides the GPUs
    assert rollout_batch % (N_GPUS // tp) == 0  # prompts split evenly over the vLLM engines
    assert rollout_batch * n % N_GPUS == 0  # experience batches split evenly over the trainer GPUs


@both_recipes
def test_easyr1_token_budget_constraints_hold():
    from data_prep.longdocurl import BuildConfig
    from data_prep.qwen_tokens import PromptBudget

    prompt, response = get("data.max_prompt_length"), get("data.max_response_length")
    assert get("worker.rollout.max_num_batched_tokens") >= prompt + response  # vllm_rollout_spmd raises otherwise
    # the builder fits every prompt into the recipe's prompt length, and no page image is resized by EasyR1
    budget = PromptBudget()
    assert budget.max_prompt_length == prompt
    assert get("data.max_pixels") >= budget.max_pixels_per_page
    assert get("data.min_pixels") <= budget.min_pixels_per_page
    assert get("worker.rollout.limit_images") >= BuildConfig.__dataclass_fields__["max_window"].default


def test_values_the_paper_gives():
    paper = {
        "worker.actor.model.model_path": "Qwen/Qwen3-VL-8B-Instruct",
        "worker.actor.model.lora.rank": 64,
        "worker.actor.model.lora.alpha": 64,
        "worker.actor.model.lora.target_modules": "all-linear",
        "worker.actor.model.lora.exclude_modules": ".*visual.*",
        "worker.actor.model.freeze_vision_tower": True,
        "algorithm.adv_estimator": "grpo",
        "algorithm.use_kl_loss": True,
        "algorithm.kl_penalty": "low_var_kl",
        "algorithm.online_filtering": True,
        "worker.rollout.temperature": 1.0,
        "data.max_prompt_length": 48_000,
        "data.max_response_length": 768,
        "data.rollout_batch_size": 32,
        "worker.actor.global_batch_size": 16,
        "trainer.total_epochs": 3,
        "worker.actor.optim.lr_scheduler_type": "constant",
        "trainer.n_gpus_per_node": 2,
    }
    assert {k: get(k) for k in paper} == paper


def test_provisional_values_are_the_specs_and_say_so():
    provisional = {
        "worker.rollout.n": 5,
        "worker.actor.optim.lr": 1e-5,
        "worker.actor.clip_ratio_low": 0.2,
        "worker.actor.clip_ratio_high": 0.28,
        "algorithm.kl_coef": 1e-2,
        "algorithm.filter_low": 0.01,
        "algorithm.filter_high": 0.99,
    }
    assert {k: get(k) for k in provisional} == provisional
    lines = RECIPE.read_text().splitlines()
    for key in provisional:
        leaf = key.rsplit(".", 1)[1]
        line = next(line for line in lines if re.match(rf"\s*{leaf}:", line))
        assert "provisional" in line and "paper does not give" in line, line


def test_the_online_filter_reads_the_keep_key_and_its_band_excludes_the_drop_value():
    from reward.scoring import BREAKDOWN_KEYS, KEEP_DROP

    assert get("algorithm.filter_key") == "keep" and "keep" in BREAKDOWN_KEYS
    low, high = get("algorithm.filter_low"), get("algorithm.filter_high")
    assert not low < KEEP_DROP < high  # zero-variance and all-unscorable groups never train
    assert get("worker.reward.reward_function_kwargs")["judge_outage_s"] == 600


@both_recipes
def test_training_essentials():
    assert get("trainer.logger") == ["file", "wandb"]
    assert get("trainer.find_last_checkpoint") is True
    assert 1 <= get("trainer.save_freq") <= 8
    assert get("trainer.save_model_only") is False  # resume needs the optimizer state
    assert get("data.val_files").endswith("/val.parquet") and get("data.train_files").endswith("/train.parquet")
    assert (get("data.prompt_key"), get("data.answer_key"), get("data.image_key")) == ("prompt", "answer", "images")


# ---------------------------------------------------------------------------------------------------- files
def test_format_prompt_exists_and_uses_easyr1s_content_variable():
    path = REPO / get("data.format_prompt")
    assert path.is_file()
    text = path.read_text()
    assert "{{ content | trim }}" in text and "<image>" not in text
    from jinja2 import Template

    rendered = Template(text.strip()).render(content="<image><image>What is the total?")
    assert rendered.startswith("<image><image>What is the total?")
    assert rendered.count("<image>") == 2
    assert '{"answer":' in rendered and '"quotes":' in rendered


def test_coordinate_prompt_asks_for_the_tags_the_evaluation_parses():
    text = (REPO / "recipes" / "prompts" / "coordinate_interface.jinja").read_text()
    assert "<image>" not in text and "{{ content | trim }}" in text
    tag = re.search(r'<bbox page="N" x1="left" y1="top" x2="right" y2="bottom" />', text)
    assert tag is not None
    coordinate = pytest.importorskip("eval.coordinate")
    example = tag.group(0).replace('"N"', '"2"').replace('"left"', '"100"').replace('"top"', '"50"')
    example = example.replace('"right"', '"900"').replace('"bottom"', '"120"')
    parsed = coordinate.parse_coordinate_response("The total is 12. " + example)
    assert [(b.page, b.box) for b in parsed.boxes] == [(2, (100.0, 50.0, 900.0, 120.0))]


def _load_reward_plugin():
    spec_str = get("worker.reward.reward_function")
    path, name = spec_str.rsplit(":", 1)
    file = REPO / path
    assert file.is_file(), f"worker.reward.reward_function names {file}, which does not exist"
    # the way EasyR1's AutoRewardManager loads it: by file path, under a module name of its own
    spec = importlib.util.spec_from_file_location("custom_reward_fn_test", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, name


@both_recipes
def test_reward_plugin_path_exists_and_has_the_batch_signature():
    spec_str = get("worker.reward.reward_function")
    assert spec_str.startswith("./") and spec_str.endswith(".py:compute_score")
    module, name = _load_reward_plugin()
    fn = getattr(module, name)
    assert module.REWARD_TYPE == "batch" and isinstance(module.REWARD_NAME, str)
    params = list(inspect.signature(fn).parameters.values())
    assert params[0].name == "reward_inputs" and params[0].kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert params[-1].kind == inspect.Parameter.VAR_KEYWORD
    assert typing.get_type_hints(fn).get("return") == list[dict]


def _py_type(type_str: str):
    optional = type_str.endswith("|null")
    base = type_str.removesuffix("|null")
    simple = {"int": int, "float": float, "bool": bool, "str": str}
    if base in simple:
        t = simple[base]
    elif base.startswith("dict"):
        t = dict[str, Any]
    elif base.lower().startswith("tuple"):
        inner = base[base.index("[") + 1 : -1].split(",")[0].strip()
        t = list[simple[inner]]  # OmegaConf 2.3 treats a Tuple like a list
    else:
        raise AssertionError(type_str)
    return typing.Optional[t] if optional else t  # noqa: UP045 (OmegaConf needs typing.Optional)


def easyr1_schema():
    """Nested dataclasses with EasyR1's keys, types and defaults, built from the key list."""
    tree: dict = {}
    for spec in KEYS.values():
        node = tree
        *parents, leaf = spec.key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = spec

    def make(name: str, node: dict):
        fields = []
        for key, child in node.items():
            if isinstance(child, KeySpec):
                default = ast.literal_eval(child.default)
                if isinstance(default, tuple):
                    default = list(default)
                if isinstance(default, list | dict):
                    fld = dataclasses.field(default_factory=lambda d=default: type(d)(d))
                else:
                    fld = dataclasses.field(default=default)
                fields.append((key, _py_type(child.type), fld))
            else:
                sub = make(f"{name}_{key}", child)
                fields.append((key, sub, dataclasses.field(default_factory=sub)))
        return dataclasses.make_dataclass(name, fields)

    return make("PPOConfigKeys", tree)


# ---------------------------------------------------------------------------------------------------- OmegaConf
def test_reward_kwargs_resolve_to_valid_reward_settings(tmp_path, monkeypatch):
    """The kwargs as the trainer hands them over (interpolations resolved) are settings the reward accepts."""
    om = pytest.importorskip("omegaconf").OmegaConf
    _load_reward_plugin()
    from reward.config import RewardConfig

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("QUOTECITE_JUDGE_MODEL", raising=False)
    monkeypatch.setenv("QUOTECITE_CACHE_DIR", str(tmp_path))
    recipe = om.to_container(om.load(RECIPE), resolve=True)
    kwargs = recipe["worker"]["reward"]["reward_function_kwargs"]
    config = RewardConfig.from_kwargs(**kwargs)  # unknown settings and bad values raise here
    assert (config.judge, config.reward_form, config.max_crops) == ("http", "gated", 6)
    assert config.judge_url == "http://judge:8000/v1" and config.cache_dir == str(tmp_path)
    assert kwargs["judge_model"] == "Qwen/Qwen3.5-9B"  # the default when the variable is unset
