"""Where the training job's parts run: the split of a Slurm allocation into trainer nodes and serving GPUs.

Read by ``launch/grpo_8b.sh`` (``python launch/layout.py plan`` prints shell assignments, ``--format json`` the same
as JSON) and run on every node it starts something on (``python launch/layout.py run --gpus 0,1 -- CMD...``).
Standard library only: it runs with whatever python the launch picked, also on a laptop for ``--dry-run``.

The allocation (Slurm's variables, so a laptop can plan any layout with the same names a job has):

- ``SLURM_JOB_NUM_NODES`` (else ``SLURM_NNODES``): how many nodes;
- ``SLURM_JOB_NODELIST`` (else ``SLURM_NODELIST``): their names in Slurm's hostlist form (``gpu[01-03,07],login1``);
  the batch script runs on the first one;
- ``SLURM_GPUS_ON_NODE`` (else ``SLURM_GPUS_PER_NODE``, e.g. ``8`` or ``gpu:h200:8``): GPUs on each node;
  ``QUOTECITE_NODE_GPUS`` overrides it per node in Slurm's count form (``8(x2),4``) for uneven allocations;
- ``CUDA_VISIBLE_DEVICES`` on a node: the device ids its GPU positions stand for (clusters without device
  cgroups hand out e.g. ``4,5,6``); without it position N is device N.

Outside a job nothing is set: one node (this host) with as many GPUs as ``CUDA_VISIBLE_DEVICES`` lists, else 3.

The split (settings: ``QUOTECITE_SERVE_GPUS`` S, default 1; ``QUOTECITE_JUDGE_REPLICAS`` R, default 1, at most S;
``QUOTECITE_TRAIN_GPUS_PER_NODE`` G):

- the servers take the last S GPUs of the allocation (node by node, GPU by GPU): judge replica i the i-th of
  them, the embedder the last one (so with S = R = 1 the judge and the embedder share the last GPU);
- the trainer takes G GPUs (the first ones) on every node that has at least G left. G defaults to 2 on one node
  (the recipe is sized for two trainer GPUs; a single node behaves as it always has) and, on several nodes, to the
  GPUs the first node has left (all of them unless it also serves). A node that serves and keeps fewer than G
  GPUs does not train; its other GPUs stay idle and the plan says so;
- the first node is always a trainer node: it runs the batch script, the Ray head (when there are several trainer
  nodes; one trainer node means no Ray cluster: EasyR1 starts its own, as on one node) and the trainer's driver.

>>> lay = plan(["gpu01", "gpu02", "gpu03"], [1, 1, 1])
>>> lay.trainer_nodes, lay.train_gpus_per_node, lay.judges, lay.embed
(['gpu01', 'gpu02'], 1, [('gpu03', 0)], ('gpu03', 0))
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

DEFAULT_LOCAL_GPUS = 3
"""GPUs assumed outside a job when neither Slurm nor ``CUDA_VISIBLE_DEVICES`` says (the single-node layout)."""
SINGLE_NODE_TRAIN_GPUS = 2
"""Trainer GPUs on a one-node allocation unless ``QUOTECITE_TRAIN_GPUS_PER_NODE`` says otherwise."""


class LayoutError(ValueError):
    """The allocation or the settings cannot host the job; the message says which input and why."""


# --------------------------------------------------------------------------------------------- hostlists
MAX_NODES = 10_000
"""Most node names a node list may expand to (the largest Slurm clusters have fewer nodes): a range such as
``n[0-99999999]`` is refused before it is expanded."""
MAX_GPUS_PER_NODE = 64
"""Most GPUs a node may report (a count past it is a typo, not a machine)."""
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist form to node names, in order (what ``scontrol show hostnames`` prints).

    >>> expand_hostlist("gpu[01-03,07],login1")
    ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']
    >>> expand_hostlist("r[1-2]n[8-9]")
    ['r1n8', 'r1n9', 'r2n8', 'r2n9']
    """
    if not text or not text.strip():
        raise LayoutError("node list is empty")
    names: list[str] = []
    for item in _split_top(text.strip()):
        if not item:
            raise LayoutError(f"node list {text!r}: empty name between commas")
        parts: list[list[str]] = []
        pos = 0
        room = MAX_NODES - len(names)
        for m in re.finditer(r"\[([^\[\]]*)\]", item):
            parts.append([item[pos : m.start()]])
            parts.append(_expand_ranges(m.group(1), text, room))
            room //= max(len(parts[-1]), 1)
            pos = m.end()
        rest = item[pos:]
        if "[" in rest or "]" in rest or any("[" in p[0] or "]" in p[0] for p in parts[::2]):
            raise LayoutError(f"node list {text!r}: unbalanced brackets in {item!r}")
        parts.append([rest])
        if math.prod(len(p) for p in parts) > MAX_NODES - len(names):
            raise LayoutError(f"node list {text!r}: more than {MAX_NODES} nodes")
        names.extend("".join(combo) for combo in itertools.product(*parts))
    bad = next((n for n in names if not _NODE_NAME.fullmatch(n)), None)
    if bad is not None:
        raise LayoutError(f"node list {text!r}: {bad!r} is not a node name (letters, digits, '.', '_', '-')")
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise LayoutError(f"node list {text!r}: node {dup!r} is listed twice")
    return names


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise LayoutError(f"node list {text!r}: ']' without '['")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise LayoutError(f"node list {text!r}: '[' without ']'")
    out.append(cur)
    return [s.strip() for s in out]


