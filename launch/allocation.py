"""The allocation of a Slurm job as Slurm holds it, and the options that make the next job of a chain ask for the
same one.

A chained training job submits its successor itself. Retyping the allocation in the script loses what the user
gave on the command line (``sbatch --nodes=3 --gpus-per-node=1 -p gpu -A lab launch/grpo_8b.sh``): the successor
falls back to the script's ``#SBATCH`` header and may not fit the partition at all. So the launch reads the
running job back from Slurm (:func:`read_job`, ``scontrol show job -o JOB``) and submits the next one with
:func:`sbatch_args` of that shape, in the environment :func:`clean_submit_env` leaves.

What ``scontrol show job -o`` gives (checked against Slurm 22.05 in ``tests/launch/test_allocation.py``) and how it
maps to a :class:`JobShape`:

- ``NumNodes=3`` (running) or ``NumNodes=3-3`` / ``2-4`` (pending: min-max): ``nodes``;
- ``NtasksPerN:B:S:C=1:0:*:*``: ``ntasks_per_node`` (0: not given); ``NumTasks``: ``ntasks``, repeated only
  without a per-node count;
- GPUs, first found of ``TresPerNode`` / ``TresPerJob`` / ``TresPerTask`` (``gres:gpu:1``, ``gres/gpu:h100:8``
  in newer releases), else the ``gres/gpu`` total of ``ReqTRES`` / ``TRES`` (``gres/gpu=8``,
  ``gres/gpu:h100=8``), spread evenly over the nodes when it divides;
- ``CPUs/Task``, or ``CpusPerTres=gres:gpu:N`` (``--cpus-per-gpu``); ``MinMemoryNode`` (``--mem``; ``0`` is the
  whole node) or ``MinMemoryCPU`` (``--mem-per-cpu``) or ``MemPerTres=gres:gpu:N`` (``--mem-per-gpu``), all in MiB;
- ``TimeLimit`` as Slurm prints it (``00:05:00``, ``1-00:00:00``, ``UNLIMITED``), which ``sbatch --time`` reads back;
- ``Partition`` (``a,b`` for a job that may run in either), ``Account``, ``QOS``, ``Features`` (the
  ``--constraint``), ``Reservation`` (only printed when set), ``Licenses``, ``ExcNodeList`` (``--exclude``: nodes
  the user keeps away from stay away); ``(null)``, ``N/A`` and empty values are None;
- ``OverSubscribe=NO`` is ``--exclusive`` (``USER``/``MCS``/``TOPO``: ``--exclusive=user`` ...);
- ``--signal``: Slurm does not print a job's warning signal (not in ``scontrol show job``, ``-d`` or ``squeue``),
  so ``signal`` stays None and the script's ``#SBATCH --signal`` header gives it to every job of the chain.

Without accounting (``AccountingStorageType=accounting_storage/none``, the local test Slurm) sbatch accepts
``--qos`` but the job shows ``QOS=(null)``: there is nothing to repeat and nothing lost.

The nodes themselves (``NodeList``) are never repeated: the next job may get, and should accept, other nodes.

Only the standard library (and :class:`core.errors.InputError` for a job that cannot be read).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field

from core.errors import InputError

GPU_ENV = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")
"""This job's GPU lists: Slurm sets (or not) the next job's itself; handing it ours would point it at our GPUs."""
KEEP_SLURM_ENV = ("SLURM_CONF",)
"""``SLURM_*`` variables kept for sbatch: where the cluster's configuration is (on a configless cluster slurmd
sets it for the job, and sbatch on a compute node needs it); it is no state of this job."""

_NULL = {"", "(null)", "N/A", "None", "(none)"}
_JOB_ID_RE = re.compile(r"\d+(?:[_+]\d+)?")
_KEY_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")
_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024**3}


@dataclass(frozen=True)
class JobShape:
    """A job's allocation request as Slurm holds it; a field Slurm leaves empty is None (see the module
    docstring for where each comes from). Two jobs with equal shapes asked for the same allocation
    (``job_id`` is not compared)."""

    job_id: str = field(compare=False)
    nodes: str | None = None
    """``3``, or ``2-4`` for a pending job given a range."""
    ntasks_per_node: int | None = None
    ntasks: int | None = None
    gpus_per_node: int | None = None
    gpus_per_job: int | None = None
    gpus_per_task: int | None = None
    gpu_type: str | None = None
    """``h100`` in ``gres/gpu:h100:8``; None when untyped."""
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    """``--cpus-per-gpu`` (``CpusPerTres=gres:gpu:N``); Slurm then shows ``CPUs/Task=1``, which is not repeated."""
    mem_per_node_mb: int | None = None
    """``--mem`` in MiB; 0 asks for all the memory of each node."""
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    time_limit: str | None = None
    """As Slurm prints it: ``00:05:00``, ``1-00:00:00``, ``UNLIMITED``."""
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    exclusive: str | None = None
    """``""`` for plain ``--exclusive``, ``user`` / ``mcs`` / ``topo``; None: not exclusive."""
    licenses: str | None = None
    exclude: str | None = None
    signal: str | None = None
    """Never printed by Slurm (see the module docstring); the script header carries it."""

    @property
    def time_limit_s(self) -> int | None:
        """The time limit in seconds; None when unlimited or unknown."""
        return parse_time_limit(self.time_limit)


# --------------------------------------------------------------------------------------------- parsing
def parse_fields(line: str) -> dict[str, str]:
    """``Key=value`` pairs of one ``scontrol show ... -o`` line. A value runs up to the next `` Key=``, so a value
    with spaces (a job name, a path) stays whole; the first occurrence of a key wins.

    >>> parse_fields("JobId=7 JobName=my job Partition=a,b TRES=cpu=3,mem=300M")["JobName"]
    'my job'
    """
    out: dict[str, str] = {}
    matches = list(_KEY_RE.finditer(line))
    for m, nxt in zip(matches, [*matches[1:], None], strict=True):
        value = line[m.end() : nxt.start() if nxt else len(line)].strip()
        out.setdefault(m.group(1), value)
    return out


def _value(fields: Mapping[str, str], key: str) -> str | None:
    v = fields.get(key)
    return None if v is None or v.strip() in _NULL else v.strip()


def _int(fields: Mapping[str, str], key: str, job: str, zero_is_none: bool = False) -> int | None:
    v = _value(fields, key)
    if v is None or v == "*":
        return None
    if not v.isdigit():
        raise InputError(f"job {job}: scontrol gives {key}={v!r}, not a whole number")
    n = int(v)
    return None if zero_is_none and n == 0 else n


def parse_memory_mb(text: str, what: str) -> int:
    """Slurm's memory size (``100M``, ``1G``, ``1.50T``, ``512``: MiB without a unit) in MiB, rounded up.

    >>> parse_memory_mb("100M", "x"), parse_memory_mb("2G", "x"), parse_memory_mb("0", "x")
    (100, 2048, 0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)B?\s*", text, re.IGNORECASE)
    if not m:
        raise InputError(f"{what}={text!r}: not a memory size like 100M or 2G")
    mib = float(m.group(1)) * _MEM_UNITS[(m.group(2) or "M").upper()]
    return int(-(-mib // 1))


def parse_time_limit(text: str | None) -> int | None:
    """Slurm's time limit (``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``) in seconds;
    None for ``UNLIMITED``/``INFINITE``/``Partition_Limit`` or nothing.

    >>> parse_time_limit("1-00:00:00"), parse_time_limit("00:05:00"), parse_time_limit("UNLIMITED")
    (86400, 300, None)
    """
    if text is None or text.strip() in _NULL or text.strip().upper() in ("UNLIMITED", "INFINITE", "PARTITION_LIMIT"):
        return None
    t = text.strip()
    days = 0
    if "-" in t:
        d, _, t = t.partition("-")
        if not d.isdigit():
            raise InputError(f"time limit {text!r}: not like 1-00:00:00")
        days = int(d)
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise InputError(f"time limit {text!r}: not like 1-00:00:00 or 00:05:00")
    nums = [int(p) for p in parts]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, mi, s = (nums + [0, 0])[:3]
    elif len(nums) == 3:
        h, mi, s = nums
    elif len(nums) == 2:  # MM:SS
        h, mi, s = 0, nums[0], nums[1]
    else:  # MM
        h, mi, s = 0, nums[0], 0
    return ((days * 24 + h) * 60 + mi) * 60 + s


def _gres_gpus(text: str | None) -> tuple[int, str | None] | None:
    """GPUs in a ``TresPer*`` value (``gres:gpu:2``, ``gres/gpu:h100:8``, several comma-separated items add up);
    None when it names no GPU."""
    if not text:
        return None
    total, types, found = 0, set(), False
    for item in text.split(","):
        m = re.fullmatch(r"\s*gres[:/]gpu(?::([^:=,\s]+))?(?::(\d+))?\s*", item)
        if not m:
            continue
        gtype, count = m.group(1), m.group(2)
        if count is None and gtype is not None and gtype.isdigit():  # gres:gpu:2
            gtype, count = None, gtype
        found = True
        total += int(count) if count is not None else 1
        types.add(gtype)
    if not found:
        return None
    return total, (types.pop() if len(types) == 1 else None)


def _tres_gpus(text: str | None) -> tuple[int, str | None] | None:
    """The GPU total of a TRES list (``cpu=3,gres/gpu=8,gres/gpu:h100=8``): the untyped count when there is one,
    else the typed counts added up."""
    if not text:
        return None
    untyped, typed = None, {}
    for item in text.split(","):
        m = re.fullmatch(r"\s*gres/gpu(?::([^=,\s]+))?=(\d+)\s*", item)
        if m:
            if m.group(1) is None:
                untyped = int(m.group(2))
            else:
                typed[m.group(1)] = typed.get(m.group(1), 0) + int(m.group(2))
    if untyped is not None:
        return untyped, (next(iter(typed)) if len(typed) == 1 else None)
    if typed:
        return sum(typed.values()), (next(iter(typed)) if len(typed) == 1 else None)
    return None


def _nodes(text: str | None, job: str) -> tuple[str | None, int | None]:
    if text is None:
        return None, None
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text)
    if not m:
        raise InputError(f"job {job}: scontrol gives NumNodes={text!r}, not a node count")
    lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
    return (str(lo) if lo == hi else f"{lo}-{hi}"), lo


def _exclusive(text: str | None) -> str | None:
    return {"NO": "", "USER": "user", "MCS": "mcs", "TOPO": "topo"}.get((text or "").upper())


def shape_from_fields(fields: Mapping[str, str], job: str = "?") -> JobShape:
    """A :class:`JobShape` from the fields of one ``scontrol show job -o`` line (see the module docstring)."""
    nodes, n_min = _nodes(_value(fields, "NumNodes"), job)
    per_node_tasks = None
    npn = _value(fields, "NtasksPerN:B:S:C")
    if npn:
        first = npn.split(":")[0]
        if first.isdigit() and int(first) > 0:
            per_node_tasks = int(first)
    gpn = gpj = gpt = None
    gtype = None
    if g := _gres_gpus(_value(fields, "TresPerNode")):
        gpn, gtype = g
    elif g := _gres_gpus(_value(fields, "TresPerJob")):
        gpj, gtype = g
    elif g := _gres_gpus(_value(fields, "TresPerTask")):
        gpt, gtype = g
    else:
        for key in ("ReqTRES", "TRES", "AllocTRES"):
            if g := _tres_gpus(_value(fields, key)):
                total, gtype = g
                if n_min and nodes == str(n_min) and total % n_min == 0:
                    gpn = total // n_min
                else:
                    gpj = total
                break
    mem_node = mem_cpu = mem_gpu = None
    if (v := _value(fields, "MinMemoryCPU")) is not None:
        mem_cpu = parse_memory_mb(v, f"job {job}: MinMemoryCPU")
    elif (v := _value(fields, "MemPerTres")) and (m := re.search(r"gres[:/]gpu:(\d+)", v)):
        mem_gpu = int(m.group(1))
    elif (v := _value(fields, "MinMemoryNode")) is not None:
        mem_node = parse_memory_mb(v, f"job {job}: MinMemoryNode")
    cpus_gpu = None
    if (v := _value(fields, "CpusPerTres")) and (m := re.search(r"gres[:/]gpu:(\d+)", v)):
        cpus_gpu = int(m.group(1))
    time_limit = _value(fields, "TimeLimit")
    if time_limit is not None:
        if time_limit.upper() == "PARTITION_LIMIT":
            time_limit = None
        else:
            try:  # refuse what sbatch could not read back
                parse_time_limit(time_limit)
            except InputError as e:
                raise InputError(f"job {job}: scontrol gives TimeLimit: {e}") from None
    return JobShape(
        job_id=_value(fields, "JobId") or job,
        nodes=nodes,
        ntasks_per_node=per_node_tasks,
        ntasks=None if per_node_tasks else _int(fields, "NumTasks", job, zero_is_none=True),
        gpus_per_node=gpn,
        gpus_per_job=gpj,
        gpus_per_task=gpt,
        gpu_type=gtype,
        cpus_per_task=None if cpus_gpu else _int(fields, "CPUs/Task", job, zero_is_none=True),
        cpus_per_gpu=cpus_gpu,
        mem_per_node_mb=mem_node,
        mem_per_cpu_mb=mem_cpu,
        mem_per_gpu_mb=mem_gpu,
        time_limit=time_limit,
        partition=_value(fields, "Partition"),
        account=_value(fields, "Account"),
        qos=_value(fields, "QOS"),
        constraint=_value(fields, "Features"),
        reservation=_value(fields, "Reservation"),
        exclusive=_exclusive(_value(fields, "OverSubscribe")),
        licenses=_value(fields, "Licenses"),
        exclude=_value(fields, "ExcNodeList"),
    )


def parse_show_job(text: str, job_id: str) -> JobShape:
    """The shape of ``job_id`` from ``scontrol show job -o`` output (an array or heterogeneous job prints one line
    per part: the line whose ``JobId`` is ``job_id`` is taken, else the first)."""
    lines = [ln for ln in text.splitlines() if ln.strip().startswith("JobId=")]
    if not lines:
        raise InputError(f"job {job_id}: scontrol printed no job line")
    chosen = [f for f in map(parse_fields, lines) if f.get("JobId") == job_id]
    return shape_from_fields(chosen[0] if chosen else parse_fields(lines[0]), job_id)


def read_job(job_id: str | int, scontrol: str = "scontrol", timeout: float = 30) -> JobShape:
    """The allocation of Slurm job ``job_id`` as Slurm holds it (``scontrol show job -o``). :class:`InputError`
    naming the job when it is not a job id, scontrol is missing or fails (no such job), or its output cannot
    be read."""
    job = str(job_id).strip()
    if not _JOB_ID_RE.fullmatch(job):
        raise InputError(f"job {job_id!r}: not a Slurm job id (expected digits, e.g. 12345 or 12345_7)")
    try:
        r = subprocess.run([scontrol, "show", "job", "-o", job], capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise InputError(
            f"job {job}: cannot read its allocation: {scontrol!r} not found (is Slurm installed?)"
        ) from None
    except subprocess.TimeoutExpired:
        raise InputError(f"job {job}: {scontrol} show job did not answer within {timeout:g} s") from None
    except OSError as e:
        raise InputError(f"job {job}: cannot run {scontrol!r}: {e.strerror or e}") from None
    if r.returncode != 0:
        why = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
        raise InputError(f"job {job}: {scontrol} show job failed: {why}")
    return parse_show_job(r.stdout, job)


# --------------------------------------------------------------------------------------------- the next job
def _mem(mib: int) -> str:
    return "0" if mib == 0 else (f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M")


def sbatch_args(shape: JobShape) -> list[str]:
    """sbatch options that ask for the allocation ``shape`` describes (one argument each, ``--opt=value``).
    Values Slurm filled in from defaults are repeated too (harmless: the same defaults); never ``--nodelist``.

    sbatch refuses mutually exclusive options even when one is in the script's ``#SBATCH`` header and the other on
    the command line (``--mem`` / ``--mem-per-cpu`` / ``--mem-per-gpu``; ``--cpus-per-task`` / ``--cpus-per-gpu``).
    A job submitted with a script whose header sets one of them cannot have been given the other, so resubmitting
    the same script with these options never meets that conflict."""
    out: list[str] = []
    if shape.nodes:
        out.append(f"--nodes={shape.nodes}")
    if shape.ntasks_per_node:
        out.append(f"--ntasks-per-node={shape.ntasks_per_node}")
    elif shape.ntasks:
        out.append(f"--ntasks={shape.ntasks}")
    gtype = f"{shape.gpu_type}:" if shape.gpu_type else ""
    if shape.gpus_per_node is not None:
        out.append(f"--gpus-per-node={gtype}{shape.gpus_per_node}")
    elif shape.gpus_per_job is not None:
        out.append(f"--gpus={gtype}{shape.gpus_per_job}")
    elif shape.gpus_per_task is not None:
        out.append(f"--gpus-per-task={gtype}{shape.gpus_per_task}")
    if shape.cpus_per_gpu:
        out.append(f"--cpus-per-gpu={shape.cpus_per_gpu}")
    elif shape.cpus_per_task:
        out.append(f"--cpus-per-task={shape.cpus_per_task}")
    if shape.mem_per_cpu_mb is not None:
        out.append(f"--mem-per-cpu={_mem(shape.mem_per_cpu_mb)}")
    elif shape.mem_per_gpu_mb is not None:
        out.append(f"--mem-per-gpu={_mem(shape.mem_per_gpu_mb)}")
    elif shape.mem_per_node_mb is not None:
        out.append(f"--mem={_mem(shape.mem_per_node_mb)}")
    for opt, value in (
        ("--time", shape.time_limit),
        ("--partition", shape.partition),
        ("--account", shape.account),
        ("--qos", shape.qos),
        ("--constraint", shape.constraint),
        ("--reservation", shape.reservation),
        ("--licenses", shape.licenses),
        ("--exclude", shape.exclude),
        ("--signal", shape.signal),
    ):
        if value:
            out.append(f"{opt}={value}")
    if shape.exclusive is not None:
        out.append(f"--exclusive={shape.exclusive}" if shape.exclusive else "--exclusive")
    return out


def srun_cpu_args(env: Mapping[str, str] | None = None) -> list[str]:
    """``["--cpus-per-task=N"]`` for every ``srun`` step of a job started with ``--cpus-per-task=N`` (since Slurm
    22.05 srun no longer reads ``SLURM_CPUS_PER_TASK``, so a step's task is laid out, and bound, with one CPU);
    ``[]`` outside a job or when the job did not set it."""
    env = os.environ if env is None else env
    raw = (env.get("SLURM_CPUS_PER_TASK") or "").strip()
    if not raw:
        return []
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"SLURM_CPUS_PER_TASK={raw!r}: expected a whole number >= 1")
    return [f"--cpus-per-task={int(raw)}"]


def clean_submit_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for ``sbatch`` of the next job: this one's, without its ``SLURM_*`` variables (they would
    leak into the next job, e.g. a stale ``SLURM_RESTART_COUNT``; :data:`KEEP_SLURM_ENV` excepted) and without its
    GPU lists (:data:`GPU_ENV`). The same rule as ``qc_sbatch_clean`` in ``slurm/common.sh``, except that
    ``SLURM_CONF`` is kept."""
    env = os.environ if env is None else env
    return {
        k: v for k, v in env.items() if not (k.startswith("SLURM_") and k not in KEEP_SLURM_ENV) and k not in GPU_ENV
    }
