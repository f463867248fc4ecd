"""What a training run needs before it starts: host memory per node, checkpoint disk, and a ``save_freq`` that fits
the stop grace.

``python -m launch.budget memory --recipe recipes/qwen3vl_8b_grpo.yaml`` prints the ``#SBATCH --mem=`` value (the
first line, e.g. ``141G``) and the table of parts it is made of; ``disk --recipe R --run-dir D`` checks the
checkpoints the run will keep against the free space of D's filesystem (exit 3 when they cannot fit; ``--prune``
first clears ``checkpoints/incomplete/``); ``save-freq
--run-dir D`` compares ``save_freq`` x the measured step time with the stop grace; ``gpu --recipe R --gpu h200``
prints the GPU memory per phase and GPU (:mod:`launch.budget_gpu`, exit 3 when a phase cannot fit). Units: GiB
(2**30 bytes), which is what Slurm's ``G`` means.

Every number comes from EasyR1 at b44b311 (read in ``verl/``) or is an assumption named by a constant below.

**Host memory** (:func:`memory_estimate`), for one node that holds the trainer's first rank and both servers (the
one-node layout; on several nodes it is an upper bound for every node). Parts are tagged with the phase they live
in: ``start`` parts are gone before ``training`` parts appear, ``always`` parts stay; the total is
``always + max(start, training)``, plus :data:`MEMORY_MARGIN`, rounded up to a whole GiB.

- *policy load on rank 0* (``start``): with ``worker.actor.fsdp.enable_rank0_init`` (the recipe's setting) global
  rank 0 alone loads the whole policy with ``from_pretrained(device_map="cpu")`` in ``fsdp.torch_dtype``, which
  EasyR1 defaults to fp32 for the actor (``fsdp_workers._build_model_optimizer``): params x 4 bytes. FSDP then moves
  the shards to the GPUs (``sync_module_states``) before ``_build_rollout`` creates vLLM, so this copy and vLLM's
  never coexist. Without rank-0 init every rank loads straight onto its GPU (0 here).
- *vLLM sleep-mode weights* (``training``): every trainer GPU runs one vLLM engine (``vllm_rollout_spmd``,
  ``enable_sleep_mode=True``), put to ``sleep(level=1)`` after each rollout; level 1 backs the weights up in (pinned)
  host memory and drops the KV cache. One copy per engine in ``rollout.dtype`` (bf16 by default: 2 bytes), of
  1/``tensor_parallel_size`` of the model: params x 2 x GPUs / TP per node. With LoRA the engine holds the base
  weights (loaded from the checkpoint) and the adapter; the adapter is counted in the checkpoint part.
- *checkpoint staging* (``training``): ``FSDPCheckpointManager.save_checkpoint`` calls ``get_state_dict(...,
  cpu_offload=True)``: each rank copies its model and optimizer shards to host memory before ``torch.save``; a
  node holds its share (its GPUs / all GPUs) of the model + optimizer state (:func:`checkpoint_bytes`).
- *actor image cache* (``training``): ``FSDPWorker._process_multi_modal_inputs`` keeps the image processor's
  ``pixel_values`` of the worker's share of the batch on the CPU for the whole update: float32, 3 channels x 2
  temporal copies per pixel (:data:`PIXEL_VALUE_BYTES` = 24 bytes per pixel), for ``ceil(data.rollout_batch_size /
  world size)`` prompts of ``rollout.limit_images`` pages of ``data.max_pixels`` pixels each (the caps: the
  balanced share of prompts and the largest pages; ``_balance_batch`` may give one worker more prompts, which the
  margin is for).
- *vLLM queued images* (``training``): vLLM's input processor turns every request of a ``generate`` call into its
  ``pixel_values`` before it schedules any (float32, :data:`PIXEL_VALUE_BYTES` per pixel), so each engine (one per
  trainer GPU; with tensor parallelism each rank of a group holds the group's share) holds the images of its
  share of the rollout batch, ``ceil(data.rollout_batch_size / (world / TP))`` prompts, or of one validation batch
  (``data.val_batch_size``; -1 is the whole validation set, :data:`VAL_SIZE_DEFAULT` questions unless
  ``--val-size``), whichever is larger (the two never coexist). The job bounds -1 to the rollout batch
  (:func:`plan_val_batch`) and refuses a budget whose peak exceeds ``SLURM_MEM_PER_NODE`` (:func:`check_host_memory`).
- *data loader* (``training``): EasyR1's ``create_dataloader`` starts :data:`DATALOADER_WORKERS` workers; each one
  holds one prompt's pixel values while it tokenizes (``RLHFDataset.__getitem__`` runs the processor on every page),
  plus a Python process (:data:`PROCESS_GIB`).
- *Ray and the trainer processes* (``always``): the driver, GCS, raylet and dashboard (:data:`RAY_BASE_GIB`), one
  ``FSDPWorker`` process per trainer GPU and EasyR1's two reward actors (train and validation,
  ``verl/trainer/main.py``), :data:`PROCESS_GIB` each (torch, CUDA's host side, NCCL buffers, the reward's clients).
- *judge / embedder servers* (``always``): each ``vllm serve`` (API server + engine core) :data:`SERVER_GIB`; their
  weights are memory-mapped safetensors (page cache, reclaimable), not counted.

**Checkpoint disk** (:func:`checkpoint_bytes`), per saved step, from ``FSDPCheckpointManager.save_checkpoint`` and
``RayPPOTrainer._save_checkpoint``: every rank writes ``model_world_size_W_rank_R.pt`` (its shard of the full
state dict), ``optim_...pt`` (AdamW's ``exp_avg`` and ``exp_avg_sq``: 8 bytes per *trainable* parameter) and
``extra_state_...pt`` (LR scheduler and RNG states, :data:`EXTRA_STATE_BYTES` per rank); rank 0 adds
``huggingface/`` (config and processor files, :data:`HF_FILES_BYTES`) and, with LoRA, ``lora_adapter/
adapter_model.safetensors`` (the adapter in fp32); then ``dataloader.pt`` (:data:`DATALOADER_BYTES`). With LoRA
(``lora.rank`` > 0) the frozen base weights are cast to bf16 (2 bytes) and only the adapter is trainable (fp32: 4
bytes in the model state, 8 in the optimizer); without, the model is the actor dtype (fp32: 4 bytes) and the
optimizer counts every parameter (an upper bound: a frozen vision tower has no optimizer state).
``save_model_only`` drops the optimizer and extra states. What is available is the smaller of the file system's
free space and what the user's quota leaves (:func:`read_quota`: ``lfs quota`` on Lustre, ``mmlsquota`` on GPFS,
``quota -w`` elsewhere; unknown: free space only, and the dry run says so). The run keeps ``trainer.save_limit`` step folders
(``remove_obsolete_ckpt`` prunes to ``save_limit - 1`` *before* writing the next one; with ``save_limit`` 1 the best
step is kept besides the newest: 2); ``-1``/None keeps all: ``ceil(max_steps / save_freq)`` (the last step is
always saved).

**Step time** (:func:`measured_step_seconds`): EasyR1's ``file`` logger writes one line per step with
``compute_timing_metrics``' ``timing_s/step`` (unflattened: ``{"timing_s": {"step": ...}}``), the whole step,
checkpoint and validation included; the median of the run's steps keeps the rare long ones out. Before any step is
measured, :data:`STEP_SECONDS_ESTIMATES` stands in; :func:`plan_save_freq` lowers ``trainer.save_freq`` to fit the
stop grace.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.budget")

import argparse
import getpass
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
from core.io import read_json
from data_prep.validate import bounded_float, finite, nonneg_int, positive_float, positive_int
from launch import budget_gpu
from launch.merge import read_log_records
from launch.run_files import CHECKPOINT_TRACKER, INCOMPLETE_DIR, STEP_DIR_RE
from recipes.reader import RecipeError, dig, load_recipe

GIB = 2**30

# ----------------------------------------------------------------------------- assumptions (see the docstring)
MEMORY_MARGIN = 0.15
"""Added to the host-memory sum: allocator slack, the uneven share of prompts, what no part names."""
PIXEL_VALUE_BYTES = 24
"""Bytes of Qwen-VL ``pixel_values`` per image pixel: float32 x 3 channels x ``temporal_patch_size`` 2."""
DATALOADER_WORKERS = 8
"""``num_workers`` of EasyR1's training DataLoader (``verl/trainer/data_loader.py``)."""
PROCESS_GIB = 4.0
"""Host memory of one Python process with torch and CUDA (a Ray worker, a reward actor); 1 GiB of it for a data
loader worker (no CUDA), see :data:`LOADER_PROCESS_GIB`."""
LOADER_PROCESS_GIB = 1.0
RAY_BASE_GIB = 4.0
"""The trainer's driver, Ray's GCS, raylet and dashboard together."""
REWARD_ACTORS = 2
"""EasyR1 starts two reward managers (train and validation) as Ray actors."""
SERVER_GIB = 8.0
"""One ``vllm serve`` process pair (API server and engine core) outside its GPU memory."""
EXTRA_STATE_BYTES = 64 * 1024
"""``extra_state_world_size_W_rank_R.pt``: LR scheduler and the CPU/CUDA/numpy/random RNG states."""
HF_FILES_BYTES = 20 * 10**6
"""``actor/huggingface/``: config, generation config, tokenizer and processor files (Qwen's tokenizer.json ~11 MB)."""
DATALOADER_BYTES = 10**6
"""``dataloader.pt``: the StatefulDataLoader's position and sampler state."""
DEFAULT_STOP_GRACE_S = 3000
"""Seconds from SIGUSR1 until the trainer is stopped regardless (``QUOTECITE_STOP_GRACE`` of the launch)."""
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
LORA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelArch:
    """What the estimates need of a model: its parameter count and its language model's linear shapes."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int

    def lora_params(self, rank: int, targets: str = "all-linear") -> int:
        """Parameters of a LoRA adapter of ``rank`` on the language model's linear layers: ``rank x (in + out)``
        per targeted layer (PEFT's ``all-linear`` takes every linear but the LM head; the recipe keeps the vision
        tower out with ``exclude_modules``)."""
        q, kv, h, i = self.heads * self.head_dim, self.kv_heads * self.head_dim, self.hidden, self.intermediate
        shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                  "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip
        if targets.strip() == "all-linear":
            names = list(LORA_LINEARS)
        else:
            names = [t.strip() for t in targets.split(",") if t.strip()]
            unknown = [n for n in names if n not in shapes]
            if unknown:
                raise InputError(f"lora.target_modules: {', '.join(unknown)} not among {', '.join(LORA_LINEARS)}")
        return self.layers * sum(rank * (shapes[n][0] + shapes[n][1]) for n in names)


KNOWN_MODELS = {
    "qwen3-vl-8b-instruct": ModelArch(8_767_123_696, 36, 4096, 12288, 32, 8, 128),
}
"""By the model id's last component, lower case. Qwen3-VL-8B-Instruct: the published 8.77B parameters and its
shapes (``tests/support/tiny_qwen3vl.py``'s ``QWEN3_VL_8B``, counted from transformers in
``tests/eval/test_attention_attrib.py``)."""


# --------------------------------------------------------------------------------------------- models
def params_b_from_id(model: str) -> float | None:
    """The parameter count in billions that a model id carries (``Qwen/Qwen3-VL-8B-Instruct`` -> 8; the larger
    number when there are several, as in ``Qwen3-30B-A3B``); None when it carries none.

    >>> params_b_from_id("Qwen/Qwen3-VL-8B-Instruct"), params_b_from_id("org/llama-3.1-70b"), params_b_from_id("x/y")
    (8.0, 70.0, None)
    """
    name = model.rstrip("/").rsplit("/", 1)[-1]
    found = [float(m.group(1)) for m in re.finditer(r"(?<![\d.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", name)]
    return max(found) if found else None


def model_arch(model: str) -> ModelArch | None:
    """The shapes of ``model``: a local folder's ``config.json`` (``text_config`` for a vision-language model),
    else :data:`KNOWN_MODELS`; None when neither knows it."""
    cfg_path = Path(model) / "config.json"
    if cfg_path.is_file():
        cfg = read_json(cfg_path, "model config")
        text = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
        try:
            heads = int(text["num_attention_heads"])
            hidden = int(text["hidden_size"])
            known = KNOWN_MODELS.get(Path(model).name.lower())
            return ModelArch(
                params=known.params if known else 0,
                layers=int(text["num_hidden_layers"]),
                hidden=hidden,
                intermediate=int(text["intermediate_size"]),
                heads=heads,
                kv_heads=int(text.get("num_key_value_heads", heads)),
                head_dim=int(text.get("head_dim") or hidden // heads),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{cfg_path}: not a transformer config with layer shapes ({e})") from None
    return KNOWN_MODELS.get(model.rstrip("/").rsplit("/", 1)[-1].lower())


def model_params(model: str, params_b: float | None = None) -> tuple[int, str]:
    """(parameters, where the number comes from): ``params_b`` when given, else the known count of the model,
    else the number its id carries; :class:`InputError` when none says."""
    if params_b is not None:
        return round(params_b * 1e9), f"--params-b {params_b:g}"
    arch = model_arch(model)
    if arch and arch.params:
        return arch.params, f"published count of {model}"
    if (b := params_b_from_id(model)) is not None:
        return round(b * 1e9), f"{b:g}B from the model id {model}"
    raise InputError(f"cannot tell the parameter count of model {model!r}: pass --params-b (billions)")


# --------------------------------------------------------------------------------------------- checkpoints
@dataclass(frozen=True)
class CheckpointSize:
    """Bytes of one saved step (``global_step_N/``), by file kind."""

    model: int
    optim: int
    extra: int
    lora_adapter: int
    small: int
    """``huggingface/`` and ``dataloader.pt``."""

    @property
    def total(self) -> int:
        return self.model + self.optim + self.extra + self.lora_adapter + self.small

    @property
    def state(self) -> int:
        """What ranks stage in host memory while saving: model and optimizer shards."""
        return self.model + self.optim


def checkpoint_bytes(
    params: int,
    lora_params: int = 0,
    world_size: int = 1,
    save_model_only: bool = False,
    actor_dtype_bytes: int = 4,
) -> CheckpointSize:
    """One EasyR1 checkpoint of a policy of ``params`` parameters (see the module docstring): with
    ``lora_params`` > 0, bf16 base + fp32 adapter and optimizer state for the adapter only."""
    if lora_params > 0:
        model = params * 2 + lora_params * 4
        trainable = lora_params
        adapter = lora_params * 4
    else:
        model = params * actor_dtype_bytes
        trainable = params
        adapter = 0
    optim = 0 if save_model_only else trainable * 8
    extra = 0 if save_model_only else EXTRA_STATE_BYTES * world_size
    return CheckpointSize(model, optim, extra, adapter, HF_FILES_BYTES + DATALOADER_BYTES)


def kept_checkpoints(save_limit: int | None, max_steps: int | None, save_freq: int) -> int:
    """How many step folders the run holds at most (see the module docstring)."""
    if save_limit is not None and save_limit > 0:
        return max(save_limit, 2) if save_limit == 1 else save_limit
    if max_steps is None:
        raise InputError("trainer.save_limit keeps every checkpoint: the count needs max_steps (pass --max-steps)")
    return max(1, math.ceil(max_steps / save_freq)) if save_freq > 0 else 1


def _mount_point(path: Path) -> Path:
    p = path.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


# --------------------------------------------------------------------------------------------- quota
QUOTA_TIMEOUT_S = 30
"""Seconds a quota command may take (a hung NFS server must not hang the job)."""


@dataclass(frozen=True)
class Quota:
    """The user's block quota on a file system, as its quota command reports it."""

    left: int | None
    """Bytes left under the quota; None when unknown or when no limit is set."""
    note: str
    """One line saying what was read and from which command, or why nothing was."""


