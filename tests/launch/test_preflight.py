"""The launch's pre-flight checks (launch/preflight.py) on their own and through the job's dry run: node names that
resolve to loopback, NCCL/Gloo variables, Ray's per-job ports, the NVIDIA driver and the C compiler, one wandb run
per training run. What the node would answer (name resolution, the driver, ``which``) is given through a ``Probe``;
the dry run is the job's own code with the printing executor. No GPU, no cluster."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import InputError
from launch import preflight, settings
from launch.executor import PrintingExecutor
from launch.job import Job
from launch.preflight import (
    RAY_BLOCK,
    RAY_RANGE,
    RAY_SLOTS,
    Probe,
    check_toolchain,
    node_addresses,
    ray_ports,
)

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
DRIVER_VISIBLE = preflight._read_driver()[0] is not None
"""This machine shows an NVIDIA driver (the H200 machine); a CPU machine does not."""


def addrinfo(table: dict[str, list[str]]):
    """A ``getaddrinfo`` answering from ``table`` (a name missing from it does not resolve)."""

    def getaddrinfo(name, port, family=0, type=0, *rest):
        if name not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        fam = {True: socket.AF_INET6, False: socket.AF_INET}
        return [(fam[":" in a], socket.SOCK_STREAM, 6, "", (a, 0)) for a in table[name]]

    return getaddrinfo


def routes(table: dict[str, str]):
    return lambda peer: table.get(peer, "")


CLUSTER = {"gpu01": ["127.0.1.1"], "gpu02": ["10.0.0.2"], "gpu03": ["10.0.0.3"]}
"""Debian's /etc/hosts on gpu01: its own name is 127.0.1.1; the others come from DNS."""


# --------------------------------------------------------------------------------------------- node addresses
def test_this_nodes_name_on_loopback_is_replaced_by_its_route_to_another_node():
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({"10.0.0.2": "10.0.0.1"}))
    got = node_addresses(["gpu01", "gpu02", "gpu03"], "gpu01", {}, probe)
    assert [(a.address, a.host) for a in got.values()] == [("10.0.0.1", "10.0.0.1"), ("10.0.0.2", "gpu02"),
                                                           ("10.0.0.3", "gpu03")]  # fmt: skip
    assert "gpu01 resolves to 127.0.1.1" in got["gpu01"].note and "10.0.0.1" in got["gpu01"].note
    assert got["gpu02"].note == got["gpu03"].note == ""


def test_another_nodes_name_on_loopback_is_refused_in_one_line_naming_the_setting():
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({"10.0.0.2": "10.0.0.9"}))
    with pytest.raises(InputError) as e:
        node_addresses(["gpu01", "gpu02", "gpu03"], "login1", {}, probe)
    msg = str(e.value)
    assert "\n" not in msg and "node gpu01 resolves to 127.0.1.1 on login1" in msg
    assert "QUOTECITE_NODE_ADDRESSES=gpu01=<its routable IP>" in msg


def test_127_0_0_1_is_one_machine_when_every_node_is_there_and_refused_next_to_routable_nodes():
    local = {"ci3n1": ["127.0.0.1"], "ci3n2": ["127.0.0.1"]}  # .ci/slurm_up.sh adds its node names so
    got = node_addresses(["ci3n1", "ci3n2"], "ci3n1", {}, Probe(getaddrinfo=addrinfo(local)))
    assert [(a.address, a.host, a.note) for a in got.values()] == [("127.0.0.1", "ci3n1", ""),
                                                                   ("127.0.0.1", "ci3n2", "")]  # fmt: skip
    mixed = {"gpu01": ["10.0.0.1"], "gpu02": ["127.0.0.1"]}
    with pytest.raises(InputError, match="node gpu02 resolves to 127.0.0.1"):
        node_addresses(["gpu01", "gpu02"], "gpu01", {}, Probe(getaddrinfo=addrinfo(mixed)))


def test_no_route_to_another_node_is_refused_even_on_the_node_itself():
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({}))
    with pytest.raises(InputError, match="QUOTECITE_NODE_ADDRESSES"):
        node_addresses(["gpu01", "gpu02"], "gpu01", {}, probe)


