"""launch/allocation.py: a job's allocation read back from Slurm, the next job of a chain asking for the same one, and
the CPUs of every srun step.

The parser is checked on captured ``scontrol show job -o`` lines (Slurm 22.05, and the odd fields of other
releases and clusters); the rest against the real local Slurm of ``.ci/slurm_up.sh`` (partitions ci, ci3, ci8)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from core.errors import InputError
from launch.allocation import (
    JobShape,
    clean_submit_env,
    parse_fields,
    parse_show_job,
    parse_time_limit,
    read_job,
    sbatch_args,
    srun_cpu_args,
)
from tests.support.slurm import slurm_reason, wait_for

REPO = Path(__file__).resolve().parents[2]

# Captured from `scontrol show job -o` of Slurm 22.05 (the local CI Slurm): a held job of
# `sbatch --hold -p ci3 --nodes=3 --gpus-per-node=1 --cpus-per-task=1 --mem=100M --time=00:05:00 --account=lab`.
PENDING_2205 = (
    "JobId=1 JobName=l2probe-2799 UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0 Account=lab "
    "QOS=(null) JobState=PENDING Reason=JobHeldUser Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:05:00 TimeMin=N/A SubmitTime=2026-12-02T18:30:49 "
    "EligibleTime=Unknown AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None "
    "SecsPreSuspend=0 LastSchedEval=2026-12-02T18:30:49 Scheduler=Main Partition=ci3 AllocNode:Sid=localhost:2799 "
    "ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes=3-3 NumCPUs=3 NumTasks=3 CPUs/Task=1 "
    "ReqB:S:C:T=0:0:*:* TRES=cpu=3,mem=300M,node=3,billing=3 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=100M MinTmpDiskNode=0 Features= DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 "
    "Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp StdErr=/tmp/slurm-1.out StdIn=/dev/null "
    "StdOut=/tmp/slurm-1.out Power= TresPerNode=gres:gpu:1 "
)
# The same release once running, with --ntasks-per-node=1 --exclusive: TRES becomes the allocated CPUs (the whole
# nodes) and loses mem; NodeList names the nodes.
RUNNING_2205 = (
    "JobId=2 JobName=l2probe-b UserId=root(0) GroupId=root(0) Account=(null) QOS=(null) JobState=RUNNING "
    "TimeLimit=00:05:00 Partition=ci3 ReqNodeList=(null) ExcNodeList=(null) NodeList=ci3n[1-3] BatchHost=ci3n1 "
    "NumNodes=3 NumCPUs=6 NumTasks=3 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=6,node=3,billing=6 Socks/Node=* "
    "NtasksPerN:B:S:C=1:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=100M MinTmpDiskNode=0 Features=(null) "
    "OverSubscribe=NO Contiguous=0 Licenses=(null) Command=(null) WorkDir=/tmp TresPerNode=gres:gpu:1"
)
# What other clusters print: GPUs only in the TRES totals (typed and untyped), memory per CPU, two partitions, a
# day-long limit, features, a reservation, --exclusive=user, a job name with spaces.
ODD_TRES = (
    "JobId=4242 JobName=grpo 8b run UserId=u(1) Account=lab QOS=high JobState=RUNNING TimeLimit=1-00:00:00 "
    "Partition=a,b ReqNodeList=(null) ExcNodeList=bad[01-02] NodeList=gpu[03-04] NumNodes=2 NumCPUs=64 NumTasks=2 "
    "CPUs/Task=32 ReqTRES=cpu=64,mem=1000G,node=2,billing=64,gres/gpu=16,gres/gpu:h100=16 "
    "AllocTRES=cpu=64,mem=1000G,node=2,billing=64,gres/gpu=16,gres/gpu:h100=16 NtasksPerN:B:S:C=1:0:*:* "
    "MinCPUsNode=32 MinMemoryCPU=8G Features=h100&ib Reservation=maint OverSubscribe=USER "
    "Licenses=scratch:1 Command=/home/u/my jobs/grpo_8b.sh"
)


def test_parse_fields_keeps_values_with_spaces_and_equals():
    f = parse_fields(ODD_TRES)
    assert f["JobName"] == "grpo 8b run"
    assert f["Command"] == "/home/u/my jobs/grpo_8b.sh"
    assert f["ReqTRES"].endswith("gres/gpu:h100=16")
    assert f["NtasksPerN:B:S:C"] == "1:0:*:*" and f["CPUs/Task"] == "32"


def test_pending_2205_line():
    s = parse_show_job(PENDING_2205, "1")
    assert s == JobShape(job_id="1", nodes="3", ntasks=3, gpus_per_node=1, cpus_per_task=1, mem_per_node_mb=100,
                         time_limit="00:05:00", partition="ci3", account="lab")  # fmt: skip
    assert s.qos is None and s.constraint is None and s.exclusive is None and s.signal is None
    assert s.time_limit_s == 300
    assert sbatch_args(s) == ["--nodes=3", "--ntasks=3", "--gpus-per-node=1", "--cpus-per-task=1", "--mem=100M",
                              "--time=00:05:00", "--partition=ci3", "--account=lab"]  # fmt: skip


def test_running_exclusive_line():
    s = parse_show_job(RUNNING_2205, "2")
    assert (s.nodes, s.ntasks_per_node, s.ntasks, s.gpus_per_node, s.exclusive) == ("3", 1, None, 1, "")
    assert s.account is None and s.mem_per_node_mb == 100
    args = sbatch_args(s)
    assert "--ntasks-per-node=1" in args and "--exclusive" in args
    assert not any(a.startswith(("--nodelist", "-w", "--ntasks=")) for a in args)


def test_odd_fields():
    s = parse_show_job(ODD_TRES, "4242")
    assert (s.nodes, s.gpus_per_node, s.gpu_type, s.gpus_per_job) == ("2", 8, "h100", None)
    assert (s.mem_per_cpu_mb, s.mem_per_node_mb, s.cpus_per_task) == (8192, None, 32)
    assert (s.partition, s.time_limit, s.time_limit_s) == ("a,b", "1-00:00:00", 86400)
    assert (s.account, s.qos, s.constraint, s.reservation, s.exclusive) == ("lab", "high", "h100&ib", "maint", "user")
    assert sbatch_args(s) == [
        "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=h100:8", "--cpus-per-task=32", "--mem-per-cpu=8G",
        "--time=1-00:00:00", "--partition=a,b", "--account=lab", "--qos=high", "--constraint=h100&ib",
        "--reservation=maint", "--licenses=scratch:1", "--exclude=bad[01-02]", "--exclusive=user",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        # only a typed total, one node: typed per-node count
        ("NumNodes=1 TRES=cpu=8,mem=64G,node=1,gres/gpu:h100=8 TimeLimit=UNLIMITED", ["--gpus-per-node=h100:8"]),
        # newer releases write TresPerNode with a slash
        ("NumNodes=2 TresPerNode=gres/gpu:a100:4 TRES=cpu=2,gres/gpu=8", ["--gpus-per-node=a100:4"]),
        # a total that does not divide over the nodes stays a job total
        ("NumNodes=3 TRES=cpu=3,node=3,gres/gpu=4", ["--gpus=4"]),
        ("NumNodes=1 TresPerJob=gres:gpu:2", ["--gpus=2"]),
        ("NumNodes=1 NumTasks=2 TresPerTask=gres:gpu:1", ["--ntasks=2", "--gpus-per-task=1"]),
        (
            "NumNodes=1 TresPerNode=gres:gpu:2,gres:nic:1 MemPerTres=gres:gpu:1000 MinMemoryNode=0",
            ["--gpus-per-node=2"],
        ),
        # --cpus-per-gpu: Slurm shows CPUs/Task=1 beside it; repeating both would be refused
        ("NumNodes=1 CPUs/Task=1 CpusPerTres=gres:gpu:8 TresPerNode=gres:gpu:1", ["--cpus-per-gpu=8"]),
    ],
)
def test_gpu_forms(fields, want):
    s = parse_show_job(f"JobId=9 {fields}", "9")
    args = sbatch_args(s)
    for w in want:
        assert w in args, args
    assert not ("--cpus-per-gpu=8" in args and any(a.startswith("--cpus-per-task") for a in args))


def test_memory_and_node_forms():
    s = parse_show_job("JobId=9 NumNodes=2-4 MinMemoryNode=0 TimeLimit=UNLIMITED", "9")
    assert (s.nodes, s.mem_per_node_mb, s.time_limit, s.time_limit_s) == ("2-4", 0, "UNLIMITED", None)
    assert sbatch_args(s) == ["--nodes=2-4", "--mem=0", "--time=UNLIMITED"]  # --mem=0: the whole node, as before
    g = parse_show_job("JobId=9 NumNodes=1 MemPerTres=gres:gpu:1000 MinMemoryNode=0", "9")
    assert (g.mem_per_gpu_mb, g.mem_per_node_mb) == (1000, None)
    assert "--mem-per-gpu=1000M" in sbatch_args(g)
    assert parse_show_job("JobId=9 MinMemoryNode=1.5G", "9").mem_per_node_mb == 1536
    assert parse_show_job("JobId=9 TimeLimit=Partition_Limit", "9").time_limit is None


def test_time_limit_forms():
    assert [parse_time_limit(t) for t in ("30", "5:30", "02:00:00", "2-12", "2-12:30", "7-00:00:00")] == [
        1800, 330, 7200, 216000, 217800, 604800,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "line",
    [
        "JobId=9 NumNodes=three",
        "JobId=9 TimeLimit=soon",
        "JobId=9 MinMemoryNode=lots",
        "JobId=9 CPUs/Task=x",
        "no job here",
    ],
)
def test_bad_fields_are_input_errors_naming_the_job(line):
    with pytest.raises(InputError, match=r"job 9"):
        parse_show_job(line, "9")


def _fake_scontrol(tmp_path: Path, body: str) -> str:
    p = tmp_path / "scontrol"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)
    return str(p)


def test_read_job_through_a_program(tmp_path):
    ok = _fake_scontrol(tmp_path, f"[ \"$*\" = 'show job -o 1' ] || exit 3\ncat <<'EOF'\n{PENDING_2205}\nEOF\n")
    assert read_job(1, scontrol=ok).partition == "ci3"
    bad = _fake_scontrol(tmp_path, "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
    with pytest.raises(InputError, match=r"^job 77: .*Invalid job id specified$"):
        read_job("77", scontrol=bad)
    with pytest.raises(InputError, match=r"job 5: .*not found"):
        read_job(5, scontrol=str(tmp_path / "missing"))
    with pytest.raises(InputError, match="not a Slurm job id"):
        read_job("5; rm -rf /", scontrol=ok)


def test_srun_cpu_args():
    assert srun_cpu_args({"SLURM_CPUS_PER_TASK": "32", "SLURM_JOB_ID": "5"}) == ["--cpus-per-task=32"]
    assert srun_cpu_args({}) == [] and srun_cpu_args({"SLURM_CPUS_PER_TASK": ""}) == []
    with pytest.raises(InputError, match="SLURM_CPUS_PER_TASK"):
        srun_cpu_args({"SLURM_CPUS_PER_TASK": "all"})


JOB_ENV = {
    "SLURM_JOB_ID": "5",
    "SLURM_RESTART_COUNT": "2",
    "SLURM_CPUS_PER_TASK": "32",
    "SLURM_CONF": "/etc/slurm/slurm.conf",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "GPU_DEVICE_ORDINAL": "0,1",
    "ROCR_VISIBLE_DEVICES": "0",
    "QUOTECITE_RUN_DIR": "/runs/x",
    "MY_SLURM_NOTE": "kept",
    "PATH": "/usr/bin:/bin",
}


def test_clean_submit_env():
    assert clean_submit_env(JOB_ENV) == {
        "SLURM_CONF": "/etc/slurm/slurm.conf",
        "QUOTECITE_RUN_DIR": "/runs/x",
        "MY_SLURM_NOTE": "kept",
        "PATH": "/usr/bin:/bin",
    }


def test_clean_submit_env_follows_the_bash_rule(tmp_path):
    """The environment ``qc_sbatch_clean`` (slurm/common.sh) hands sbatch, recorded by a stand-in sbatch, is the one
    :func:`clean_submit_env` builds, SLURM_CONF aside (kept here, on purpose)."""
    common = REPO / "slurm" / "common.sh"
    if not common.is_file() or "qc_sbatch_clean()" not in common.read_text():
        pytest.skip("slurm/common.sh has no qc_sbatch_clean any more (the launch moved to Python)")
    (tmp_path / "sbatch").write_text(f"#!/bin/sh\nenv > {tmp_path}/env.txt\necho 1\n")
    (tmp_path / "sbatch").chmod(0o755)
    env = {**JOB_ENV, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    subprocess.run(["bash", "-c", f"source {common} && qc_sbatch_clean --wrap true"],
                   env=env, check=True, capture_output=True)  # fmt: skip
    got = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    got = {k: v for k, v in got.items() if k in env}  # what bash adds itself (PWD, SHLVL, _) aside
    want = clean_submit_env(env)
    assert got == {k: v for k, v in want.items() if k != "SLURM_CONF"}
    assert "SLURM_CONF" in want


# --------------------------------------------------------------------------------------------- the real Slurm
needs_slurm = pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-")


def _partition_nodes(name: str) -> int:
    out = subprocess.run(["sinfo", "-h", "-p", name, "-o", "%D"], capture_output=True, text=True).stdout.split()
    return sum(int(x) for x in out if x.isdigit())


def _sbatch(name: str, *args: str, env: dict | None = None) -> str:
    r = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", *args], capture_output=True, text=True,
                       env=env, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


REQUEST = ["-p", "ci3", "--nodes=3", "--gpus-per-node=1", "--cpus-per-task=1", "--mem=100M", "--time=00:05:00"]


@pytest.mark.slurm
@needs_slurm
def test_read_job_gives_the_request_back_and_the_next_job_asks_the_same(cleanup_jobs):
    """A held job read back field by field; the job submitted with sbatch_args of that shape has the same shape.
    The local Slurm accepts --account (no accounting: any name) and --qos, but keeps no QOS without accounting."""
    if _partition_nodes("ci3") < 3:
        pytest.skip("no partition ci3 with 3 nodes (QUOTECITE_SLURM_LAYOUT=multi bash .ci/slurm_up.sh)")
    name = f"qc-alloc-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    first = _sbatch(name, "--hold", *REQUEST, "--account=lab", "--qos=normal", "--wrap", "sleep 30")
    s = read_job(first)
    assert s.job_id == first
    assert (s.nodes, s.gpus_per_node, s.gpu_type, s.cpus_per_task, s.mem_per_node_mb) == ("3", 1, None, 1, 100)
    assert (s.time_limit, s.time_limit_s, s.partition, s.account) == ("00:05:00", 300, "ci3", "lab")
    assert s.qos is None  # accounting_storage/none: Slurm takes --qos and keeps nothing
    assert (s.constraint, s.reservation, s.exclusive, s.mem_per_cpu_mb, s.signal) == (None, None, None, None, None)
    second = _sbatch(name, "--hold", *sbatch_args(s), "--wrap", "sleep 30", env=clean_submit_env())
    s2 = read_job(second)
    assert s2.job_id == second != first
    assert s2 == s


@pytest.mark.slurm
@needs_slurm
def test_other_options_round_trip(cleanup_jobs):
    """Per-node tasks, exclusive nodes, memory per CPU, two partitions, a day-long limit, eight GPUs."""
    if _partition_nodes("ci8") < 2:
        pytest.skip("no partition ci8 with 2 nodes")
    name = f"qc-alloc-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    first = _sbatch(name, "--hold", "-p", "ci8,ci3", "--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=1",
                    "--mem-per-cpu=50M", "--time=1-00:00:00", "--exclusive", "--wrap", "sleep 30")  # fmt: skip
    s = read_job(first)
    assert (s.partition, s.nodes, s.ntasks_per_node, s.gpus_per_node) == ("ci8,ci3", "2", 1, 1)
    assert (s.mem_per_cpu_mb, s.mem_per_node_mb, s.time_limit, s.exclusive) == (50, None, "1-00:00:00", "")
    assert read_job(_sbatch(name, "--hold", *sbatch_args(s), "--wrap", "sleep 30")) == s
    g8 = _sbatch(name, "--hold", "-p", "ci8", "--nodes=2", "--gres=gpu:8", "--time=UNLIMITED", "--wrap", "true")
    cg = read_job(_sbatch(name, "--hold", "-p", "ci", "--gpus-per-node=1", "--cpus-per-gpu=2", "--wrap", "true"))
    assert (cg.cpus_per_gpu, cg.cpus_per_task) == (2, None)
    assert read_job(_sbatch(name, "--hold", *sbatch_args(cg), "--wrap", "true")) == cg
    s8 = read_job(g8)
    assert (s8.gpus_per_node, s8.time_limit, s8.time_limit_s) == (8, "UNLIMITED", None)
    assert read_job(_sbatch(name, "--hold", *sbatch_args(s8), "--wrap", "true")) == s8


@pytest.mark.slurm
@needs_slurm
def test_read_job_of_no_job_is_one_input_error():
    with pytest.raises(InputError, match=r"^job 987654321: scontrol show job failed: .*[Ii]nvalid job id"):
        read_job(987654321)


CHAIN_STEP = """
import json, os, subprocess, sys
from launch.allocation import clean_submit_env, read_job, sbatch_args
me = read_job(os.environ["SLURM_JOB_ID"])
env = clean_submit_env()
nxt = subprocess.run(["sbatch", "--parsable", "--hold", "--job-name=" + sys.argv[1], *sbatch_args(me), "--wrap",
                      "sleep 30"], env=env, capture_output=True, text=True, check=True).stdout.strip()
