"""From training to evaluation with a real adapter: a TRL GRPO run (``reward/trl_train.py``) writes a LoRA adapter on
the vLLM tier's tiny policy checkpoint; ``eval infer --lora RUN_DIR`` serves it with real vLLM (the TRL run's layout,
found by :func:`eval.infer.lora_adapter_dir`), then ``eval resolve`` and ``eval score`` take its predictions.

The policy is random, so its rewards are 0 and the adapter's B matrices stay at their zero start: what is proven is
that the files TRL writes load into vLLM's LoRA path (names, ranks, the excluded vision tower) and that the
evaluation runs on them, as ``launch/eval_8b.sh`` does with EasyR1's ``global_step_N/actor/lora_adapter``."""

from __future__ import annotations

import json

import pytest

from tests.vllm.conftest import CPU_MEMORY_SHARE, VLLM_PY, resolve_and_score, write_sample_gold
from tests.vllm.test_vllm_infer import INFER_DEADLINE_S, _run_with_deadline, _tail

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def trained(checkpoints, sample_pdf, tmp_path_factory):
    """The sample document's cache, a gold file of two of its questions and a TRL run (2 steps) on the vLLM
    policy checkpoint."""
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from quotecite.trl_demo import DemoSettings, trl_run, write_sample_set
    from reward.trl_train import train

    root = tmp_path_factory.mktemp("trl-adapter")
    cached = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), root / "cache")
    s = DemoSettings(seed=0, questions=2, num_generations=2, max_completion_length=16, lora_rank=8, steps=2)
    write_sample_set(cached, root / "data", s.questions, s.max_pixels)
    run = trl_run(cached, root / "data", checkpoints["policy"], root / "run", s, quiet=True)
    result = train(run)
    gold_path = write_sample_gold(cached, root / "gold.jsonl")
    return {"cache": cached, "gold": gold_path, "run": root / "run", "result": result}


def test_the_trl_adapter_is_served_by_vllm_then_resolved_and_scored(trained, checkpoints, tmp_path):
    run = trained["run"]
    config = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 8 and (run / "adapter" / "adapter_model.safetensors").is_file()
    pred, log = tmp_path / "pred.jsonl", tmp_path / "infer.log"
    argv = [str(VLLM_PY), "-m", "eval", "infer", "--model", str(checkpoints["policy"]), "--lora", str(run),
            "--gold", str(trained["gold"]), "--interface", "language", "--cache-dir",
            str(trained["cache"].path.parent), "--out", str(pred), "--total-pixels", "400000", "--max-tokens", "32",
            "--max-model-len", "8192", "--gpu-memory-utilization", CPU_MEMORY_SHARE]  # fmt: skip
    rc, _ = _run_with_deadline(argv, log, INFER_DEADLINE_S)
    assert rc == 0, _tail(log)
    assert "lora" in log.read_text(errors="replace").lower(), "vLLM did not load the adapter"
    rows = [json.loads(line) for line in pred.read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == [0, 1]

    resolve_and_score(pred, trained["gold"], str(trained["cache"].path.parent), tmp_path)
