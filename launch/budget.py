"""What a training run needs before it starts: host memory per node, checkpoint disk, and a ``save_freq`` that fits
the stop grace.

The 8B recipe's numbers are in docs/cluster.md, "Memory and disk budgets"; the GPU memory is :mod:`launch.budget_gpu`.
Units: GiB (2**30 bytes), what Slurm's ``G`` means. Every number comes from EasyR1 at b44b311 (``verl/``) or a
constant below:

- Host memory of the node with rank 0 and both servers (on several nodes an upper bound for each) is
  ``always + max(start, training)`` plus :data:`MEMORY_MARGIN`. With ``enable_rank0_init`` rank 0 alone loads the
  policy on the CPU in ``fsdp.torch_dtype`` (fp32 for the actor) and FSDP moves the shards to the GPUs before vLLM
  starts, so that copy (``start``) never meets vLLM's. ``sleep(level=1)`` keeps each engine's weights in host memory;
  ``save_checkpoint`` stages each rank's model and optimizer shards on the CPU (``get_state_dict(cpu_offload=True)``);
  the actor keeps its share of the batch's ``pixel_values`` on the CPU for the whole update; vLLM preprocesses every
  request of a ``generate`` call (a rollout share, or one validation batch: never both) before it schedules any.
- A checkpoint: every rank's model shard, ``optim`` (AdamW's two fp32 moments of the *trainable* parameters, all of
  them without LoRA: an upper bound) and ``extra_state``; rank 0 adds ``huggingface/`` and, with LoRA, the adapter as
  safetensors; then ``dataloader.pt``. With LoRA the base is bf16 and the adapter fp32. ``remove_obsolete_ckpt``
  prunes to ``save_limit - 1`` before the next save, and with ``save_limit`` 1 the best step stays besides the newest.
- Step time: the median of EasyR1's ``timing_s/step`` (checkpoint and validation included) keeps rare long steps out.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.budget")

import argparse
import getpass
import json
import math
import os
import re
import shutil
import stat
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InputError
from data_prep.validate import bounded_float, finite, nonneg_int, positive_float, positive_int
from launch import budget_gpu, settings
from launch.budget_gpu import GIB, GPUS, Part, ServerPlan, find_gpu, params_b_from_id, setting, text_table
from launch.merge import read_log_records
from launch.run_files import CHECKPOINT_TRACKER, INCOMPLETE_DIR, STEP_DIR_RE
from recipes.reader import RecipeError, dig, load_recipe

# ----------------------------------------------------------------------------- assumptions (see the docstring)
MEMORY_MARGIN = 0.15  # allocator slack, a worker given more prompts by _balance_batch, what no part names
PIXEL_VALUE_BYTES = 24  # Qwen-VL pixel_values per image pixel: float32 x 3 channels x temporal_patch_size 2
DATALOADER_WORKERS = 8  # num_workers of EasyR1's DataLoader; each holds one prompt's pixel_values while it tokenizes
PROCESS_GIB = 4.0  # one Python process with torch and CUDA (a Ray GPU worker, a reward actor)
LOADER_PROCESS_GIB = 1.0  # one data loader worker (no CUDA)
RAY_BASE_GIB = 4.0  # the trainer's driver, Ray's GCS, raylet and dashboard together
REWARD_ACTORS = 2  # EasyR1 starts two reward managers (train and validation) as Ray actors
SERVER_GIB = 8.0  # one vllm serve (API server + engine core); its weights are mmapped page cache, not counted
EXTRA_STATE_BYTES = 64 * 1024  # extra_state_*.pt: LR scheduler and RNG states
HF_FILES_BYTES = 20 * 10**6  # actor/huggingface/: config and processor files (Qwen's tokenizer.json ~11 MB)
DATALOADER_BYTES = 10**6  # dataloader.pt: the StatefulDataLoader's state
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
VAL_SIZE_DEFAULT = 83
"""Questions of the recipe's held-out set (``data.val_files``): a ``data.val_batch_size`` of -1 queues them all."""
STEP_SECONDS_ESTIMATES = {"qwen3-vl-8b-instruct": 1400.0}
"""Seconds a GRPO step takes before any is measured, by model name: the 8B recipe on H200 takes 900-1,400 s for
20-30k-token prompts (issue 31's estimate); the upper end, so the first ``save_freq`` errs towards more checkpoints."""
QUOTA_TIMEOUT_S = 30  # a hung NFS server must not hang the job


def model_params(model: str, params_b: float | None = None) -> tuple[int, str]:
    """(parameters, where the number comes from): ``params_b``, else a known model's published count, else its id's."""
    if params_b is not None:
        return round(params_b * 1e9), f"--params-b {params_b:g}"
    if known := budget_gpu.KNOWN_SHAPES.get(budget_gpu.model_name(model)):
        return known.params, f"published count of {model}"
    if (b := params_b_from_id(model)) is not None:
        return round(b * 1e9), f"{b:g}B from the model id {model}"
    raise InputError(f"cannot tell the parameter count of model {model!r}: pass --params-b (billions)")