def mount_of(path: str | Path, mounts: str | None = None) -> tuple[Path, str, str]:
    """(mount point, file-system type, source) of the file system holding ``path`` (``/proc/mounts``)."""
    mount = _mount_point(_existing(Path(path)))
    if mounts is None:
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


_NUM = re.compile(r"(\d+)\*?$")


def parse_quota(text: str, mount: str = "", source: str = "") -> tuple[int, int, int] | None:
    r"""(used, soft limit, hard limit) in KiB from the table ``lfs quota``, ``quota -w`` or ``mmlsquota
    --block-size 1K`` prints: the row of ``mount`` or ``source`` when there are several, else the only one; a name
    wrapped onto a line of its own is joined to the next; ``*`` (over quota) is ignored. None: no row (no quota).

    >>> parse_quota("Disk quotas for usr alice (uid 1000):\n Filesystem kbytes quota limit grace files quota limit "
    ...             "grace\n /lustre 1048576* 0 2097152 - 10 0 0 -\n")
    (1048576, 0, 2097152)
    """
    rows, carry = [], ""
    for line in text.splitlines():
        tok = (carry + " " + line).split() if carry else line.split()
        carry = ""
        if not tok or tok[0] in ("Disk", "Filesystem") or tok[0].startswith(("Block", "quota:")) or "|" == tok[0]:
            continue
        if len(tok) == 1:
            carry = tok[0]
            continue
        nums = [int(m.group(1)) for t in tok[1:] if (m := _NUM.match(t))]
        if len(nums) >= 3:
            rows.append((tok[0], nums[0], nums[1], nums[2]))
    if not rows:
        return None
    mine = [r for r in rows if r[0] in (mount, source) and r[0]] or rows
    return mine[0][1:]


