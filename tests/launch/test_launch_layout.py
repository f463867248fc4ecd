"""launch/layout.py: Slurm hostlists, the split of an allocation into trainer nodes and serving GPUs, its CLI."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import settings
from launch.layout import (
    LayoutError,
    allocation_from_env,
    device_ids,
    expand_hostlist,
    parse_gpu_count,
    plan,
    plan_from_env,
    port_taken,
)

REPO = Path(__file__).resolve().parents[2]
LAYOUT = str(REPO / "launch" / "layout.py")


# --------------------------------------------------------------------------------------------- hostlists
@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("vm", ["vm"]),
        ("ci3n[1-3]", ["ci3n1", "ci3n2", "ci3n3"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("gpu[08-11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),  # zero padding kept across a width change
        ("a[1-2]-b[7,9]", ["a1-b7", "a1-b9", "a2-b7", "a2-b9"]),  # several brackets: every combination
        ("n[1],m", ["n1", "m"]),
        ("node-1.cluster,node-2.cluster", ["node-1.cluster", "node-2.cluster"]),
    ],
)
def test_expand_hostlist(text, nodes):
    assert expand_hostlist(text) == nodes


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "node list is empty"),
        ("gpu[01-03", "'[' without ']'"),
        ("gpu01-03]", "']' without '['"),
        ("gpu[03-01]", "range '03-01' goes down"),
        ("gpu[a-b]", "'a-b' is not a number or a range"),
        ("gpu01,,gpu02", "empty name between commas"),
    ],
)
def test_bad_hostlists_name_the_input(text, error):
    with pytest.raises(LayoutError, match=None) as e:
        expand_hostlist(text)
    assert error in str(e.value)


def test_gpu_counts_in_slurm_forms():
    assert [parse_gpu_count(v, "X") for v in ("8", "gpu:8", "gpu:h200:8", "gpu:a:2,gpu:b:1")] == [8, 8, 8, 3]
    with pytest.raises(LayoutError, match=r"SLURM_GPUS_PER_NODE='gpu:h200': not a GPU count"):
        parse_gpu_count("gpu:h200", "SLURM_GPUS_PER_NODE")
    # QUOTECITE_NODE_GPUS (the settings' node_counts: "8(x2),4" -> [8, 8, 4]): one count for every node, or one each
    three = {"SLURM_JOB_NODELIST": "a,b,c"}
    assert allocation_from_env(three, node_gpus=[8, 8, 4]).gpus == [8, 8, 4]
    assert allocation_from_env(three, node_gpus=[2]).gpus == [2, 2, 2]
    with pytest.raises(LayoutError, match=r"QUOTECITE_NODE_GPUS=8,8 gives 2 node\(s\), the allocation has 3"):
        allocation_from_env(three, node_gpus=[8, 8])


# --------------------------------------------------------------------------------------------- the split
# (nodes, GPUs per node, serve, replicas, train per node) -> (trainer nodes, G, judges, embed, idle, ray)
CASES = {
    "1x3 (today)": (
        (["vm"], [3], 1, 1, None),
        (["vm"], 2, [("vm", 2)], ("vm", 2), {}, False),
    ),
    "1x8 keeps two trainer GPUs": (
        (["vm"], [8], 1, 1, None),
        (["vm"], 2, [("vm", 7)], ("vm", 7), {"vm": [2, 3, 4, 5, 6]}, False),
    ),
    "3x1": (
        (["n1", "n2", "n3"], [1, 1, 1], 1, 1, None),
        (["n1", "n2"], 1, [("n3", 0)], ("n3", 0), {}, True),
    ),
    "2x8: the serving node keeps 7, fewer than 8: it does not train": (
        (["g1", "g2"], [8, 8], 1, 1, None),
        (["g1"], 8, [("g2", 7)], ("g2", 7), {"g2": [0, 1, 2, 3, 4, 5, 6]}, False),
    ),
    "2x8, 4 trainer GPUs per node: Ray across both": (
        (["g1", "g2"], [8, 8], 1, 1, 4),
        (["g1", "g2"], 4, [("g2", 7)], ("g2", 7), {"g1": [4, 5, 6, 7], "g2": [4, 5, 6]}, True),
    ),
    "2x8 with 2 judge replicas": (
        (["g1", "g2"], [8, 8], 2, 2, None),
        (["g1"], 8, [("g2", 6), ("g2", 7)], ("g2", 7), {"g2": [0, 1, 2, 3, 4, 5]}, False),
    ),
    "2x8 with 2 judge replicas, 6 trainer GPUs per node": (
        (["g1", "g2"], [8, 8], 2, 2, 6),
        (["g1", "g2"], 6, [("g2", 6), ("g2", 7)], ("g2", 7), {"g1": [6, 7]}, True),
    ),
    "4x1, two serving GPUs, one judge: judge and embedder apart": (
        (["a", "b", "c", "d"], [1, 1, 1, 1], 2, 1, None),
        (["a", "b"], 1, [("c", 0)], ("d", 0), {}, True),
    ),
    "uneven: a bigger node trains on G": (
        (["a", "b", "c"], [2, 4, 1], 1, 1, None),
        (["a", "b"], 2, [("c", 0)], ("c", 0), {"b": [2, 3]}, True),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_split(case):
    (nodes, gpus, serve, replicas, train), (tnodes, g, judges, embed, idle, ray) = CASES[case]
    lay = plan(nodes, gpus, serve, replicas, train)
    got = (lay.trainer_nodes, lay.train_gpus_per_node, lay.judges, lay.embed, lay.idle, lay.ray)
    assert got == (tnodes, g, judges, embed, idle, ray)
    # every GPU has exactly one role
    used = [(n, p) for n in lay.trainer_nodes for p in range(g)] + lay.serving
    used += [(n, p) for n, ps in lay.idle.items() for p in ps]
    assert sorted(used) == sorted((n, p) for n, k in zip(nodes, gpus, strict=True) for p in range(k))
    assert lay.trainer_nodes[0] == nodes[0]  # the batch node drives the trainer and holds the Ray head


BAD = [
    ((["vm"], [2], 1, 1, None), "this job sees 2 GPU(s), needs 3: 2 for the trainer, 1 for the judge and embedder"),
    ((["a", "b"], [1, 1], 2, 1, None), "this job sees 2 GPU(s), needs 3: 1 for the trainer, 2 for the judge"),
    ((["a", "b"], [1, 1], 1, 2, None), "QUOTECITE_JUDGE_REPLICAS=2 needs as many serving GPUs"),
    ((["a", "b", "c"], [8, 4, 8], 1, 1, None), "trainer GPUs would be unequal across trainer nodes"),
    ((["a", "b"], [2, 8], 1, 1, 4), "the first node a (where the batch script"),
]


@pytest.mark.parametrize(("args", "error"), BAD, ids=[e[:40] for _, e in BAD])
def test_allocations_that_cannot_host_the_job_are_clear_errors(args, error):
    with pytest.raises(LayoutError) as e:
        plan(*args)
    assert error in str(e.value)


def test_unequal_error_says_what_to_set():
    with pytest.raises(LayoutError) as e:
        plan(["a", "b", "c"], [8, 4, 8])
    assert "b has 4, a has 8; set QUOTECITE_TRAIN_GPUS_PER_NODE to at most 4" in str(e.value)
    assert plan(["a", "b", "c"], [8, 4, 8], train_gpus_per_node=4).trainer_nodes == ["a", "b", "c"]


# --------------------------------------------------------------------------------------------- from the environment
def test_env_reads_the_slurm_variables_and_the_settings():
    env = dict(SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="gpu[01-02]", SLURM_GPUS_ON_NODE="8")
    env |= {"QUOTECITE_SERVE_GPUS": "2", "QUOTECITE_JUDGE_REPLICAS": "2"}
    lay_settings = settings.resolve(env, REPO).layout  # the job's own path: the settings, then the split
    alloc, lay = plan_from_env(env, None, lay_settings.serve_gpus, lay_settings.judge_replicas)
    assert (alloc.nodes, alloc.gpus, alloc.source) == (["gpu01", "gpu02"], [8, 8], "SLURM_GPUS_ON_NODE=8")
    assert lay.server_gpus() == [("judge", "gpu02", 6), ("judge2", "gpu02", 7), ("embed", "gpu02", 7)]
    # SLURM_NNODES / SLURM_NODELIST / SLURM_GPUS_PER_NODE when the JOB_ forms are absent
    alloc, _ = plan_from_env({"SLURM_NNODES": "3", "SLURM_NODELIST": "n[1-3]", "SLURM_GPUS_PER_NODE": "gpu:1"})
    assert (alloc.nodes, alloc.gpus) == (["n1", "n2", "n3"], [1, 1, 1])
    # outside a job: this host, as many GPUs as CUDA_VISIBLE_DEVICES lists, else 3
    alloc, lay = plan_from_env({}, hostname="laptop.example")
    assert (alloc.nodes, alloc.gpus, lay.judges) == (["laptop"], [3], [("laptop", 2)])
    alloc, _ = plan_from_env({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, hostname="h")
    assert alloc.gpus == [4] and alloc.devices == ["4", "5", "6", "7"]
    env = {"SLURM_JOB_NODELIST": "a,b,c", "QUOTECITE_NODE_GPUS": "2(x2),1"}
    alloc, lay = plan_from_env(env, node_gpus=settings.resolve(env, REPO).layout.node_gpus)
    assert alloc.gpus == [2, 2, 1] and lay.trainer_nodes == ["a", "b"]


@pytest.mark.parametrize(
    ("env", "error"),
    [
        (
            {"SLURM_JOB_NUM_NODES": "3", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "1"},
            "SLURM_JOB_NUM_NODES=3 but SLURM_JOB_NODELIST='n[1-2]' names 2 node(s)",
        ),
        ({"SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "1"}, "SLURM_JOB_NUM_NODES=2 needs SLURM_JOB_NODELIST"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_ON_NODE": "lots"}, "SLURM_GPUS_ON_NODE='lots': not a GPU count"),
        (
            {"SLURM_GPUS_ON_NODE": "3", "CUDA_VISIBLE_DEVICES": "0,1"},
            "CUDA_VISIBLE_DEVICES=0,1 lists 2 GPU(s) but the job has 3",
        ),
    ],
)
def test_bad_environment_names_the_variable(env, error):
    with pytest.raises(LayoutError) as e:
        plan_from_env(env, hostname="h")
    assert error in str(e.value)


@pytest.mark.parametrize(
    ("env", "error"),
    [
        ({"QUOTECITE_SERVE_GPUS": "one"}, "QUOTECITE_SERVE_GPUS='one': expected an integer"),
        ({"QUOTECITE_SERVE_GPUS": "0"}, "QUOTECITE_SERVE_GPUS='0': expected an integer from 1"),
        ({"QUOTECITE_JUDGE_REPLICAS": "0"}, "QUOTECITE_JUDGE_REPLICAS='0': expected an integer from 1"),
        ({"QUOTECITE_TRAIN_GPUS_PER_NODE": "0"}, "QUOTECITE_TRAIN_GPUS_PER_NODE='0': expected an integer from 1"),
        ({"QUOTECITE_NODE_GPUS": "2,x"}, "QUOTECITE_NODE_GPUS='2,x': 'x' is not a count like 8 or 8(x2)"),
    ],
)
def test_bad_layout_settings_are_refused_by_the_settings_naming_the_variable(env, error):
    # the split takes its counts from the typed settings (launch/job.py passes s.layout), never from env again, and
    # does not check them again (nor a node listed twice: expand_hostlist refuses it, tested below)
    with pytest.raises(settings.SettingsError) as e:
        settings.resolve(env, REPO)
    assert error in str(e.value)


# --------------------------------------------------------------------------------------------- CLI
def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUOTECITE_", "CUDA_VISIBLE"))}
    return subprocess.run(
        [sys.executable, LAYOUT, *args], env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def test_the_batch_nodes_gpu_positions_map_to_its_devices():
    env = dict(SLURM_JOB_NUM_NODES="3", SLURM_JOB_NODELIST="localhost,n[2-3]", SLURM_GPUS_ON_NODE="1")
    env["CUDA_VISIBLE_DEVICES"] = "5"
    alloc, lay = plan_from_env(env)
    assert (lay.trainer_nodes, lay.train_gpus_per_node, lay.ray) == (["localhost", "n2"], 1, True)
    assert [name for name, _, _ in lay.server_gpus()] == ["judge", "embed"] and lay.embed == ("n3", 0)
    # the batch node's GPU position 0 is device 5 (the nodes' addresses: tests/launch/test_preflight.py)
    assert device_ids(lay.train_positions, alloc.devices, lay.nodes[0]) == ["5"]


def test_cli_error_is_one_line_on_stderr_and_exit_1():
    r = cli("run", "--gpus", "0,x", "--", "true")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "error: --gpus '0,x': expected comma-separated GPU positions like 0,1\n"


def test_run_maps_positions_through_cuda_visible_devices_and_returns_the_exit_code():
    echo = ["bash", "-c", 'echo "$CUDA_VISIBLE_DEVICES"; exit 7']
    r = cli("run", "--gpus", "1,2", "--", *echo, CUDA_VISIBLE_DEVICES="4,5,6")
    assert (r.returncode, r.stdout) == (7, "5,6\n")
    assert cli("run", "--gpus", "0", "--", "bash", "-c", 'echo "$CUDA_VISIBLE_DEVICES"').stdout == "0\n"
    r = cli("run", "--gpus", "3", "--", "true", CUDA_VISIBLE_DEVICES="0,1")
    assert r.returncode == 1 and "GPU position 3 on this node, but CUDA_VISIBLE_DEVICES=0,1 lists 2" in r.stderr


def test_run_stops_the_whole_group_on_sigterm_also_what_ignores_it(tmp_path):
    # A program that ignores SIGTERM and leaves a child behind (as Ray's head drains for 30 s): the wrapper kills
    # the group after its grace, and nothing of it is left.
    pidfile = tmp_path / "pids"
    prog = f"trap '' TERM; sleep 300 & echo $$ $! > {pidfile}; wait"
    p = subprocess.Popen([sys.executable, LAYOUT, "run", "--gpus", "0", "--grace", "1", "--", "bash", "-c", prog])
    deadline = time.monotonic() + 30
    while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(x) for x in pidfile.read_text().split()]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGKILL
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    """Running, not a zombie: a killed process whose parent is gone waits for PID 1 to reap it, which in a
    container may be slow or never, and ``kill(pid, 0)`` still succeeds on a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_the_module_examples_hold():
    import doctest

    import launch.layout

    result = doctest.testmod(launch.layout)
    assert result.attempted >= 4 and result.failed == 0