# --------------------------------------------------------------------------------------------- checkpoints
@dataclass(frozen=True)
class CheckpointSize:
    """Bytes of one saved step (``global_step_N/``), by file kind; ``small``: ``huggingface/`` and ``dataloader.pt``."""

    model: int
    optim: int
    extra: int
    lora_adapter: int
    small: int

    @property
    def total(self) -> int:
        return self.model + self.optim + self.extra + self.lora_adapter + self.small


def checkpoint_bytes(
    params: int, lora_params: int = 0, world_size: int = 1, save_model_only: bool = False, actor_dtype_bytes: int = 4
) -> CheckpointSize:
    """One EasyR1 checkpoint of a policy of ``params`` parameters (``lora_params`` > 0: bf16 base, fp32 adapter)."""
    model = params * 2 + lora_params * 4 if lora_params > 0 else params * actor_dtype_bytes
    trainable = lora_params if lora_params > 0 else params
    optim = 0 if save_model_only else trainable * 8
    extra = 0 if save_model_only else EXTRA_STATE_BYTES * world_size
    return CheckpointSize(model, optim, extra, max(lora_params, 0) * 4, HF_FILES_BYTES + DATALOADER_BYTES)


def kept_checkpoints(save_limit: int | None, max_steps: int | None, save_freq: int) -> int:
    """How many step folders the run holds at most (``save_limit`` 1 keeps the best besides the newest)."""
    if save_limit is not None and save_limit > 0:
        return max(save_limit, 2)
    if max_steps is None:
        raise InputError("trainer.save_limit keeps every checkpoint: the count needs max_steps (pass --max-steps)")
    return max(1, math.ceil(max_steps / save_freq)) if save_freq > 0 else 1


# --------------------------------------------------------------------------------------------- disk and quota
@dataclass(frozen=True)
class Quota:
    """Bytes ``left`` of the user's block quota (None: unknown or no limit) and a ``note``: what was read, or why not."""

    left: int | None
    note: str


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def mount_of(path: str | Path) -> tuple[Path, str, str]:
    """(mount point, file-system type, source) of the file system holding ``path`` (``/proc/mounts``)."""
    mount = _existing(Path(path)).resolve()
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        mounts = Path("/proc/mounts").read_text(errors="replace")
    except OSError:
        mounts = ""
    fstype = source = ""
    for line in mounts.splitlines():  # the last entry for a mount point is the one on top
        f = line.split()
        if len(f) >= 3 and f[1].replace("\\040", " ") == str(mount):
            source, fstype = f[0], f[2]
    return mount, fstype, source


def parse_quota(text: str, mount: str = "", source: str = "") -> tuple[int, int, int] | None:
    """(used, soft limit, hard limit) in KiB from ``lfs quota``, ``quota -w`` or ``mmlsquota --block-size 1K``: the
    row of ``mount`` or ``source`` when there are several, else the first; a name wrapped onto its own line is joined
    to the next; ``*`` (over quota) is ignored. None: no row (no quota)."""
    rows, carry = [], ""
    for line in text.splitlines():
        tok = f"{carry} {line}".split()
        carry = ""
        if not tok or tok[0] in ("Disk", "Filesystem", "|") or tok[0].startswith(("Block", "quota:")):
            continue
        if len(tok) == 1:
            carry = tok[0]
            continue
        nums = [int(m.group(1)) for t in tok[1:] if (m := re.match(r"(\d+)\*?$", t))]
        if len(nums) >= 3:
            rows.append((tok[0], *nums[:3]))
    mine = [r for r in rows if r[0] in (mount, source)] or rows
    return mine[0][1:] if mine else None


def read_quota(path: str | Path, user: str | None = None, fstype: str | None = None, which=shutil.which) -> Quota:
    """The user's quota on the file system of ``path``: ``lfs quota -u USER MOUNT`` on Lustre, ``mmlsquota`` on GPFS,
    ``quota -w -f MOUNT`` elsewhere (``fstype`` None: read from ``/proc/mounts``). A command missing, failing or
    printing no limit: ``left`` None and a note that says so."""
    mount, found_type, source = mount_of(path)
    fstype = found_type if fstype is None else fstype
    user = user or os.environ.get("USER") or getpass.getuser()
    argv = {
        "lustre": ["lfs", "quota", "-u", user, str(mount)],
        "gpfs": ["mmlsquota", "-u", user, "--block-size", "1K"],
    }.get(fstype, ["quota", "-w", "-f", str(mount)])
    cmd = " ".join(argv)
    if not which(argv[0]):
        return Quota(None, f"quota unknown: no {argv[0]} command on this node ({fstype or 'unknown'} file system "
                           f"{mount}); only its free space is checked")  # fmt: skip
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=QUOTA_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Quota(None, f"quota unknown: `{cmd}` failed ({type(e).__name__}); only free space is checked")
    row = parse_quota(r.stdout, str(mount), source)
    if row is None and r.returncode != 0 and not r.stdout.strip():
        why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
        return Quota(None, f"quota unknown: `{cmd}`: {why}; only free space is checked")
    limits = [x for x in row[1:] if x > 0] if row else []
    if not limits:
        return Quota(None, f"no quota for {user} on {mount} (`{cmd}`{': no limit set' if row else ''})")
    used, limit = row[0], min(limits)
    left = max(0, limit - used) * 1024
    return Quota(left, f"quota {limit * 1024 / GIB:.1f} GiB, {used * 1024 / GIB:.1f} GiB used, "
                       f"{left / GIB:.1f} GiB left for {user} on {mount} (`{cmd}`)")  # fmt: skip