def test_given_addresses_win_and_unresolvable_names_stay_names():
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({}))
    got = node_addresses(["gpu01", "gpu02", "gpu09"], "login1", {"gpu01": "10.9.0.1"}, probe)
    assert (got["gpu01"].address, got["gpu01"].host) == ("10.9.0.1", "10.9.0.1")
    assert "QUOTECITE_NODE_ADDRESSES" in got["gpu01"].note
    assert (got["gpu09"].address, got["gpu09"].host) == ("gpu09", "gpu09")  # a laptop's dry run: names as they are


def test_ipv4_is_preferred_and_the_real_resolver_and_route_answer_for_loopback():
    both = {"gpu01": ["fd00::1", "10.0.0.1"]}
    assert preflight.resolve("gpu01", addrinfo(both)) == ["10.0.0.1", "fd00::1"]
    assert preflight.resolve("127.0.0.1") == ["127.0.0.1"]
    assert preflight.resolve("no-such-host.invalid") == []
    assert preflight._route("127.0.0.1") == "127.0.0.1"


@pytest.mark.parametrize(
    ("value", "phrase"),
    [("gpu01", "node=IP pairs"), ("gpu01=node7", "not an IP address"), ("gpu01=127.0.1.1", "loopback"),
     ("gpu01=10.0.0.1,gpu01=10.0.0.2", "given twice")],
)  # fmt: skip
def test_node_addresses_setting_is_checked(tmp_path, value, phrase):
    with pytest.raises(settings.SettingsError) as e:
        settings.resolve({"QUOTECITE_NODE_ADDRESSES": value}, tmp_path)
    assert "QUOTECITE_NODE_ADDRESSES" in str(e.value) and phrase in str(e.value)


# --------------------------------------------------------------------------------------------- Ray's ports
def head_ports(p: preflight.RayPorts) -> dict[str, int]:
    args = p.head_args()
    return {flag: int(port) for flag, port in zip(args[::2], args[1::2], strict=True)}


def test_ray_ports_come_from_the_job_id_in_the_documented_range_one_block_per_job():
    a, b = ray_ports("4242"), ray_ports("4243")
    assert a.slot == 4242 % RAY_SLOTS and b.slot == (a.slot + 1) % RAY_SLOTS
    for p in (a, b):
        ports = head_ports(p)
        lo, hi = ports.pop("--min-worker-port"), ports.pop("--max-worker-port")
        assert RAY_RANGE[0] <= p.base and hi <= RAY_RANGE[1] and hi - lo + 1 == RAY_BLOCK - 16
        # the fixed ports at the block's start, one held back (the client server's, not passed), the workers after
        assert sorted(ports.values()) == [p.base, *range(p.base + 2, p.base + 8)] and lo == p.base + 16
    assert set(range(a.base, a.base + RAY_BLOCK)).isdisjoint(range(b.base, b.base + RAY_BLOCK))
    assert ray_ports("local-20261203") == ray_ports("local-20261203")  # a name: its CRC-32, the same every time


def test_a_taken_port_moves_the_job_to_the_next_free_block_and_none_free_is_refused():
    first = ray_ports("4242")
    taken = {head_ports(first)["--max-worker-port"]}  # the last worker port of the job's own block
    moved = ray_ports("4242", lambda p: p not in taken)
    assert moved.checked and moved.slot == (first.slot + 1) % RAY_SLOTS
    with pytest.raises(InputError, match="no block of 320 free ports for Ray in 20000-32767"):
        ray_ports("4242", lambda p: False)


def test_port_free_sees_a_listening_socket():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        assert preflight.port_free(s.getsockname()[1]) is False


# --------------------------------------------------------------------------------------------- driver, compiler
def driver(version: str | None):
    return lambda: (version, "/proc/driver/nvidia/version" if version else "no NVIDIA driver visible on this node")


