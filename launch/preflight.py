"""What a first day on a real cluster would hit, checked or fixed before the training job spends GPU time.

Each check and why: docs/cluster.md ("Pre-flight checks of the launch"). What a check reads from the node comes
through a :class:`Probe`, so the tests give it any node they need; :mod:`launch.job` uses the real one.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
import shutil
import socket
import subprocess
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from recipes.reader import RecipeError, dig, load_recipe

DRIVER_FILE = Path("/proc/driver/nvidia/version")  # NVRM version: ... Kernel Module  580.65.06 ...


# ------------------------------------------------------------------------------------------------- the probe
def _route(peer: str) -> str:
    """This host's address on the route to ``peer`` (a UDP ``connect`` sends nothing); "" when there is none."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in peer else socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((peer, 9))
            return str(s.getsockname()[0])
    except OSError:
        return ""


def port_free(port: int) -> bool:
    """Whether a TCP port can be bound on every address of this host now (a port in TIME_WAIT counts as taken)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", port))
        return True
    except OSError:
        return False


def _output(*argv: str) -> str:
    """What a program prints; "" when it is not on PATH, fails or hangs."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


def _read_driver() -> tuple[str | None, str]:
    """(the NVIDIA driver's version, where it was read) or (None, why none is visible)."""
    try:
        text = DRIVER_FILE.read_text(errors="replace")
    except OSError:
        text = ""
    if found := parse_driver(text):
        return found, str(DRIVER_FILE)
    if found := parse_driver(_output("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")):
        return found, "nvidia-smi"
    return None, f"no NVIDIA driver visible on this node ({DRIVER_FILE} absent, no nvidia-smi)"


@dataclass(frozen=True)
class Probe:
    """What the checks read from the node; the defaults are the real ones (tests give their own)."""

    getaddrinfo: Callable[..., list] = socket.getaddrinfo
    route: Callable[[str], str] = _route
    read_driver: Callable[[], tuple[str | None, str]] = _read_driver
    which: Callable[[str], str | None] = shutil.which
    port_free: Callable[[int], bool] = port_free
    srun_version: Callable[[], str] = functools.partial(_output, "srun", "--version")


# ------------------------------------------------------------------------------------------------- addresses
def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def resolve(name: str, getaddrinfo: Callable[..., list] = socket.getaddrinfo) -> list[str]:
    """The addresses ``name`` resolves to here, IPv4 first, each once; [] when it does not resolve."""
    try:
        infos = getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(i[4][0]) for i in sorted(infos, key=lambda i: i[0] != socket.AF_INET)))


@dataclass(frozen=True)
class NodeAddress:
    """How the job reaches a node: ``address`` is Ray's ``--node-ip-address``, ``host`` what its servers listen on
    and are reached by, ``note`` what was changed and why."""

    address: str
    host: str
    note: str = ""


def node_addresses(
    nodes: list[str], here: str, given: Mapping[str, str] | None = None, probe: Probe | None = None
) -> dict[str, NodeAddress]:
    """The address of every node of a multi-node job, read on ``here`` (the node the job runs on); ``given``
    (``QUOTECITE_NODE_ADDRESSES``) wins. Names that all resolve to ``127.0.0.1`` are one machine (a local Slurm)."""
    probe, given = probe or Probe(), dict(given or {})
    found = {n: resolve(n, probe.getaddrinfo) for n in nodes if n not in given}
    routable = {n: [a for a in addrs if not _is_loopback(a)] for n, addrs in found.items()}
    reach = {**{n: a[0] for n, a in routable.items() if a}, **given}  # how the other nodes are reached, if known
    out = {n: NodeAddress(ip, ip, f"{n}: {ip} (QUOTECITE_NODE_ADDRESSES)") for n, ip in given.items() if n in nodes}
    for node, addrs in found.items():
        if addrs and not routable[node] and (addrs[0] != "127.0.0.1" or reach):
            peers = [reach[n] for n in nodes if n != node and n in reach]
            out[node] = _own_route(node, addrs[0], here, peers, probe)
        else:  # routable, every node on 127.0.0.1 (a local Slurm) or unresolvable here (a laptop's dry run)
            out[node] = NodeAddress((routable[node] or addrs or [node])[0], node)
    return {n: out[n] for n in nodes}


def _own_route(node: str, loop: str, here: str, peers: list[str], probe: Probe) -> NodeAddress:
    """``node``, whose name resolves to loopback (``loop``): its route to a peer where it is ``here``, else refused."""
    for peer in peers if node.split(".")[0].lower() == here.split(".")[0].lower() else []:
        mine = probe.route(peer)
        if mine and not _is_loopback(mine):
            why = f"{node} resolves to {loop} (a loopback address: /etc/hosts maps the node's own name to it)"
            return NodeAddress(mine, mine, f"{why}; its servers and Ray use {mine}, its address that reaches {peer}")
    raise InputError(
        f"node {node} resolves to {loop} on {here or 'this host'}, a loopback address the other nodes "
        f"of the job cannot reach (/etc/hosts maps the name to it): set QUOTECITE_NODE_ADDRESSES="
        f"{node}=<its routable IP>[,<node>=<IP>...] or fix /etc/hosts"
    )