def check_disk(run_dir: str | Path, need_bytes: int, margin: float = 0.1, what: str = "",
               quota: Quota | None = None) -> tuple[str, str]:  # fmt: skip
    """(level, message) for ``need_bytes`` more on the file system of ``run_dir``: ``refuse`` when they do not fit
    the smaller of its free space and what the quota leaves (:func:`read_quota` when ``quota`` is None), ``warn``
    under ``margin`` x need to spare, else ``ok``; ``what`` explains the need (``5 checkpoints x 18.3 GiB``)."""
    where = _existing(Path(run_dir))
    free = shutil.disk_usage(where).free
    quota = read_quota(where) if quota is None else quota
    avail = free if quota.left is None else min(free, quota.left)
    detail = f" ({what})" if what else ""
    text = (f"need {need_bytes / GIB:.1f} GiB{detail}; free {free / GIB:.1f} GiB on {mount_of(where)[0]} (holding "
            f"{run_dir}); {quota.note}")  # fmt: skip
    by_quota = quota.left is not None and quota.left < free
    fix = "the quota is the limit: free space under it or ask for more" if by_quota else "free space"
    if avail < need_bytes:
        return "refuse", f"not enough disk: {text}; {fix} or lower trainer.save_limit"
    if avail < need_bytes * (1 + margin):
        return "warn", f"disk nearly full: {text}, less than {margin:.0%} to spare{' under the quota' * by_quota}"
    return "ok", text


def _tree_bytes(path: Path) -> int:
    """Bytes of the regular files at or under ``path`` (links are not followed and count nothing)."""
    if path.is_symlink():
        return 0
    files = [Path(root) / n for root, _, names in os.walk(path) for n in names] if path.is_dir() else [path]
    total = 0
    for f in files:
        try:
            st = f.lstat()
        except OSError:
            continue
        total += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return total


@dataclass
class Pruned:
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    freed_bytes: int = 0


_INCOMPLETE_RE = re.compile(rf"(?:global_step_\d+|{re.escape(CHECKPOINT_TRACKER)})\..+")
_PRUNING = ".pruning-"


def prune_incomplete(ckpt_dir: str | Path, keep: int = 1) -> Pruned:
    """Remove what :func:`launch.checkpoints.repair_checkpoints` moved into ``ckpt_dir/incomplete/`` but the
    ``keep`` newest step folders (by the time they were moved: the newest torn save stays for a post-mortem); nothing
    else there is touched. Each entry is renamed to ``.pruning-<name>`` first (atomic: no reader sees half a folder
    under its name), then deleted; an interrupted prune's leftovers go too. Links are removed, never followed."""
    inc = Path(ckpt_dir) / INCOMPLETE_DIR
    out = Pruned()
    if not inc.is_dir():
        return out
    entries = [p for p in inc.iterdir() if _INCOMPLETE_RE.fullmatch(p.name)]
    steps = sorted((p for p in entries if p.name.startswith("global_step_") and not p.is_symlink() and p.is_dir()),
                   key=lambda p: p.lstat().st_mtime, reverse=True)  # fmt: skip
    out.kept = sorted(p.name for p in steps[: max(keep, 0)])
    victims = [p for p in entries if p.name not in out.kept]
    victims += [p for p in inc.iterdir() if p.name.startswith(_PRUNING)]  # an interrupted prune's leftovers
    for p in sorted(victims):
        out.freed_bytes += _tree_bytes(p)
        name = p.name.removeprefix(_PRUNING)
        doomed = inc / f"{_PRUNING}{name}"
        if p != doomed:
            os.replace(p, doomed)
        if doomed.is_dir() and not doomed.is_symlink():
            shutil.rmtree(doomed)
        else:
            doomed.unlink()
        out.removed.append(name)
    return out


