"""A real GRPO run with TRL (reward/trl_train.py) on a tiny warm-started Qwen3-VL: two steps move every LoRA
weight and no base weight, the reward receives each row's ground truth and page images, the checkpoints are
complete, and a resumed run continues at the next step from the saved adapter."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import TrainerCallback


class Snapshot(TrainerCallback):
    """The trainable (LoRA) weights when training begins (after a resume has loaded its checkpoint) and the model."""

    def __init__(self) -> None:
        self.lora: dict[str, torch.Tensor] = {}
        self.model = None

    def on_train_begin(self, args, state, control, model=None, **kw):
        self.model = model
        self.lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def _base_name(peft_name: str) -> str:
    return peft_name.removeprefix("base_model.model.").replace(".base_layer", "")


@pytest.fixture(scope="module")
def smoke(trl_env, tmp_path_factory, monkeypatch_module):
    from quotecite.trl_demo import trl_run
    from reward.trl_reward import QuoteReward
    from reward.trl_train import train

    cached, data, warm, s = trl_env
    seen: list[dict] = []
    real = QuoteReward.__call__

    def spy(self, *a, **kw):
        seen.append({k: v for k, v in kw.items() if k in ("answer", "images", "completions")})
        return real(self, *a, **kw)

    monkeypatch_module.setattr(QuoteReward, "__call__", spy)
    out = tmp_path_factory.mktemp("run")
    snap = Snapshot()
    run = trl_run(cached, data, warm, out, s, quiet=True)
    run.grpo.update(max_steps=2, save_steps=1)
    run.callbacks.append(snap)
    result = train(run)
    return out, result, snap, seen, run


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_two_steps_move_every_lora_weight_and_no_base_weight(smoke, trl_env):
    from safetensors.torch import load_file

    out, result, snap, _, _ = smoke
    assert [r["step"] for r in result["steps"]] == [1, 2]
    # the first step's rewards differ (the warm-start's two responses a question), so its advantages move the
    # adapter's B matrices; the second step's KL term (beta 0.01) and advantages move every weight
    assert result["steps"][0]["trl"]["reward_std"] > 0, "the warm-started policy gave equal rewards to all"
    after = dict(snap.model.named_parameters())
    assert snap.lora and all("visual" not in n for n in snap.lora)  # never the vision tower
    unchanged = [n for n, before in snap.lora.items() if torch.equal(before, after[n].detach())]
    assert not unchanged, f"{len(unchanged)} LoRA weights did not move, e.g. {unchanged[:3]}"
    warm = {}
    for f in sorted(trl_env[2].glob("*.safetensors")):
        warm.update(load_file(f))
    base = {_base_name(n): p for n, p in after.items() if "lora_" not in n}
    assert set(base) == set(warm)
    moved = [n for n, p in base.items() if not torch.equal(p.detach(), warm[n])]
    assert not moved, f"base weights changed: {moved[:3]}"


def test_the_reward_gets_each_rows_ground_truth_and_pages(smoke, trl_env):
    from data_prep.groundtruth import unpack_ground_truth
    from reward.trl_train import read_rows

    _, _, _, seen, _ = smoke
    cached, data, _, s = trl_env
    rows = read_rows(data / "train.parquet")
    assert len(seen) == 2  # one call per generation batch
    for call in seen:
        n = len(call["completions"])
        assert n == s.num_generations * len(rows) == len(call["answer"]) == len(call["images"])
        qids = [unpack_ground_truth(a).qid for a in call["answer"]]
        assert sorted(set(qids)) == sorted(unpack_ground_truth(r["answer"]).qid for r in rows)
        for i in range(0, n, s.num_generations):  # a group's responses are consecutive and share their row
            assert len(set(qids[i : i + s.num_generations])) == 1
        for pages in call["images"]:
            assert len(pages) == cached.n_pages and all(hasattr(p, "size") for p in pages)


def test_checkpoints_run_log_and_samples(smoke):
    out, result, _, _, _ = smoke
    for step in (1, 2):
        folder = out / "checkpoints" / f"checkpoint-{step}"
        for name in ("adapter_model.safetensors", "adapter_config.json", "optimizer.pt", "scheduler.pt",
                     "trainer_state.json", "rng_state.pth"):  # fmt: skip
            assert (folder / name).is_file(), f"{folder / name} missing"
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 8 and "visual" in config["exclude_modules"]
    log = [json.loads(line) for line in (out / "run_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2]
    for r in log:
        assert 0 <= r["reward"]["overall"] <= 1 and r["train_batch"]["groups_trained"] == 2
    assert sorted(p.name for p in (out / "samples").glob("batch_*.json")) == ["batch_000001.json", "batch_000002.json"]
    assert (out / "reward_counters.jsonl").is_file()


def test_resume_continues_at_the_next_step_from_the_saved_adapter(smoke):
    from safetensors.torch import load_file

    from reward.trl_train import train

    out, _, _, _, run = smoke
    snap = Snapshot()
    run.grpo.update(max_steps=3)
    run.resume = True
    run.callbacks = [snap]
    result = train(run)
    assert result["resume_step"] == 2
    assert [r["step"] for r in result["steps"]] == [3]
    saved = load_file(out / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors")
    assert len(saved) == len(snap.lora)
    for name, value in saved.items():  # PEFT saves without the adapter name
        live = next(v for n, v in snap.lora.items() if n.replace(".default", "") == name)
        assert torch.equal(live, value), name
    log = [json.loads(line) for line in (out / "run_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2, 3]