def this_node(environ: Mapping[str, str]) -> str:
    """The node the job runs on: Slurm's ``SLURMD_NODENAME``, else this host's name."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname()


# ------------------------------------------------------------------------------------------------- NCCL / Gloo
def network_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The job's ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_*`` and ``GLOO_SOCKET_IFNAME``, as they are (sorted by name)."""
    names = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
    return {k: environ[k] for k in sorted(environ) if k in names or k.startswith("NCCL_IB_")}


def network_note(env: Mapping[str, str], multi: bool) -> str:
    """The dry run's line on NCCL and Gloo."""
    if env:
        given = " ".join(f"{k}={v}" for k, v in env.items())
        return f"NCCL/Gloo       {given} (from the job's environment, passed to the trainer and its Ray nodes)"
    note = "NCCL/Gloo       none of NCCL_SOCKET_IFNAME, NCCL_IB_*, GLOO_SOCKET_IFNAME is set: NCCL chooses"
    if multi:
        note += "; on several nodes set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (and NCCL_IB_HCA) if they pick the "
        note += "wrong interface"
    return note


# ------------------------------------------------------------------------------------------------- Ray's ports
RAY_RANGE = (20000, 32767)  # above Ray's own defaults (6379, 8265, 10001, 10002-19999), below Linux's ephemeral ports
RAY_BLOCK = 320  # one job's ports: RAY_FLAGS' from the block's start, the workers' from its 17th to its end
RAY_SLOTS = (RAY_RANGE[1] + 1 - RAY_RANGE[0]) // RAY_BLOCK
RAY_FLAGS = (
    "--dashboard-port",
    "",  # the client server's: reserved, not passed (ray start fails on the flag without ray[client])
    "--node-manager-port",
    "--object-manager-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--metrics-export-port",
    "--runtime-env-agent-port",
)


@dataclass(frozen=True)
class RayPorts:
    """One job's block of Ray ports, from ``base``; ``checked``: found free on this node."""

    slot: int
    base: int
    checked: bool

    def head_args(self) -> list[str]:
        """``ray start --head`` flags (worker nodes get none: nodes sharing one host would bind the same ports)."""
        args = [a for i, flag in enumerate(RAY_FLAGS) if flag for a in (flag, str(self.base + i))]
        return [*args, "--min-worker-port", str(self.base + 16), "--max-worker-port", str(self.base + RAY_BLOCK - 1)]

    def describe(self) -> str:
        how = "checked free on this node" if self.checked else "checked free on the head node when the job runs"
        return (
            f"Ray ports       block {self.slot} of {RAY_SLOTS} in {RAY_RANGE[0]}-{RAY_RANGE[1]} (from the job id; "
            f"{how}): {self.base}-{self.base + RAY_BLOCK - 1}, workers from {self.base + 16}"
        )


def ray_ports(job_id: str, check: Callable[[int], bool] | None = None) -> RayPorts:
    """This job's block of Ray ports: block ``job id mod`` :data:`RAY_SLOTS` (a job id that is not a number: its
    CRC-32), else the next block whose every port ``check`` finds free; ``check`` None: not checked (a dry run)."""
    first = int(job_id) if job_id.isdigit() else zlib.crc32(job_id.encode())
    for i in range(RAY_SLOTS):
        slot = (first + i) % RAY_SLOTS
        base = RAY_RANGE[0] + slot * RAY_BLOCK
        if check is None or all(check(p) for p in range(base, base + RAY_BLOCK)):
            return RayPorts(slot, base, check is not None)
    raise InputError(
        f"no block of {RAY_BLOCK} free ports for Ray in {RAY_RANGE[0]}-{RAY_RANGE[1]} on this node "
        "(other jobs hold them): ask for a node of your own (sbatch --exclusive)"
    )


# ------------------------------------------------------------------------------------------------- driver, compiler
MIN_DRIVER = {13: 580, 12: 525}  # CUDA major -> the oldest NVIDIA driver it runs on (minor-version compatibility)
SERVER_CUDA = 13  # the server venv's torch (vLLM's wheels) when its stamp does not say (not built yet)


