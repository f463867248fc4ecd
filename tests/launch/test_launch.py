"""`sbatch launch/grpo_8b.sh` on a real single-node Slurm (started by .ci/slurm_up.sh), with stand-in programs.

The trainer, judge and embedder are tests/standins (EasyR1-shaped checkpoints and logs, vLLM-shaped servers);
everything else is the real launch code: #SBATCH lines, GPU split, health waits, signal handling, checkpoint
repair, segments, the merged run log, the job's `scontrol requeue` of itself. The end of a job's wall time
is played by `scancel --signal=USR1 --batch` (what --signal=B:USR1@... delivers), since Slurm enforces wall time
only at minute granularity. Steps take 1 s, so the whole module runs in about a minute.

Robust on a slow machine: where a job stands when it is signalled or requeued is fixed by the stand-in trainer's
gate (QUOTECITE_STANDIN_GATE: it starts step N only once the test allows it), not by timing, and every wait polls
for a state with a generous limit (QUOTECITE_SLURM_TEST_TIMEOUT seconds, default 180) instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from launch.runlog import find_resume_point
from launch.samples_page import collect_steps
from tests.support.slurm import jobs_named, wait_for
from tests.support.slurm import slurm_reason as _slurm_reason

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
GRPO_SCRIPT = str(REPO / "launch" / "grpo_8b.sh")


pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(_slurm_reason()), reason=_slurm_reason() or "-")]

RECIPE = """\
worker:
  actor:
    model:
      model_path: standin/policy
      lora: {rank: 8, alpha: 8}
%(worker_extra)strainer:
  max_steps: null
  logger: [console]
  n_gpus_per_node: 2
  save_freq: %(save_freq)d
  save_limit: -1
  val_before_train: true
  load_checkpoint_path: null