def _quota_argv(fstype: str, mount: Path, user: str) -> list[str]:
    if fstype == "lustre":
        return ["lfs", "quota", "-u", user, str(mount)]
    if fstype == "gpfs":
        return ["mmlsquota", "-u", user, "--block-size", "1K"]
    return ["quota", "-w", "-f", str(mount)]


def read_quota(path: str | Path, user: str | None = None, fstype: str | None = None, which=shutil.which,
               run=subprocess.run) -> Quota:  # fmt: skip
    """The user's quota on the file system of ``path``: ``lfs quota -u USER`` on Lustre, ``mmlsquota`` on GPFS,
    ``quota -w -f MOUNT`` elsewhere (ext4, XFS, NFS); ``fstype`` None: read from ``/proc/mounts``. A command
    missing, failing or printing no limit: ``left`` None and a note that says so."""
    mount, found_type, source = mount_of(path)
    fstype = found_type if fstype is None else fstype
    user = user or os.environ.get("USER") or getpass.getuser()
    argv = _quota_argv(fstype, mount, user)
    cmd = " ".join(argv)
    if not which(argv[0]):
        return Quota(None, f"quota unknown: no {argv[0]} command on this node ({fstype or 'unknown'} file system "
                           f"{mount}); only its free space is checked")  # fmt: skip
    try:
        r = run(argv, capture_output=True, text=True, timeout=QUOTA_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Quota(None, f"quota unknown: `{cmd}` failed ({type(e).__name__}); only free space is checked")
    row = parse_quota(r.stdout, str(mount), source)
    if row is None:
        if r.returncode != 0 and not r.stdout.strip():
            why = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
            return Quota(None, f"quota unknown: `{cmd}`: {why}; only free space is checked")
        return Quota(None, f"no quota for {user} on {mount} (`{cmd}`)")
    used, soft, hard = row
    limits = [x for x in (soft, hard) if x > 0]
    if not limits:
        return Quota(None, f"no quota for {user} on {mount} (`{cmd}`: no limit set)")
    limit = min(limits)
    left = max(0, limit - used) * 1024
    return Quota(left, f"quota {limit * 1024 / GIB:.1f} GiB, {used * 1024 / GIB:.1f} GiB used, "
                       f"{left / GIB:.1f} GiB left for {user} on {mount} (`{cmd}`)")  # fmt: skip


def check_disk(run_dir: str | Path, need_bytes: int, margin: float = 0.1, what: str = "",
               quota: Quota | None = None) -> tuple[str, str]:  # fmt: skip
    """(level, message) for ``need_bytes`` more on the filesystem of ``run_dir`` (or its nearest existing parent):
    ``refuse`` when they do not fit what is available (the smaller of the free space and what the user's quota
    leaves, :func:`read_quota` when ``quota`` is None), ``warn`` when they fit but leave less than ``margin`` x need
    over, else ``ok``. ``what`` explains the need (``5 checkpoints x 18.3 GiB``)."""
    where = _existing(Path(run_dir))
    free = shutil.disk_usage(where).free
    mount = _mount_point(where)
    quota = read_quota(where) if quota is None else quota
    avail = free if quota.left is None else min(free, quota.left)
    detail = f" ({what})" if what else ""
    text = (f"need {need_bytes / GIB:.1f} GiB{detail}; free {free / GIB:.1f} GiB on {mount} (holding {run_dir}); "
            f"{quota.note}")  # fmt: skip
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
    if not path.is_dir():
        return path.stat().st_size if path.is_file() else 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = (Path(root) / name).lstat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


@dataclass
class Pruned:
    removed: list[str] = field(default_factory=list)
    """Names in ``incomplete/`` that were removed."""
    kept: list[str] = field(default_factory=list)
    freed_bytes: int = 0


_INCOMPLETE_RE = re.compile(rf"(?:global_step_\d+|{re.escape(CHECKPOINT_TRACKER)})\..+")
_PRUNING = ".pruning-"


def prune_incomplete(ckpt_dir: str | Path, keep: int = 1) -> Pruned:
    """Remove what :func:`launch.checkpoints.repair_checkpoints` moved aside into ``ckpt_dir/incomplete/``
    (``global_step_N.<tag>`` folders of torn saves and newer-than-resume steps, ``checkpoint_tracker.json.<tag>``),
    all but the ``keep`` newest step folders (by the time they were moved there): the newest torn save is kept for
    a post-mortem, the older ones only take disk. Nothing else in the folder is touched. Each entry is first
    renamed to ``.pruning-<name>`` (one atomic step: a reader never sees half a folder under its name), then
    deleted; leftovers of an interrupted prune are deleted too. Symbolic links are removed, never followed."""
    inc = Path(ckpt_dir) / INCOMPLETE_DIR
    out = Pruned()
    if not inc.is_dir():
        return out
    entries = [p for p in inc.iterdir() if _INCOMPLETE_RE.fullmatch(p.name)]
    steps = sorted((p for p in entries if p.name.startswith("global_step_") and not p.is_symlink() and p.is_dir()),
                   key=lambda p: p.lstat().st_mtime, reverse=True)  # fmt: skip
    keep_set = {p.name for p in steps[: max(keep, 0)]}
    victims = [p for p in entries if p.name not in keep_set]
    victims += [p for p in inc.iterdir() if p.name.startswith(_PRUNING)]
    for p in sorted(victims):
        size = _tree_bytes(p)
        if p.name.startswith(_PRUNING):
            doomed, name = p, p.name[len(_PRUNING) :]
        else:
            doomed, name = inc / f"{_PRUNING}{p.name}", p.name
            os.replace(p, doomed)
        if doomed.is_dir() and not doomed.is_symlink():
            shutil.rmtree(doomed)
        else:
            doomed.unlink()
        out.removed.append(name)
        out.freed_bytes += size
    out.kept = sorted(keep_set)
    return out


# --------------------------------------------------------------------------------------------- step time
def _timing(row: dict) -> float | None:
    v = row.get("timing_s/step")
    if v is None and isinstance(row.get("timing_s"), dict):
        v = row["timing_s"].get("step")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
        return float(v)
    return None


def _step_times(path: Path) -> dict[int, float]:
    """Step -> ``timing_s/step`` of a log's records (a line torn by a killed job is left out; a rerun step: its
    last record)."""
    rows, _ = read_log_records(path) if path.is_file() else ([], 0)
    return {row["step"]: t for row in rows if isinstance(row.get("step"), int) and (t := _timing(row)) is not None}


def measured_step_seconds(run_dir: str | Path) -> float | None:
    """The median ``timing_s/step`` of the run's steps: from the merged ``run_log.jsonl`` when it has any, else
    from every segment's ``experiment_log.jsonl`` (a rerun step counts once, its last record); None before the
    first logged step."""
    run_dir = Path(run_dir)
    times = _step_times(run_dir / "run_log.jsonl")
    if not times:
        for log in sorted((run_dir / "segments").glob("*/experiment_log.jsonl")):
            times.update(_step_times(log))
    return statistics.median(times.values()) if times else None


def save_freq_check(save_freq: int, step_s: float, grace_s: float) -> str | None:
    """A warning when ``save_freq`` steps take longer than the stop grace: after SIGUSR1 the launch waits for the
    next checkpoint at most ``grace_s`` seconds, so a job stopped later than that loses up to ``save_freq`` steps,
    at every requeue. Names the largest ``save_freq`` that fits; None when it fits."""
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


STEP_SECONDS_ESTIMATES = {"qwen3-vl-8b-instruct": 1400.0}
"""Seconds a GRPO step takes before any is measured, by the policy model id's last component (lower case): the
8B recipe on H200 at 900-1,400 s a step for 20-30k-token prompts (issue 31's estimate from the recipe's lengths and
batch sizes; the upper end, so the first job's ``save_freq`` errs towards checkpointing more often)."""


def step_seconds(run_dir: str | Path, model: str) -> tuple[float | None, str]:
    """(seconds a step takes, where that comes from: ``measured: ...`` or ``estimated ...``): the run's measured
    median (:func:`measured_step_seconds`), else the estimate for ``model`` (:data:`STEP_SECONDS_ESTIMATES`), else
    (None, why there is none)."""
    measured = measured_step_seconds(run_dir)
    if measured is not None:
        return measured, "measured: the median timing_s/step of this run's logged steps"
    name = str(model).rstrip("/").rsplit("/", 1)[-1].lower()
    if name in STEP_SECONDS_ESTIMATES:
        return STEP_SECONDS_ESTIMATES[name], (f"estimated for {model} on H200 before any step is measured "
                                              "(launch.budget.STEP_SECONDS_ESTIMATES)")  # fmt: skip
    return None, f"no step measured yet and no estimate for {model}"


@dataclass(frozen=True)
class SaveFreqPlan:
    """What the job does about ``trainer.save_freq`` against the stop grace."""

    override: str
    """``trainer.save_freq=N`` for the trainer ("" when the recipe's or the user's value stands)."""
    note: str
    """The dry run's and the log's line."""
    warning: bool = False


def _secs(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def plan_save_freq(save_freq: Any, step_s: float | None, source: str, grace_s: float, user_set: bool,
                   measured: bool = True) -> SaveFreqPlan:  # fmt: skip
    """Lower ``trainer.save_freq`` so that a checkpoint falls within the stop grace after SIGUSR1: with
    ``save_freq`` x ``step_s`` past ``grace_s`` the job passes ``trainer.save_freq=floor(grace / step)``; a value
    the user set (an override) is kept, with a warning; one *measured* step longer than the grace is refused
    (:class:`InputError`: raise the grace and the ``--signal`` offset), unless the user set ``save_freq`` (an
    estimated one: a warning). No step time (``step_s`` None): nothing to say.

    >>> plan_save_freq(4, 1400.0, "estimated", 3000, False).override
    'trainer.save_freq=2'
    >>> plan_save_freq(4, 700.0, "measured", 3000, False).override
    ''
    """
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
    warning = save_freq_check(freq, step_s, grace_s) or ""
    fits = math.floor(grace_s / step_s)
    if user_set or (fits < 1 and not measured):
        whose = f"your trainer.save_freq={freq} is kept" if user_set else "nothing is changed before it is measured"
        return SaveFreqPlan("", f"{head}warning: {warning} (step time {source}); {whose}", warning=True)
    if fits < 1:
        raise InputError(f"one training step ({_secs(step_s)} s, {source}) is longer than the stop grace of "
                         f"{grace_s:g} s (QUOTECITE_STOP_GRACE): no checkpoint can fall within it after SIGUSR1; raise "
                         "QUOTECITE_STOP_GRACE and the sbatch --signal offset above the step time")  # fmt: skip
    was = (
        f"{freq} x {_secs(step_s)} s = {_secs(freq * step_s)} s"
        if freq > 0
        else f"{freq} (checkpoints only at the end)"
    )
    return SaveFreqPlan(f"trainer.save_freq={fits}", f"{head}trainer.save_freq={was} is past the {grace_s:g} s stop "
                        f"grace (step time {source}): the job passes trainer.save_freq={fits} "
                        f"({_secs(fits * step_s)} s between checkpoints); set trainer.save_freq yourself to keep "
                        "another")  # fmt: skip


# --------------------------------------------------------------------------------------------- memory
@dataclass
class Estimate:
    """Host memory of one node: ``parts`` as (part, GiB, why), their phases, and the total to request."""

    parts: list[tuple[str, float, str]]
    phases: list[str]
    margin: float
    total_gib: int
    """``always + max(start, training)`` plus the margin, rounded up."""

    @property
    def peak_gib(self) -> float:
        """``always + max(start, training)`` without the margin."""
        by = {ph: sum(g for (_, g, _), p in zip(self.parts, self.phases, strict=True) if p == ph)
              for ph in ("always", "start", "training")}  # fmt: skip
        return by["always"] + max(by["start"], by["training"])

    @property
    def sbatch_mem(self) -> str:
        """The value of ``#SBATCH --mem=``."""
        return f"{self.total_gib}G"

    def table(self) -> str:
        w = max(len(p) for p, _, _ in self.parts)
        lines = [f"{'part':<{w}}  {'GiB':>6}  {'phase':<8}  why"]
        for (part, gib, why), phase in zip(self.parts, self.phases, strict=True):
            lines.append(f"{part:<{w}}  {gib:6.1f}  {phase:<8}  {why}")
        by = {ph: sum(g for (_, g, _), p in zip(self.parts, self.phases, strict=True) if p == ph)
              for ph in ("always", "start", "training")}  # fmt: skip
        peak = by["always"] + max(by["start"], by["training"])
        lines.append(
            f"peak = always {by['always']:.1f} + max(start {by['start']:.1f}, training {by['training']:.1f}) = "
            f"{peak:.1f} GiB; + {self.margin:.0%} margin -> --mem={self.sbatch_mem}"
        )
        return "\n".join(lines)


def memory_estimate(
    params_b: float,
    n_train_gpus_per_node: int,
    *,
    nnodes: int = 1,
    lora_params: int = 0,
    tensor_parallel: int = 1,
    rank0_init: bool = True,
    actor_dtype_bytes: int = 4,
    rollout_dtype_bytes: int = 2,
    rollout_batch_size: int = 32,
    images_per_prompt: int = 30,
    max_pixels: int = 1_000_000,
    save_model_only: bool = False,
    judge_replicas: int = 1,
    embedder: bool = True,
    margin: float = MEMORY_MARGIN,
    val_batch_size: int = 0,
) -> Estimate:
    """Host memory of the node with rank 0 and the servers (see the module docstring for every part)."""
    if n_train_gpus_per_node < 1 or nnodes < 1 or tensor_parallel < 1:
        raise InputError("trainer GPUs per node, nodes and tensor_parallel_size must be at least 1")
    p = params_b * 1e9
    world = n_train_gpus_per_node * nnodes
    ckpt = checkpoint_bytes(round(p), lora_params, world, save_model_only, actor_dtype_bytes)
    page = images_per_prompt * max_pixels * PIXEL_VALUE_BYTES
    prompts = math.ceil(rollout_batch_size / world)
    # vLLM preprocesses every request of a generate call before it schedules any: one engine per trainer GPU holds
    # the pixel values of its data-parallel group's prompts (rollout, or one validation batch: never both at once)
    groups = max(1, world // tensor_parallel)
    rollout_q, val_q = math.ceil(rollout_batch_size / groups), math.ceil(max(val_batch_size, 0) / groups)
    queued = max(rollout_q, val_q)
    queued_why = (f"a validation batch of {val_batch_size} / {groups} engine group(s)" if val_q > rollout_q else
                  f"a rollout batch of {rollout_batch_size} / {groups} engine group(s)")  # fmt: skip
    rows: list[tuple[str, float, str, str]] = []
    if rank0_init:
        rows.append(("policy load (rank 0)", p * actor_dtype_bytes / GIB, "start",
                     f"{params_b:g}B params x {actor_dtype_bytes} B on the CPU (fsdp.enable_rank0_init)"))  # fmt: skip
    rows += [
        ("vLLM sleep-mode weights", n_train_gpus_per_node * p * rollout_dtype_bytes / tensor_parallel / GIB,
         "training", f"{n_train_gpus_per_node} engine(s) x {params_b:g}B x {rollout_dtype_bytes} B / TP "
         f"{tensor_parallel} (sleep level 1 keeps weights in host memory)"),
        ("checkpoint staging", ckpt.state * n_train_gpus_per_node / world / GIB, "training",
         f"model+optimizer state {ckpt.state / GIB:.1f} GiB x {n_train_gpus_per_node}/{world} GPUs "
         "(get_state_dict cpu_offload)"),
        ("actor image cache", n_train_gpus_per_node * prompts * page / GIB, "training",
         f"{n_train_gpus_per_node} worker(s) x {prompts} prompts x {images_per_prompt} pages x {max_pixels} px x "
         f"{PIXEL_VALUE_BYTES} B (float32 pixel_values)"),
        ("vLLM queued images", n_train_gpus_per_node * queued * page / GIB, "training",
         f"{n_train_gpus_per_node} engine(s) x {queued} prompts ({queued_why}) x {images_per_prompt} pages x "
         f"{max_pixels} px x {PIXEL_VALUE_BYTES} B (float32 pixel_values of every queued request)"),
        ("data loader", DATALOADER_WORKERS * (page / GIB + LOADER_PROCESS_GIB), "training",
         f"{DATALOADER_WORKERS} workers x (one prompt's pixel_values + {LOADER_PROCESS_GIB:g} GiB process)"),
        ("Ray and trainer processes", RAY_BASE_GIB + (n_train_gpus_per_node + REWARD_ACTORS) * PROCESS_GIB,
         "always", f"{RAY_BASE_GIB:g} GiB driver+GCS+raylet, ({n_train_gpus_per_node} GPU workers + "
         f"{REWARD_ACTORS} reward actors) x {PROCESS_GIB:g} GiB"),
    ]  # fmt: skip
    if judge_replicas:
        rows.append(("judge server(s)", judge_replicas * SERVER_GIB, "always",
                     f"{judge_replicas} x vllm serve {SERVER_GIB:g} GiB (weights mmapped, not counted)"))  # fmt: skip
    if embedder:
        rows.append(("embedder server", SERVER_GIB, "always", f"vllm serve {SERVER_GIB:g} GiB"))
    by = {ph: sum(r[1] for r in rows if r[2] == ph) for ph in ("always", "start", "training")}
    peak = by["always"] + max(by["start"], by["training"])
    total = math.ceil(peak * (1 + margin) - 1e-9)
    return Estimate([(r[0], r[1], r[3]) for r in rows], [r[2] for r in rows], margin, total)


# --------------------------------------------------------------------------------------------- validation batch
VAL_SIZE_DEFAULT = 83
"""Questions of the validation set when ``data.val_batch_size`` is -1 (EasyR1: the whole set in one batch) and no
``--val-size`` says: the recipe's held-out set (``data.val_files``, 83 questions)."""


def plan_val_batch(val_batch_size: Any, rollout_batch_size: Any, user_set: bool) -> tuple[str, str]:
    """(override, note): ``data.val_batch_size`` of -1 (EasyR1 then queues the whole validation set in one
    generate call: every question's page images preprocessed in host memory at once, about 30 GiB an engine for
    the 8B recipe) or above the rollout batch is bounded to ``data.rollout_batch_size``, so validation holds no
    more host memory than a rollout; a value the user set is kept (the memory check then refuses it when it cannot
    fit the job's memory).

    >>> plan_val_batch(-1, 32, False)[0], plan_val_batch(16, 32, False)[0], plan_val_batch(-1, 32, True)[0]
    ('data.val_batch_size=32', '', '')
    """
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
    """The job's memory per node in MiB (``SLURM_MEM_PER_NODE``, from ``--mem``); None when Slurm does not say (no
    ``--mem``, ``--mem=0``: the whole node, or outside Slurm)."""
    v = str(environ.get("SLURM_MEM_PER_NODE", "")).strip()
    return int(v) if v.isdigit() and int(v) > 0 else None


def check_host_memory(est: Estimate, mem_mib: int | None) -> tuple[str, str]:
    """(level, message) of the host-memory budget against the job's memory: ``refuse`` when the parts' peak
    (without the margin) exceeds it, ``warn`` when only the margin does not fit, ``ok`` else or when unknown."""
    peak = est.peak_gib
    text = f"{peak:.1f} GiB at peak, --mem={est.sbatch_mem} with the {est.margin:.0%} margin"
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


def _num(recipe: dict, key: str, default: Any, kind=int) -> Any:
    v = dig(recipe, key, default)
    if v is None:
        return None
    try:
        if isinstance(v, bool):
            raise ValueError
        return kind(v)
    except (TypeError, ValueError):
        raise InputError(f"recipe {key}={v!r}: expected a number") from None


def _dtype(recipe: dict, key: str, default: str) -> int:
    v = dig(recipe, key, None) or default
    if str(v).lower() not in DTYPE_BYTES:
        raise InputError(f"recipe {key}={v!r}: expected one of {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[str(v).lower()]


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
    """Read the recipe (and EasyR1 ``key=value`` overrides) and estimate memory and checkpoint size for it;
    ``val_size``: the validation set's questions, for ``data.val_batch_size: -1`` (default :data:`VAL_SIZE_DEFAULT`)."""
    recipe, model = budget_gpu.load_policy_recipe(path, overrides)
    val_batch = _num(recipe, "data.val_batch_size", -1)
    if val_batch is None or val_batch < 0:
        val_batch = val_size or VAL_SIZE_DEFAULT
    params, source = model_params(model, params_b)
    rank = _num(recipe, "worker.actor.model.lora.rank", 0) or 0
    lora = 0
    if rank > 0:
        arch = model_arch(model)
        if arch is None:
            raise InputError(f"model {model!r}: its layer shapes are unknown (needed for the LoRA size); point "
                             "worker.actor.model.model_path at a local copy with its config.json")  # fmt: skip
        lora = arch.lora_params(rank, str(dig(recipe, "worker.actor.model.lora.target_modules", "all-linear")))
    n = n_gpus_per_node or _num(recipe, "trainer.n_gpus_per_node", 8)
    nodes = nnodes or _num(recipe, "trainer.nnodes", 1)
    actor_bytes = _dtype(recipe, "worker.actor.fsdp.torch_dtype", "fp32")
    save_model_only = bool(dig(recipe, "trainer.save_model_only", False))
    ckpt = checkpoint_bytes(params, lora, n * nodes, save_model_only, actor_bytes)
    est = memory_estimate(
        params / 1e9,
        n,
        nnodes=nodes,
        lora_params=lora,
        tensor_parallel=_num(recipe, "worker.rollout.tensor_parallel_size", 2),
        rank0_init=bool(dig(recipe, "worker.actor.fsdp.enable_rank0_init", True)),
        actor_dtype_bytes=actor_bytes,
        rollout_dtype_bytes=_dtype(recipe, "worker.rollout.dtype", "bf16"),
        rollout_batch_size=_num(recipe, "data.rollout_batch_size", 512),
        images_per_prompt=_num(recipe, "worker.rollout.limit_images", 0) or 1,
        max_pixels=_num(recipe, "data.max_pixels", 4194304),
        save_model_only=save_model_only,
        judge_replicas=judge_replicas,
        val_batch_size=val_batch,
    )
    return RecipePlan(
        model, params, source, lora, n, nodes,
        save_freq=_num(recipe, "trainer.save_freq", -1),
        save_limit=_num(recipe, "trainer.save_limit", -1),
        max_steps=max_steps if max_steps is not None else _num(recipe, "trainer.max_steps", None),
        ckpt=ckpt, estimate=est,
    )  # fmt: skip


def run_disk_check(recipe: str | Path, overrides: list[str], run_dir: str | Path, max_steps: int | None = None,
                   params_b: float | None = None, n_gpus_per_node: int | None = None, nnodes: int | None = None,
                   margin: float = 0.1) -> tuple[str, str]:  # fmt: skip
    """(level, message) of :func:`check_disk` for the checkpoints a run of ``recipe`` will keep in ``run_dir``, less
    the step folders it already holds (what the launch checks before every training job, and ``disk`` prints)."""
    plan = plan_from_recipe(recipe, overrides, params_b, n_gpus_per_node, nnodes, max_steps=max_steps)
    kept = kept_checkpoints(plan.save_limit, plan.max_steps, plan.save_freq)
    ckpt_dir = Path(run_dir) / "checkpoints"
    have = [p for p in (ckpt_dir.iterdir() if ckpt_dir.is_dir() else []) if STEP_DIR_RE.match(p.name)]
    held = sum(_tree_bytes(p) for p in have)
    need = max(0, kept * plan.ckpt.total - held)
    what = f"{kept} checkpoints x {plan.ckpt.total / GIB:.1f} GiB"
    if held:
        what += f" less {held / GIB:.1f} GiB already in {len(have)} step folder(s)"
    return check_disk(run_dir, need, margin, what)


# --------------------------------------------------------------------------------------------- CLI
def _recipe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--recipe", required=True, help="EasyR1 recipe YAML (e.g. recipes/qwen3vl_8b_grpo.yaml)")
    p.add_argument("--params-b", type=positive_float, help="policy parameters in billions (default: from the model)")
    p.add_argument("--train-gpus-per-node", type=positive_int, help="default: the recipe's trainer.n_gpus_per_node")
    p.add_argument("--nnodes", type=positive_int, help="trainer nodes (default: the recipe's trainer.nnodes)")
    p.add_argument("overrides", nargs="*", help="EasyR1 key=value overrides, as the launch passes them")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("memory", help="host memory per node: the #SBATCH --mem= value, then its parts")
    _recipe_args(m)
    m.add_argument("--judge-replicas", type=nonneg_int, default=1, help="judge servers on the node (default 1)")
    m.add_argument("--val-size", type=positive_int, help="validation questions, for data.val_batch_size -1 "
                   f"(default {VAL_SIZE_DEFAULT}, the recipe's held-out set)")  # fmt: skip
    d = sub.add_parser("disk", help="checkpoint disk use against free space (exit 3 when it cannot fit)")
    _recipe_args(d)
    d.add_argument("--run-dir", required=True, help="the run folder (its checkpoints/ holds the step folders)")
    d.add_argument("--max-steps", type=positive_int, help="needed when trainer.save_limit keeps every checkpoint")
    d.add_argument("--margin", type=bounded_float(0.0, 10.0), default=0.1, help="warn under this spare fraction")
    d.add_argument("--prune", action="store_true", help="first prune checkpoints/incomplete/ (keeps the newest)")
    s = sub.add_parser("save-freq", help="warn when save_freq x the measured step time exceeds the stop grace")
    s.add_argument("--run-dir", required=True)
    s.add_argument("--save-freq", type=int, help="default: the recipe's trainer.save_freq")
    s.add_argument("--recipe", help="recipe to read trainer.save_freq from")
    s.add_argument("--grace", type=finite, default=DEFAULT_STOP_GRACE_S, help="seconds from SIGUSR1 to the stop")
    g = sub.add_parser("gpu", help="GPU memory per phase and GPU against a GPU kind (exit 3 when a phase cannot fit)")
    budget_gpu.add_arguments(g)


def run(args: argparse.Namespace) -> int:
    if args.what == "gpu":
        return budget_gpu.run(args)
    if args.what == "memory":
        plan = plan_from_recipe(args.recipe, args.overrides, args.params_b, args.train_gpus_per_node, args.nnodes,
                                judge_replicas=args.judge_replicas, val_size=args.val_size)  # fmt: skip
        print(plan.estimate.sbatch_mem)
        print(f"# {plan.model}: {plan.params / 1e9:.3f}B params ({plan.params_source}); {plan.n_gpus_per_node} "
              f"trainer GPU(s) per node x {plan.nnodes} node(s); LoRA params {plan.lora_params}")  # fmt: skip
        print(plan.estimate.table())
        return 0
    if args.what == "disk":
        if args.prune:
            ckpt_dir = Path(args.run_dir) / "checkpoints"
            pruned = prune_incomplete(ckpt_dir, keep=1)
            print(f"pruned {len(pruned.removed)} entr{'y' if len(pruned.removed) == 1 else 'ies'} of "
                  f"{ckpt_dir / INCOMPLETE_DIR}: {pruned.freed_bytes} bytes freed")  # fmt: skip
        level, message = run_disk_check(args.recipe, args.overrides, args.run_dir, args.max_steps, args.params_b,
                                        args.train_gpus_per_node, args.nnodes, args.margin)  # fmt: skip
        print(("error: " if level == "refuse" else "warning: " if level == "warn" else "ok: ") + message,
              file=sys.stderr if level != "ok" else sys.stdout)  # fmt: skip
        return 3 if level == "refuse" else 0
    save_freq = args.save_freq
    if save_freq is None:
        if not args.recipe:
            raise InputError("save-freq: pass --save-freq or --recipe")
        try:
            save_freq = _num(load_recipe(args.recipe), "trainer.save_freq", -1)
        except RecipeError as e:
            raise InputError(str(e)) from None
    step_s = measured_step_seconds(args.run_dir)
    if step_s is None:
        print(f"no step time measured yet in {args.run_dir} (no timing_s/step in its logs)")
        return 0
    warning = save_freq_check(save_freq, step_s, args.grace)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    else:
        print(f"ok: save_freq={save_freq} x {step_s:.0f} s per step fits the {args.grace:g} s stop grace")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.budget", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