def test_an_old_driver_is_refused_naming_what_the_server_venv_needs():
    probe = Probe(read_driver=driver("570.133.20"), which=lambda n: f"/usr/bin/{n}")
    with pytest.raises(InputError) as e:
        check_toolchain({}, "unknown", True, probe)
    msg = str(e.value)
    assert "\n" not in msg and "NVIDIA driver 570.133.20" in msg and "older than 580" in msg
    assert "CUDA 13 torch" in msg and "driver >= 580" in msg


def test_a_new_enough_driver_and_a_compiler_pass_and_say_so():
    probe = Probe(read_driver=driver("580.65.06"), which=lambda n: f"/usr/bin/{n}")
    assert check_toolchain({}, "2.9.0+cu130", True, probe) == [
        "NVIDIA driver 580.65.06 (/proc/driver/nvidia/version) >= 580, what the server venv's CUDA 13 torch "
        "(2.9.0+cu130) needs",
        "C compiler for Triton: /usr/bin/cc",
    ]
    # a CUDA 12 build of torch runs on a 5xx driver from 525 on
    assert check_toolchain({}, "2.8.0+cu128", True, Probe(read_driver=driver("550.54.15"), which=lambda n: "/x"))


def test_a_missing_compiler_is_one_error_saying_how_to_fix_it():
    probe = Probe(read_driver=driver("580.65.06"), which=lambda n: None)
    with pytest.raises(InputError) as e:
        check_toolchain({}, "unknown", True, probe)
    assert "no C compiler on this node (no $CC, no cc or gcc on PATH)" in str(e.value)
    assert "Triton" in str(e.value) and "module load gcc" in str(e.value)
    with pytest.raises(InputError, match="CC=/opt/none/gcc-13 is not a program on this node"):
        check_toolchain(
            {"CC": "/opt/none/gcc-13"}, "unknown", True, Probe(read_driver=driver("580.1"), which=lambda n: None)
        )
    both = Probe(read_driver=driver("535.1"), which=lambda n: None)
    with pytest.raises(InputError) as e:
        check_toolchain({}, "unknown", True, both)
    assert "older than 580" in str(e.value) and "no C compiler" in str(e.value) and "\n" not in str(e.value)


def test_no_driver_skips_and_servers_of_the_users_own_are_not_compared():
    assert check_toolchain({}, "unknown", True, Probe(read_driver=driver(None), which=lambda n: None)) == [
        "driver and C compiler check skipped: no NVIDIA driver visible on this node"
    ]
    lines = check_toolchain({}, "unknown", False, Probe(read_driver=driver("470.1"), which=lambda n: "/usr/bin/cc"))
    assert "not compared" in lines[0] and lines[1] == "C compiler for Triton: /usr/bin/cc"


def test_the_driver_version_is_read_from_the_kernel_module_line_and_nvidia_smi():
    proc = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 2025\nGCC version:  gcc 11.4.0\n"
    assert preflight.parse_driver(proc) == "580.95.05"
    assert preflight.parse_driver("580.95.05\n580.95.05\n") == "580.95.05"
    assert preflight.parse_driver("") is None
    version, where = preflight._read_driver()  # this machine: a driver or, on a CPU machine, why there is none
    if version is None:
        assert where.startswith("no NVIDIA driver visible on this node")
    else:
        assert preflight.parse_driver(version) == version and where in (str(preflight.DRIVER_FILE), "nvidia-smi")


# --------------------------------------------------------------------------------------------- through the job
def job_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "QUOTECITE_", "CUDA_VISIBLE", "NCCL_", "GLOO_", "WANDB_"))}  # fmt: skip
    env.update(QUOTECITE_ENV_SETUP="0", QUOTECITE_PYTHON=PY, QUOTECITE_RUN_DIR=str(tmp / "run"),
               QUOTECITE_MAX_STEPS="8", QUOTECITE_JUDGE_PORT="0", QUOTECITE_EMBED_PORT="0",
               QUOTECITE_CHAIN="0")  # fmt: skip
    env.update(extra)
    return env