"""
# How long any one wait may take (a job start, a checkpoint, a chain's end) before the test fails.
T = float(os.environ.get("QUOTECITE_SLURM_TEST_TIMEOUT", "180"))
# --signal: the script asks for USR1 an hour before its wall time; with a 10-minute limit that would come at once.
SBATCH_ARGS = "--cpus-per-task=1 --mem=500M --time=00:10:00 --signal=B:USR1@1"


# --------------------------------------------------------------------------------------------- helpers
def show_job(job: str) -> dict[str, str]:
    """`scontrol show job -o` as a dict (there is no sacct without accounting)."""
    r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True, check=True)
    out = {}
    for tok in r.stdout.split():
        k, _, v = tok.partition("=")
        out.setdefault(k, v)
    return out


def completing(job: str) -> bool:
    """Whether Slurm still cleans up a run of ``job``: the job has the COMPLETING flag (squeue state CG) or a node
    is still COMPLETING (its slurmstepd has not ended)."""
    cg = subprocess.run(["squeue", "-h", "-t", "CG", "-o", "%i"], capture_output=True, text=True).stdout.split()
    nodes = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True).stdout
    return job in cg or "COMPLETING" in nodes


def kill_every_process_of(job: str) -> None:
    """SIGKILL the batch script and all its children at once (`scancel --signal=KILL` still TERMs the script)."""
    r = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True, check=True)
    pids = [int(line.split()[0]) for line in r.stdout.splitlines()[1:] if line.split() and line.split()[0].isdigit()]
    assert pids, r.stdout
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


class Run:
    """One run folder, its settings, and the jobs of its chain (all share one unique job name)."""

    def __init__(
        self, tmp: Path, max_steps: int, save_freq: int = 1, gate: bool = False, worker_extra: str = "", **env: str
    ) -> None:
        self.dir = tmp / "run"
        (self.dir / "logs").mkdir(parents=True)
        self.recipe = tmp / "recipe.yaml"
        self.recipe.write_text(RECIPE % {"save_freq": save_freq, "worker_extra": worker_extra})
        self.name = f"qc-test-{uuid.uuid4().hex[:8]}"
        self.gate = tmp / "gate"
        if gate:
            env = {"QUOTECITE_STANDIN_GATE": str(self.gate), **env}
            self.allow(0)
        self.env = {
            **os.environ,
            "QUOTECITE_ENV_SETUP": "0",
            "QUOTECITE_REPO": str(REPO),
            "QUOTECITE_RUN_DIR": str(self.dir),
            "QUOTECITE_RECIPE": str(self.recipe),
            "QUOTECITE_MAX_STEPS": str(max_steps),
            "QUOTECITE_PYTHON": PY,
            "QUOTECITE_TRAINER_CMD": f"{PY} -m tests.standins.trainer",
            "QUOTECITE_JUDGE_CMD": f"{PY} -m tests.standins.vllm_serve serve",
            "QUOTECITE_EMBED_CMD": f"{PY} -m tests.standins.vllm_serve serve",
            "QUOTECITE_STANDIN_STEP_SECONDS": "1",
            "QUOTECITE_POLL_SECONDS": "0.3",
            "QUOTECITE_HEALTH_POLL": "0.2",
            "QUOTECITE_HEALTH_TIMEOUT": "30",
            "QUOTECITE_STOP_GRACE": "30",
            **env,
        }

    def allow(self, step: int) -> None:
        """Let the stand-in trainer run up to ``step`` (it waits before any later step)."""
        tmp = self.gate.with_suffix(".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.gate)

    def usr1_seen(self) -> int:
        """How many times the launch has acted on SIGUSR1 (its chain.log line)."""
        path = self.dir / "chain.log"
        return (
            path.read_text().count("SIGUSR1: stopping the trainer after its next checkpoint") if path.exists() else 0
        )

    def submit(self, *extra: str) -> str:
        r = subprocess.run(
            ["sbatch", "--parsable", f"--job-name={self.name}", *SBATCH_ARGS.split(), *extra,
             f"--output={self.dir}/logs/first-%j.out", f"--chdir={REPO}", str(REPO / "launch" / "grpo_8b.sh")],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip().split(";")[0]

    def last_step(self) -> int:
        return find_resume_point(self.dir / "checkpoints").tracker_step or 0

    def logged_steps(self, segment: str) -> list[int]:
        path = self.dir / "segments" / segment / "experiment_log.jsonl"
        if not path.exists():
            return []
        return [json.loads(x)["step"] for x in path.read_text().splitlines() if x.strip().endswith("}")]

    def wait_chain_end(self, timeout: float = T) -> list[str]:
        def ended():
            ids = jobs_named(self.name)
            return ids if ids and all(show_job(j).get("JobState") in FINAL for j in ids) else None

        return wait_for(ended, timeout, f"every job named {self.name} to end", poll=0.5)

    def run_log(self) -> list[dict]:
        return [json.loads(x) for x in (self.dir / "run_log.jsonl").read_text().splitlines()]

    def segments(self) -> list[dict]:
        segs = [json.loads(p.read_text()) for p in (self.dir / "segments").glob("*/segment.json")]
        return sorted(segs, key=lambda s: s["seq"])

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted((self.dir / "logs").glob("*.out")))

    def processes(self) -> list[int]:
        """Pids of every live process of this run (the batch script, servers, trainer: they all carry its
        QUOTECITE_RUN_DIR)."""
        mark = f"QUOTECITE_RUN_DIR={self.dir}\0".encode()
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    if mark in (d / "environ").read_bytes():
                        stat = (d / "stat").read_text()
                        if stat.rsplit(")", 1)[1].split()[0] != "Z":
                            pids.append(int(d.name))
        return pids

    def release(self, job: str) -> None:
        """Start a requeued job now (else Slurm holds it ~121 s), once its first run's processes have all ended: a
        job started again while its first run is still stopping is killed by Slurm ("Job credential revoked").
        Requeued means pending with more restarts than at the last release: a job just submitted is pending too,
        before its first run, and starting it "now" then fails ("Job is no longer pending execution")."""
        released = getattr(self, "_released", {})
        self._released = released
        seen = released.get(job, 0)

        def requeued() -> bool:
            info = show_job(job)
            return info.get("JobState") == "PENDING" and int(info.get("Restarts") or 0) > seen

        wait_for(requeued, T, f"the requeued job {job} to be pending (restarts > {seen})")
        released[job] = int(show_job(job).get("Restarts") or 0)
        pending_at = time.time()
        wait_for(lambda: not self.processes(), T, f"every process of job {job}'s first run to end")
        # and Slurm's own clean-up of that run: the job and its node(s) no longer COMPLETING (its slurmstepd gone)
        wait_for(lambda: not completing(job), T, f"Slurm to finish cleaning up job {job}'s first run")
        # slurmd revoked the first run's credential when it killed it and refuses a new one created in the same
        # second (it compares whole seconds: "Job credential revoked"); Slurm's own ~121 s hold never meets this
        time.sleep(max(0.0, pending_at + 2.0 - time.time()))
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)

    def usr1(self, job: str) -> None:
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)


ONE_CALL_EACH = {"judge_calls": 1, "embed_calls": 1}


def assert_every_step_once(run: Run, max_steps: int, counters: dict = ONE_CALL_EACH) -> list[dict]:
    log = run.run_log()
    steps = [r["step"] for r in log]
    assert steps == list(range(0, max_steps + 1)), run.logs()
    for r in log[1:]:  # the stand-in's metrics are a function of the step: the record is that step's
        assert r["actor"]["pg_loss"] == round(1.0 / r["step"], 6)
        assert r["reward_counters"] == counters, r
    summary = json.loads((run.dir / "run_summary.json").read_text())
    assert summary["missing"] == []
    return log


# --------------------------------------------------------------------------------------------- tests
def test_a_job_requeues_itself_twice_and_reaches_max_steps_with_every_step_logged_once(tmp_path, cleanup_jobs):
    run = Run(tmp_path, max_steps=8, gate=True)
    cleanup_jobs.append(run)
    run.allow(2)
    job = run.submit()
    # Run 1 gets the wall-time warning at checkpoint 2 and stops after the next one (3), then requeues itself; run 2
    # gets it at checkpoint 5 and stops after 6; run 3 goes to the end. The gate holds the trainer at each point
    # until the launch has acted on the signal, so the chain's shape does not depend on the machine's speed.
    wait_for(lambda: run.last_step() == 2, T, "checkpoint 2")
    run.usr1(job)
    wait_for(lambda: run.usr1_seen() == 1, T, "run 1 to act on SIGUSR1")
    run.allow(3)
    run.release(job)  # the job requeued itself (PENDING, BeginTime): start it now, not in ~121 s
    wait_for(lambda: show_job(job).get("JobState") == "RUNNING", T, "run 2")
    run.allow(5)
    wait_for(lambda: run.last_step() == 5, T, "checkpoint 5")
    run.usr1(job)
    wait_for(lambda: run.usr1_seen() == 2, T, "run 2 to act on SIGUSR1")
    run.allow(6)
    run.release(job)
    wait_for(lambda: show_job(job).get("Restarts") == "2", T, "run 3")
    run.allow(8)
    ids = run.wait_chain_end()

    assert ids == [job], run.logs()  # one job id all along: no other job was submitted
    info = show_job(job)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "2")
    segs = run.segments()
    assert [(s["name"], s["job_id"]) for s in segs] == [(f"{job}-{i}", job) for i in range(3)]
    # the SIGTERM each requeue brings was expected: no "terminated" segment, no extra record
    assert [s["status"] for s in segs] == ["stopped", "stopped", "finished"]
    # each run stopped right after the checkpoint that followed its warning, and the next resumed from it
    assert [(s["resume_step"], s["end_step"]) for s in segs] == [(0, 3), (3, 6), (6, 8)]
    log = assert_every_step_once(run, 8)
    assert {r["segment"] for r in log} == {s["name"] for s in segs}
    # the GPU split of the real job: servers on the third GPU, trainer on the first two
    judge = json.loads((run.dir / "segments" / segs[0]["name"] / "judge.log").read_text().splitlines()[0])
    embed = json.loads((run.dir / "segments" / segs[0]["name"] / "embed.log").read_text().splitlines()[0])
    assert (judge["cuda_visible_devices"], embed["cuda_visible_devices"]) == ("2", "2")
    # memory shares as vLLM reads them (the stand-in parses the flags like vLLM 0.32.0): both fit on GPU 2
    assert (judge["gpu_memory_utilization"], embed["gpu_memory_utilization"]) == (0.55, 0.25)
    assert (judge["model"], embed["model"], embed["runner"]) == ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-VL-Embedding-2B",
                                                                 "pooling")  # fmt: skip
    trainer_log = (run.dir / "segments" / segs[1]["name"] / "trainer.log").read_text()
    assert "global_step_3." in trainer_log  # "Load from checkpoint: .../global_step_3."
    man = json.loads((run.dir / "manifest.json").read_text())
    assert [(j["job_id"], j["segment"]) for j in man["jobs"]] == [(job, s["name"]) for s in segs]
    assert [j["next"] for j in man["jobs"]] == ["continue", "continue", "done"]
    assert man["recipe"]["sha256"] and man["max_steps"] == 8
    assert man["models"] == {"policy": "standin/policy", "judge": "Qwen/Qwen3.5-9B",
                             "embedder": "Qwen/Qwen3-VL-Embedding-2B"}  # fmt: skip
    chain = (run.dir / "chain.log").read_text()
    assert "run complete: global_step_8 reaches max_steps=8" in chain
    assert chain.count(f"requeueing job {job}") == 2 and "SIGTERM: stopping" not in chain
    assert [f"this is run {i} of job {job}" in chain for i in (1, 2, 3)] == [True] * 3
    # one output file, appended to by the three runs (--open-mode=append), with Slurm's own line for each requeue
    (out,) = (run.dir / "logs").glob("*.out")
    assert out.read_text().count("DUE TO JOB REQUEUE") == 2
    # the reward's samples of every step, once, across the three runs, and the page that shows them
    assert [s for s, _, _ in collect_steps(run.dir)] == list(range(1, 9))
    page = (run.dir / "samples.html").read_text()
    assert '"step": 8' in page and "samples browser: " + str(run.dir / "samples.html") in run.logs()


def test_a_job_that_cannot_requeue_itself_stops_with_slurms_reason_and_the_command_to_resume(tmp_path, cleanup_jobs):
    run = Run(tmp_path, max_steps=4, gate=True)
    cleanup_jobs.append(run)
    run.allow(2)
    job = run.submit("--no-requeue")  # Requeue=0: what a cluster with JobRequeue=0 gives a job without --requeue
    wait_for(lambda: run.last_step() == 2, T, "checkpoint 2")
    run.usr1(job)
    wait_for(lambda: run.usr1_seen() == 1, T, "the job to act on SIGUSR1")
    run.allow(3)
    assert run.wait_chain_end() == [job], run.logs()
    info = show_job(job)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("FAILED", "1:0", "0")
    assert [(s["status"], s["end_step"]) for s in run.segments()] == [("stopped", 3)]
    out = run.logs()
    assert (f"error: the job could not requeue itself (scontrol requeue {job}: Requested operation is presently "
            f"disabled for job {job}); the chain stops here. To resume: cd {REPO} && QUOTECITE_RUN_DIR={run.dir} "
            "sbatch [your sbatch options] launch/grpo_8b.sh") in out  # fmt: skip


SRUN_STEPS = """
ARGS=$({python} -c 'import os; from launch.job import srun_cpus; print(*srun_cpus(os.environ))')
echo "args=$ARGS"
srun --exact --ntasks=1 $ARGS bash -c 'scontrol show step -o $SLURM_JOB_ID.$SLURM_STEP_ID' > {out}/with.txt
srun --exact --ntasks=1 bash -c 'scontrol show step -o $SLURM_JOB_ID.$SLURM_STEP_ID' > {out}/without.txt
touch {out}/done
"""


def test_srun_steps_get_the_jobs_cpus_per_task(tmp_path, cleanup_jobs):
    """A job of --cpus-per-task=2: an srun step given srun_cpus holds 2 CPUs, one without holds 1 (srun of 22.05
    does not read SLURM_CPUS_PER_TASK; --exact makes the step hold only what it asks for)."""
    name = f"qc-cpus-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/bash\n" + SRUN_STEPS.format(python=PY, out=tmp_path))
    subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "-p", "ci", "--ntasks=1", "--cpus-per-task=2",
                    "--time=00:05:00", f"--output={tmp_path}/job.out", f"--chdir={REPO}", str(script)],
                   env={**os.environ, "PYTHONPATH": str(REPO)}, check=True, capture_output=True)  # fmt: skip
    wait_for(lambda: (tmp_path / "done").exists(), T, f"job {name}'s steps", poll=0.5)
    assert "args=--cpus-per-task=2" in (tmp_path / "job.out").read_text()
    cpus = {k: re.search(r"\bCPUs=(\d+)", (tmp_path / f"{k}.txt").read_text()) for k in ("with", "without")}
    assert cpus["with"] and cpus["without"], {k: (tmp_path / f"{k}.txt").read_text() for k in cpus}
    assert (int(cpus["with"].group(1)), int(cpus["without"].group(1))) == (2, 1)


def test_requeue_mid_job_loses_no_completed_step_and_duplicates_none(tmp_path, cleanup_jobs):
    # save every 3 steps: the requeue lands after step 4 is logged but before checkpoint 6, so the rerun
    # repeats steps 4.. from checkpoint 3 and their first records must be superseded, not duplicated.
    run = Run(tmp_path, max_steps=6, save_freq=3, gate=True)
    cleanup_jobs.append(run)
    run.allow(4)  # the trainer logs step 4 and waits: the requeue comes between steps 4 and 5, checkpoint 3 the last
    job = run.submit()
    first_seg = f"{job}-0"
    wait_for(lambda: max(run.logged_steps(first_seg), default=0) == 4, T, "step 4 logged")
    subprocess.run(["scontrol", "requeue", job], check=True)
    run.allow(6)
    run.release(job)
    ids = run.wait_chain_end()

    assert ids == [job], run.logs()  # no extra job: the requeued one resumed by itself
    info = show_job(job)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1")
    segs = run.segments()
    assert [(s["name"], s["status"]) for s in segs] == [(first_seg, "terminated"), (f"{job}-1", "finished")]
    assert segs[1]["resume_step"] == 3
    assert run.logged_steps(first_seg) == [0, 1, 2, 3, 4]  # validation before training, then steps 1-4
    summary = json.loads((run.dir / "run_summary.json").read_text())
    assert summary["superseded"] == {first_seg: [4]}  # step 4 was rerun from checkpoint 3: its first record goes
    log = assert_every_step_once(run, 6)
    assert [r["segment"] for r in log] == [first_seg] * 4 + [f"{job}-1"] * 3
    # samples: step 4 of the requeued segment is superseded by its rerun; no step lost, none twice
    steps = collect_steps(run.dir)
    assert [s for s, _, _ in steps] == list(range(1, 7))
    assert [folder.parent.name for _, folder, _ in steps] == [first_seg] * 3 + [f"{job}-1"] * 3
    assert "DUE TO JOB REQUEUE" in run.logs()  # --open-mode=append kept the first run's output


def test_job_killed_while_writing_a_checkpoint_resumes_from_the_previous_complete_one(tmp_path, cleanup_jobs):
    # The stand-in pauses half-way through writing checkpoint 3 (shards written, no adapter, no tracker update);
    # every process of the job is SIGKILLed there, as when a node dies (no cleanup runs), and a new submission must
    # resume from checkpoint 2.
    run = Run(tmp_path, max_steps=4, QUOTECITE_STANDIN_SLOW_SAVE=f"3:{T:g}")
    cleanup_jobs.append(run)
    job = run.submit()
    shard = run.dir / "checkpoints" / "global_step_3" / "actor" / "model_world_size_2_rank_0.pt"
    wait_for(shard.exists, T, "checkpoint 3 to be half-written")
    assert run.last_step() == 2
    kill_every_process_of(job)
    wait_for(lambda: show_job(job).get("JobState") in FINAL, T, "the killed job to end")
    assert jobs_named(run.name) == [job]  # a killed job submits nothing
    assert json.loads((run.dir / "segments" / f"{job}-0" / "segment.json").read_text())["status"] == "running"

    second = run.submit()
    assert run.wait_chain_end() == [job, second], run.logs()
    segs = run.segments()
    assert [(s["name"], s["status"]) for s in segs] == [(f"{job}-0", "died"), (f"{second}-0", "finished")]
    assert segs[1]["resume_step"] == 2
    moved = run.dir / "checkpoints" / "incomplete" / f"global_step_3.{second}-0"
    assert (moved / "actor" / "model_world_size_2_rank_0.pt").exists()
    assert not (moved / "dataloader.pt").exists()
    trainer_log = (run.dir / "segments" / f"{second}-0" / "trainer.log").read_text()
    assert "global_step_2." in trainer_log and "global_step_3." not in trainer_log.split("starting at")[0]
    assert find_resume_point(run.dir / "checkpoints").step == 4
    assert_every_step_once(run, 4)


def test_judge_that_never_becomes_healthy_ends_the_chain_with_a_clear_error(tmp_path, cleanup_jobs):
    run = Run(
        tmp_path,
        max_steps=4,
        QUOTECITE_JUDGE_CMD=f"{PY} -m tests.standins.vllm_serve serve --never-healthy",
        QUOTECITE_HEALTH_TIMEOUT="3",
    )
    cleanup_jobs.append(run)
    job = run.submit()
    ids = run.wait_chain_end()
    # No wait for a late resubmission is needed: a job submits its successor (sbatch returns once slurmctld has
    # it) before its script exits, and wait_chain_end returns only when every job of the chain has ended.
    assert jobs_named(run.name) == ids == [job]
    info = show_job(job)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "1:0")
    seg = run.segments()[0]
    judge_log = run.dir / "segments" / seg["name"] / "judge.log"
    out = run.logs()
    assert "judge server (Qwen/Qwen3.5-9B on GPU 2) did not answer http://127.0.0.1:" in out
    assert f"/health within 3s; see its log: {judge_log}" in out
    assert "The chain stops here (no job submitted)." in out
    assert seg["status"] == "server_failed"
    assert not (run.dir / "segments" / seg["name"] / "trainer.log").exists()  # never started
    assert not (run.dir / "segments" / seg["name"] / "embed.log").exists()
    assert json.loads((run.dir / "manifest.json").read_text())["jobs"][0]["next"] == "stop"


def test_chain_stops_after_the_set_number_of_jobs_without_progress(tmp_path, cleanup_jobs):
    run = Run(
        tmp_path,
        max_steps=4,
        QUOTECITE_STANDIN_FAIL_AT_START="CUDA error: out of memory",
        QUOTECITE_MAX_STALLED_JOBS="2",
    )
    cleanup_jobs.append(run)
    job = run.submit()
    run.release(job)  # run 1 crashed at step 0: one job without progress, so it requeued itself
    ids = run.wait_chain_end()
    assert jobs_named(run.name) == ids == [job], run.logs()
    assert show_job(job)["Restarts"] == "1"
    assert [s["status"] for s in run.segments()] == ["crashed", "crashed"]
    assert "2 jobs in a row made no progress (stuck at step 0); not resubmitting" in run.logs()


# --------------------------------------------------------------------------------------------- server outages
def test_a_judge_that_dies_mid_job_is_restarted_while_the_reward_waits(tmp_path, cleanup_jobs):
    # The launch polls every 3 s here, so the trainer's step-3 judge call meets the dead port before any restart:
    # the reward's own client waits out the outage (probing /health) and step 3 gets a real score, in the same segment.
    run = Run(tmp_path, max_steps=4, gate=True, QUOTECITE_POLL_SECONDS="3", QUOTECITE_STANDIN_STEP_SECONDS="0.2")
    cleanup_jobs.append(run)
    run.allow(2)
    job = run.submit()
    seg = f"{job}-0"
    wait_for(lambda: max(run.logged_steps(seg), default=0) == 2, T, "step 2 logged")
    judge_log = run.dir / "segments" / seg / "judge.log"
    first = json.loads(judge_log.read_text().splitlines()[0])
    os.kill(first["pid"], signal.SIGKILL)
    run.allow(4)
    assert run.wait_chain_end() == [job], run.logs()

    assert show_job(job)["JobState"] == "COMPLETED"
    segs = run.segments()
    assert [(s["name"], s["status"]) for s in segs] == [(seg, "finished")]  # the trainer never stopped
    assert segs[0]["extra"]["restarts"] == {"judge": 1}
    man = json.loads((run.dir / "manifest.json").read_text())
    assert man["restarts"] == {"judge": 1} and man["jobs"][0]["restarts"] == {"judge": 1}
    starts = [json.loads(x) for x in judge_log.read_text().splitlines() if x.startswith('{"standin"')]
    assert len(starts) == 2 and starts[1]["pid"] != first["pid"] and starts[1]["port"] == first["port"]
    chain = (run.dir / "chain.log").read_text()
    assert "exited (code 137) mid-job; restarting it (1 of at most 5 in this job)" in chain
    log = run.run_log()
    assert [r["step"] for r in log] == [0, 1, 2, 3, 4]
    assert log[3]["reward_counters"]["judge_outages"] == 1  # step 3 waited for the judge, then was scored
    assert [r["reward_counters"]["judge_calls"] for r in log[1:]] == [1, 1, 1, 1]


def test_a_judge_outage_past_the_budget_restarts_the_servers_and_resumes_losing_no_step(tmp_path, cleanup_jobs):
    # The judge wedges (alive, answering 503 to everything) after 3 chat requests per process. The reward waits
    # judge_outage_s=2, then the trainer stops with the reward's one-line error; the launch restarts both servers
    # and the trainer, which resumes from the last complete checkpoint in a new segment. Twice, then the run ends.
    run = Run(
        tmp_path,
        max_steps=6,
        save_freq=2,
        worker_extra="  reward:\n    reward_function_kwargs: {judge_outage_s: 2}\n",
        QUOTECITE_JUDGE_ARGS="--wedge-after 3",
    )
    cleanup_jobs.append(run)
    job = run.submit()
    assert run.wait_chain_end() == [job], run.logs()

    assert show_job(job)["JobState"] == "COMPLETED"
    segs = run.segments()
    assert [(s["name"], s["status"], s["resume_step"], s["end_step"]) for s in segs] == [
        (f"{job}-0", "outage", 0, 2), (f"{job}-1", "outage", 2, 4), (f"{job}-2", "finished", 4, 6)]  # fmt: skip
    url_re = r"judge at http://127\.0\.0\.1:\d+/v1/chat/completions is down: no answer for 2 s"
    assert re.search(r"stopped on a server outage: " + url_re + r" \(outage budget judge_outage_s=2\)",
                     segs[0]["message"])  # fmt: skip
    trainer_log = (run.dir / "segments" / f"{job}-0" / "trainer.log").read_text()
    assert re.search(url_re, trainer_log) and "No sample is kept" not in trainer_log
    man = json.loads((run.dir / "manifest.json").read_text())
    assert man["restarts"] == {"trainer": 2}
    summary = json.loads((run.dir / "run_summary.json").read_text())
    assert summary["superseded"] == {f"{job}-0": [3], f"{job}-1": [5]}  # rerun from the checkpoint, kept once
    assert_every_step_once(run, 6)
    chain = (run.dir / "chain.log").read_text()
    assert chain.count("restarting the judge and embedding servers and the trainer") == 2