# --------------------------------------------------------------------------------------------- step time
def _step_times(path: Path) -> dict[int, float]:
    """Step -> ``timing_s/step`` (flat or EasyR1's ``{"timing_s": {"step": ...}}``) of a log's records (torn lines
    left out; a rerun step: its last record)."""
    out = {}
    for row in read_log_records(path)[0] if path.is_file() else []:
        t = row.get("timing_s/step")
        if t is None and isinstance(row.get("timing_s"), dict):
            t = row["timing_s"].get("step")
        ok = isinstance(t, (int, float)) and not isinstance(t, bool) and math.isfinite(t) and t > 0
        if ok and isinstance(row.get("step"), int):
            out[row["step"]] = float(t)
    return out


def measured_step_seconds(run_dir: str | Path) -> float | None:
    """The median ``timing_s/step`` of the run's steps (``run_log.jsonl``, else the segments' logs); None before one."""
    run_dir = Path(run_dir)
    times = _step_times(run_dir / "run_log.jsonl")
    if not times:
        for log in sorted((run_dir / "segments").glob("*/experiment_log.jsonl")):
            times.update(_step_times(log))
    return statistics.median(times.values()) if times else None


def step_seconds(run_dir: str | Path, model: str) -> tuple[float | None, str]:
    """(seconds a step takes, where that comes from): measured, else :data:`STEP_SECONDS_ESTIMATES`, else None."""
    measured = measured_step_seconds(run_dir)
    if measured is not None:
        return measured, "measured: the median timing_s/step of this run's logged steps"
    if (est := STEP_SECONDS_ESTIMATES.get(budget_gpu.model_name(str(model)))) is not None:
        return est, f"estimated for {model} on H200 before any step is measured (launch.budget.STEP_SECONDS_ESTIMATES)"
    return None, f"no step measured yet and no estimate for {model}"


def save_freq_check(save_freq: int, step_s: float, grace_s: float) -> str | None:
    """A warning naming the largest ``save_freq`` that fits when ``save_freq`` steps outlast the stop grace (after
    SIGUSR1 the launch waits that long for a checkpoint: later, up to ``save_freq`` steps are lost at each requeue)."""
    if step_s <= 0 or not math.isfinite(step_s):
        raise InputError(f"step time {step_s!r}: expected a positive number of seconds")
    fits = math.floor(grace_s / step_s)
    if save_freq <= 0:
        return (f"trainer.save_freq={save_freq}: checkpoints only at the end of training, so every stop loses the "
                f"job's steps; trainer.save_freq={max(fits, 1)} fits the {grace_s:g} s stop grace")  # fmt: skip
    if save_freq * step_s <= grace_s:
        return None
    head = (f"trainer.save_freq={save_freq} x {step_s:.0f} s per step = {save_freq * step_s:.0f} s exceeds the "
            f"stop grace of {grace_s:g} s (QUOTECITE_STOP_GRACE): a job stopped after SIGUSR1 may lose up to "
            f"{save_freq} steps at every requeue; ")  # fmt: skip
    if fits < 1:
        return head + "even one step is longer than the grace: raise QUOTECITE_STOP_GRACE and the --signal offset"
    return head + f"trainer.save_freq={fits} fits"


@dataclass(frozen=True)
class SaveFreqPlan:
    """``override``: ``trainer.save_freq=N`` for the trainer ("" when the value stands); ``note``: the dry run's line."""

    override: str
    note: str
    warning: bool = False


