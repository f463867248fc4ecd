"""Where the training job's parts run (docs/cluster.md, "Several nodes"): the split of a Slurm allocation into trainer
nodes and serving GPUs, and ``python launch/layout.py run``, which starts a program on a node's GPUs. Standard library
only: the job runs it by its path on every node. The first node always trains: it runs the batch script, the
trainer's driver and the Ray head."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

DEFAULT_LOCAL_GPUS = 3
SINGLE_NODE_TRAIN_GPUS = 2
"""Trainer GPUs on one node unless ``QUOTECITE_TRAIN_GPUS_PER_NODE`` says otherwise (the recipe is sized for 2)."""
MAX_NODES = 10_000
"""Most nodes a node list may name (more than any cluster): ``n[0-99999999]`` is refused before it is expanded."""
MAX_GPUS_PER_NODE = 64
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


class LayoutError(ValueError):
    """The allocation or the settings cannot host the job; the message says which input and why."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist form to node names, in order, as ``scontrol show hostnames`` prints them (also where there is
    no ``scontrol``: a dry run on a laptop).

    >>> expand_hostlist("gpu[01-03,07],login1")
    ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'login1']
    >>> expand_hostlist("r[1-2]n[8-9]")
    ['r1n8', 'r1n9', 'r2n8', 'r2n9']
    """
    if not text.strip():
        raise LayoutError("node list is empty")
    unpaired = re.sub(r"\[[^\[\]]*\]", "", text)  # what is left once every [...] is taken out
    if "[" in unpaired and "]" in unpaired:
        raise LayoutError(f"node list {text!r}: brackets nested or out of order")
    if "[" in unpaired:
        raise LayoutError(f"node list {text!r}: '[' without ']'")
    if "]" in unpaired:
        raise LayoutError(f"node list {text!r}: ']' without '['")
    names: list[str] = []
    for item in re.split(r",(?![^\[]*\])", text.strip()):  # the commas outside brackets
        if not item.strip():
            raise LayoutError(f"node list {text!r}: empty name between commas")
        pieces = re.split(r"\[([^\]]*)\]", item.strip())  # name, ranges, name, ranges, ..., name
        ranges = [_ranges(spec, text) for spec in pieces[1::2]]
        if math.prod(sum(len(r) for r, _ in rs) for rs in ranges) > MAX_NODES - len(names):
            raise LayoutError(f"node list {text!r}: more than {MAX_NODES} nodes")
        choices = [[p] for p in pieces]
        choices[1::2] = [[str(i).zfill(width) for r, width in rs for i in r] for rs in ranges]
        names.extend("".join(combo) for combo in itertools.product(*choices))
    for name, seen in Counter(names).items():
        if not _NODE_NAME.fullmatch(name):
            raise LayoutError(f"node list {text!r}: {name!r} is not a node name (letters, digits, '.', '_', '-')")
        if seen > 1:
            raise LayoutError(f"node list {text!r}: node {name!r} is listed twice")
    return names


def _ranges(spec: str, text: str) -> list[tuple[range, int]]:
    """``01-03,07`` -> each range with the width its numbers are zero-padded to."""
    out = []
    for r in spec.split(","):
        m = re.fullmatch(r"\s*(\d{1,12})\s*(?:-\s*(\d{1,12})\s*)?", r)
        if not m:
            raise LayoutError(f"node list {text!r}: {r!r} is not a number or a range like 01-03")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise LayoutError(f"node list {text!r}: range {r.strip()!r} goes down")
        out.append((range(lo, hi + 1), len(m.group(1))))
    return out


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
    return total


def _visible_devices(env) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list; None when unset or empty."""
    raw = env.get("CUDA_VISIBLE_DEVICES", "")
    devices = [d.strip() for d in raw.split(",") if d.strip()]
    dup = next((d for d in devices if devices.count(d) > 1), None)
    if dup is not None:  # one GPU twice would put two programs on it
        raise LayoutError(f"CUDA_VISIBLE_DEVICES={raw!r}: GPU {dup} is listed twice")
    return devices or None


@dataclass
class Allocation:
    nodes: list[str]
    gpus: list[int]
    source: str
    """Where the GPU count came from, for messages (e.g. ``SLURM_GPUS_ON_NODE=1``)."""
    devices: list[str] | None = None
    """``CUDA_VISIBLE_DEVICES`` of the node this runs on (the first node in a job), when set."""