# --------------------------------------------------------------------------------------------- ports at bind time
def test_a_server_that_loses_its_port_before_binding_is_started_again_on_another(tmp_path):
    # The first start plays the race: another process takes the chosen port (a detached holder) and the server
    # fails as vLLM does on a taken port; the wrapper sees the port held by someone else and starts it again.
    marker, port_file = tmp_path / "first", tmp_path / "srv.port"
    holder = tmp_path / "holder.py"
    holder.write_text(
        "import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])))\n"
        "s.listen(); time.sleep(30)\n"
    )
    server = (
        "import os, subprocess, socket, sys, time\n"
        f"port = int(sys.argv[1]); marker = {str(marker)!r}\n"
        "if not os.path.exists(marker):\n"
        "    open(marker, 'w').close()\n"
        f"    subprocess.Popen([sys.executable, {str(holder)!r}, str(port)], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "    time.sleep(1); sys.exit('OSError: [Errno 98] Address already in use')\n"
        "s = socket.socket(); s.bind(('127.0.0.1', port)); print('bound', port)\n"
    )
    flags = ["--port-file", str(port_file), "--bind-host", "127.0.0.1"]
    r = cli("run", "--gpus", "0", *flags, "--", sys.executable, "-c", server, "{port}", CUDA_VISIBLE_DEVICES="0")
    assert r.returncode == 0, r.stderr
    final = int(port_file.read_text())
    assert f"bound {final}" in r.stdout
    assert "was taken before the server bound it; starting it again on another port (1 of 3)" in r.stderr