def _secs(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def plan_save_freq(save_freq: Any, step_s: float | None, source: str, grace_s: float, user_set: bool,
                   measured: bool = True) -> SaveFreqPlan:  # fmt: skip
    """Lower ``trainer.save_freq`` to ``floor(grace / step)`` when ``save_freq`` x ``step_s`` is past ``grace_s``; a
    value the user set is kept with a warning; one *measured* step longer than the grace is refused (an estimated
    one, or the user's value: a warning). No step time: nothing to say."""
    head = "save_freq       "
    if step_s is None:
        return SaveFreqPlan("", "")
    try:
        freq = int(save_freq) if save_freq is not None and not isinstance(save_freq, bool) else -1
    except (TypeError, ValueError):
        raise InputError(f"trainer.save_freq={save_freq!r}: expected a whole number of steps") from None
    if freq > 0 and freq * step_s <= grace_s:
        return SaveFreqPlan("", f"{head}trainer.save_freq={freq} x {_secs(step_s)} s per step ({source}) = "
                                f"{_secs(freq * step_s)} s fits the {grace_s:g} s stop grace")  # fmt: skip
    fits = math.floor(grace_s / step_s)
    if user_set or (fits < 1 and not measured):
        whose = f"your trainer.save_freq={freq} is kept" if user_set else "nothing is changed before it is measured"
        warning = save_freq_check(freq, step_s, grace_s)
        return SaveFreqPlan("", f"{head}warning: {warning} (step time {source}); {whose}", warning=True)
    if fits < 1:
        raise InputError(f"one training step ({_secs(step_s)} s, {source}) is longer than the stop grace of "
                         f"{grace_s:g} s (QUOTECITE_STOP_GRACE): no checkpoint can fall within it after SIGUSR1; raise "
                         "QUOTECITE_STOP_GRACE and the sbatch --signal offset above the step time")  # fmt: skip
    was = f"{freq} (checkpoints only at the end)"
    if freq > 0:
        was = f"{freq} x {_secs(step_s)} s = {_secs(freq * step_s)} s"
    return SaveFreqPlan(f"trainer.save_freq={fits}", f"{head}trainer.save_freq={was} is past the {grace_s:g} s stop "
                        f"grace (step time {source}): the job passes trainer.save_freq={fits} "
                        f"({_secs(fits * step_s)} s between checkpoints); set trainer.save_freq yourself to keep "
                        "another")  # fmt: skip


# --------------------------------------------------------------------------------------------- host memory
@dataclass
class Estimate:
    """Host memory of one node: its parts and the phase of each."""

    parts: list[Part]
    phases: list[str]

    def by_phase(self) -> dict[str, float]:
        return {ph: sum(g for (_, g, _), p in zip(self.parts, self.phases, strict=True) if p == ph)
                for ph in ("always", "start", "training")}  # fmt: skip

    @property
    def peak_gib(self) -> float:
        """``always + max(start, training)`` without the margin."""
        by = self.by_phase()
        return by["always"] + max(by["start"], by["training"])

    @property
    def total_gib(self) -> int:
        """The peak plus the margin, rounded up to a whole GiB."""
        return math.ceil(self.peak_gib * (1 + MEMORY_MARGIN) - 1e-9)

    @property
    def sbatch_mem(self) -> str:
        """The value of ``#SBATCH --mem=``."""
        return f"{self.total_gib}G"

    def table(self) -> str:
        rows = [
            (part, f"{gib:.1f}", phase, why) for (part, gib, why), phase in zip(self.parts, self.phases, strict=True)
        ]
        by = self.by_phase()
        peak = (f"peak = always {by['always']:.1f} + max(start {by['start']:.1f}, training {by['training']:.1f}) = "
                f"{self.peak_gib:.1f} GiB; + {MEMORY_MARGIN:.0%} margin -> --mem={self.sbatch_mem}")  # fmt: skip
        return "\n".join([*text_table(("part", "GiB", "phase", "why"), rows, 1), peak])


def plan_val_batch(val_batch_size: Any, rollout_batch_size: Any, user_set: bool) -> tuple[str, str]:
    """(override, note): a ``data.val_batch_size`` of -1 (EasyR1 queues the whole validation set in one generate
    call: about 30 GiB of images an engine for the 8B recipe) or above the rollout batch is bounded to
    ``data.rollout_batch_size``; a value the user set is kept (the memory check refuses it when it cannot fit)."""
    try:
        vb, rb = int(val_batch_size if val_batch_size is not None else -1), int(rollout_batch_size)
    except (TypeError, ValueError):
        raise InputError(f"data.val_batch_size={val_batch_size!r} / data.rollout_batch_size="
                         f"{rollout_batch_size!r}: expected whole numbers") from None  # fmt: skip
    head = "validation      "
    what = "-1 (the whole validation set in one batch)" if vb < 0 else str(vb)
    if user_set:
        return "", f"{head}data.val_batch_size={what} is yours: kept (counted in the host-memory budget)"
    if vb < 0 or vb > rb:
        return (f"data.val_batch_size={rb}", f"{head}data.val_batch_size={what} would queue every question's "
                f"page images in vLLM at once (host memory): the job passes data.val_batch_size={rb}, the rollout "
                "batch, so validation holds no more than a rollout; set data.val_batch_size yourself to keep another")  # fmt: skip
    return "", ""


def job_memory_mib(environ: dict[str, str] | Any) -> int | None:
    """The job's memory per node in MiB (``SLURM_MEM_PER_NODE``); None when unknown or ``--mem=0`` (the whole node)."""
    v = str(environ.get("SLURM_MEM_PER_NODE", "")).strip()
    return int(v) if v.isdigit() and int(v) > 0 else None


def check_host_memory(est: Estimate, mem_mib: int | None) -> tuple[str, str]:
    """(level, message): ``refuse`` when the peak (without the margin) exceeds the job's memory, ``warn`` when only
    the margin does not fit, ``ok`` else or when it is unknown."""
    peak = est.peak_gib
    text = f"{peak:.1f} GiB at peak, --mem={est.sbatch_mem} with the {MEMORY_MARGIN:.0%} margin"
    if mem_mib is None:
        return "ok", f"{text} (the job's memory is not known here: no SLURM_MEM_PER_NODE)"
    have = mem_mib / 1024
    if peak > have:
        return "refuse", (f"{text}, past the job's {have:.0f} GiB (SLURM_MEM_PER_NODE): sbatch --mem="
                          f"{est.sbatch_mem}, or lower data.val_batch_size / data.rollout_batch_size / "
                          "worker.rollout.limit_images (python -m launch.budget memory shows the parts)")  # fmt: skip
    if est.total_gib > have:
        return "warn", f"{text}: the job's {have:.0f} GiB leaves less than the margin"
    return "ok", f"{text}; the job has {have:.0f} GiB"


# --------------------------------------------------------------------------------------------- the recipe
@dataclass(frozen=True)
class RecipePlan:
    """What the estimates read from a recipe."""

    model: str
    params: int
    params_source: str
    lora_params: int
    n_gpus_per_node: int
    nnodes: int
    save_freq: int
    save_limit: int | None
    max_steps: int | None
    ckpt: CheckpointSize
    estimate: Estimate


def _dtype(recipe: dict, key: str, default: str) -> int:
    v = str(dig(recipe, key, None) or default).lower()
    if v not in DTYPE_BYTES:
        raise InputError(f"recipe {key}={v!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[v]


def plan_from_recipe(
    path: str | Path,
    overrides: list[str] | None = None,
    params_b: float | None = None,
    n_gpus_per_node: int | None = None,
    nnodes: int | None = None,
    max_steps: int | None = None,
    judge_replicas: int = 1,
    val_size: int | None = None,
) -> RecipePlan:
    """Host memory and checkpoint size for a recipe and its EasyR1 ``key=value`` overrides; ``val_size``: the
    validation set's questions, for ``data.val_batch_size: -1`` (default :data:`VAL_SIZE_DEFAULT`)."""
    recipe, model = budget_gpu.load_policy_recipe(path, overrides)
    params, source = model_params(model, params_b)
    rank = setting(recipe, "worker.actor.model.lora.rank", 0)
    lora = 0
    if rank > 0:
        shape = budget_gpu.model_shape(model)
        if shape is None:
            raise InputError(f"model {model!r}: its layer shapes are unknown (needed for the LoRA size); point "
                             "worker.actor.model.model_path at a local copy with its config.json")  # fmt: skip
        lora = shape.lora_params(rank, str(dig(recipe, "worker.actor.model.lora.target_modules", "all-linear")))
    n = n_gpus_per_node or setting(recipe, "trainer.n_gpus_per_node", 8)
    nodes = nnodes or setting(recipe, "trainer.nnodes", 1)
    tensor_parallel = setting(recipe, "worker.rollout.tensor_parallel_size", 2)
    budget_gpu.at_least_1(
        path,
        {
            "trainer.n_gpus_per_node": n,
            "trainer.nnodes": nodes,
            "worker.rollout.tensor_parallel_size": tensor_parallel,
        },
    )
    actor_bytes = _dtype(recipe, "worker.actor.fsdp.torch_dtype", "fp32")
    ckpt = checkpoint_bytes(params, lora, n * nodes, bool(dig(recipe, "trainer.save_model_only", False)), actor_bytes)

    # host memory of the node with rank 0 and the servers (the module docstring says where each part comes from)
    rollout_bytes = _dtype(recipe, "worker.rollout.dtype", "bf16")
    rollout_batch = setting(recipe, "data.rollout_batch_size", 512)
    val_batch = setting(recipe, "data.val_batch_size", -1)
    val_batch = val_batch if val_batch >= 0 else val_size or VAL_SIZE_DEFAULT
    images = setting(recipe, "worker.rollout.limit_images", 0) or 1
    max_pixels = setting(recipe, "data.max_pixels", 4194304)
    world, params_b, state = n * nodes, params / 1e9, ckpt.model + ckpt.optim  # what ranks stage while saving
    page = images * max_pixels * PIXEL_VALUE_BYTES
    pages = f"{images} pages x {max_pixels} px x {PIXEL_VALUE_BYTES} B"
    prompts = math.ceil(rollout_batch / world)
    groups = max(1, world // tensor_parallel)  # each engine of a TP group holds the group's share of the requests
    rollout_q, val_q = math.ceil(rollout_batch / groups), math.ceil(val_batch / groups)
    queued = max(rollout_q, val_q)
    batch = f"a validation batch of {val_batch}" if val_q > rollout_q else f"a rollout batch of {rollout_batch}"
    rows = [
        ("vLLM sleep-mode weights", n * params * rollout_bytes / tensor_parallel / GIB, "training",
         f"{n} engine(s) x {params_b:g}B x {rollout_bytes} B / TP {tensor_parallel} (sleep level 1 keeps "
         "weights in host memory)"),
        ("checkpoint staging", state * n / world / GIB, "training", f"model+optimizer state "
         f"{state / GIB:.1f} GiB x {n}/{world} GPUs (get_state_dict cpu_offload)"),
        ("actor image cache", n * prompts * page / GIB, "training",
         f"{n} worker(s) x {prompts} prompts x {pages} (float32 pixel_values)"),
        ("vLLM queued images", n * queued * page / GIB, "training", f"{n} engine(s) x {queued} prompts ({batch} / "
         f"{groups} engine group(s)) x {pages} (float32 pixel_values of every queued request)"),
        ("data loader", DATALOADER_WORKERS * (page / GIB + LOADER_PROCESS_GIB), "training",
         f"{DATALOADER_WORKERS} workers x (one prompt's pixel_values + {LOADER_PROCESS_GIB:g} GiB process)"),
        ("Ray and trainer processes", RAY_BASE_GIB + (n + REWARD_ACTORS) * PROCESS_GIB, "always",
         f"{RAY_BASE_GIB:g} GiB driver+GCS+raylet, ({n} GPU workers + {REWARD_ACTORS} reward actors) x "
         f"{PROCESS_GIB:g} GiB"),
        ("embedder server", SERVER_GIB, "always", f"vllm serve {SERVER_GIB:g} GiB"),
    ]  # fmt: skip
    if bool(dig(recipe, "worker.actor.fsdp.enable_rank0_init", True)):
        rows.insert(0, ("policy load (rank 0)", params * actor_bytes / GIB, "start",
                        f"{params_b:g}B params x {actor_bytes} B on the CPU (fsdp.enable_rank0_init)"))  # fmt: skip
    if judge_replicas:
        rows.insert(-1, ("judge server(s)", judge_replicas * SERVER_GIB, "always",
                         f"{judge_replicas} x vllm serve {SERVER_GIB:g} GiB (weights mmapped, not counted)"))  # fmt: skip
    return RecipePlan(
        model, params, source, lora, n, nodes,
        save_freq=setting(recipe, "trainer.save_freq", -1),
        save_limit=setting(recipe, "trainer.save_limit", -1),
        max_steps=max_steps if max_steps is not None else setting(recipe, "trainer.max_steps", None),
        ckpt=ckpt,
        estimate=Estimate([(name, gib, why) for name, gib, _, why in rows], [r[2] for r in rows]),
    )  # fmt: skip


def run_disk_check(recipe: str | Path, overrides: list[str], run_dir: str | Path, max_steps: int | None = None,
                   params_b: float | None = None, n_gpus_per_node: int | None = None, nnodes: int | None = None,
                   margin: float = 0.1) -> tuple[str, str]:  # fmt: skip
    """:func:`check_disk` for the checkpoints a run of ``recipe`` will keep in ``run_dir``, less the step folders there."""
    plan = plan_from_recipe(recipe, overrides, params_b, n_gpus_per_node, nnodes, max_steps=max_steps)
    kept = kept_checkpoints(plan.save_limit, plan.max_steps, plan.save_freq)
    ckpt_dir = Path(run_dir) / "checkpoints"
    have = [p for p in (ckpt_dir.iterdir() if ckpt_dir.is_dir() else []) if STEP_DIR_RE.match(p.name)]
    held = sum(_tree_bytes(p) for p in have)
    what = f"{kept} checkpoints x {plan.ckpt.total / GIB:.1f} GiB"
    if held:
        what += f" less {held / GIB:.1f} GiB already in {len(have)} step folder(s)"
    return check_disk(run_dir, max(0, kept * plan.ckpt.total - held), margin, what)


# --------------------------------------------------------------------------------------------- CLI
def _memory(args: argparse.Namespace) -> int:
    plan = plan_from_recipe(args.recipe, args.overrides, args.params_b, args.train_gpus_per_node, args.nnodes,
                            judge_replicas=args.judge_replicas, val_size=args.val_size)  # fmt: skip
    print(plan.estimate.sbatch_mem)
    print(f"# {plan.model}: {plan.params / 1e9:.3f}B params ({plan.params_source}); {plan.n_gpus_per_node} "
          f"trainer GPU(s) per node x {plan.nnodes} node(s); LoRA params {plan.lora_params}")  # fmt: skip
    print(plan.estimate.table())
    return 0


def _disk(args: argparse.Namespace) -> int:
    if args.prune:
        ckpt_dir = Path(args.run_dir) / "checkpoints"
        pruned = prune_incomplete(ckpt_dir, keep=1)
        print(f"pruned {len(pruned.removed)} entr{'y' if len(pruned.removed) == 1 else 'ies'} of "
              f"{ckpt_dir / INCOMPLETE_DIR}: {pruned.freed_bytes} bytes freed")  # fmt: skip
    level, message = run_disk_check(args.recipe, args.overrides, args.run_dir, args.max_steps, args.params_b,
                                    args.train_gpus_per_node, args.nnodes, args.margin)  # fmt: skip
    if level == "ok":
        print(f"ok: {message}")
    else:
        print(f"{'error' if level == 'refuse' else 'warning'}: {message}", file=sys.stderr)
    return 3 if level == "refuse" else 0


def _save_freq(args: argparse.Namespace) -> int:
    save_freq = args.save_freq
    if save_freq is None:
        if not args.recipe:
            raise InputError("save-freq: pass --save-freq or --recipe")
        try:
            save_freq = setting(load_recipe(args.recipe), "trainer.save_freq", -1)
        except RecipeError as e:
            raise InputError(str(e)) from None
    step_s = measured_step_seconds(args.run_dir)
    if step_s is None:
        print(f"no step time measured yet in {args.run_dir} (no timing_s/step in its logs)")
    elif warning := save_freq_check(save_freq, step_s, args.grace):
        print(f"warning: {warning}", file=sys.stderr)
    else:
        print(f"ok: save_freq={save_freq} x {step_s:.0f} s per step fits the {args.grace:g} s stop grace")
    return 0


def _gpu(args: argparse.Namespace) -> int:
    servers = ServerPlan(judge_util=args.judge_util, embed_util=args.embed_util, serve_gpus=args.serve_gpus,
                         judge_replicas=min(args.judge_replicas, args.serve_gpus))  # fmt: skip
    b = budget_gpu.budget_from_recipe(args.recipe, args.overrides, find_gpu(args.gpu), args.train_gpus, servers)
    print(json.dumps(b.to_json(), indent=1) if args.json else b.table())
    if why := b.refusal():
        print(f"error: {why}", file=sys.stderr)
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.budget", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory", help="host memory per node: the #SBATCH --mem= value, then its parts")
    d = sub.add_parser("disk", help="checkpoint disk use against free space (exit 3 when it cannot fit)")
    g = sub.add_parser("gpu", help="GPU memory per phase and GPU against a GPU kind (exit 3 when a phase cannot fit)")
    s = sub.add_parser("save-freq", help="warn when save_freq x the measured step time exceeds the stop grace")
    for p in (m, d, g):
        p.add_argument("--recipe", required=True, help="EasyR1 recipe YAML (e.g. recipes/qwen3vl_8b_grpo.yaml)")
        p.add_argument("overrides", nargs="*", help="EasyR1 key=value overrides, as the launch passes them")
    for p in (m, d):
        p.add_argument("--params-b", type=positive_float, help="policy parameters in billions (default: the model's)")
        p.add_argument("--train-gpus-per-node", type=positive_int, help="default: trainer.n_gpus_per_node")
        p.add_argument("--nnodes", type=positive_int, help="trainer nodes (default: the recipe's trainer.nnodes)")
    m.add_argument("--judge-replicas", type=nonneg_int, default=1, help="judge servers on the node (default 1)")
    m.add_argument("--val-size", type=positive_int, help="validation questions, for data.val_batch_size -1 "
                   f"(default {VAL_SIZE_DEFAULT}, the recipe's held-out set)")  # fmt: skip
    d.add_argument("--run-dir", required=True, help="the run folder (its checkpoints/ holds the step folders)")
    d.add_argument("--max-steps", type=positive_int, help="needed when trainer.save_limit keeps every checkpoint")
    d.add_argument("--margin", type=bounded_float(0.0, 10.0), default=0.1, help="warn under this spare fraction")
    d.add_argument("--prune", action="store_true", help="first prune checkpoints/incomplete/ (keeps the newest)")
    s.add_argument("--run-dir", required=True)
    s.add_argument("--save-freq", type=int, help="default: the recipe's trainer.save_freq")
    s.add_argument("--recipe", help="recipe to read trainer.save_freq from")
    s.add_argument("--grace", type=finite, default=settings.Run().stop_grace, help="seconds from SIGUSR1 to the stop")
    g.add_argument("--gpu", required=True, help=f"the GPU kind: {', '.join(GPUS)}")
    g.add_argument("--train-gpus", type=positive_int, help="trainer GPUs in all (default: the recipe's "
                   "trainer.n_gpus_per_node x trainer.nnodes)")  # fmt: skip
    servers = ServerPlan()
    for flag, who, default in (("judge", "judge", servers.judge_util), ("embed", "embedder", servers.embed_util)):
        help = f"the {who}'s vLLM share (QUOTECITE_{flag.upper()}_GPU_UTIL; default {default:g})"
        g.add_argument(f"--{flag}-util", type=bounded_float(0.01, 1.0), default=default, help=help)
    g.add_argument("--serve-gpus", type=positive_int, default=1, help="GPUs of the servers (QUOTECITE_SERVE_GPUS)")
    g.add_argument("--judge-replicas", type=positive_int, default=1, help="judge servers (QUOTECITE_JUDGE_REPLICAS)")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    commands = {"gpu": _gpu, "memory": _memory, "disk": _disk, "save-freq": _save_freq}
    try:
        return commands[args.what](args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
