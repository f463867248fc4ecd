"""The local-Slurm chain with EasyR1 b44b311's own training loop in place of the stand-in trainer.

``sbatch launch/grpo_8b.sh`` as in tests/launch/test_launch.py (the real launch: segments, health waits, requeue,
restart on a server outage, the merged run log), but the trainer is the launch's own command, ``python -m
reward.train`` (EasyR1's ``verl.trainer.main``: its config path, ``Runner.run``, ``RayPPOTrainer.fit``, the reward
plug-in in its reward actors, the file logger, ``checkpoint_tracker.json``, save and resume) in .venv-easyr1, with
one substitution made by the test only: tests/easyr1/launch_entry.py puts tests/easyr1/cpu_worker.py's
``CPUWorker`` (a tiny random Qwen3-VL with the recipe's LoRA, EasyR1's ``DataParallelPPOActor``) in
``FSDPWorker``'s place and gives Ray the trainer's GPUs as a count (``QUOTECITE_TRAINER_CMD=.venv-easyr1/bin/python -m
tests.easyr1.launch_entry``). The recipe is recipes/qwen3vl_8b_grpo.yaml with the easyr1 tier's CPU scale
(tests/easyr1/test_easyr1_fit.py: the builder's LongDocURL fixture set, group size 4, 2 questions a step, responses
constrained to four scripted ones per question); the judge and the embedder are the stand-in servers
(tests/standins/vllm_serve.py) and the resolver is the lexical one (the fixture cache has no embeddings).

Where a job stands when it is requeued or loses its judge is fixed by the CPU worker's gate (``CPU_WORKER_GATE``:
it generates for step N only once the test allows N), never by timing. One chain (the ``chain`` fixture: a requeue,
then a judge outage, three trainer processes) serves every test here; the last ones check what the stand-in trainer
(tests/standins/trainer.py) copies from EasyR1, and what the launch reads from the run log, against what this loop
wrote, so neither can drift silently.

Cost, measured on a shared 2-core machine (load average 5-9): each trainer process takes 60-100 s from its start to
the worker's model (five processes import EasyR1, torch and transformers: the driver, Ray's Runner actor, two reward
actors and the worker; ``import verl.trainer.main`` alone takes ~15 s there); a step takes 6-13 s
(``timing_s/step``); the module 6.4-6.8 minutes, the builder's data and the tiny model included.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.easyr1.conftest import EASYR1_PY, EASYR1_READY
from tests.easyr1.test_easyr1_fit import SCALE as FIT_SCALE
from tests.launch.test_launch import FINAL, REPO, Run, T, show_job
from tests.support.slurm import slurm_reason, wait_for

_NO_EASYR1 = "" if EASYR1_READY.exists() else ".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311)"
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.easyr1,
    pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-"),
    pytest.mark.skipif(bool(_NO_EASYR1), reason=_NO_EASYR1 or "-"),
]

RECIPE = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
N = 4  # group size (the recipe: 5)
# Two CPUs: Ray gets the job's CPUs (reward.train), and EasyR1's Runner actor and the worker's bundle take one each;
# the two reward actors ask for worker.reward.num_cpus=0 (the recipe: 8 on a 32-CPU job).
SBATCH = "--cpus-per-task=2 --mem=8G --time=00:20:00 --signal=B:USR1@1"
# the easyr1 tier's scale (test_easyr1_fit.py SCALE) as EasyR1 overrides of the job; the launch sets the GPUs
# (QUOTECITE_TRAIN_GPUS_PER_NODE), max_steps and the checkpoint folder itself
_LAUNCH_SETS = ("trainer.n_gpus_per_node=", "trainer.save_freq=")  # the launch or the test below sets these
_REPLACED = {  # the judge and embedder are the stand-in servers here, the reward actors ask for no CPU
    "worker.reward.num_cpus=1": ["worker.reward.num_cpus=0"],
    "worker.reward.reward_function_kwargs.judge=lexical": [],
    "worker.reward.reward_function_kwargs.judge_url=null": [],
    "trainer.max_try_make_batch=3": ["worker.reward.reward_function_kwargs.timeout_s=3",
                                     "worker.reward.reward_function_kwargs.retries=0", "trainer.max_try_make_batch=3"],
}  # fmt: skip
SCALE = [y for x in FIT_SCALE if not x.startswith(_LAUNCH_SETS) for y in _REPLACED.get(x, [x])]


# --------------------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The builder's parquet and block cache, the scripted responses, the tiny Qwen3-VL (made once)."""
    from tests.easyr1.test_easyr1_fit import build_data, candidates

    root = tmp_path_factory.mktemp("easyr1chain")
    out = build_data(root)
    (root / "candidates.json").write_text(json.dumps(candidates(out)))
    model = root / "tiny_qwen3vl"
    r = subprocess.run([str(EASYR1_PY), "-m", "tests.easyr1.launch_entry", "--write-tiny-model", str(model)],
                       cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return {"out": out, "candidates": root / "candidates.json", "model": model}


class EasyR1Run(Run):
    """A :class:`~tests.launch.test_launch.Run` whose trainer is EasyR1's loop on the CPU worker."""

    def __init__(self, tmp: Path, data: dict, max_steps: int, save_freq: int, *extra: str, **env: str) -> None:
        super().__init__(tmp, max_steps=max_steps, gate=True)
        self.worker_log = tmp / "worker.jsonl"
        self.overrides = [*SCALE, f"worker.actor.model.model_path={data['model']}", f"trainer.save_freq={save_freq}",
                          *extra]  # fmt: skip
        self.env.update(
            QUOTECITE_RECIPE=str(RECIPE),
            QUOTECITE_DATA_DIR=str(data["out"]),
            QUOTECITE_TRAINER_CMD=f"{EASYR1_PY} -m tests.easyr1.launch_entry",
            QUOTECITE_TRAIN_GPUS_PER_NODE="1",
            QUOTECITE_HEALTH_TIMEOUT="60",
            QUOTECITE_STOP_GRACE="120",
            CPU_WORKER_GATE=str(self.gate),
            CPU_WORKER_CANDIDATES=str(data["candidates"]),
            CPU_WORKER_LOG=str(self.worker_log),
            OMP_NUM_THREADS="1",  # a tiny model's matmuls: one thread is faster than two on a shared 2-core CPU
            TOKENIZERS_PARALLELISM="false",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_DATASETS_OFFLINE="1",
            RAY_USAGE_STATS_ENABLED="0",
            **env,
        )
        self.env.pop("QUOTECITE_STANDIN_GATE", None)
        self.recipe = RECIPE

    def submit(self) -> str:
        r = subprocess.run(
            ["sbatch", "--parsable", f"--job-name={self.name}", *SBATCH.split(),
             f"--output={self.dir}/logs/first-%j.out", f"--chdir={REPO}", str(REPO / "launch" / "grpo_8b.sh"),
             *self.overrides],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip().split(";")[0]

    def events(self, kind: str) -> list[dict]:
        if not self.worker_log.exists():
            return []
        lines = [x for x in self.worker_log.read_text().splitlines() if x.endswith("}")]  # not one caught half-written
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def waits_before(self, step: int) -> int:
        """How many times a CPU worker of this run has waited at the gate before generating for ``step``."""
        return sum(e["step"] == step for e in self.events("gate_wait"))

    def seg_log(self, segment: str) -> list[dict]:
        path = self.dir / "segments" / segment / "experiment_log.jsonl"
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def assert_every_step_once(run: EasyR1Run, max_steps: int) -> list[dict]:
    """The merged run log: validation at step 0, then every training step once, each with EasyR1's actor metrics and
    the reward's record of the batch that trained it (2 groups of N responses)."""
    log = run.run_log()
    assert [r["step"] for r in log] == list(range(0, max_steps + 1)), run.logs()
    assert "val" in log[0] and "actor" not in log[0]
    for r in log[1:]:
        assert r["actor"]["kl_coef"] == 0.01 and r["actor"]["grad_norm"] > 0, r
        assert r["train_batch"]["groups_trained"] == 2 and r["train_batch"]["responses"] == 2 * N, r
    summary = json.loads((run.dir / "run_summary.json").read_text())
    assert summary["missing"] == []
    return log


def step_seconds(log: list[dict]) -> list[float]:
    return [r["timing_s"]["step"] for r in log if "actor" in r]


# --------------------------------------------------------------------------------------------- the chain
@pytest.fixture(scope="module")
def chain(data, tmp_path_factory):
    """One run, save_freq 2, max_steps 4, three trainer processes (about 6 minutes on 2 loaded cores):

    1. job J, segment J-0: validation at 0, steps 1, 2 (checkpoint 2), 3; while the worker waits before step 4 the
       job is requeued (`scontrol requeue`): SIGTERM, no checkpoint 3;
    2. the requeued job, segment J-1: resumes from EasyR1's tracker at 2 (no validation there: the launch passes
       ``trainer.val_before_train=false`` to a resumed trainer), step 3 again; while the
       worker waits before step 4 the judge process is stopped (SIGSTOP: alive, answering nothing); step 4's reward
       waits out judge_outage_s=2, the reward actor raises, EasyR1's fit ends;
    3. the launch restarts both servers and the trainer, segment J-2: resumes from 2 again, steps 3, 4 (checkpoint
       4), the validation after the last step; the run is complete.
    """
    from tests.support.slurm import jobs_named

    tmp = tmp_path_factory.mktemp("chain")
    run = EasyR1Run(tmp, data, 4, 2, "worker.reward.reward_function_kwargs.judge_outage_s=2")
    started = time.monotonic()
    try:
        run.allow(3)
        job = run.submit()
        wait_for(lambda: run.waits_before(4) == 1, 3 * T, "the first run's worker to wait before step 4")
        wait_for(lambda: 3 in run.logged_steps(f"{job}-0"), T, "step 3 logged")
        subprocess.run(["scontrol", "requeue", job], check=True)
        run.release(job)
        wait_for(lambda: run.waits_before(4) == 2, 3 * T, "the requeued run's worker to wait before step 4")
        wait_for(lambda: 3 in run.logged_steps(f"{job}-1"), T, "step 3 logged again")
        judge = json.loads((run.dir / "segments" / f"{job}-1" / "judge.log").read_text().splitlines()[0])
        os.kill(judge["pid"], signal.SIGSTOP)
        run.allow(5)  # step 4, and the validation after it
        ids = run.wait_chain_end(4 * T)
    finally:
        ids_now = jobs_named(run.name)
        if ids_now and any(show_job(j).get("JobState") not in FINAL for j in ids_now):
            subprocess.run(["scancel", *ids_now], check=False)
    print(f"\nthe chain on EasyR1's loop took {time.monotonic() - started:.0f} s")
    return {"run": run, "job": job, "ids": ids, "segs": [f"{job}-{k}" for k in range(3)]}


def test_the_requeued_job_resumes_from_easyr1s_tracker_with_the_saved_adapter(chain):
    run, job, (seg0, seg1, _) = chain["run"], chain["job"], chain["segs"]
    assert chain["ids"] == [job], run.logs()  # no extra job: the requeued one resumed by itself
    info = show_job(job)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), run.logs()
    segs = run.segments()
    assert [(s["name"], s["status"], s["resume_step"]) for s in segs][:2] == [(seg0, "terminated", 0),
                                                                               (seg1, "outage", 2)]  # fmt: skip
    # EasyR1's file logger: validation at 0, steps 1-3; the requeued run resumes without validating again
    assert [(x["step"], "val" in x) for x in run.seg_log(seg0)] == [(0, True), (1, False), (2, False), (3, False)]
    assert [(x["step"], "val" in x) for x in run.seg_log(seg1)] == [(3, False)]
    # it loaded checkpoint 2 (the tracker's last step; step 3 had no checkpoint), with the adapter saved there
    load = run.events("load_checkpoint")[0]
    assert load["path"] == str(run.dir / "checkpoints" / "global_step_2" / "actor")
    assert load["adapter_equal"] and load["adapter_nonzero_B"] > 0
    assert "DUE TO JOB REQUEUE" in run.logs()  # --open-mode=append kept the first run's output


def test_a_judge_outage_restarts_the_servers_and_easyr1s_loop_resumes_from_its_last_checkpoint(chain):
    run, (_, seg1, seg2) = chain["run"], chain["segs"]
    segs = run.segments()
    assert [(s["name"], s["status"], s["resume_step"], s["end_step"]) for s in segs][1:] == [
        (seg1, "outage", 2, 2), (seg2, "finished", 2, 4)], run.logs()  # fmt: skip
    url_re = r"judge at http://127\.0\.0\.1:\d+/v1/chat/completions is down: no answer for \d+ s"
    assert re.search(r"stopped on a server outage: " + url_re + r" \(outage budget judge_outage_s=2\)",
                     segs[1]["message"]), segs[1]["message"]  # fmt: skip
    trainer_log = (run.dir / "segments" / seg1 / "trainer.log").read_text(errors="replace")
    assert "ServerOutageError" in trainer_log and "No sample is kept" not in trainer_log
    assert json.loads((run.dir / "manifest.json").read_text())["restarts"] == {"trainer": 1}
    assert "restarting the judge and embedding servers and the trainer" in (run.dir / "chain.log").read_text()
    loads = run.events("load_checkpoint")
    assert [e["path"] for e in loads] == [str(run.dir / "checkpoints" / "global_step_2" / "actor")] * 2
    assert loads[1]["adapter_equal"]
    assert [(x["step"], "val" in x) for x in run.seg_log(seg2)] == [(3, False), (4, False), (4, True)]
    tracker = json.loads((run.dir / "checkpoints" / "checkpoint_tracker.json").read_text())
    assert tracker["last_global_step"] == 4
    assert sorted(p.name for p in (run.dir / "checkpoints").glob("global_step_*")) == ["global_step_2",
                                                                                       "global_step_4"]  # fmt: skip


def test_every_step_of_the_chain_is_logged_once(chain):
    run, (seg0, seg1, seg2) = chain["run"], chain["segs"]
    summary = json.loads((run.dir / "run_summary.json").read_text())
    assert summary["superseded"] == {seg0: [3], seg1: [3]}  # step 3 was rerun from checkpoint 2 twice: kept once
    # the reward's own counters (lines without a step) are summed per segment: every segment called the judge
    counters = summary["reward_counters"]
    assert sorted(counters) == [seg0, seg1, seg2]
    for seg in (seg0, seg1, seg2):
        assert counters[seg]["judge_requests"] > 0 and counters[seg]["responses"] > 0, counters[seg]
        assert "time" not in counters[seg]  # each line's timestamp is no counter (launch/merge.py)
    log = assert_every_step_once(run, 4)
    assert [r["segment"] for r in log] == [seg0, seg0, seg0, seg2, seg2]
    # the reward's samples of every step, once: steps 1-2 from the first run, 3-4 from the last
    from launch.samples_page import collect_steps

    steps = collect_steps(run.dir)
    assert [s for s, _, _ in steps] == [1, 2, 3, 4]
    assert [folder.parent.name for _, folder, _ in steps] == [seg0, seg0, seg2, seg2]
    print(f"\nEasyR1 fit on the CPU worker, seconds per step (timing_s/step): {step_seconds(log)}")


def test_every_metric_the_launch_reads_is_one_easyr1s_loop_logs(chain):
    """launch/plot.py's series and launch/budget.py's step time, in the merged log of EasyR1's own loop."""
    from launch.plot import PANELS

    log = chain["run"].run_log()
    merged: dict = {}
    for r in log:
        merged.update(flat(r))
    wanted = [alts for _, _, series in PANELS for _, alts, _ in series] + ["timing_s.step"]
    missing = [alts for alts in wanted if not any(k in merged for k in alts.split("|"))]
    assert missing == [], missing


def flat(rec: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in rec.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def standin_run(tmp: Path, recipe: Path) -> Path:
    """tests/standins/trainer.py on the same recipe: steps 1-2, checkpoint 2, world size 1, LoRA."""
    ckpt = tmp / "ckpt"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0", "QUOTECITE_STANDIN_STEP_SECONDS": "0"}
    for k in ("QUOTECITE_JUDGE_URL", "QUOTECITE_EMBED_URL", "QUOTECITE_METRICS_DIR"):  # no servers, no reward files
        env.pop(k, None)
    r = subprocess.run([sys.executable, "-m", "tests.standins.trainer", f"config={recipe}",
                        f"trainer.save_checkpoint_path={ckpt}", "trainer.max_steps=2", "trainer.save_freq=2",
                        "trainer.n_gpus_per_node=1", "trainer.val_before_train=true",
                        "worker.actor.model.lora.rank=4"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return ckpt


def test_the_stand_in_writes_easyr1s_checkpoint_layout_and_tracker(chain, tmp_path):
    """What tests/standins/trainer.py copies from EasyR1's checkpoints (its docstring), against this loop's."""
    ckpt, real = standin_run(tmp_path, RECIPE), chain["run"].dir / "checkpoints"

    def tree(root: Path) -> set[str]:  # huggingface/ holds the model's config files: only its presence is copied
        return {str(p.relative_to(root)) for p in root.rglob("*") if "huggingface" not in p.relative_to(root).parts}

    assert tree(ckpt / "global_step_2") == tree(real / "global_step_2")
    assert (ckpt / "global_step_2" / "actor" / "huggingface").is_dir()
    assert (real / "global_step_2" / "actor" / "huggingface").is_dir()
    stand_tracker = json.loads((ckpt / "checkpoint_tracker.json").read_text())
    real_tracker = json.loads((real / "checkpoint_tracker.json").read_text())
    assert stand_tracker.keys() == real_tracker.keys()
    assert stand_tracker["last_actor_path"] == str((ckpt / "global_step_2" / "actor").resolve())
    assert real_tracker["last_actor_path"] == str(real / "global_step_4" / "actor")
    # both log validation first, then each step after its checkpoint, into a log truncated at start
    stand = [json.loads(x) for x in (ckpt / "experiment_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in stand] == [x["step"] for x in chain["run"].seg_log(chain["segs"][0])[:3]] == [0, 1, 2]


def test_every_key_the_stand_in_logs_is_one_easyr1s_loop_logs(chain, tmp_path):
    ckpt = standin_run(tmp_path, RECIPE)
    stand = [flat(json.loads(x)) for x in (ckpt / "experiment_log.jsonl").read_text().splitlines()]
    real = [flat(x) for x in chain["run"].seg_log(chain["segs"][0])]
    assert set(stand[1]) <= set(real[1]), set(stand[1]) - set(real[1])  # a training step
    assert set(stand[0]) <= set(real[0]), set(stand[0]) - set(real[0])  # validation before training