json.dump({"me": vars(me), "next": nxt, "args": sbatch_args(me), "dropped": sorted(set(os.environ) - set(env)),
           "node": os.environ.get("SLURMD_NODENAME")}, open(sys.argv[2], "w"))
"""


@pytest.mark.slurm
@needs_slurm
def test_a_running_job_submits_its_successor_with_its_own_shape(tmp_path, cleanup_jobs):
    """What the launch does at the end of a job: read itself from Slurm while running, submit the next job with
    that shape from a clean environment. The successor (held) asks for the same allocation the user gave the
    first job on the command line, none of which the job script's header says."""
    if _partition_nodes("ci3") < 3:
        pytest.skip("no partition ci3 with 3 nodes")
    name = f"qc-alloc-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    (tmp_path / "step.py").write_text(CHAIN_STEP)
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = _sbatch(name, *REQUEST, "--account=lab", f"--output={tmp_path}/job.out", f"--chdir={REPO}",
                    "--wrap", f"{sys.executable} {tmp_path}/step.py {name} {out}", env=env)  # fmt: skip
    wait_for(lambda: out.exists() and out.stat().st_size > 0, 180, f"job {first} to write {out}", poll=0.5)
    rec = json.loads(out.read_text())
    assert rec["node"] == "ci3n1"  # it ran, on the first of the three nodes
    assert rec["me"]["job_id"] == first and rec["me"]["nodes"] == "3" and rec["me"]["account"] == "lab"
    assert not any(a.startswith(("--nodelist", "-w")) for a in rec["args"])
    assert {"SLURM_JOB_ID", "SLURM_NODELIST", "SLURM_CPUS_PER_TASK"} <= set(rec["dropped"])
    succ = read_job(rec["next"])
    assert vars(succ) == {**rec["me"], "job_id": rec["next"]}