def allocation_from_env(
    env: dict[str, str] | None = None, hostname: str | None = None, node_gpus: list[int] | None = None
) -> Allocation:
    """The allocation from Slurm's variables; outside a job, this host with as many GPUs as ``CUDA_VISIBLE_DEVICES``
    lists, else 3. ``node_gpus`` (``QUOTECITE_NODE_GPUS``): one count for every node, or one each."""
    env = os.environ if env is None else env
    devices = _visible_devices(env)
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    raw_n = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or ""
    if nodelist:
        nodes = expand_hostlist(nodelist)
        if raw_n and raw_n.strip() != str(len(nodes)):
            raise LayoutError(
                f"SLURM_JOB_NUM_NODES={raw_n} but SLURM_JOB_NODELIST={nodelist!r} names {len(nodes)} node(s)"
            )
    elif raw_n and raw_n != "1":
        raise LayoutError(f"SLURM_JOB_NUM_NODES={raw_n} needs SLURM_JOB_NODELIST (the node names)")
    else:
        nodes = [(hostname or socket.gethostname()).split(".")[0]]
    if node_gpus:
        source = f"QUOTECITE_NODE_GPUS={','.join(map(str, node_gpus))}"
        gpus = node_gpus * len(nodes) if len(node_gpus) == 1 else list(node_gpus)
        if len(gpus) != len(nodes):
            raise LayoutError(f"{source} gives {len(gpus)} node(s), the allocation has {len(nodes)}")
    elif var := next((v for v in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE") if env.get(v)), None):
        gpus, source = [parse_gpu_count(env[var], var)] * len(nodes), f"{var}={env[var]}"
    elif devices:
        gpus, source = [len(devices)] * len(nodes), f"CUDA_VISIBLE_DEVICES={','.join(devices)}"
    else:
        gpus, source = [DEFAULT_LOCAL_GPUS] * len(nodes), f"assumed {DEFAULT_LOCAL_GPUS}: no Slurm GPU count"
    if max(gpus) > MAX_GPUS_PER_NODE:
        raise LayoutError(f"{source}: {max(gpus)} GPUs on a node, more than {MAX_GPUS_PER_NODE}")
    if devices is not None and len(nodes) == 1 and len(devices) < gpus[0]:
        raise LayoutError(
            f"CUDA_VISIBLE_DEVICES={','.join(devices)} lists {len(devices)} GPU(s) but the job has {gpus[0]} "
            f"({source})"
        )
    return Allocation(nodes, gpus, source, devices)


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
    idle: dict[str, list[int]]

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
) -> Layout:
    """Split the allocation (docs/cluster.md, "Several nodes"). Each input is checked where it is read (hostlist,
    allocation, settings); here, whether they fit together."""
    if judge_replicas > serve_gpus:
        raise LayoutError(
            f"QUOTECITE_JUDGE_REPLICAS={judge_replicas} needs as many serving GPUs (one judge per GPU), but "
            f"QUOTECITE_SERVE_GPUS={serve_gpus}"
        )
    single = len(nodes) == 1
    src = f" ({source})" if source else ""
    slots = [(n, p) for n, k in zip(nodes, gpus, strict=True) for p in range(k)]
    g = train_gpus_per_node or (SINGLE_NODE_TRAIN_GPUS if single else 1)
    if len(slots) < serve_gpus + g:
        raise LayoutError(
            f"this job sees {len(slots)} GPU(s){src}, needs {serve_gpus + g}: {g} for the trainer, "
            f"{serve_gpus} for the judge and embedder"
            + ("" if single else f" (nodes {','.join(nodes)} with {gpus} GPUs)")
        )
    serving = slots[len(slots) - serve_gpus :]
    served = Counter(n for n, _ in serving)
    left = {n: k - served[n] for n, k in zip(nodes, gpus, strict=True)}
    if not (train_gpus_per_node or single):  # several nodes: all the first node has left
        g = left[nodes[0]]
    if g < 1 or left[nodes[0]] < g:
        raise LayoutError(
            f"the first node {nodes[0]} (where the batch script, the trainer's driver and the Ray head run) has "
            f"{left[nodes[0]]} GPU(s) left after serving, needs {max(g, 1)} for the trainer{src}"
        )
    short = [n for n in nodes if n not in served and left[n] < g]
    if short:
        raise LayoutError(
            "trainer GPUs would be unequal across trainer nodes (EasyR1 runs trainer.n_gpus_per_node on each): "
            + ", ".join(f"{n} has {left[n]}" for n in short)
            + f", {nodes[0]} has {g}; set QUOTECITE_TRAIN_GPUS_PER_NODE to at most {min(left[n] for n in short)}"
        )
    trainer_nodes = [n for n in nodes if left[n] >= g]
    used = {*serving, *((n, p) for n in trainer_nodes for p in range(g))}
    idle: dict[str, list[int]] = {}
    for n, p in slots:
        if (n, p) not in used:
            idle.setdefault(n, []).append(p)
    return Layout(list(nodes), list(gpus), trainer_nodes, g, serving[:judge_replicas], serving[-1], serving, idle)


def plan_from_env(
    env: dict[str, str] | None = None,
    hostname: str | None = None,
    serve_gpus: int = 1,
    judge_replicas: int = 1,
    train_gpus_per_node: int | None = None,
    node_gpus: list[int] | None = None,
) -> tuple[Allocation, Layout]:
    """The allocation from ``env`` and its split; the counts are the settings' ``layout`` group (validated there)."""
    alloc = allocation_from_env(env, hostname, node_gpus)
    return alloc, plan(alloc.nodes, alloc.gpus, serve_gpus, judge_replicas, train_gpus_per_node, alloc.source)


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
    """True when something else holds ``port`` on this node. With ``SO_REUSEADDR``, as the servers bind: the
    connections of a server just killed, in TIME_WAIT on its port, do not count (its restart gets the port the
    trainer knows); a listener does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def run(positions: list[int], cmd: list[str], grace=10, port_file="", bind_host="", prefer_port=0) -> int:
    """Run ``cmd`` on this node's GPUs at ``positions`` in its own session; its exit status (128+N for signal N), so an
    ``srun`` step ends as the program did. SIGTERM/SIGINT/SIGUSR1 go to its process group (SIGTERM/SIGINT: SIGKILL
    ``grace`` seconds later); what it leaves in the group (Ray's raylet, vLLM workers) is killed when it exits. With
    ``port_file``: ``{port}`` in ``cmd`` becomes a free port (``prefer_port`` when free), written there; a server that
    lost the race for it (:data:`CLASH_WINDOW_S`) is started again on a new one."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(device_ids(positions, _visible_devices(os.environ))))
    child: subprocess.Popen | None = None
    stopping = False

    def kill_group(sig: int) -> None:
        if child is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, sig)

    def forward(sig: int, _frame) -> None:
        nonlocal stopping
        kill_group(sig)
        if sig != signal.SIGUSR1:  # a program that drains (Ray: up to 30 s) is killed after the grace
            stopping = True
            signal.signal(signal.SIGALRM, lambda *_: kill_group(signal.SIGKILL))
            signal.alarm(grace)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(s, forward)
    for attempt in range(PORT_RETRIES + 1):
        argv, port = cmd, 0
        if port_file:
            keep = attempt == 0 and prefer_port and not port_taken(prefer_port, bind_host)
            port = prefer_port if keep else free_port(bind_host)
            argv = [a.replace(PORT_TOKEN, str(port)) for a in cmd]
            with open(f"{port_file}.tmp{os.getpid()}", "w", encoding="utf-8") as f:
                f.write(f"{port}\n")
            os.replace(f.name, port_file)
        started = time.monotonic()
        try:
            child = subprocess.Popen(argv, env=env, start_new_session=True)
        except OSError as e:
            print(f"error: cannot start {argv[0]!r}: {e}", file=sys.stderr)
            return 127
        rc = child.wait()
        kill_group(signal.SIGKILL)
        rc = 128 - rc if rc < 0 else rc
        lost_race = port_file and rc and not stopping and time.monotonic() - started < CLASH_WINDOW_S
        if not lost_race or attempt == PORT_RETRIES or not port_taken(port, bind_host):
            return rc
        why = f"port {port} was taken before the server bound it; starting it again on another port"
        print(f"{why} ({attempt + 1} of {PORT_RETRIES})", file=sys.stderr, flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launch/layout.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a command on this node's GPUs at the given positions")
    r.add_argument("--gpus", required=True, help="comma-separated GPU positions on this node, e.g. 0,1")
    r.add_argument("--grace", type=int, default=10, help="seconds from SIGTERM until the program is killed")
    r.add_argument("--port-file", default="", help="pick a free port now for {port} in the command; write it here")
    r.add_argument("--bind-host", default="", help="the address the server binds (for the free-port check)")
    r.add_argument("--prefer-port", type=int, default=0, help="with --port-file: this port when it is free")
    r.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
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