def parse_driver(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` (after ``Kernel Module``) or ``nvidia-smi``'s output."""
    line = next((ln for ln in text.splitlines() if "Kernel Module" in ln), text).split("Kernel Module", 1)[-1]
    m = re.search(r"(?<![\d.])\d{3,4}\.\d{1,3}(?:\.\d{1,3})?(?![\d.])", re.sub(r"\bfor \S+", "", line))
    return m.group(0) if m else None


def check_toolchain(
    environ: Mapping[str, str], torch_server: str, know_server: bool, probe: Probe | None = None
) -> list[str]:
    """The driver and C compiler check: lines to log, or one :class:`InputError` naming what is missing and how to
    fix it. ``torch_server``: the server venv's torch version (``2.9.0+cu130``, else "unknown"); ``know_server``
    False: the servers are the user's own (``QUOTECITE_ENV_SETUP=0``), their CUDA unknown."""
    probe = probe or Probe()
    version, source = probe.read_driver()
    if version is None:
        return [f"driver and C compiler check skipped: {source}"]
    lines, problems = [], []
    cu = re.search(r"\+cu(\d{2,3})", torch_server)
    major = int(cu.group(1)[:-1]) if cu else (SERVER_CUDA if know_server else None)
    need = MIN_DRIVER.get(major, max(MIN_DRIVER.values()))
    what = f"the server venv's CUDA {major} torch ({torch_server if cu else 'vLLM pin'})"
    if major is None:
        lines.append(
            f"NVIDIA driver {version} ({source}); the servers' CUDA is unknown (QUOTECITE_ENV_SETUP=0): not compared"
        )
    elif int(version.split(".")[0]) < need:
        problems.append(
            f"NVIDIA driver {version} ({source}) is older than {need}, which {what} needs: run on "
            f"nodes with a driver >= {need} (sbatch --constraint/--nodelist; ask the admins)"
        )
    else:
        lines.append(f"NVIDIA driver {version} ({source}) >= {need}, what {what} needs")
    cc = environ.get("CC", "").strip()  # Triton's C compiler: $CC, else cc or gcc
    found = probe.which(cc.split()[0]) if cc else probe.which("cc") or probe.which("gcc")
    if found:
        lines.append(f"C compiler for Triton: {found}")
    else:
        missing = f"CC={cc} is not a program on this node"
        if not cc:
            missing = "no C compiler on this node (no $CC, no cc or gcc on PATH)"
        problems.append(
            f"{missing}, which Triton needs to build its kernels: `module load gcc` (or set CC to a C "
            "compiler) in the job's environment"
        )
    if problems:
        raise InputError("the node cannot run the servers or the trainer: " + "; ".join(problems))
    return lines


# ------------------------------------------------------------------------------------------------- Slurm version
def check_step_sharing(steps: Mapping[str, list[str]], probe: Probe | None = None) -> str:
    """The Slurm version (``srun --version``) against the job's ``srun --overlap`` steps (``steps``: node -> the
    names of the steps the job starts there): before 22.05 refused; else the line for the dry run and the log, ""
    (not asked) when no node has two steps."""
    crowded = {n: names for n, names in steps.items() if len(names) > 1}
    if not crowded:
        return ""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", (probe or Probe()).srun_version() or "")
    where = "; ".join(f"{' and '.join(names)} on {node}" for node, names in crowded.items())
    if m is None:
        return (
            f"Slurm version   unknown (no srun --version here): the job steps {where} share their node with "
            "srun --overlap, which needs Slurm >= 22.05"
        )
    major, minor = int(m[1]), int(m[2])
    shown = f"{major}.{minor:02d}.{int(m[3] or 0)}"
    if (major, minor) < (22, 5):
        raise InputError(
            f"Slurm {shown} (srun --version) is older than 22.05: its srun --overlap steps share only "
            f"CPUs, so the steps {where} cannot run at once (the second would wait until its health wait "
            "fails); run on one node (sbatch --nodes=1: the servers then run in the batch step) or on "
            "a cluster with Slurm >= 22.05"
        )
    return f"Slurm version   {shown} (srun --version): steps {where} share their node (srun --overlap)"


# ------------------------------------------------------------------------------------------------- wandb
def recipe_loggers(recipe: Path, overrides: Iterable[str]) -> list[str]:
    """The trainer's loggers (``trainer.logger``, overrides applied); [] when the recipe cannot be read."""
    try:
        value = dig(load_recipe(recipe, list(overrides)), "trainer.logger") or []
    except RecipeError:
        return []
    return [str(x) for x in value] if isinstance(value, list) else [str(value)]


def wandb_env(run_dir: Path, loggers: list[str], environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(``WANDB_RUN_ID`` and ``WANDB_RESUME`` for the trainer, a line saying so) when wandb is a logger; a value
    the job's environment already has is kept. The run id: the run folder's name and a hash of its full path."""
    if "wandb" not in loggers:
        return {}, ""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(run_dir).name).strip("-")[:40] or "run"
    run_id = environ.get("WANDB_RUN_ID") or f"{name}-{hashlib.sha256(str(Path(run_dir)).encode()).hexdigest()[:12]}"
    resume = environ.get("WANDB_RESUME") or "allow"
    note = f"wandb           every job of this run logs into wandb run {run_id} (WANDB_RUN_ID, WANDB_RESUME={resume})"
    return {"WANDB_RUN_ID": run_id, "WANDB_RESUME": resume}, note
