"""`sbatch --nodes=3 launch/grpo_8b.sh` on the local multi-node Slurm (.ci/slurm_up.sh, partition ci3: three slurmd
on this host, one GPU each), with the stand-in trainer and servers of tests/launch/test_launch.py.

The Ray cluster is real (ray from the project's test extra): the job starts the head on the first node and a worker
on the second as an srun step, all with --node-ip-address of the node (127.0.0.1 here: /etc/hosts); the stand-in
trainer joins it through RAY_ADDRESS as EasyR1's ray.init() would and prints the nodes and GPUs it sees, so the test
checks the cluster itself, not the text of the commands. The servers run as srun steps on the third node and are
reached by its name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.launch.test_launch import (
    ONE_CALL_EACH,
    REPO,
    SBATCH_ARGS,
    Run,
    T,
    assert_every_step_once,
    show_job,
)
from tests.launch.test_launch import _slurm_reason as _base_reason
from tests.support.slurm import wait_for

PARTITION_ARGS = "-p ci3 --nodes=3 --gpus-per-node=1"
BOTH_NODES = {"judge_calls": 2, "embed_calls": 2, "nodes": {"ci3n1": ONE_CALL_EACH, "ci3n2": ONE_CALL_EACH}}
"""The reward counters of a step trained on ci3n1 and ci3n2: one reward task on each node wrote its own."""
RAY = REPO / ".venv" / "bin" / "ray"


def _reason() -> str:
    if r := _base_reason():
        return r
    out = subprocess.run(["sinfo", "-h", "-p", "ci3", "-o", "%D"], capture_output=True, text=True).stdout.split()
    if sum(int(x) for x in out if x.isdigit()) < 3:
        return "no partition ci3 with 3 nodes (QUOTECITE_SLURM_LAYOUT=multi bash .ci/slurm_up.sh)"
    if not RAY.exists():
        return f"{RAY} missing (pip install -e '.[test]')"
    return ""


pytestmark = [pytest.mark.slurm, pytest.mark.skipif(bool(_reason()), reason=_reason() or "-")]


class MultiRun(Run):
    """A run whose job asks for three one-GPU nodes of partition ci3 (and keeps them when it requeues itself)."""

    def __init__(self, tmp: Path, max_steps: int, save_freq: int = 1, gate: bool = False, **env: str) -> None:
        # Ray's sockets live under its temp dir: a short path (unix socket paths are limited to ~107 bytes)
        self.ray_tmp = f"/tmp/qcray-{uuid.uuid4().hex[:8]}"
        super().__init__(tmp, max_steps, save_freq, gate, QUOTECITE_RAY_CMD=str(RAY), QUOTECITE_RAY_TMPDIR=self.ray_tmp, QUOTECITE_RAY_TIMEOUT="120",
                         **env)  # fmt: skip

    def submit(self) -> str:
        r = subprocess.run(
            ["sbatch", "--parsable", f"--job-name={self.name}", *PARTITION_ARGS.split(), *SBATCH_ARGS.split(),
             f"--output={self.dir}/logs/first-%j.out", f"--chdir={REPO}", str(REPO / "launch" / "grpo_8b.sh")],
            env=self.env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        return r.stdout.strip().split(";")[0]

    def first_line(self, segment: str, log: str, prefix: str) -> dict:
        path = self.dir / "segments" / segment / log
        return json.loads(next(x for x in path.read_text().splitlines() if x.startswith(prefix)))

    def ray_processes(self) -> list[str]:
        """Processes of this run's Ray cluster still alive (their command lines name its temp dir)."""
        out = subprocess.run(["ps", "-eww", "-o", "stat=,args="], capture_output=True, text=True, check=True).stdout
        return [line for line in out.splitlines() if self.ray_tmp in line and not line.lstrip().startswith("Z")]