def test_a_server_that_fails_for_another_reason_is_not_restarted(tmp_path):
    fail = [sys.executable, "-c", "import sys; sys.exit(3)", "{port}"]
    r = cli("run", "--gpus", "0", "--port-file", str(tmp_path / "p"), "--", *fail)
    assert r.returncode == 3 and "starting it again" not in r.stderr
    assert int((tmp_path / "p").read_text()) > 0


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("n[0-99999999]", "more than 10000 nodes"),  # refused before anything is expanded (no memory error)
        ("a[0-9999],b[0-9]", "more than 10000 nodes"),
        ("r[0-999]n[0-999]", "more than 10000 nodes"),
        ("n[1-999999999999999]", "not a number or a range"),  # past 12 digits: not read as a number at all
        ("gpu01,gpu01", "listed twice"),
        ("gpu[01-02],gpu02", "listed twice"),
        ("node 1", "not a node name"),
        ("n$(id)", "not a node name"),
    ],
)
def test_a_node_list_past_any_cluster_or_with_bad_names_is_refused_quickly(text, error):
    with pytest.raises(LayoutError, match=re.escape(error)):  # counted before built: n[0-99999999] is no list
        expand_hostlist(text)


@pytest.mark.parametrize(
    ("var", "value", "error"),
    [
        ("SLURM_GPUS_ON_NODE", "99999999999", "not a GPU count"),
        ("SLURM_GPUS_ON_NODE", "gpu:h200:65", "more than 64"),
        ("CUDA_VISIBLE_DEVICES", "0,1,1", "GPU 1 is listed twice"),
    ],
)
def test_slurm_variables_that_no_node_can_have_are_refused(var, value, error):
    with pytest.raises(LayoutError, match=re.escape(error)):
        allocation_from_env({var: value}, hostname="n1")


