"""What a first day on a real cluster would hit, checked or fixed before the training job spends GPU time.

Each check takes what it reads from the node through a :class:`Probe` (name resolution, the route to a peer, the
NVIDIA driver, ``which``, whether a port is free), so the tests give it any node they need; the job
(:mod:`launch.job`) uses the real one, its dry run included.

- **Node addresses** (:func:`node_addresses`, several nodes only): a node whose name resolves to a loopback address
  (``/etc/hosts`` mapping the node's own name to ``127.0.1.1``, as Debian and Ubuntu write it) is never used as the
  address other nodes reach: on this node its routable address (the one that reaches another node of the job) is
  used instead, elsewhere the job stops with one line naming ``QUOTECITE_NODE_ADDRESSES``. Names that all resolve
  to ``127.0.0.1`` are one machine (the local Slurm of ``.ci/slurm_up.sh``) and are kept.
- **NCCL and Gloo** (:func:`network_env`): ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_*`` and ``GLOO_SOCKET_IFNAME`` from the
  job's environment are handed to the trainer and its Ray nodes as they are, and the dry run says which are set;
  nothing is ever invented.
- **Ray's ports** (:func:`ray_ports`): every port ``ray start`` would otherwise take at a fixed default (dashboard
  8265, dashboard agent 52365, workers 10002-19999; not the client server's 10001, see :meth:`RayPorts.head_args`)
  or leave to chance (node manager, object
  manager, metrics, runtime-env agent) comes from one block of :data:`RAY_BLOCK` ports of this job's own in
  :data:`RAY_RANGE`, chosen by the Slurm job id and checked free on this node (else the next block).
- **Driver and compiler** (:func:`check_toolchain`): the NVIDIA driver against what the server venv's CUDA build of
  torch needs (:data:`MIN_DRIVER`), and a C compiler for Triton (``$CC``, ``cc`` or ``gcc``); no NVIDIA driver
  visible at all (a login node, this CPU machine): skipped, saying so.
- **Slurm before 22.05** (:func:`check_step_sharing`): where the job starts two ``srun --overlap`` steps on one
  node (the judge and the embedder on the serving node of a multi-node job), ``srun --version`` is read before any
  server starts; an older Slurm is refused with one line (its ``--overlap`` shares CPUs only: the second step
  would wait).
- **wandb** (:func:`wandb_env`): with ``wandb`` among the recipe's loggers every job of a run logs into one wandb
  run: ``WANDB_RUN_ID`` derived from the run folder, ``WANDB_RESUME=allow``.

What only a cluster shows is in ``docs/cluster.md`` ("Pre-flight checks of the launch").
"""

from __future__ import annotations

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
from launch.run_files import RunError
from launch.run_manifest import load_recipe, parse_overrides, recipe_value

DRIVER_FILE = Path("/proc/driver/nvidia/version")
"""The loaded NVIDIA kernel module's version line (``NVRM version: ... Kernel Module  580.65.06 ...``)."""


# ------------------------------------------------------------------------------------------------- the probe
def _route(peer: str) -> str:
    """This host's address on the route to ``peer`` (a UDP ``connect`` sends nothing); "" when there is none."""
    family = socket.AF_INET6 if ":" in peer else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
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


def _read_driver() -> tuple[str | None, str]:
    """(the NVIDIA driver's version, where it was read) or (None, why none is visible)."""
    try:
        text = DRIVER_FILE.read_text(errors="replace")
    except OSError:
        text = ""
    found = parse_driver(text)
    if found:
        return found, str(DRIVER_FILE)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=30, stdin=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            r = None
        found = parse_driver(r.stdout) if r is not None and r.returncode == 0 else None
        if found:
            return found, "nvidia-smi"
    return None, f"no NVIDIA driver visible on this node ({DRIVER_FILE} absent, no nvidia-smi)"