def _expand_ranges(spec: str, text: str, room: int = MAX_NODES) -> list[str]:
    out: list[str] = []
    for r in spec.split(","):
        m = re.fullmatch(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?", r)
        if not m:
            raise LayoutError(f"node list {text!r}: {r!r} is not a number or a range like 01-03")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise LayoutError(f"node list {text!r}: range {r.strip()!r} goes down")
        if len(out) + int(hi) - int(lo) + 1 > room:  # counted before anything is made
            raise LayoutError(f"node list {text!r}: more than {MAX_NODES} nodes")
        out.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return out


# --------------------------------------------------------------------------------------------- GPU counts
def parse_gpu_count(value: str, what: str) -> int:
    """A GPU count as Slurm writes it: ``8``, ``gpu:8``, ``gpu:h200:8`` (several types, comma-separated, add up).

    >>> parse_gpu_count("gpu:h200:8", "SLURM_GPUS_PER_NODE"), parse_gpu_count("3", "x")
    (8, 3)
    """
    total = 0
    for item in value.split(","):
        last = item.strip().rsplit(":", 1)[-1]
        if not last.isdigit() or len(last) > 6:
            raise LayoutError(f"{what}={value!r}: not a GPU count (expected e.g. 8 or gpu:h200:8)")
        total += int(last)
    if total > MAX_GPUS_PER_NODE:
        raise LayoutError(f"{what}={value!r}: {total} GPUs on a node, more than {MAX_GPUS_PER_NODE}")
    return total


def parse_counts(value: str, n_nodes: int, what: str) -> list[int]:
    """Slurm's per-node count form (as in ``SLURM_JOB_CPUS_PER_NODE``): ``8(x2),4`` -> ``[8, 8, 4]``.

    >>> parse_counts("8(x2),4", 3, "QUOTECITE_NODE_GPUS")
    [8, 8, 4]
    """
    out: list[int] = []
    for item in value.split(","):
        m = re.fullmatch(r"\s*(\d{1,6})\s*(?:\(x(\d{1,6})\))?\s*", item)
        if not m:
            raise LayoutError(f"{what}={value!r}: {item!r} is not a count like 8 or 8(x2)")
        if int(m.group(1)) > MAX_GPUS_PER_NODE:
            raise LayoutError(f"{what}={value!r}: {m.group(1)} GPUs on a node, more than {MAX_GPUS_PER_NODE}")
        if len(out) + int(m.group(2) or 1) > MAX_NODES:
            raise LayoutError(f"{what}={value!r}: more than {MAX_NODES} nodes")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) == 1 and n_nodes > 1:
        out *= n_nodes
    if len(out) != n_nodes:
        raise LayoutError(f"{what}={value!r} gives {len(out)} node(s), the allocation has {n_nodes}")
    return out