def dry_steps(env: dict[str, str], probe: Probe, args: tuple[str, ...] = ()) -> list[dict]:
    """The job's dry run in this process with ``probe`` standing for the node."""
    out = io.StringIO()
    job = Job(settings.resolve(env, REPO), list(args), PrintingExecutor(as_json=True, out=out), env, probe=probe)
    assert job.run() == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def step(steps: list[dict], name: str) -> dict:
    (one,) = [s for s in steps if s["name"] == name]
    return one


def program(s: dict) -> list[str]:
    return s["argv"][s["argv"].index("--") + 1 :]


THREE_NODES = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "gpu[01-03]",
               "SLURM_GPUS_ON_NODE": "1"}  # fmt: skip


def test_dry_run_on_a_node_whose_name_is_loopback_uses_its_routable_address_for_ray(tmp_path):
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({"10.0.0.2": "10.0.0.1"}),
                  read_driver=driver(None))  # fmt: skip
    st = dry_steps(job_env(tmp_path, SLURMD_NODENAME="gpu01", **THREE_NODES), probe)
    head, worker = step(st, "ray_0"), step(st, "ray_1")
    h, w = program(head), program(worker)
    assert h[h.index("--node-ip-address") + 1] == "10.0.0.1"
    assert head["argv"][head["argv"].index("--bind-host") + 1] == "10.0.0.1"
    assert w[w.index("--address") + 1] == "10.0.0.1:{port}" and w[w.index("--node-ip-address") + 1] == "10.0.0.2"
    # the servers' node resolves properly: they keep its name
    assert program(step(st, "judge"))[program(step(st, "judge")).index("--host") + 1] == "gpu03"


def test_dry_run_from_a_node_that_cannot_fix_it_stops_before_anything_with_one_line(tmp_path):
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({}), read_driver=driver(None))
    with pytest.raises(InputError, match="node gpu01 resolves to 127.0.1.1 on login1.*QUOTECITE_NODE_ADDRESSES"):
        dry_steps(job_env(tmp_path, SLURMD_NODENAME="login1", **THREE_NODES), probe)
    # given the address, the same plan goes through and every step uses it
    env = job_env(tmp_path, SLURMD_NODENAME="login1", QUOTECITE_NODE_ADDRESSES="gpu01=10.0.0.1", **THREE_NODES)
    h = program(step(dry_steps(env, probe), "ray_0"))
    assert h[h.index("--node-ip-address") + 1] == "10.0.0.1"


def test_servers_on_a_loopback_named_node_listen_on_and_are_reached_by_its_address(tmp_path):
    # two nodes, one judge replica on each node's last GPU: judge on gpu01, the second replica and the embedder on gpu02
    probe = Probe(getaddrinfo=addrinfo(CLUSTER), route=routes({"10.0.0.2": "10.0.0.1"}), read_driver=driver(None))
    env = job_env(tmp_path, SLURMD_NODENAME="gpu01", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="gpu[01-02]",
                  QUOTECITE_NODE_GPUS="3,1", QUOTECITE_SERVE_GPUS="2", QUOTECITE_JUDGE_REPLICAS="2",
                  QUOTECITE_TRAIN_GPUS_PER_NODE="2")  # fmt: skip
    st = dry_steps(env, probe)
    j = program(step(st, "judge"))
    assert j[j.index("--host") + 1] == "10.0.0.1"
    urls = step(st, "trainer")["env"]["QUOTECITE_JUDGE_URL"].split(",")
    assert urls == ["http://10.0.0.1:{port}/v1", "http://gpu02:{port}/v1"]


def test_driver_too_old_stops_the_job_before_any_server_starts(tmp_path):
    probe = Probe(read_driver=driver("570.86.15"), which=lambda n: "/usr/bin/cc")
    out = io.StringIO()
    env = job_env(tmp_path, QUOTECITE_ENV_SETUP="1")  # the job's own server venv: vLLM with a CUDA 13 torch
    job = Job(settings.resolve(env, REPO), [], PrintingExecutor(as_json=True, out=out), env, probe=probe)
    with pytest.raises(InputError, match="NVIDIA driver 570.86.15 .* older than 580"):
        job.run()
    assert not [json.loads(x) for x in out.getvalue().splitlines() if '"start"' in x]


