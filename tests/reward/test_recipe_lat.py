"""recipes/qwen3vl_8b_lat.yaml's own values (the structural checks shared with the quote recipe run in
tests/reward/test_recipe.py on both recipes): LAT's published settings, the reward kwargs, the Chain-of-Evidence prompt."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.reward.test_recipe import ENV, KEYS, RECIPES, REPO, easyr1_schema, flatten

RECIPE = RECIPES["lat"]
FLAT = flatten(yaml.safe_load(RECIPE.read_text()), KEYS)


def test_lats_published_settings():
    lat = {
        "worker.actor.model.lora.rank": 64,
        "worker.actor.model.lora.alpha": 64,
        "worker.actor.optim.lr": 5e-5,
        "worker.actor.optim.lr_scheduler_type": "cosine",
        "worker.rollout.n": 8,
        "data.max_response_length": 600,
        "trainer.total_epochs": 1,
        "algorithm.kl_coef": 0.04,
        "worker.rollout.temperature": 0.9,
        "worker.actor.clip_ratio_low": 0.2,
        "worker.actor.clip_ratio_high": 0.2,
        "algorithm.online_filtering": False,
        "algorithm.adv_estimator": "grpo",
    }
    assert {k: FLAT[k] for k in lat} == lat
    lines = RECIPE.read_text().splitlines()
    for key in lat:
        leaf = key.rsplit(".", 1)[1]
        line = next(line for line in lines if re.match(rf"\s*{leaf}:", line))
        assert "# LAT" in line, line  # every LAT value says where it comes from


def test_same_stack_as_the_quote_recipe():
    quote = flatten(yaml.safe_load(RECIPES["grpo"].read_text()), KEYS)
    same = [
        "worker.actor.model.model_path",
        "data.train_files",
        "data.val_files",
        "data.max_prompt_length",
        "data.rollout_batch_size",
        "worker.actor.global_batch_size",
        "worker.actor.model.freeze_vision_tower",
        "worker.actor.model.lora.target_modules",
        "worker.actor.model.lora.exclude_modules",
        "worker.reward.reward_function",
        "trainer.n_gpus_per_node",
    ]
    assert {k: FLAT[k] for k in same} == {k: quote[k] for k in same}
    assert FLAT["trainer.experiment_name"] != quote["trainer.experiment_name"]


@pytest.fixture
def omegaconf(monkeypatch):
    om = pytest.importorskip("omegaconf")
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    return om


def test_recipe_merges_and_its_reward_kwargs_build_the_lat_reward(omegaconf, tmp_path, monkeypatch):
    from reward.config import RewardConfig
    from reward.lat import LatSettings
    from reward.pipeline import RewardScorer

    om = omegaconf.OmegaConf
    monkeypatch.setenv("QUOTECITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("QUOTECITE_JUDGE_URL")  # LAT needs no judge
    cfg = om.to_object(om.merge(om.structured(easyr1_schema()), om.load(RECIPE)))
    config = RewardConfig.from_kwargs(**cfg.worker.reward.reward_function_kwargs)
    assert (config.reward_form, config.cache_dir, config.embed_url) == ("lat", str(tmp_path), "http://judge:8001")
    scorer = RewardScorer(config)
    assert scorer.judge is None  # the form needs steps, not a judge
    assert scorer.steps.settings == LatSettings()  # the recipe writes out LAT's defaults
    assert scorer.weights == {"format": 1.0, "accuracy": 1.0, "step": 1.0, "ground": 1.0}


def test_lat_prompt_asks_for_what_the_reward_parses():
    from jinja2 import Template

    from reward.lat import COORD_SCALE, parse_coe

    text = (REPO / FLAT["data.format_prompt"]).read_text()
    assert "{{ content | trim }}" in text and "<image>" not in text
    rendered = Template(text.strip()).render(content="<image><image>Which site?")
    assert rendered.startswith("<image><image>Which site?") and rendered.count("<image>") == 2
    line = re.search(r'Bounding box: \{"bbox_2d": \[x1, y1, x2, y2\], "Image_index": N\}', rendered).group(0)
    example = line.replace("x1, y1, x2, y2", "100, 200, 900, 300").replace("N}", "2}")
    parsed = parse_coe(f"<think>The table. {example}</think>\n<answer>Shenzhen\n{example}</answer>")
    assert parsed.format_ok and parsed.answer == "Shenzhen"
    assert [(s.image, s.box) for s in parsed.steps] == [(2, (100.0, 200.0, 900.0, 300.0))]
    assert f"0 to {int(COORD_SCALE)}" in rendered