def test_node_gpu_counts_that_no_node_can_have_are_refused():
    with pytest.raises(LayoutError, match=re.escape("QUOTECITE_NODE_GPUS=100: 100 GPUs on a node, more than 64")):
        allocation_from_env({}, hostname="n1", node_gpus=[100])
    with pytest.raises(
        settings.SettingsError, match=re.escape("QUOTECITE_NODE_GPUS='8(x999999)': '8(x999999)' is not a count")
    ):
        settings.resolve({"QUOTECITE_NODE_GPUS": "8(x999999)"}, REPO)  # refused as a setting, never expanded


def test_a_killed_servers_port_is_free_again_for_its_restart_but_a_listener_holds_it():
    # A server killed mid-job closes its accepted connections first: they stay in TIME_WAIT on its port. The
    # restart asks for that same port (the trainer knows it); a bind without SO_REUSEADDR failed there, so the
    # restarted judge took another port and the trainer could not reach it.
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    assert port_taken(port, "127.0.0.1")  # a listener holds it
    conn.close()  # the server side closes first: its end of the connection goes to TIME_WAIT
    listener.close()
    client.close()
    with socket.socket() as plain:  # what the check did before: this bind fails on TIME_WAIT
        with pytest.raises(OSError):
            plain.bind(("127.0.0.1", port))
    assert not port_taken(port, "127.0.0.1")