def _srun_version() -> str:
    """What ``srun --version`` prints (``slurm 22.05.8``); "" when there is no ``srun`` or it fails."""
    srun = shutil.which("srun")
    if not srun:
        return ""
    try:
        r = subprocess.run([srun, "--version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""


@dataclass(frozen=True)
class Probe:
    """What the checks read from the node; the defaults are the real ones (tests give their own)."""

    getaddrinfo: Callable[..., list] = socket.getaddrinfo
    route: Callable[[str], str] = _route
    """This host's address towards a peer address ("" when there is no route)."""
    read_driver: Callable[[], tuple[str | None, str]] = _read_driver
    which: Callable[[str], str | None] = shutil.which
    port_free: Callable[[int], bool] = port_free
    srun_version: Callable[[], str] = _srun_version
    """What ``srun --version`` prints ("" when there is no srun)."""


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
    v4 = [str(i[4][0]) for i in infos if i[0] == socket.AF_INET]
    v6 = [str(i[4][0]) for i in infos if i[0] == socket.AF_INET6]
    return list(dict.fromkeys(v4 + v6))


@dataclass(frozen=True)
class NodeAddress:
    """How the job reaches one node."""

    node: str
    address: str
    """An IP (Ray's ``--node-ip-address``), or the name itself when it does not resolve here (a dry run on a
    laptop)."""
    host: str
    """What its servers listen on and are reached by: the name, or :attr:`address` where the name is unusable."""
    note: str = ""
    """What was changed and why ("" when nothing was)."""


def node_addresses(nodes: list[str], here: str, given: Mapping[str, str] | None = None,
                   probe: Probe | None = None) -> dict[str, NodeAddress]:  # fmt: skip
    """The address of every node of a multi-node job, read on ``here`` (the node the job runs on).

    A node that resolves only to loopback addresses, where the job's nodes are not all ``127.0.0.1`` (one
    machine), is refused with one line naming ``QUOTECITE_NODE_ADDRESSES``, unless it is ``here``: then its
    route to another node gives its routable address. ``given`` (``QUOTECITE_NODE_ADDRESSES``) always wins.
    """
    probe = probe or Probe()
    given = dict(given or {})
    found = {n: resolve(n, probe.getaddrinfo) for n in nodes if n not in given}
    routable = {n: [a for a in addrs if not _is_loopback(a)] for n, addrs in found.items()}
    any_routable = bool(given) or any(routable.values())
    out: dict[str, NodeAddress] = {}
    for node in nodes:
        if node in given:
            out[node] = NodeAddress(
                node, given[node], given[node], f"{node}: {given[node]} (QUOTECITE_NODE_ADDRESSES)"
            )
            continue
        addrs = found[node]
        if not addrs:
            out[node] = NodeAddress(node, node, node)
            continue
        if routable[node]:
            out[node] = NodeAddress(node, routable[node][0], node)
            continue
        loop = addrs[0]
        if loop == "127.0.0.1" and not any_routable:  # every node is this machine (a local Slurm)
            out[node] = NodeAddress(node, loop, node)
            continue
        fix = ""
        if _short(node) == _short(here):
            peers = [given.get(n) or (routable.get(n) or [""])[0] for n in nodes if n != node]
            for peer in (p for p in peers if p):
                mine = probe.route(peer)
                if mine and not _is_loopback(mine):
                    fix = mine
                    note = (f"{node} resolves to {loop} (a loopback address: /etc/hosts maps the node's own name to "
                            f"it); its servers and Ray use its routable address {mine}, the one that reaches {peer}")  # fmt: skip
                    out[node] = NodeAddress(node, mine, mine, note)
                    break
        if not fix:
            raise InputError(f"node {node} resolves to {loop} on {here or 'this host'}, a loopback address the other "
                             f"nodes of the job cannot reach (/etc/hosts maps the name to it): set "
                             f"QUOTECITE_NODE_ADDRESSES={node}=<its routable IP>[,<node>=<IP>...] or fix /etc/hosts")  # fmt: skip
    return out


def _short(name: str) -> str:
    return name.split(".", 1)[0].lower()


def this_node(environ: Mapping[str, str]) -> str:
    """The node the job runs on: Slurm's ``SLURMD_NODENAME``, else this host's name."""
    return environ.get("SLURMD_NODENAME") or socket.gethostname()


# ------------------------------------------------------------------------------------------------- NCCL / Gloo
NET_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
NET_PREFIXES = ("NCCL_IB_",)


def network_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The job's ``NCCL_SOCKET_IFNAME``, ``NCCL_IB_*`` and ``GLOO_SOCKET_IFNAME``, as they are (sorted by name).

    >>> network_env({"NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "INFO", "PATH": "/bin"})
    {'NCCL_IB_HCA': 'mlx5_0', 'NCCL_SOCKET_IFNAME': 'ib0'}
    """
    return {k: environ[k] for k in sorted(environ) if k in NET_VARS or k.startswith(NET_PREFIXES)}


def network_note(env: Mapping[str, str], multi: bool) -> str:
    """The dry run's line on NCCL and Gloo."""
    if env:
        return "NCCL/Gloo       " + " ".join(f"{k}={v}" for k, v in env.items()) + " (from the job's environment, " \
               "passed to the trainer and its Ray nodes)"  # fmt: skip
    tail = ("; on several nodes set NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME (and NCCL_IB_HCA) if they pick the wrong "
            "interface" if multi else "")  # fmt: skip
    return f"NCCL/Gloo       none of NCCL_SOCKET_IFNAME, NCCL_IB_*, GLOO_SOCKET_IFNAME is set: NCCL chooses{tail}"


# ------------------------------------------------------------------------------------------------- Ray's ports
RAY_RANGE = (20000, 32767)
"""Ray's per-job ports come from here: above the ports of common services and Ray's own defaults (6379, 8265,
10001, 10002-19999), below Linux's ephemeral range (32768-60999, where the kernel picks ports for any program)."""
RAY_BLOCK = 320
"""Ports of one job's block: :data:`RAY_FIXED` at its start, the workers' range from :data:`RAY_WORKERS_FROM` to
its end (304 ports: one per Ray worker process of the node)."""
RAY_FIXED = ("dashboard", "client_server", "node_manager", "object_manager", "agent_http", "agent_grpc", "metrics",
             "runtime_env_agent")  # fmt: skip
RAY_WORKERS_FROM = 16
RAY_SLOTS = (RAY_RANGE[1] + 1 - RAY_RANGE[0]) // RAY_BLOCK


@dataclass(frozen=True)
class RayPorts:
    """One job's block of Ray ports: ``base + offset`` for :data:`RAY_FIXED`, the workers from ``base + 16``."""

    slot: int
    base: int
    checked: bool

    def port(self, what: str) -> int:
        return self.base + RAY_FIXED.index(what)

    @property
    def workers(self) -> tuple[int, int]:
        return self.base + RAY_WORKERS_FROM, self.base + RAY_BLOCK - 1

    def node_args(self) -> list[str]:
        """``ray start`` flags of every node of the job (each node has its own port space)."""
        lo, hi = self.workers
        return ["--node-manager-port", str(self.port("node_manager")), "--object-manager-port",
                str(self.port("object_manager")), "--dashboard-agent-listen-port", str(self.port("agent_http")),
                "--dashboard-agent-grpc-port", str(self.port("agent_grpc")), "--metrics-export-port",
                str(self.port("metrics")), "--runtime-env-agent-port", str(self.port("runtime_env_agent")),
                "--min-worker-port", str(lo), "--max-worker-port", str(hi)]  # fmt: skip

    def head_args(self) -> list[str]:
        """``ray start --head`` flags: the node's and the dashboard's. Not the client server's: with
        ``--ray-client-server-port`` ``ray start`` fails where Ray lacks ``ray[client]`` (a plain ``pip install
        ray``); where it has it, the client server takes Ray's default 10001 (its slot in the block stays
        reserved)."""
        return ["--dashboard-port", str(self.port("dashboard")), *self.node_args()]

    def describe(self) -> str:
        lo, hi = self.workers
        fixed = ", ".join(f"{w.replace('_', ' ')} {self.port(w)}" for w in RAY_FIXED if w != "client_server")
        how = "checked free on this node" if self.checked else "checked free on the head node when the job runs"
        return (f"Ray ports       block {self.slot} of {RAY_SLOTS} in {RAY_RANGE[0]}-{RAY_RANGE[1]} (from the job id; "
                f"{how}): {fixed}, workers {lo}-{hi}")  # fmt: skip


def ray_ports(job_id: str, check: Callable[[int], bool] | None = None) -> RayPorts:
    """This job's block of Ray ports: block ``job id mod`` :data:`RAY_SLOTS` (a job id that is not a number:
    its CRC-32), else the next block whose every port ``check`` finds free; ``check`` None: not checked (a dry
    run). :class:`InputError` when no block is free.

    >>> p = ray_ports("1234567")
    >>> p.slot, p.port("dashboard"), p.workers
    (22, 27040, (27056, 27359))
    """
    first = int(job_id) if job_id.isdigit() else zlib.crc32(job_id.encode())
    for i in range(RAY_SLOTS):
        slot = (first + i) % RAY_SLOTS
        ports = RayPorts(slot, RAY_RANGE[0] + slot * RAY_BLOCK, check is not None)
        if check is None:
            return ports
        lo, hi = ports.workers
        wanted = [ports.port(w) for w in RAY_FIXED] + list(range(lo, hi + 1))
        if all(check(p) for p in wanted):
            return ports
    raise InputError(f"no block of {RAY_BLOCK} free ports for Ray in {RAY_RANGE[0]}-{RAY_RANGE[1]} on this node "
                     "(other jobs hold them): ask for a node of your own (sbatch --exclusive)")  # fmt: skip


# ------------------------------------------------------------------------------------------------- driver, compiler
MIN_DRIVER = {13: 580, 12: 525}
"""The oldest NVIDIA driver (major version) each CUDA major version runs on (CUDA's minor-version compatibility)."""
SERVER_CUDA = 13
"""The CUDA major version of the server venv's torch (vLLM ``QUOTECITE_VLLM_SERVER``'s wheels) when its stamp does
not say (a venv not built yet)."""

_DRIVER = re.compile(r"(?<![\d.])(\d{3,4})\.(\d{1,3})(?:\.(\d{1,3}))?(?![\d.])")


def parse_driver(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` or ``nvidia-smi``'s output.

    >>> parse_driver("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs)")
    '580.65.06'
    >>> parse_driver("570.133.20\\n570.133.20\\n")
    '570.133.20'
    """
    line = next((ln for ln in text.splitlines() if "Kernel Module" in ln), text)
    line = line.split("Kernel Module", 1)[-1]
    line = re.sub(r"\bfor \S+", "", line)
    m = _DRIVER.search(line)
    return m.group(0) if m else None


def cuda_major(torch_version: str) -> int | None:
    """The CUDA major version of a torch build (``2.9.0+cu130`` -> 13); None when it does not say.

    >>> cuda_major("2.9.0+cu130"), cuda_major("2.8.0+cu128"), cuda_major("unknown")
    (13, 12, None)
    """
    m = re.search(r"\+cu(\d{2,3})", torch_version or "")
    return int(m.group(1)[:-1]) if m else None


def compiler(environ: Mapping[str, str], which: Callable[[str], str | None] = shutil.which) -> tuple[str, str]:
    """(the C compiler Triton would use, "") or ("", what is missing)."""
    cc = environ.get("CC", "").strip()
    if cc:
        found = which(cc.split()[0])
        return (found, "") if found else ("", f"CC={cc} is not a program on this node")
    for name in ("cc", "gcc"):
        found = which(name)
        if found:
            return found, ""
    return "", "no C compiler on this node (no $CC, no cc or gcc on PATH)"


def check_toolchain(environ: Mapping[str, str], torch_server: str, know_server: bool,
                    probe: Probe | None = None) -> list[str]:  # fmt: skip
    """The driver and compiler check: lines to log, or :class:`InputError` (one line: what is missing, how to fix
    it). ``torch_server``: the server venv's torch version (its stamp, else "unknown"); ``know_server`` False: the
    servers are programs of the user's (``QUOTECITE_ENV_SETUP=0``), their CUDA unknown, so only the compiler."""
    probe = probe or Probe()
    version, source = probe.read_driver()
    if version is None:
        return [f"driver and C compiler check skipped: {source}"]
    problems, lines = [], []
    major = cuda_major(torch_server) or (SERVER_CUDA if know_server else None)
    if major is None:
        lines.append(f"NVIDIA driver {version} ({source}); the servers' CUDA is unknown (QUOTECITE_ENV_SETUP=0): "
                     "not compared")  # fmt: skip
    else:
        need = MIN_DRIVER.get(major, max(MIN_DRIVER.values()))
        what = f"the server venv's CUDA {major} torch ({torch_server if cuda_major(torch_server) else 'vLLM pin'})"
        if int(version.split(".")[0]) < need:
            problems.append(f"NVIDIA driver {version} ({source}) is older than {need}, which {what} needs: run on "
                            f"nodes with a driver >= {need} (sbatch --constraint/--nodelist; ask the admins)")  # fmt: skip
        else:
            lines.append(f"NVIDIA driver {version} ({source}) >= {need}, what {what} needs")
    cc, missing = compiler(environ, probe.which)
    if missing:
        problems.append(f"{missing}, which Triton needs to build its kernels: `module load gcc` (or set CC to a C "
                        "compiler) in the job's environment")  # fmt: skip
    else:
        lines.append(f"C compiler for Triton: {cc}")
    if problems:
        raise InputError("the node cannot run the servers or the trainer: " + "; ".join(problems))
    return lines


# ------------------------------------------------------------------------------------------------- Slurm version
OVERLAP_SHARES_ALL = (22, 5)
"""The first Slurm whose ``srun --overlap`` steps share a node's GPUs and memory, not only its CPUs: before it, a
second step on a node waits until the first ends."""


def parse_slurm_version(text: str) -> tuple[int, int, int] | None:
    """The version ``srun --version`` prints.

    >>> parse_slurm_version("slurm 21.08.8"), parse_slurm_version("slurm-wlm 22.05.8"), parse_slurm_version("")
    ((21, 8, 8), (22, 5, 8), None)
    """
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def check_step_sharing(steps: Mapping[str, list[str]], probe: Probe | None = None) -> str:
    """The Slurm version against the job's ``srun --overlap`` steps (``steps``: node -> the names of the steps the
    job starts there): before Slurm 22.05 two steps on one node (the judge and the embedder on the serving node, a
    server next to a Ray worker) do not share its GPUs and memory, so the second one would wait until its health
    wait fails; that is refused with one line saying what to do. Returns the line for the dry run and the log; no
    node with two steps: not even asked."""
    crowded = {n: names for n, names in steps.items() if len(names) > 1}
    if not crowded:
        return ""
    probe = probe or Probe()
    text = probe.srun_version()
    version = parse_slurm_version(text)
    where = "; ".join(f"{' and '.join(names)} on {node}" for node, names in crowded.items())
    if version is None:
        return (f"Slurm version   unknown (no srun --version here): the job steps {where} share their node with "
                "srun --overlap, which needs Slurm >= 22.05")  # fmt: skip
    shown = ".".join(f"{x:02d}" if i == 1 else str(x) for i, x in enumerate(version))
    if version[:2] < OVERLAP_SHARES_ALL:
        raise InputError(f"Slurm {shown} (srun --version) is older than 22.05: its srun --overlap steps share only "
                         f"CPUs, so the steps {where} cannot run at once (the second would wait until its health wait "
                         "fails); run on one node (sbatch --nodes=1: the servers then run in the batch step) or on "
                         "a cluster with Slurm >= 22.05")  # fmt: skip
    return f"Slurm version   {shown} (srun --version): steps {where} share their node (srun --overlap)"


# ------------------------------------------------------------------------------------------------- wandb
def recipe_loggers(recipe: Path, overrides: Iterable[str]) -> list[str]:
    """The trainer's loggers (``trainer.logger``, overrides applied); [] when the recipe cannot be read."""
    try:
        value = recipe_value(load_recipe(Path(recipe)), parse_overrides(list(overrides)), "trainer.logger", [])
    except (InputError, RunError, OSError, ValueError):
        return []
    if isinstance(value, str):
        value = [x.strip().strip("'\"") for x in value.strip().strip("[]").split(",") if x.strip()]
    return [str(x) for x in value or []]


def wandb_run_id(run_dir: Path) -> str:
    """A wandb run id of the run folder: its name (letters, digits, ``_ -``) and a hash of its full path.

    >>> wandb_run_id(Path("/scratch/me/runs/qwen3vl_8b_grpo"))
    'qwen3vl_8b_grpo-12fad3a54d7a'
    """
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(run_dir).name).strip("-")[:40] or "run"
    return f"{name}-{hashlib.sha256(str(Path(run_dir)).encode()).hexdigest()[:12]}"


def wandb_env(run_dir: Path, loggers: list[str], environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(``WANDB_RUN_ID`` and ``WANDB_RESUME`` for the trainer, a line saying so) when wandb is a logger; a value
    the job's environment already has is kept."""
    if "wandb" not in loggers:
        return {}, ""
    run_id = environ.get("WANDB_RUN_ID") or wandb_run_id(run_dir)
    resume = environ.get("WANDB_RESUME") or "allow"
    return ({"WANDB_RUN_ID": run_id, "WANDB_RESUME": resume},
            f"wandb           every job of this run logs into wandb run {run_id} (WANDB_RUN_ID, WANDB_RESUME={resume})")  # fmt: skip