def test_three_nodes_train_on_a_ray_cluster_across_a_requeue_with_every_step_once(tmp_path, cleanup_jobs):
    # save every 3 steps; the requeue lands after step 4 is logged, so the rerun repeats step 4 from checkpoint 3
    run = MultiRun(tmp_path, max_steps=6, save_freq=3, gate=True)
    cleanup_jobs.append(run)
    run.allow(4)
    job = run.submit()
    first = f"{job}-0"
    wait_for(lambda: max(run.logged_steps(first), default=0) == 4, T, "step 4 logged")
    info = show_job(job)
    assert (info["NumNodes"], info["NodeList"]) == ("3", "ci3n[1-3]")
    assert run.ray_processes(), "no Ray process while the job trains"
    subprocess.run(["scontrol", "requeue", job], check=True)
    wait_for(lambda: show_job(job).get("JobState") == "PENDING", T, "the requeued job to be pending")
    # the requeue's SIGTERM stopped the whole cluster: the head here and the worker's srun step on ci3n2
    wait_for(lambda: not run.ray_processes(), 30, "the first cluster's Ray processes to end")
    run.allow(6)
    run.release(job)
    ids = run.wait_chain_end()

    assert ids == [job], run.logs()
    assert (show_job(job)["JobState"], show_job(job)["Restarts"]) == ("COMPLETED", "1")
    segs = run.segments()
    assert [(s["name"], s["status"]) for s in segs] == [(first, "terminated"), (f"{job}-1", "finished")]
    assert segs[1]["resume_step"] == 3
    # every step's reward counters were written by a Ray task on each trainer node, from that node's environment
    assert_every_step_once(run, 6, BOTH_NODES)
    for seg in segs:
        # the stand-in trainer joined the job's Ray cluster and saw both trainer nodes with one GPU each
        seen = run.first_line(seg["name"], "trainer.log", '{"standin": "ray"')
        assert sorted(n["gpus"] for n in seen["nodes"]) == [1.0, 1.0], seen
        assert len({n["id"] for n in seen["nodes"]}) == 2
        # the servers ran on the third node's GPU (an srun step there), reached by its name
        judge = run.first_line(seg["name"], "judge.log", '{"standin"')
        embed = run.first_line(seg["name"], "embed.log", '{"standin"')
        assert (judge["cuda_visible_devices"], embed["cuda_visible_devices"]) == ("0", "0")
        assert judge["argv"][judge["argv"].index("--host") + 1] == "ci3n3"
    chain = (run.dir / "chain.log").read_text()
    assert "Ray cluster at 127.0.0.1:" in chain and "2 nodes (ci3n1 ci3n2), 1 GPU(s) each" in chain
    assert "judge server (Qwen/Qwen3.5-9B on ci3n3 GPU 0) is healthy at http://ci3n3:" in chain
    assert "trainer         2 node(s) x 1 GPU(s): ci3n1 ci3n2" in chain
    wait_for(lambda: not run.ray_processes(), 30, "every Ray process to end with the job")


def test_a_ray_worker_step_that_dies_fails_the_segment_naming_its_node(tmp_path, cleanup_jobs):
    run = MultiRun(tmp_path, max_steps=3, gate=True)
    cleanup_jobs.append(run)
    run.allow(1)
    job = run.submit()
    wait_for(lambda: max(run.logged_steps(f"{job}-0"), default=0) == 1, T, "step 1 logged")
    chain = (run.dir / "chain.log").read_text()
    address = chain.split("Ray cluster at ", 1)[1].split(":", 2)[:2]
    # the worker's `ray start --block` on ci3n2 dies: its srun step ends, the launch sees it
    out = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, check=True).stdout
    needle = f"start --address {address[0]}:{address[1]} "
    worker = [int(x.split()[0]) for x in out.splitlines() if needle in x and "layout.py" not in x]
    assert len(worker) == 1, out
    os.kill(worker[0], signal.SIGKILL)
    wait_for(lambda: len(run.segments()) and run.segments()[0]["status"] != "running", T, "the segment to end")
    run.allow(3)
    run.release(job)
    ids = run.wait_chain_end()
    # the job made progress (checkpoint 1), so the chain goes on: requeued, it starts a new cluster and finishes
    assert ids == [job] and show_job(job)["Restarts"] == "1", run.logs()
    segs = run.segments()
    assert [s["status"] for s in segs] == ["crashed", "finished"]
    assert segs[0]["message"].startswith("Ray worker (srun step) on ci3n2 exited (code 137); see its log ")
    assert segs[0]["message"].endswith(f"/segments/{job}-0/ray-ci3n2.log")
    assert_every_step_once(run, 3, BOTH_NODES)
    wait_for(lambda: not run.ray_processes(), 30, "every Ray process to end with the job")