def _int_setting(env: dict[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = env.get(name, "")
    if raw == "":
        return default
    if not raw.strip().isdigit() or int(raw) < low:
        raise LayoutError(f"{name}={raw!r}: expected a whole number >= {low}")
    return int(raw)


@dataclass
class Allocation:
    nodes: list[str]
    gpus: list[int]
    source: str
    """Where the GPU count came from, for error messages (e.g. ``SLURM_GPUS_ON_NODE=1``)."""
    devices: list[str] | None = None
    """``CUDA_VISIBLE_DEVICES`` of the node this runs on (the first node in a job), when set."""


def allocation_from_env(env: dict[str, str] | None = None, hostname: str | None = None) -> Allocation:
    """The allocation as a job sees it (see the module docstring for the variables)."""
    env = dict(os.environ if env is None else env)
    devices = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] or None
    if devices and len(set(devices)) != len(devices):  # one GPU twice would put two programs on it
        dup = next(d for d in devices if devices.count(d) > 1)
        raise LayoutError(f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r}: GPU {dup} is listed twice")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    raw_n = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if nodelist:
        nodes = expand_hostlist(nodelist)
        if raw_n:
            if not raw_n.isdigit() or int(raw_n) < 1:
                raise LayoutError(f"SLURM_JOB_NUM_NODES={raw_n!r}: expected a whole number >= 1")
            if int(raw_n) != len(nodes):
                raise LayoutError(
                    f"SLURM_JOB_NUM_NODES={raw_n} but SLURM_JOB_NODELIST={nodelist!r} names {len(nodes)} node(s)"
                )
    elif raw_n and raw_n != "1":
        raise LayoutError(f"SLURM_JOB_NUM_NODES={raw_n} needs SLURM_JOB_NODELIST (the node names)")
    else:
        nodes = [(hostname or socket.gethostname()).split(".")[0]]
    if env.get("QUOTECITE_NODE_GPUS"):
        gpus = parse_counts(env["QUOTECITE_NODE_GPUS"], len(nodes), "QUOTECITE_NODE_GPUS")
        source = f"QUOTECITE_NODE_GPUS={env['QUOTECITE_NODE_GPUS']}"
    else:
        for var in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
            if env.get(var):
                gpus = [parse_gpu_count(env[var], var)] * len(nodes)
                source = f"{var}={env[var]}"
                break
        else:
            if devices:
                gpus, source = [len(devices)] * len(nodes), f"CUDA_VISIBLE_DEVICES={','.join(devices)}"
            else:
                gpus, source = [DEFAULT_LOCAL_GPUS] * len(nodes), f"assumed {DEFAULT_LOCAL_GPUS}: no Slurm GPU count"
    return Allocation(nodes, gpus, source, devices)


# --------------------------------------------------------------------------------------------- the split
@dataclass
class Layout:
    nodes: list[str]
    gpus: list[int]
    trainer_nodes: list[str]
    train_gpus_per_node: int
    judges: list[tuple[str, int]]
    """(node, GPU position) of each judge replica."""
    embed: tuple[str, int]
    serving: list[tuple[str, int]]
    idle: dict[str, list[int]] = field(default_factory=dict)

    @property
    def ray(self) -> bool:
        """A Ray cluster is started only when the trainer spans several nodes."""
        return len(self.trainer_nodes) > 1

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def train_positions(self) -> list[int]:
        return list(range(self.train_gpus_per_node))

    def server_gpus(self) -> list[tuple[str, str, int]]:
        """(name, node, position) of every server: judge, judge2, ..., embed."""
        out = [("judge" if i == 0 else f"judge{i + 1}", n, g) for i, (n, g) in enumerate(self.judges)]
        return [*out, ("embed", *self.embed)]


def plan(
    nodes: list[str],
    gpus: list[int],
    serve_gpus: int = 1,
    judge_replicas: int = 1,
    train_gpus_per_node: int | None = None,
    source: str = "",
    devices: list[str] | None = None,
) -> Layout:
    """Split the allocation (see the module docstring); :class:`LayoutError` when it cannot host the job."""
    if not nodes:
        raise LayoutError("the allocation has no node")
    if len(set(nodes)) != len(nodes):
        raise LayoutError(f"node list names a node twice: {','.join(nodes)}")
    if len(gpus) != len(nodes) or any(g < 0 for g in gpus):
        raise LayoutError(f"GPU counts {gpus} do not fit the {len(nodes)} node(s) {','.join(nodes)}")
    if serve_gpus < 1 or judge_replicas < 1:
        raise LayoutError("QUOTECITE_SERVE_GPUS and QUOTECITE_JUDGE_REPLICAS must be at least 1")
    if judge_replicas > serve_gpus:
        raise LayoutError(
            f"QUOTECITE_JUDGE_REPLICAS={judge_replicas} needs as many serving GPUs (one judge per GPU), but "
            f"QUOTECITE_SERVE_GPUS={serve_gpus}"
        )
    single = len(nodes) == 1
    slots = [(n, p) for n, k in zip(nodes, gpus, strict=True) for p in range(k)]
    src = f" ({source})" if source else ""
    if devices is not None and single and len(devices) < gpus[0]:
        raise LayoutError(
            f"CUDA_VISIBLE_DEVICES={','.join(devices)} lists {len(devices)} GPU(s) but the job has {gpus[0]}{src}"
        )
    need_train = train_gpus_per_node or (SINGLE_NODE_TRAIN_GPUS if single else 1)
    if len(slots) < serve_gpus + need_train:
        where = f"this job sees {len(slots)} GPU(s){src}"
        raise LayoutError(
            f"{where}, needs {serve_gpus + need_train}: {need_train} for the trainer, {serve_gpus} for the judge "
            f"and embedder" + ("" if single else f" (nodes {','.join(nodes)} with {gpus} GPUs)")
        )
    serving = slots[len(slots) - serve_gpus :]
    left = {n: k - sum(1 for s in serving if s[0] == n) for n, k in zip(nodes, gpus, strict=True)}
    if train_gpus_per_node is not None:
        g = train_gpus_per_node
    elif single:
        g = SINGLE_NODE_TRAIN_GPUS
    else:
        g = left[nodes[0]]
    if g < 1 or left[nodes[0]] < g:
        raise LayoutError(
            f"the first node {nodes[0]} (where the batch script, the trainer's driver and the Ray head run) has "
            f"{left[nodes[0]]} GPU(s) left after serving, needs {max(g, 1)} for the trainer{src}"
        )
    serving_nodes = {n for n, _ in serving}
    short = [n for n in nodes if n not in serving_nodes and left[n] < g]
    if short:
        raise LayoutError(
            "trainer GPUs would be unequal across trainer nodes (EasyR1 runs trainer.n_gpus_per_node on each): "
            + ", ".join(f"{n} has {left[n]}" for n in short)
            + f", {nodes[0]} has {g}; set QUOTECITE_TRAIN_GPUS_PER_NODE to at most {min(left[n] for n in short)}"
        )
    trainer_nodes = [n for n in nodes if left[n] >= g]
    idle: dict[str, list[int]] = {}
    for n, k in zip(nodes, gpus, strict=True):
        used = {p for m, p in serving if m == n} | (set(range(g)) if n in trainer_nodes else set())
        rest = [p for p in range(k) if p not in used]
        if rest:
            idle[n] = rest
    judges = serving[:judge_replicas]
    return Layout(list(nodes), list(gpus), trainer_nodes, g, judges, serving[-1], serving, idle)


def plan_from_env(env: dict[str, str] | None = None, hostname: str | None = None) -> tuple[Allocation, Layout]:
    env = dict(os.environ if env is None else env)
    alloc = allocation_from_env(env, hostname)
    serve = _int_setting(env, "QUOTECITE_SERVE_GPUS", 1, 1)
    replicas = _int_setting(env, "QUOTECITE_JUDGE_REPLICAS", 1, 1)
    train = _int_setting(env, "QUOTECITE_TRAIN_GPUS_PER_NODE", None, 1)
    lay = plan(alloc.nodes, alloc.gpus, serve, replicas, train, alloc.source, alloc.devices)
    return alloc, lay


def device_ids(positions: list[int], devices: list[str] | None, where: str = "this node") -> list[str]:
    """GPU positions to device ids through ``CUDA_VISIBLE_DEVICES`` (``devices``; none: position = id).

    >>> device_ids([0, 1], ["4", "5", "6"]), device_ids([2], None)
    (['4', '5'], ['2'])
    """
    if devices is None:
        return [str(p) for p in positions]
    if positions and max(positions) >= len(devices):
        raise LayoutError(
            f"GPU position {max(positions)} on {where}, but CUDA_VISIBLE_DEVICES={','.join(devices)} lists "
            f"{len(devices)} GPU(s)"
        )
    return [devices[p] for p in positions]


def node_address(node: str) -> str:
    """The node's IP address (what Ray's ``--node-ip-address`` takes); the name itself when it does not resolve
    (a dry run on a laptop)."""
    try:
        return socket.gethostbyname(node)
    except OSError:
        return node


def shell_assignments(alloc: Allocation, lay: Layout) -> str:
    """The layout as bash assignments (``eval`` them); arrays for lists, one variable per server."""
    q = shlex.quote

    def arr(items) -> str:
        return "(" + " ".join(q(str(x)) for x in items) + ")"

    first = lay.nodes[0]
    lines = [
        f"QC_LAYOUT_NODES={arr(lay.nodes)}",
        f"QC_LAYOUT_GPUS={arr(lay.gpus)}",
        f"QC_LAYOUT_SOURCE={q(alloc.source)}",
        f"QC_MULTI_NODE={int(lay.multi_node)}",
        f"QC_RAY={int(lay.ray)}",
        f"QC_NNODES={len(lay.trainer_nodes)}",
        f"QC_N_TRAIN_GPUS={lay.train_gpus_per_node}",
        f"QC_TRAIN_NODES={arr(lay.trainer_nodes)}",
        f"QC_TRAIN_ADDRS={arr(node_address(n) for n in lay.trainer_nodes)}",
        f"QC_TRAIN_POSITIONS={q(','.join(map(str, lay.train_positions)))}",
        f"QC_TRAINER_GPUS={q(','.join(device_ids(lay.train_positions, alloc.devices, first)))}",
        f"QC_SERVERS={arr(name for name, _, _ in lay.server_gpus())}",
        f"QC_JUDGE_REPLICAS={len(lay.judges)}",
        f"QC_IDLE={q('; '.join(f'{n} GPU {position_ranges(p)}' for n, p in lay.idle.items()))}",
    ]
    serving_here = [p for n, p in lay.serving if n == first]
    lines.append(
        f"QC_SERVER_GPUS={q(','.join(device_ids(serving_here, alloc.devices, first)) if serving_here else '')}"
    )
    for name, node, pos in lay.server_gpus():
        lines.append(f"QC_SRV_NODE_{name}={q(node)}")
        lines.append(f"QC_SRV_POS_{name}={pos}")
        here = node == first
        lines.append(f"QC_SRV_DEV_{name}={q(device_ids([pos], alloc.devices, first)[0] if here else str(pos))}")
    return "\n".join(lines) + "\n"


def position_ranges(ps: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5``."""
    out = []
    for _, grp in itertools.groupby(enumerate(ps), lambda t: t[1] - t[0]):
        g = [p for _, p in grp]
        out.append(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]))
    return ",".join(out)


# --------------------------------------------------------------------------------------------- run
PORT_TOKEN = "{port}"
"""In a command run with ``--port-file``, the token replaced by the port chosen on the node, when it starts."""
PORT_RETRIES = 3
"""Times a server whose port was taken between the choice and its bind is started again on another port."""
CLASH_WINDOW_S = 120.0
"""A server that fails within this many seconds while its port is held by another process lost a race for it."""


def free_port(host: str = "") -> int:
    """A port that is free on this node now (the kernel's choice), for a server bound to ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_taken(port: int, host: str = "") -> bool:
    """True when something else holds ``port`` on this node (a bind fails). With ``SO_REUSEADDR``, as the servers
    bind (uvicorn, Ray): connections of a server just killed, left in TIME_WAIT on its port, do not count, so a
    restarted server gets the port the trainer already knows; a listener still there does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def _write_port(path: str, port: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def run(positions: list[int], cmd: list[str], grace: int = 10, port_file: str | None = None,
        bind_host: str = "", prefer_port: int = 0) -> int:  # fmt: skip
    """Run ``cmd`` on this node's GPUs at ``positions`` (through this process's ``CUDA_VISIBLE_DEVICES``), in its
    own session; SIGTERM/SIGINT/SIGUSR1 are passed to its whole process group (after SIGTERM/SIGINT the group is
    killed when it has not ended within ``grace`` seconds), and whatever it leaves behind in that group (Ray's
    raylet and GCS, vLLM workers) is killed once it exits. Returns its exit status (128+N for a
    signal N), so an ``srun`` step ends as the program did.

    With ``port_file``, the port is chosen here, on the node and at the moment the server starts (``{port}`` in
    ``cmd`` becomes a free port, written to ``port_file`` for the job to read); a server that fails soon after while
    its port is held by someone else lost the race for it and is started again on a new port (at most
    :data:`PORT_RETRIES` times)."""
    devices = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] or None
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(device_ids(positions, devices)))
    state: dict = {"child": None, "stopping": False}

    def kill_group(sig) -> None:
        if state["child"] is not None:
            try:
                os.killpg(state["child"].pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def forward(sig, _frame) -> None:
        kill_group(sig)
        if sig != signal.SIGUSR1:  # a program that drains (Ray: up to 30 s) is killed after the grace
            state["stopping"] = True
            signal.signal(signal.SIGALRM, lambda *_: kill_group(signal.SIGKILL))
            signal.alarm(grace)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, forward)
    for attempt in range(PORT_RETRIES + 1):
        argv, port = list(cmd), 0
        if port_file:
            port = prefer_port if attempt == 0 and prefer_port and not port_taken(prefer_port, bind_host) else 0
            port = port or free_port(bind_host)
            argv = [a.replace(PORT_TOKEN, str(port)) for a in cmd]
            _write_port(port_file, port)
        started = time.monotonic()
        try:
            state["child"] = subprocess.Popen(argv, env=env, start_new_session=True)
        except OSError as e:
            print(f"error: cannot start {argv[0]!r}: {e}", file=sys.stderr)
            return 127
        rc = state["child"].wait()
        kill_group(signal.SIGKILL)
        rc = 128 - rc if rc < 0 else rc
        lost_race = (port_file and rc != 0 and not state["stopping"] and attempt < PORT_RETRIES
                     and time.monotonic() - started < CLASH_WINDOW_S and port_taken(port, bind_host))  # fmt: skip
        if not lost_race:
            return rc
        print(f"port {port} was taken before the server bound it; starting it again on another port "
              f"({attempt + 1} of {PORT_RETRIES})", file=sys.stderr, flush=True)  # fmt: skip
    return rc


# --------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launch/layout.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="print the split of this allocation (from the Slurm variables)")
    p.add_argument("--format", choices=["shell", "json"], default="shell")
    r = sub.add_parser("run", help="run a command on this node's GPUs at the given positions")
    r.add_argument("--gpus", required=True, help="comma-separated GPU positions on this node, e.g. 0,1")
    r.add_argument("--grace", type=int, default=10, help="seconds from SIGTERM until the program is killed")
    r.add_argument(
        "--port-file",
        default=None,
        help="choose a free port here and now: it replaces {port} in the command and is written here",
    )
    r.add_argument("--bind-host", default="", help="the address the server binds (for the free-port check)")
    r.add_argument("--prefer-port", type=int, default=0, help="with --port-file: this port when it is free")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "plan":
            alloc, lay = plan_from_env()
            if args.format == "json":
                out = {**asdict(lay), "ray": lay.ray, "source": alloc.source, "servers": lay.server_gpus()}
                print(json.dumps(out, indent=2))
            else:
                sys.stdout.write(shell_assignments(alloc, lay))
            return 0
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not cmd:
            raise LayoutError("run: no command after --")
        try:
            positions = [int(x) for x in args.gpus.split(",") if x.strip()]
        except ValueError:
            raise LayoutError(f"--gpus {args.gpus!r}: expected comma-separated GPU positions like 0,1") from None
        return run(positions, cmd, args.grace, args.port_file, args.bind_host, args.prefer_port)
    except LayoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
