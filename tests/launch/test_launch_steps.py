"""The launch's dry run is the job: on the local Slurm, the steps a real job ran (``RUN_DIR/logs/steps-JOBID.jsonl``,
written by the running executor) are the steps its dry run printed (``--dry-run --steps-json``, the printing executor
walking the same code), for a job of the same allocation. Also two jobs sharing one node: each server's port is
chosen where and when it binds, so both train."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.launch.test_launch import GRPO_SCRIPT, REPO, SBATCH_ARGS, Run, T, assert_every_step_once, show_job
from tests.launch.test_launch import _slurm_reason as _reason
from tests.support.slurm import normalise_steps, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(_reason()), reason=_reason() or "-")]


def test_the_steps_a_job_ran_are_the_steps_its_dry_run_printed(tmp_path, cleanup_jobs):
    run = Run(tmp_path, max_steps=4, gate=True)
    cleanup_jobs.append(run)
    # the dry run, as a job of the same shape, before the job: what the job then ran from the same run folder (after
    # it, the dry run would show the resume the next run makes: trainer.val_before_train=false)
    out = tmp_path / "dry.jsonl"
    r = subprocess.run(
        ["sbatch", "--parsable", "--wait", f"--job-name={run.name}", *SBATCH_ARGS.split(), f"--output={out}",
         f"--chdir={REPO}", GRPO_SCRIPT, "--dry-run", "--steps-json"],
        env=run.env, capture_output=True, text=True, timeout=T,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr + out.read_text()
    dry_job = r.stdout.strip().split(";")[0]
    printed = [json.loads(x) for x in out.read_text().splitlines() if x.startswith("{")]
    run.allow(1)
    job = run.submit()
    wait_for(lambda: run.last_step() == 1, T, "checkpoint 1")
    run.usr1(job)  # stop at the next checkpoint and requeue itself: the path the dry run shows
    wait_for(lambda: run.usr1_seen() == 1, T, "the job to act on SIGUSR1")
    run.allow(2)
    # requeued, it waits ~121 s before its next run (BeginTime): cancelled there, its steps file has one run's steps
    wait_for(lambda: show_job(job).get("Restarts") == "1" and show_job(job).get("JobState") == "PENDING", T,
             "the job to requeue itself")  # fmt: skip
    subprocess.run(["scancel", job], check=True)
    wait_for(lambda: show_job(job).get("JobState") == "CANCELLED", T, "the requeued job to be cancelled")
    ran = [json.loads(x) for x in (run.dir / "logs" / f"steps-{job}.jsonl").read_text().splitlines()]

    assert [s["name"] for s in ran] == ["prepare", "disk", "judge", "health-judge", "embed", "health-embed", "check",
                                        "trainer", "finish", "samples-page", "requeue"]  # fmt: skip
    assert normalise_steps(ran, job) == normalise_steps(printed, dry_job)
    assert ran[-1]["argv"] == ["scontrol", "requeue", job]  # this same job, with every option it was given


def test_two_jobs_on_one_node_both_train(tmp_path, cleanup_jobs):
    # Both jobs land on ci8n1 (8 GPUs) at once and both prefer ports 8000/8001: the second one's servers find them
    # taken when they bind and take others; each trainer reaches its own servers.
    runs = [Run(tmp_path / f"r{i}", max_steps=3, gate=True) for i in range(2)]
    jobs = []
    for r in runs:
        cleanup_jobs.append(r)
        r.allow(0)
        res = subprocess.run(
            ["sbatch", "--parsable", f"--job-name={r.name}", "-p", "ci8", "-w", "ci8n1", "--nodes=1",
             "--gpus-per-node=3", *SBATCH_ARGS.split(), f"--output={r.dir}/logs/first-%j.out", f"--chdir={REPO}",
             GRPO_SCRIPT],
            env={**r.env, "QUOTECITE_CHAIN": "0"}, capture_output=True, text=True, check=True,
        )  # fmt: skip
        jobs.append(res.stdout.strip().split(";")[0])
    # both hold their trainers at the gate at the same time: their servers run side by side
    for r, j in zip(runs, jobs, strict=True):
        wait_for(lambda r=r, j=j: (r.dir / "segments" / f"{j}-0" / "trainer.log").exists(), T, f"job {j}'s trainer")
    ports = [
        {n: int((r.dir / "segments" / f"{j}-0" / f"{n}.port").read_text()) for n in ("judge", "embed")}
        for r, j in zip(runs, jobs, strict=True)
    ]
    assert len({p for d in ports for p in d.values()}) == 4, ports  # four servers, four ports
    for r in runs:
        r.allow(3)
    for r in runs:
        r.wait_chain_end()
    for r, j in zip(runs, jobs, strict=True):
        assert show_job(j)["JobState"] == "COMPLETED", r.logs()
        assert [s["status"] for s in r.segments()] == ["finished"]
        assert_every_step_once(r, 3)