def test_two_judge_replicas_on_two_nodes_one_killed_the_other_answers(tmp_path, cleanup_jobs):
    # Serving GPUs 2 and judge replicas 2: judge 1 on ci3n2, judge 2 and the embedder on ci3n3, the trainer on ci3n1
    # alone (no Ray cluster). Judge 2 is killed after step 2; the launch polls only every 5 s, so step 3's judge
    # call meets the dead replica: the reward must send it to judge 1 at once (no outage wait).
    run = MultiRun(tmp_path, max_steps=4, gate=True, QUOTECITE_SERVE_GPUS="2", QUOTECITE_JUDGE_REPLICAS="2",
                   QUOTECITE_POLL_SECONDS="5", QUOTECITE_STANDIN_STEP_SECONDS="0.2")  # fmt: skip
    cleanup_jobs.append(run)
    run.allow(2)
    job = run.submit()
    seg = f"{job}-0"
    wait_for(lambda: max(run.logged_steps(seg), default=0) == 2, T, "step 2 logged")
    j1 = run.first_line(seg, "judge.log", '{"standin"')
    j2 = run.first_line(seg, "judge2.log", '{"standin"')
    assert (j1["argv"][j1["argv"].index("--host") + 1], j2["argv"][j2["argv"].index("--host") + 1]) == (
        "ci3n2", "ci3n3")  # fmt: skip
    os.kill(j2["pid"], signal.SIGKILL)
    run.allow(4)
    assert run.wait_chain_end() == [job], run.logs()
    segs = run.segments()
    assert [(s["name"], s["status"]) for s in segs] == [(seg, "finished")]
    log = run.run_log()
    assert [r["step"] for r in log] == [0, 1, 2, 3, 4]
    # every step scored by a judge, none waited out an outage: the live replica took the dead one's calls
    assert [r["reward_counters"] for r in log[1:]] == [{"judge_calls": 1, "embed_calls": 1}] * 4
    # the launch restarted the dead replica's srun step (counted as a judge restart)
    chain = (run.dir / "chain.log").read_text()
    assert "judge server 2 (Qwen/Qwen3.5-9B on ci3n3 GPU 0) is healthy at http://ci3n3:" in chain
    assert "exited (code 137) mid-job; restarting it (1 of at most 5 in this job)" in chain
    assert segs[0]["extra"]["restarts"] == {"judge": 1}
    assert "Ray cluster     none" in chain and not run.ray_processes()


def test_a_three_node_chain_requeued_twice_runs_every_segment_on_three_nodes(tmp_path, cleanup_jobs):
    # Only the job's submission says -p ci3 --nodes=3 --gpus-per-node=1 (the script's header asks for 1 x 3 GPUs):
    # requeued by Slurm, by itself at the wall-time warning, then by Slurm again, every run keeps that allocation.
    run = MultiRun(tmp_path, max_steps=6, gate=True)
    cleanup_jobs.append(run)
    run.allow(1)
    job = run.submit()
    wait_for(lambda: max(run.logged_steps(f"{job}-0"), default=0) == 1, T, "step 1 logged")
    subprocess.run(["scontrol", "requeue", job], check=True)  # requeue 1, by Slurm
    wait_for(lambda: show_job(job).get("JobState") == "PENDING", T, "the requeued job to be pending")
    run.allow(2)
    run.release(job)
    wait_for(lambda: run.last_step() == 2, T, "checkpoint 2")
    run.usr1(job)  # the wall-time warning: stop after the next checkpoint and requeue itself (requeue 2)
    wait_for(lambda: run.usr1_seen() == 1, T, "the job to act on SIGUSR1")
    run.allow(3)
    run.release(job)
    run.allow(4)
    wait_for(lambda: max(run.logged_steps(f"{job}-2"), default=0) == 4, T, "step 4 logged by run 3")
    subprocess.run(["scontrol", "requeue", job], check=True)  # requeue 3, by Slurm
    wait_for(lambda: show_job(job).get("JobState") == "PENDING", T, "the job to be pending again")
    run.allow(6)
    run.release(job)
    ids = run.wait_chain_end()

    assert ids == [job], run.logs()
    info = show_job(job)
    assert (info["JobState"], info["NumNodes"], info["NodeList"], info["Restarts"]) == \
           ("COMPLETED", "3", "ci3n[1-3]", "3")  # fmt: skip
    assert info["Partition"] == "ci3" and info["TresPerNode"] == "gres:gpu:1"
    segs = run.segments()
    assert [s["status"] for s in segs] == ["terminated", "stopped", "terminated", "finished"]
    man = json.loads((run.dir / "manifest.json").read_text())
    # every segment (4: one job, run four times) ran on the three nodes
    assert [j["nodes"] for j in man["jobs"]] == [["ci3n1", "ci3n2", "ci3n3"]] * 4
    assert_every_step_once(run, 6, BOTH_NODES)
    wait_for(lambda: not run.ray_processes(), 30, "every Ray process to end with the job")