SRUN_STEPS = """
ARGS=$({python} -c 'from launch.allocation import srun_cpu_args; print(*srun_cpu_args())')
echo "args=$ARGS"
srun --exact --ntasks=1 $ARGS bash -c 'scontrol show step -o $SLURM_JOB_ID.$SLURM_STEP_ID' > {out}/with.txt
srun --exact --ntasks=1 bash -c 'scontrol show step -o $SLURM_JOB_ID.$SLURM_STEP_ID' > {out}/without.txt
touch {out}/done
"""


@pytest.mark.slurm
@needs_slurm
def test_srun_steps_get_the_jobs_cpus_per_task(tmp_path, cleanup_jobs):
    """A job of --cpus-per-task=2: an srun step given srun_cpu_args holds 2 CPUs, one without holds 1 (srun of
    22.05 does not read SLURM_CPUS_PER_TASK; --exact makes the step hold only what it asks for)."""
    name = f"qc-alloc-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    script = tmp_path / "steps.sh"
    script.write_text("#!/bin/bash\n" + textwrap.dedent(SRUN_STEPS).format(python=sys.executable, out=tmp_path))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    job = _sbatch(name, "-p", "ci", "--ntasks=1", "--cpus-per-task=2", "--time=00:05:00",
                  f"--output={tmp_path}/job.out", f"--chdir={REPO}", str(script), env=env)  # fmt: skip
    wait_for(lambda: (tmp_path / "done").exists(), 180, f"job {job}'s steps", poll=0.5)
    assert "args=--cpus-per-task=2" in (tmp_path / "job.out").read_text()
    cpus = {k: re.search(r"\bCPUs=(\d+)", (tmp_path / f"{k}.txt").read_text()) for k in ("with", "without")}
    assert cpus["with"] and cpus["without"], {k: (tmp_path / f"{k}.txt").read_text() for k in cpus}
    assert (int(cpus["with"].group(1)), int(cpus["without"].group(1))) == (2, 1)
