"""The training launch on the local Slurm with real vLLM servers: ``sbatch launch/grpo_8b.sh`` starts the judge and the
embedder with the launch's own command lines (``launch/serving.py``; the model ids mapped to the tiny checkpoints by
``QUOTECITE_{JUDGE,EMBED}_WEIGHTS``, the CPU memory share through ``--gpu-memory-utilization``), waits on their
``/health``, runs the reward's check against them, and one training segment (the stand-in trainer) scores every step
through them: the reward's HTTP judge (constrained reply) and the embeddings endpoint of the pooling server.

The session's own judge and embedder servers (``conftest.py``) are stopped first: two more vLLM processes beside them
would not fit the CI machine's memory."""

from __future__ import annotations

import json

import pytest

from tests.launch import conftest as launch_conftest
from tests.launch.test_launch import Run, assert_every_step_once, show_job
from tests.launch.test_launch import _slurm_reason as _reason
from tests.vllm.conftest import _SERVERS, CPU_MEMORY_SHARE, EMBED_MODEL, JUDGE_MODEL, SERVE, vllm_env

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(_reason()), reason=_reason() or "-")]


cleanup_jobs = pytest.fixture(launch_conftest.cleanup_jobs.__wrapped__)  # the launch tests' own: jobs cancelled after


@pytest.fixture
def alone():
    """No other vLLM process of the session runs meanwhile (they are not needed after this module)."""
    for s in _SERVERS.values():
        s.stop()
    yield


@pytest.mark.timeout(900)
def test_a_training_segment_scores_every_step_through_real_vllm_servers(checkpoints, alone, tmp_path, cleanup_jobs):
    cpu = {
        k: v for k, v in vllm_env().items() if k.startswith(("OMP_", "VLLM_", "HF_", "TRANSFORMERS_", "TOKENIZERS_"))
    }
    run = Run(
        tmp_path, max_steps=2, QUOTECITE_JUDGE_CMD=" ".join(SERVE), QUOTECITE_EMBED_CMD=" ".join(SERVE),
        QUOTECITE_JUDGE_WEIGHTS=str(checkpoints["judge"]), QUOTECITE_EMBED_WEIGHTS=str(checkpoints["embedder"]),
        QUOTECITE_JUDGE_GPU_UTIL=CPU_MEMORY_SHARE, QUOTECITE_EMBED_GPU_UTIL=CPU_MEMORY_SHARE,
        QUOTECITE_JUDGE_MAX_MODEL_LEN="8192", QUOTECITE_HEALTH_TIMEOUT="600", QUOTECITE_HEALTH_POLL="2", **cpu,
    )  # fmt: skip
    cleanup_jobs.append(run)
    job = run.submit()
    ids = run.wait_chain_end(timeout=840)
    assert ids == [job] and show_job(job)["JobState"] == "COMPLETED", run.logs()
    seg = run.segments()[0]
    assert seg["status"] == "finished"
    seg_dir = run.dir / "segments" / seg["name"]
    # the real vLLM parsed the launch's flags and served the model ids over the tiny checkpoints
    chain = (run.dir / "chain.log").read_text()
    for name, model in (("judge", JUDGE_MODEL), ("embed", EMBED_MODEL)):
        log = (seg_dir / f"{name}.log").read_text(errors="replace")
        assert "Application startup complete" in log, log[-3000:]
        assert f"--served-model-name {model}" in chain  # the launch's command line, as it started it
        port = int((seg_dir / f"{name}.port").read_text())
        assert f"({model} on GPU 2) is healthy at http://127.0.0.1:{port}/v1" in chain
    assert "reward check passed" in chain
    # every step scored through both servers: a parsed (constrained) verdict from the random-weight judge
    assert_every_step_once(run, 2)
    counters = [json.loads(x) for x in (seg_dir / "reward_counters.jsonl").read_text().splitlines()]
    assert [c["judge_calls"] for c in counters] == [1, 1] and [c["embed_calls"] for c in counters] == [1, 1]