def dry_run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "launch.job", "--dry-run", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_dry_run_passes_nccl_and_gloo_variables_as_they_are_and_says_which(tmp_path):
    env = job_env(tmp_path, NCCL_SOCKET_IFNAME="ib0", NCCL_IB_HCA="mlx5_0,mlx5_1", GLOO_SOCKET_IFNAME="ib0",
                  NCCL_DEBUG="WARN", **THREE_NODES)  # fmt: skip
    r = dry_run(env)
    assert r.returncode == 0, r.stderr
    assert "# NCCL/Gloo       GLOO_SOCKET_IFNAME=ib0 NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_SOCKET_IFNAME=ib0 (from the job's " \
           "environment" in r.stdout  # fmt: skip
    st = [json.loads(x) for x in dry_run(env, "--steps-json").stdout.splitlines()]
    for name in ("trainer", "ray_0", "ray_1", "check"):
        e = step(st, name)["env"]
        assert {k: e[k] for k in e if k.startswith(("NCCL_", "GLOO_"))} == {
            "NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "GLOO_SOCKET_IFNAME": "ib0"}, name  # fmt: skip
    none = dry_run(job_env(tmp_path, **THREE_NODES))
    assert "# NCCL/Gloo       none of NCCL_SOCKET_IFNAME, NCCL_IB_*, GLOO_SOCKET_IFNAME is set" in none.stdout
    trainer = step([json.loads(x) for x in dry_run(job_env(tmp_path), "--steps-json").stdout.splitlines()], "trainer")
    assert not [k for k in trainer["env"] if k.startswith(("NCCL_", "GLOO_"))]  # nothing invented


def test_dry_run_ray_nodes_get_this_jobs_ports_and_another_job_gets_other_ones(tmp_path):
    def ray_argv(job_id: str) -> tuple[list[str], list[str]]:
        r = dry_run(job_env(tmp_path, **{**THREE_NODES, "SLURM_JOB_ID": job_id}), "--steps-json")
        assert r.returncode == 0, r.stderr
        st = [json.loads(x) for x in r.stdout.splitlines()]
        return program(step(st, "ray_0")), program(step(st, "ray_1"))

    def ports(argv: list[str]) -> dict[str, int]:
        return {a: int(argv[i + 1]) for i, a in enumerate(argv) if a.endswith("-port") and argv[i + 1].isdigit()}

    h1, w1 = ray_argv("4242")
    h2, _ = ray_argv("4243")
    p1, p2 = ports(h1), ports(h2)
    assert p1["--dashboard-port"] == ray_ports("4242").base
    assert "--ray-client-server-port" not in h1  # ray start refuses it without ray[client] (the launch's own venv)
    assert {"--node-manager-port", "--object-manager-port", "--min-worker-port", "--max-worker-port",
            "--dashboard-agent-listen-port"} <= set(p1)  # fmt: skip
    # the block is the head's; worker nodes let Ray pick (nodes sharing one host would bind the same ports)
    assert {"--node-manager-port", "--min-worker-port"}.isdisjoint(ports(w1))
    block1 = set(range(p1["--dashboard-port"], p1["--max-worker-port"] + 1))
    block2 = set(range(p2["--dashboard-port"], p2["--max-worker-port"] + 1))
    assert block1.isdisjoint(block2) and all(RAY_RANGE[0] <= p <= RAY_RANGE[1] for p in block1 | block2)
    out = dry_run(job_env(tmp_path, **THREE_NODES)).stdout
    assert "# Ray ports       block" in out and "checked free on the head node when the job runs" in out


def test_dry_run_one_wandb_run_for_every_job_of_a_run(tmp_path):
    def trainer_env(run: Path, *args: str, **extra: str) -> dict[str, str]:
        r = dry_run(job_env(tmp_path, QUOTECITE_RUN_DIR=str(run), **extra), "--steps-json", *args)
        assert r.returncode == 0, r.stderr
        return step([json.loads(x) for x in r.stdout.splitlines()], "trainer")["env"]

    run = tmp_path / "runs" / "qwen3vl_8b_grpo"
    first, second = trainer_env(run, SLURM_JOB_ID="101"), trainer_env(run, SLURM_JOB_ID="102")
    assert first["WANDB_RUN_ID"] == second["WANDB_RUN_ID"]  # the recipe logs to wandb
    assert first["WANDB_RESUME"] == "allow" and first["WANDB_RUN_ID"].startswith("qwen3vl_8b_grpo-")
    assert preflight.wandb_env(run, ["wandb"], {})[0]["WANDB_RUN_ID"] == first["WANDB_RUN_ID"]  # the same path: same
    assert trainer_env(tmp_path / "other" / "qwen3vl_8b_grpo")["WANDB_RUN_ID"] != first["WANDB_RUN_ID"]
    assert trainer_env(run, WANDB_RUN_ID="mine")["WANDB_RUN_ID"] == "mine"  # the user's own id is kept
    assert "WANDB_RUN_ID" not in trainer_env(run, "trainer.logger=[console,file]")  # no wandb logger, no id
    out = dry_run(job_env(tmp_path, QUOTECITE_RUN_DIR=str(run))).stdout
    assert f"# wandb           every job of this run logs into wandb run {first['WANDB_RUN_ID']}" in out


def test_dry_run_on_a_machine_without_a_driver_says_the_check_was_skipped(tmp_path):
    r = dry_run(job_env(tmp_path))
    assert r.returncode == 0, r.stderr
    if DRIVER_VISIBLE:  # QUOTECITE_ENV_SETUP=0: the servers are the user's, the driver is shown, not compared
        assert "# NVIDIA driver " in r.stdout and "not compared" in r.stdout
    else:
        assert "# driver and C compiler check skipped: no NVIDIA driver visible on this node" in r.stdout


# --------------------------------------------------------------------------------------------- Slurm before 22.05 (finding 4)
def srun_wrapper(bin_dir: Path, version: str) -> Path:
    """An ``srun`` on PATH that answers ``--version`` as an older (or newer) Slurm would, and records each call."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    srun = bin_dir / "srun"
    srun.write_text(f'#!/bin/sh\necho "$*" >> "{bin_dir}/srun.calls"\n[ "$1" = --version ] && echo "{version}"\n'
                    "exit 0\n")  # fmt: skip
    srun.chmod(0o755)
    return bin_dir


def test_slurm_version_is_read_and_an_old_one_refused_only_where_two_steps_share_a_node():
    old, new = Probe(srun_version=lambda: "slurm 21.08.8"), Probe(srun_version=lambda: "slurm-wlm 22.05.8")
    assert preflight.check_step_sharing({"n": ["a", "b"]}, Probe(srun_version=lambda: "slurm 23.11.1")).startswith(
        "Slurm version   23.11.1 (srun --version)"
    )
    assert preflight.check_step_sharing({"gpu02": ["ray_1"], "gpu03": ["judge"]}, Probe(srun_version=None)) == ""
    with pytest.raises(InputError) as e:
        preflight.check_step_sharing({"gpu03": ["judge", "embed"]}, old)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("Slurm 21.08.8 (srun --version) is older than 22.05")
    assert "judge and embed on gpu03" in msg and "sbatch --nodes=1" in msg
    assert preflight.check_step_sharing({"gpu03": ["judge", "embed"]}, new).startswith("Slurm version   22.05.8")
    unknown = preflight.check_step_sharing({"gpu03": ["judge", "embed"]}, Probe(srun_version=lambda: ""))
    assert unknown.startswith("Slurm version   unknown")


def test_dry_run_with_an_older_slurms_srun_on_path_stops_before_any_server(tmp_path):
    bin_dir = srun_wrapper(tmp_path / "bin", "slurm 21.08.8")
    env = job_env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}", **THREE_NODES)  # judge + embedder on gpu03
    r = dry_run(env)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.splitlines() == [r.stderr.strip()]
    assert r.stderr.startswith("error: Slurm 21.08.8 (srun --version) is older than 22.05") and "gpu03" in r.stderr
    assert (bin_dir / "srun.calls").read_text().split() == ["--version"]  # asked, nothing started
    ok = dry_run({**env, "PATH": f"{srun_wrapper(tmp_path / 'bin2', 'slurm 22.05.8')}:{os.environ['PATH']}"})
    assert ok.returncode == 0, ok.stderr
    assert "# Slurm version   22.05.8 (srun --version): steps judge and embed on gpu03 share their node" in ok.stdout
    one = dry_run(job_env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}"))  # one node: no srun step at all
    assert one.returncode == 0, one.stderr
    assert "Slurm version" not in one.stdout


# --------------------------------------------------------------------------------------------- dry-run overrides (2, 5, 10)
def trainer_argv(r: subprocess.CompletedProcess) -> list[str]:
    assert r.returncode == 0, r.stderr
    return step([json.loads(x) for x in r.stdout.splitlines()], "trainer")["argv"]


def test_dry_run_lowers_save_freq_to_the_stop_grace_and_keeps_the_users_own(tmp_path):
    env = job_env(tmp_path)
    out = dry_run(env).stdout
    assert "# save_freq       trainer.save_freq=4 x 1400 s = 5600 s is past the 3000 s stop grace (step time " \
           "estimated for Qwen/Qwen3-VL-8B-Instruct on H200" in out  # fmt: skip
    assert "trainer.save_freq=2" in trainer_argv(dry_run(env, "--steps-json"))
    mine = dry_run(env, "trainer.save_freq=4")
    assert "# save_freq       warning: trainer.save_freq=4 x 1400 s per step" in mine.stdout
    assert "your trainer.save_freq=4 is kept" in mine.stdout
    argv = trainer_argv(dry_run(env, "--steps-json", "trainer.save_freq=4"))
    assert [a for a in argv if a.startswith("trainer.save_freq=")] == ["trainer.save_freq=4"]
    # a measured step time wins over the estimate: 500 s a step fits 6 steps into the grace
    seg = tmp_path / "run" / "segments" / "100-0"
    seg.mkdir(parents=True)
    rows = [{"step": s, "timing_s": {"step": 500.0}} for s in (1, 2, 3)]
    (seg / "experiment_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    measured = dry_run(env, "trainer.save_freq=8")
    assert "trainer.save_freq=8 x 500 s per step" in measured.stdout and "measured: the median" in measured.stdout
    assert "trainer.save_freq=4 x 500 s per step (measured" in dry_run(env).stdout  # 2000 s fits: nothing passed
    with pytest.raises(InputError, match="longer than the stop grace of 300 s"):
        dry_steps(job_env(tmp_path, QUOTECITE_STOP_GRACE="300"), Probe(read_driver=driver(None)))


def test_dry_run_bounds_the_validation_batch_and_refuses_what_the_jobs_memory_cannot_hold(tmp_path):
    env = job_env(tmp_path)
    r = dry_run(env)
    assert "# validation      data.val_batch_size=-1 (the whole validation set in one batch) would queue" in r.stdout
    assert "the job passes data.val_batch_size=32" in r.stdout
    assert "# host memory     143.2 GiB at peak, --mem=165G" in r.stdout
    assert "data.val_batch_size=32" in trainer_argv(dry_run(env, "--steps-json"))
    # the whole set, as the user asks, cannot fit a 165G job: refused before anything starts
    big = dry_run({**env, "SLURM_MEM_PER_NODE": str(165 * 1024)}, "data.val_batch_size=-1")
    assert big.returncode == 1 and big.stdout == "" and big.stderr.count("\n") == 1
    assert big.stderr.startswith("error: not enough host memory for the job: 178.1 GiB at peak, --mem=205G")
    fits = dry_run({**env, "SLURM_MEM_PER_NODE": str(165 * 1024)})
    assert fits.returncode == 0 and "; the job has 165 GiB" in fits.stdout
    old = dry_run({**env, "SLURM_MEM_PER_NODE": str(141 * 1024)})  # the header's --mem before this budget
    assert old.returncode == 1 and "past the job's 141 GiB (SLURM_MEM_PER_NODE): sbatch --mem=165G" in old.stderr


def test_a_resumed_job_does_not_validate_before_training_unless_the_user_says(tmp_path):
    env = job_env(tmp_path)
    assert not [a for a in trainer_argv(dry_run(env, "--steps-json")) if a.startswith("trainer.val_before_train")]
    ckpt = tmp_path / "run" / "checkpoints"
    actor = ckpt / "global_step_4" / "actor"
    (actor / "lora_adapter").mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        (actor / f"{kind}_world_size_2_rank_0.pt").write_bytes(b"w")
        (actor / f"{kind}_world_size_2_rank_1.pt").write_bytes(b"w")
    (actor / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"a")
    (actor / "lora_adapter" / "adapter_config.json").write_text("{}")
    (ckpt / "global_step_4" / "dataloader.pt").write_bytes(b"d")
    (ckpt / "checkpoint_tracker.json").write_text(json.dumps({"last_global_step": 4}))
    assert "trainer.val_before_train=false" in trainer_argv(dry_run(env, "--steps-json"))
    assert "# resuming from step 4: trainer.val_before_train=false" in dry_run(env).stdout
    argv = trainer_argv(dry_run(env, "--steps-json", "trainer.val_before_train=true"))
    assert [a for a in argv if a.startswith("trainer.val_before_train")] == ["trainer.val_before_train=true"]


def test_dry_run_says_what_it_knows_of_the_disk_quota(tmp_path):
    r = dry_run(job_env(tmp_path, PATH=f"{tmp_path / 'nothing'}:/usr/bin:/bin"))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("# disk quota      "))
    if shutil.which("quota", path="/usr/bin:/bin") is None:
        assert "quota unknown: no quota command on this node" in line
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "quota").write_text("#!/bin/sh\necho 'Disk quotas for user alice (uid 1000):'\n"
                                   "echo '  Filesystem blocks quota limit grace files quota limit grace'\n"
                                   "echo '  /dev/x 1048576 2097152 0 1 0 0'\n")  # fmt: skip
    (bin_dir / "quota").chmod(0o755)
    r = dry_run(job_env(tmp_path, PATH=f"{bin_dir}:{os.environ['PATH']}", USER="alice"))
    assert "# disk quota      quota 2.0 GiB, 1.0 GiB used, 1.0 GiB left for alice on " in r.stdout


# --------------------------------------------------------------------------------------------- run lock without flock (10)
def test_run_lock_falls_back_to_an_exclusive_lock_file_where_flock_is_refused(tmp_path, monkeypatch, capsys):
    import errno
    import threading

    from launch import run_files

    def no_flock(f, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(run_files.fcntl, "flock", no_flock)
    run = tmp_path / "run"
    order: list[str] = []

    def second() -> None:
        with run_files.run_lock(run):
            order.append("second")

    with run_files.run_lock(run):
        assert (run / ".runlog.lock.excl").read_text().split()[1] == str(os.getpid())
        t = threading.Thread(target=second)
        t.start()
        t.join(0.5)
        assert t.is_alive() and order == []  # the second holder waits on the lock file meanwhile
        order.append("first")
    t.join(10)
    assert order == ["first", "second"] and not (run / ".runlog.lock.excl").exists()
    err = capsys.readouterr().err
    assert err.count("warning: flock is not supported on") == 1 and "ENOLCK" in err and "O_EXCL lock file" in err
    # a lock file left by a holder that is gone (this host, no such pid) is taken over; a live one times out
    (run / ".runlog.lock.excl").write_text(f"{socket.gethostname()} 999999999\n")
    with run_files.run_lock(run):
        pass
    (run / ".runlog.lock.excl").write_text(f"{socket.gethostname()} {os.getpid()}\n")
    with pytest.raises(run_files.RunError, match="another job of this run has held this lock"):
        with run_files.run_lock(run, wait_s=0.3):
            pass

    def other_error(f, op):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(run_files.fcntl, "flock", other_error)
    with pytest.raises(OSError, match="Bad file descriptor"):
        with run_files.run_lock(tmp_path / "other"):
            pass
