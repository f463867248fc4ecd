"""Run bookkeeping for chained training jobs: checkpoints, job segments, the merged run log, the manifest.

``launch/grpo_8b.sh`` calls this module (``python -m launch.runlog COMMAND``) at the start and at the end of every
Slurm job of a run. A *run* lives in one folder ``RUN_DIR``::

    RUN_DIR/checkpoints/               trainer.save_checkpoint_path: global_step_N/, checkpoint_tracker.json,
                                       experiment_log.jsonl -> ../segments/<current>/experiment_log.jsonl
    RUN_DIR/checkpoints/incomplete/    step folders that were being written when a job died (kept, never resumed)
    RUN_DIR/segments/<jobid>-<n>/      one per job start (n = 0, 1, ... counts requeues/restarts of that job id):
                                       segment.json, experiment_log.jsonl, reward_counters.jsonl, server/trainer logs
    RUN_DIR/run_log.jsonl              merged metrics: one line per step, each step exactly once
    RUN_DIR/run_summary.json           what the merge kept, superseded and found missing
    RUN_DIR/manifest.json              git commit, recipe hash, EasyR1 commit, vLLM versions, models, jobs

Why segments: EasyR1's ``file`` logger opens ``experiment_log.jsonl`` with mode ``"w"`` every time the trainer
starts, so a resumed job wipes the metrics of all earlier jobs (the paper lost steps 1-44 this way). Before each
start the launch points that name at a new file in the job's segment folder, so every job's metrics are kept
as written, even when the job is killed.

Which checkpoint is complete (EasyR1 at b44b311, ``RayPPOTrainer._save_checkpoint``): it writes
``global_step_N/actor/`` (per rank ``model_/optim_/extra_state_world_size_W_rank_R.pt``, rank 0 adds
``huggingface/`` and, with LoRA, ``lora_adapter/adapter_model.safetensors`` + ``adapter_config.json``), then
``global_step_N/dataloader.pt``, and only then rewrites ``checkpoint_tracker.json`` (plain ``open("w")``, not
atomic). ``find_latest_ckpt`` trusts the tracker alone: if the tracker's folder is missing it prints "Checkpoint
does not exist" and trains from step 0; a tracker cut off mid-write makes ``json.load`` fail. Old checkpoints are
pruned (``save_limit``) *before* the new one is written. So the tracker is the commit point, and
:func:`find_resume_point` takes the tracker's step when that folder passes :func:`check_step_dir`, otherwise the
newest older folder that passes; a tracker that is not valid JSON was being rewritten after its step folder was
finished, so the newest passing folder counts; with no tracker nothing counts (EasyR1 starts from 0 too).
:func:`repair_checkpoints` then rewrites the tracker to that step (atomically) and moves newer step folders to
``incomplete/``, so EasyR1's own ``find_last_checkpoint`` resumes from the same step and never from a torn one.

How the merge keeps each step once (:func:`merge_run_log`): segments are replayed in start order. A segment
that resumed from step ``r`` rolled the model back to ``r``, so every record of a step ``> r`` written by an
earlier segment is superseded (dropped) and the rerun's record replaces it; records of steps ``<= r`` stay.
Several lines for one step within the kept history (training metrics, then validation metrics logged at the
same step, or validation before training at the resume step) are merged into one record.

One gap no launch can close: EasyR1 logs a step's metrics right *after* saving that step's checkpoint, so a job
killed in between keeps the checkpoint and never logs the step, and no rerun repeats it. The merge lists such steps
in ``run_summary.json`` (``missing``) and the job log warns; the launch's own stop (after SIGUSR1) waits for the
step's line before it stops the trainer, so only a hard kill in that moment can cause it.

Outages and restarts: a trainer that stops because the reward gave up on a judge/embedder outage (the reward's
``server_outage.json`` in its segment) ends that segment as ``outage``; the launch restarts both servers and the
trainer in a new segment of the same job, which resumes like any other (``python -m launch.runlog outage``,
``restart``). ``manifest.json`` counts every restart (``restarts``: ``judge``, ``embed``, ``trainer``), overall and
per job; each segment keeps its own in ``extra.restarts``.

The training batch: each step's ``train_batch`` comes from the reward's ``reward_batches.jsonl`` (see
:func:`merge_run_log`), the reward of the responses that trained. ``python -m launch.runlog plot RUN_DIR`` draws
the curves (:mod:`launch.plot`).

Only the standard library is imported at module level (PyYAML only to read a recipe), so any Python 3.11 runs it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data_prep.io import atomic_write_json as _atomic_write_json
from data_prep.io import atomic_write_text

CHECKPOINT_TRACKER = "checkpoint_tracker.json"
"""EasyR1's tracker file name in ``trainer.save_checkpoint_path`` (``verl/utils/checkpoint``)."""
STEP_DIR_RE = re.compile(r"global_step_(\d+)$")
SHARD_RE = re.compile(r"(model|optim|extra_state)_world_size_(\d+)_rank_(\d+)\.pt$")
LOGGED_FILES = ("experiment_log.jsonl", "generations.log")
"""Files EasyR1's ``file`` logger truncates at every start; each job segment gets its own copy."""
REWARD_COUNTERS = "reward_counters.jsonl"
"""Per-segment file the reward may append counters to (env ``QUOTECITE_METRICS_DIR`` names the folder)."""
REWARD_BATCHES = "reward_batches.jsonl"
"""Per-segment file of the reward's training-batch records (``reward.pipeline.TrainBatchTracker``): the n-th
record of a segment is the batch of step ``resume_step + n``."""
SERVER_OUTAGE = "server_outage.json"
"""Written into the segment by the reward when a judge/embedder outage outlasted ``judge_outage_s``."""
RESTART_KINDS = ("judge", "embed", "trainer")
"""What the launch restarts within a job: a server process that died, or the trainer (with both servers) after
it stopped on a server outage."""
INCOMPLETE_DIR = "incomplete"


class RunError(Exception):
    """A run folder or setting that the launch cannot work with; the message names it and what is wrong."""


# --------------------------------------------------------------------------------------------- small helpers
def atomic_write_json(path: Path, obj: Any) -> None:
    _atomic_write_json(path, obj, indent=2)


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Exclusive lock on the run folder (two jobs of one run never update its bookkeeping at once)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".runlog.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` merged into a copy of ``base``; nested dicts merge key by key, other values are replaced."""
    out = dict(base)
    for k, v in extra.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


# --------------------------------------------------------------------------------------------- checkpoints
def step_dirs(ckpt_dir: Path) -> dict[int, Path]:
    """``{step: folder}`` for every ``global_step_N`` folder directly in ``ckpt_dir``."""
    out: dict[int, Path] = {}
    if ckpt_dir.is_dir():
        for p in ckpt_dir.iterdir():
            m = STEP_DIR_RE.match(p.name)
            if m and p.is_dir():
                out[int(m.group(1))] = p
    return out


def check_step_dir(path: Path, require_lora: bool = True) -> str:
    """Why the step folder ``path`` is not a complete EasyR1 checkpoint; ``""`` when it is.

    Complete: ``actor/`` holds model, optimizer and extra-state shards for every rank of one world size,
    ``actor/lora_adapter/`` holds ``adapter_model.safetensors`` and ``adapter_config.json`` (when
    ``require_lora``), and ``dataloader.pt`` exists; no file is empty.
    """
    actor = path / "actor"
    if not actor.is_dir():
        return "no actor/ folder"
    shards: dict[str, set[tuple[int, int]]] = {"model": set(), "optim": set(), "extra_state": set()}
    for p in actor.iterdir():
        m = SHARD_RE.match(p.name)
        if m:
            if p.stat().st_size == 0:
                return f"empty shard actor/{p.name}"
            shards[m.group(1)].add((int(m.group(2)), int(m.group(3))))
    sizes = {w for s in shards.values() for w, _ in s}
    if not shards["model"]:
        return "no model shards in actor/"
    if len(sizes) != 1:
        return f"shards of several world sizes in actor/: {sorted(sizes)}"
    world = sizes.pop()
    for kind, got in shards.items():
        missing = sorted(set(range(world)) - {r for _, r in got})
        if missing:
            return f"actor/{kind} shards missing for ranks {missing} of world size {world}"
    if require_lora:
        for name in ("adapter_model.safetensors", "adapter_config.json"):
            f = actor / "lora_adapter" / name
            if not f.is_file() or f.stat().st_size == 0:
                return f"actor/lora_adapter/{name} missing or empty"
    dl = path / "dataloader.pt"
    if not dl.is_file() or dl.stat().st_size == 0:
        return "dataloader.pt missing or empty"
    return ""


def read_tracker(ckpt_dir: Path) -> tuple[dict | None, str]:
    """(tracker contents, problem): problem is ``""``, ``"missing"`` or ``"corrupt: ..."``."""
    path = ckpt_dir / CHECKPOINT_TRACKER
    if not path.exists():
        return None, "missing"
    try:
        info = read_json(path)
        int(info["last_global_step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"corrupt: {type(e).__name__}: {e}"
    return info, ""


@dataclass(frozen=True)
class ResumePoint:
    """Where a job resumes: ``step`` 0 means from the start (no complete checkpoint)."""

    step: int
    """Optimizer step of the last complete checkpoint (0: none)."""
    path: Path | None
    """Its ``global_step_N`` folder, or None."""
    incomplete: tuple[int, ...] = ()
    """Steps of folders that must not be resumed from (newer than ``step``, or failing the check)."""
    notes: tuple[str, ...] = ()
    """Human-readable reasons for every decision that differs from the tracker."""
    tracker_step: int | None = None
    """The tracker's ``last_global_step`` as found (None: missing or unreadable)."""


def find_resume_point(ckpt_dir: Path, require_lora: bool = True) -> ResumePoint:
    """The last complete checkpoint in ``ckpt_dir`` (see the module docstring for the rule); reads only."""
    dirs = step_dirs(ckpt_dir)
    tracker, problem = read_tracker(ckpt_dir)
    notes: list[str] = []
    if problem == "missing":
        if dirs:
            notes.append(f"no {CHECKPOINT_TRACKER}: no step folder was ever committed; starting from step 0")
        return ResumePoint(0, None, tuple(sorted(dirs)), tuple(notes), None)
    tracker_step = int(tracker["last_global_step"]) if tracker else None
    if tracker is None:
        notes.append(f"{CHECKPOINT_TRACKER} is {problem} (cut off while being rewritten)")
        limit = max(dirs, default=0)
    else:
        limit = tracker_step
    chosen = 0
    for step in sorted((s for s in dirs if s <= limit), reverse=True):
        why = check_step_dir(dirs[step], require_lora)
        if not why:
            chosen = step
            break
        notes.append(f"global_step_{step} is incomplete ({why})")
    if tracker_step is not None and chosen != tracker_step:
        if tracker_step not in dirs:
            notes.append(f"the tracker names global_step_{tracker_step}, which does not exist")
        notes.append("falling back to " + (f"global_step_{chosen}" if chosen else "step 0"))
    bad = tuple(sorted(s for s in dirs if s > chosen))
    return ResumePoint(chosen, dirs.get(chosen), bad, tuple(notes), tracker_step)


def repair_checkpoints(ckpt_dir: Path, tag: str, require_lora: bool = True) -> ResumePoint:
    """Make ``ckpt_dir`` resume exactly from :func:`find_resume_point`: newer/incomplete step folders move to
    ``incomplete/global_step_N.<tag>`` and the tracker is rewritten (atomically) to the chosen step, or removed
    when there is none. Returns the resume point."""
    rp = find_resume_point(ckpt_dir, require_lora)
    dirs = step_dirs(ckpt_dir)
    for step in rp.incomplete:
        dest = ckpt_dir / INCOMPLETE_DIR / f"global_step_{step}.{tag}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(dirs[step], dest)
    tracker, _ = read_tracker(ckpt_dir)
    tracker_path = ckpt_dir / CHECKPOINT_TRACKER
    if rp.step == 0:
        if tracker_path.exists():
            os.replace(tracker_path, ckpt_dir / INCOMPLETE_DIR / f"{CHECKPOINT_TRACKER}.{tag}")
    elif tracker is None or int(tracker["last_global_step"]) != rp.step:
        info = dict(tracker or {})
        info.setdefault("best_global_step", rp.step)
        info.setdefault("best_val_reward_score", 0.0)
        if int(info["best_global_step"]) > rp.step:
            info["best_global_step"] = rp.step
        info["last_global_step"] = rp.step
        info["last_actor_path"] = str((rp.path / "actor").resolve())
        atomic_write_json(tracker_path, info)
    return rp


# --------------------------------------------------------------------------------------------- segments
@dataclass
class Segment:
    """One start of the training program inside one Slurm job (a requeued job gets a new segment)."""

    name: str
    """``<jobid>-<n>``: n counts earlier segments of the same job id (its requeues/restarts)."""
    job_id: str
    seq: int
    """Start order within the run (1, 2, ...)."""
    started_at: str
    resume_step: int
    """Step of the checkpoint this segment resumed from (0: from the start)."""
    status: str = "running"
    """running | stopped (warning signal) | finished | crashed | terminated | died | server_failed | check_failed |
    outage (the trainer stopped on a judge/embedder outage; the launch restarted it in a new segment)."""
    ended_at: str | None = None
    end_step: int | None = None
    """Last complete checkpoint when the segment ended."""
    trainer_exit: int | None = None
    message: str = ""
    host: str = ""
    extra: dict = field(default_factory=dict)


def segments_dir(run_dir: Path) -> Path:
    return run_dir / "segments"


def load_segments(run_dir: Path) -> list[Segment]:
    """All segments of the run, in start order."""
    out = []
    for p in sorted(segments_dir(run_dir).glob("*/segment.json")):
        d = read_json(p)
        out.append(Segment(**{k: v for k, v in d.items() if k in Segment.__dataclass_fields__}))
    return sorted(out, key=lambda s: s.seq)


def save_segment(run_dir: Path, seg: Segment) -> None:
    atomic_write_json(segments_dir(run_dir) / seg.name / "segment.json", asdict(seg))


def new_segment(run_dir: Path, job_id: str, resume_step: int) -> Segment:
    """Create ``segments/<jobid>-<n>/`` and point EasyR1's truncating log files at it."""
    existing = load_segments(run_dir)
    n = sum(1 for s in existing if s.job_id == job_id)
    seg = Segment(
        name=f"{job_id}-{n}",
        job_id=job_id,
        seq=max((s.seq for s in existing), default=0) + 1,
        started_at=now_iso(),
        resume_step=resume_step,
        host=os.uname().nodename,
    )
    seg_dir = segments_dir(run_dir) / seg.name
    seg_dir.mkdir(parents=True, exist_ok=False)
    save_segment(run_dir, seg)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for name in LOGGED_FILES:
        link = ckpt_dir / name
        tmp = ckpt_dir / f".{name}.{os.getpid()}.lnk"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(Path("..") / "segments" / seg.name / name)
        if link.exists() and not link.is_symlink():  # a log written before segments existed: keep it
            os.replace(link, seg_dir.parent / f"pre-segment-{name}")
        os.replace(tmp, link)
    return seg


def stalled_count(segments: list[Segment]) -> int:
    """How many of the latest finished segments in a row ended without a new complete checkpoint."""
    n = 0
    for s in reversed(segments):
        if s.status == "running":
            continue
        if s.end_step is not None and s.end_step > s.resume_step:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Decision:
    """What the chain does next: ``run`` this job, ``continue`` (submit the next job), ``done``, ``stop``
    (an error or no progress: no more jobs), or ``none`` (the job was killed/requeued: Slurm decides)."""

    action: str
    message: str
    exit_code: int = 0


def decide_at_start(segments: list[Segment], resume_step: int, max_steps: int, max_stalled: int) -> Decision:
    """Whether a job that is starting should train."""
    if resume_step >= max_steps:
        return Decision("done", f"run complete: checkpoint global_step_{resume_step} reaches max_steps={max_steps}")
    stalled = stalled_count(segments)
    if max_stalled > 0 and stalled >= max_stalled:
        return Decision(
            "stop",
            f"{stalled} jobs in a row made no progress (still at step {resume_step}, max_stalled_jobs="
            f"{max_stalled}); not training. See the trainer logs under segments/; fix the cause and submit again "
            "with a larger QUOTECITE_MAX_STALLED_JOBS or after removing the stalled segments.",
            1,
        )
    return Decision("run", f"resuming from step {resume_step}" if resume_step else "starting from step 0")


def decide_at_end(segments: list[Segment], max_steps: int, max_stalled: int) -> Decision:
    """What follows the segment that just ended (the last of ``segments``)."""
    seg = segments[-1]
    end = seg.end_step or 0
    if seg.status in ("server_failed", "check_failed"):  # misconfiguration: a rerun would fail the same way
        return Decision("stop", f"not resubmitting: {seg.message}", 1)
    if seg.status == "outage" and end < max_steps:
        return Decision("restart", f"server outage at step {end}: restarting the servers and the trainer", 0)
    if seg.status == "terminated":
        return Decision(
            "none",
            "job was cancelled or requeued by Slurm; no new job submitted (a requeued job resumes by itself)",
            143,
        )
    if end >= max_steps:
        return Decision("done", f"run complete: global_step_{end} reaches max_steps={max_steps}")
    if seg.status == "finished":
        return Decision(
            "stop",
            f"the trainer exited normally at step {end} < max_steps={max_steps}; not resubmitting (does the "
            "recipe's trainer.max_steps agree with the launch's?)",
            1,
        )
    stalled = stalled_count(segments)
    if max_stalled > 0 and stalled >= max_stalled:
        return Decision(
            "stop",
            f"{stalled} jobs in a row made no progress (stuck at step {end}); not resubmitting. Last trainer exit "
            f"code {seg.trainer_exit}; see segments/{seg.name}/trainer.log",
            1,
        )
    what = "crashed" if seg.status == "crashed" else "stopped"
    return Decision(
        "continue",
        f"trainer {what} at step {end} of {max_steps}; submitting the next job",
        1 if seg.status == "crashed" else 0,
    )


# --------------------------------------------------------------------------------------------- merge
@dataclass
class MergeSummary:
    steps: list[int]
    """Steps present in the merged log, ascending."""
    missing: list[int]
    """Steps 1..max logged step (or ..max_steps) that no kept record covers."""
    superseded: dict[str, list[int]]
    """Per segment: steps whose records were dropped because a later segment resumed from an earlier step."""
    torn_lines: dict[str, int]
    """Per segment: lines that were not valid JSON (a job killed mid-write)."""
    reward_counters: dict[str, dict[str, float]]
    """Per segment: sums of the numeric counters without a step in ``reward_counters.jsonl``."""


def _read_jsonl(path: Path) -> tuple[list[dict], int]:
    if not path.exists():
        return [], 0
    rows, torn = [], 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                torn += 1
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows, torn


def merge_run_log(run_dir: Path, max_steps: int | None = None) -> MergeSummary:
    """Merge every segment's ``experiment_log.jsonl`` (and step-keyed ``reward_counters.jsonl`` lines) into
    ``run_log.jsonl``: one record per step with a ``segment`` field; write ``run_summary.json``. Atomic.

    The reward's training-batch records (``reward_batches.jsonl``) become each step's ``train_batch``: the reward
    and its parts over the responses that trained (``train_batch.reward``), the groups kept and dropped by the
    online filter, the filter attempts (``calls``), the kept qids and the reward's counters of those calls. EasyR1's
    own ``reward/*`` keys average every response generated across the attempts, kept or not; ``train_batch`` is
    the reward that produced the gradient."""
    records: dict[int, dict] = {}
    owners: dict[int, str] = {}
    superseded: dict[str, list[int]] = {}
    torn: dict[str, int] = {}
    counters: dict[str, dict[str, float]] = {}
    for seg in load_segments(run_dir):
        for step in [s for s in records if s > seg.resume_step]:
            superseded.setdefault(owners[step], []).append(step)
            del records[step], owners[step]
        seg_dir = segments_dir(run_dir) / seg.name
        rows, n_torn = _read_jsonl(seg_dir / "experiment_log.jsonl")
        c_rows, c_torn = _read_jsonl(seg_dir / REWARD_COUNTERS)
        if n_torn + c_torn:
            torn[seg.name] = n_torn + c_torn
        for row in rows:
            if not isinstance(row.get("step"), int):
                continue
            step = row["step"]
            if step in records:
                records[step] = deep_merge(records[step], row)
            else:
                records[step], owners[step] = dict(row), seg.name
        b_rows, b_torn = _read_jsonl(seg_dir / REWARD_BATCHES)
        if b_torn:
            torn[seg.name] = torn.get(seg.name, 0) + b_torn
        for row in b_rows:
            n = row.get("batch")
            step = seg.resume_step + n if isinstance(n, int) and n >= 1 else None
            if step is not None and owners.get(step) == seg.name:
                records[step]["train_batch"] = {k: v for k, v in row.items() if k not in ("batch", "time")}
        for row in c_rows:
            step = row.get("step")
            body = {k: v for k, v in row.items() if k != "step"}
            if isinstance(step, int) and step in records:
                records[step]["reward_counters"] = deep_merge(records[step].get("reward_counters", {}), body)
            elif not isinstance(step, int):
                tot = counters.setdefault(seg.name, {})
                for k, v in body.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        tot[k] = tot.get(k, 0) + v
    steps = sorted(records)
    top = max([*steps, *([max_steps] if max_steps else [])], default=0)
    missing = [s for s in range(1, top + 1) if s not in records]
    lines = [
        json.dumps({"step": s, "segment": owners[s], **{k: v for k, v in records[s].items() if k != "step"}})
        for s in steps
    ]
    atomic_write_text(run_dir / "run_log.jsonl", "".join(line + "\n" for line in lines))
    summary = MergeSummary(steps, missing, {k: sorted(v) for k, v in superseded.items()}, torn, counters)
    atomic_write_json(
        run_dir / "run_summary.json",
        {
            "n_steps": len(steps),
            "first_step": steps[0] if steps else None,
            "last_step": steps[-1] if steps else None,
            "max_steps": max_steps,
            **asdict(summary),
            "steps": None,  # the step list is run_log.jsonl itself
            "merged_at": now_iso(),
        },
    )
    return summary


# --------------------------------------------------------------------------------------------- recipe
def load_recipe(path: Path) -> dict:
    """The recipe YAML as a dict (``${oc.env:...}`` interpolations are left as text)."""
    try:
        import yaml
    except ImportError as e:  # pragma: no cover - every venv of the project has PyYAML
        raise RunError("reading the recipe needs PyYAML (pip install pyyaml)") from e
    if not path.is_file():
        raise RunError(f"recipe {path}: no such file")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(data, dict):
        raise RunError(f"recipe {path}: not a YAML mapping")
    return data


def dig(d: dict, dotted: str, default: Any = None) -> Any:
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def parse_overrides(args: list[str]) -> dict[str, str]:
    """``key=value`` command-line overrides (EasyR1/OmegaConf style) as a flat dict."""
    out = {}
    for a in args:
        if "=" in a:
            k, v = a.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def recipe_value(recipe: dict, overrides: dict[str, str], key: str, default: Any = None) -> Any:
    if key in overrides:
        v = overrides[key]
        return None if v.lower() in ("null", "none", "~") else v
    return dig(recipe, key, default)


def count_parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq  # only when max_steps must be derived from the data

    return int(pq.read_metadata(path).num_rows)


def plan_max_steps(recipe: dict, overrides: dict[str, str], env_max_steps: str, train_files: str) -> tuple[int, str]:
    """(max_steps, how it was found): the env setting, else the recipe's ``trainer.max_steps``, else EasyR1's own
    formula ``floor(rows / data.rollout_batch_size) * trainer.total_epochs`` on the training parquet."""
    if env_max_steps:
        return int(env_max_steps), "QUOTECITE_MAX_STEPS"
    v = recipe_value(recipe, overrides, "trainer.max_steps")
    if v not in (None, ""):
        return int(v), "recipe trainer.max_steps"
    bs = int(recipe_value(recipe, overrides, "data.rollout_batch_size", 0) or 0)
    epochs = int(recipe_value(recipe, overrides, "trainer.total_epochs", 1) or 1)
    if not train_files or "${" in train_files or not Path(train_files).is_file() or bs <= 0:
        raise RunError(
            "cannot tell max_steps: set QUOTECITE_MAX_STEPS, or trainer.max_steps in the recipe, or point "
            f"QUOTECITE_TRAIN_FILES at the training parquet (got {train_files or 'nothing'!r})"
        )
    rows = count_parquet_rows(Path(train_files))
    return rows // bs * epochs, f"{rows} rows // rollout_batch_size {bs} * total_epochs {epochs}"


def absolute_path_overrides(recipe: dict, overrides: dict[str, str], repo: Path) -> dict[str, str]:
    """The trainer overrides that pin the recipe's relative paths and tell the reward its batch shape.

    ``data.format_prompt`` and ``worker.reward.reward_function`` as absolute paths (a relative one is resolved from
    ``repo``, where the recipe says they are relative to): EasyR1 resolves them from its working directory and,
    when nothing is there, prints "not found" and trains without our prompt (or, for the reward, fails late).
    With our reward plugin, also ``worker.reward.reward_function_kwargs.batch_groups`` (``data.rollout_batch_size``)
    and ``keep_band`` (``[filter_low, filter_high]`` under online filtering, else null), so the reward can tell which
    groups trained (``reward.pipeline.TrainBatchTracker``). Keys ``batch_groups``/``keep_band`` hold full
    ``key=value`` strings like the paths; a value the user already overrides is kept as given."""
    out: dict[str, str] = {}
    for key in ("data.format_prompt", "worker.reward.reward_function"):
        value = recipe_value(recipe, overrides, key)
        if not isinstance(value, str) or not value or "${" in value:
            continue
        path, sep, name = (
            value.rpartition(":") if key.endswith("reward_function") and ":" in value else (value, "", "")
        )
        p = Path(path).expanduser()
        out[key] = f"{key}={(p if p.is_absolute() else repo / p).resolve()}{sep}{name}"
    fn = str(recipe_value(recipe, overrides, "worker.reward.reward_function", "") or "")
    if Path(fn.rpartition(":")[0] if ":" in fn else fn).name == "quote_reward.py":
        kw = "worker.reward.reward_function_kwargs"
        if f"{kw}.batch_groups" not in overrides:
            groups = recipe_value(recipe, overrides, "data.rollout_batch_size")
            if groups not in (None, ""):
                out["batch_groups"] = f"{kw}.batch_groups={int(groups)}"
        if f"{kw}.keep_band" not in overrides:
            on = str(recipe_value(recipe, overrides, "algorithm.online_filtering", False)).lower() in ("true", "1")
            low = recipe_value(recipe, overrides, "algorithm.filter_low", 0.01)
            high = recipe_value(recipe, overrides, "algorithm.filter_high", 0.99)
            out["keep_band"] = f"{kw}.keep_band=" + (f"[{float(low)},{float(high)}]" if on else "null")
    return out


def check_recipe(recipe: dict, overrides: dict[str, str]) -> list[str]:
    """Settings that would break chaining; each is a one-line error."""
    errors = []
    save_freq = int(recipe_value(recipe, overrides, "trainer.save_freq", -1) or -1)
    if save_freq <= 0:
        errors.append("trainer.save_freq must be > 0: a job that never saves cannot be resumed by the next one")
    if recipe_value(recipe, overrides, "trainer.load_checkpoint_path") not in (None, ""):
        errors.append("trainer.load_checkpoint_path must be null: it overrides find_last_checkpoint in every job")
    save_limit = int(recipe_value(recipe, overrides, "trainer.save_limit", -1) or -1)
    if save_limit == 1:
        errors.append(
            "trainer.save_limit=1 deletes the only complete checkpoint before the next one is written "
            "(EasyR1 prunes first); use -1 or >= 2"
        )
    return errors


# --------------------------------------------------------------------------------------------- manifest
def git_state(repo: Path) -> dict:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else ""

    commit = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
    return {"commit": commit or None, "dirty": dirty}


def update_manifest(run_dir: Path, base: dict, job: dict, allow_recipe_change: bool = False) -> dict:
    """Create ``manifest.json`` from ``base`` on the first job; append/update ``job`` (keyed by segment or job id).
    A recipe whose hash differs from the run's is an error unless ``allow_recipe_change``."""
    path = run_dir / "manifest.json"
    man = read_json(path) if path.exists() else {**base, "created_at": now_iso(), "jobs": []}
    old_sha, new_sha = dig(man, "recipe.sha256"), dig(base, "recipe.sha256")
    if old_sha and new_sha and old_sha != new_sha:
        if not allow_recipe_change:
            raise RunError(
                f"the recipe changed during the run (sha256 {old_sha[:12]} in manifest.json, now {new_sha[:12]}); "
                "restore it, start a new RUN_DIR, or set QUOTECITE_ALLOW_RECIPE_CHANGE=1"
            )
        job = {**job, "recipe_sha256": new_sha}
    key = job.get("segment") or f"job {job.get('job_id')}"
    jobs = [j for j in man.get("jobs", []) if (j.get("segment") or f"job {j.get('job_id')}") != key]
    old = next((j for j in man.get("jobs", []) if (j.get("segment") or f"job {j.get('job_id')}") == key), {})
    jobs.append({**old, **job})
    man["jobs"] = jobs
    for k in ("easyr1_commit", "vllm", "models", "max_steps"):
        if base.get(k) and not man.get(k):
            man[k] = base[k]
    atomic_write_json(path, man)
    return man


# --------------------------------------------------------------------------------------------- commands
def shell_vars(**kw: Any) -> str:
    """``KEY=value`` lines, quoted for ``eval`` in bash."""
    return "".join(f"{k}={shlex.quote('' if v is None else str(v))}\n" for k, v in kw.items())


def _close_stale(run_dir: Path, segments: list[Segment], resume_step: int) -> None:
    for s in segments:
        changed = False
        if s.status == "running":
            s.status, s.message, changed = "died", "killed without cleanup (no end recorded)", True
        if s.end_step is None:
            s.end_step, changed = resume_step, True
        if changed:
            save_segment(run_dir, s)


def cmd_plan(a: argparse.Namespace) -> int:
    """Read the recipe: max_steps, the checks, and the trainer's logger list (with ``file``)."""
    overrides = parse_overrides(a.overrides)
    recipe = load_recipe(Path(a.recipe))
    errors = check_recipe(recipe, overrides)
    if errors:
        raise RunError(f"recipe {a.recipe}: " + "; ".join(errors))
    train = a.train_files or str(recipe_value(recipe, overrides, "data.train_files", "") or "")
    max_steps, how = plan_max_steps(recipe, overrides, a.max_steps, train)
    logger = recipe_value(recipe, overrides, "trainer.logger", ["console"])
    if isinstance(logger, str):
        logger = [x.strip() for x in logger.strip("[]").split(",") if x.strip()]
    logger_override = "" if "file" in logger else "trainer.logger=[" + ",".join([*logger, "file"]) + "]"
    lora_rank = int(recipe_value(recipe, overrides, "worker.actor.model.lora.rank", 0) or 0)
    paths = absolute_path_overrides(recipe, overrides, Path(a.repo).resolve())
    print(
        shell_vars(
            QC_FORMAT_PROMPT_OVERRIDE=paths.get("data.format_prompt", ""),
            QC_REWARD_FN_OVERRIDE=paths.get("worker.reward.reward_function", ""),
            QC_BATCH_GROUPS_OVERRIDE=paths.get("batch_groups", ""),
            QC_KEEP_BAND_OVERRIDE=paths.get("keep_band", ""),
            QC_MAX_STEPS=max_steps,
            QC_MAX_STEPS_FROM=how,
            QC_LOGGER_OVERRIDE=logger_override,
            QC_POLICY_MODEL=recipe_value(recipe, overrides, "worker.actor.model.model_path", ""),
            QC_REQUIRE_LORA=1 if lora_rank > 0 else 0,
            QC_RECIPE_SHA256=sha256_file(Path(a.recipe)),
        ),
        end="",
    )
    return 0


def cmd_prepare(a: argparse.Namespace) -> int:
    run_dir = Path(a.run_dir).resolve()
    with run_lock(run_dir):
        segments = load_segments(run_dir)
        ckpt = run_dir / "checkpoints"
        tag = f"{a.job_id}-{sum(1 for s in segments if s.job_id == a.job_id)}"
        rp = repair_checkpoints(ckpt, tag, require_lora=a.require_lora)
        _close_stale(run_dir, segments, rp.step)
        merge_run_log(run_dir, a.max_steps)
        d = decide_at_start(segments, rp.step, a.max_steps, a.max_stalled)
        base = {
            "run_dir": str(run_dir),
            "git": git_state(Path(a.repo)),
            "recipe": {"path": a.recipe, "sha256": sha256_file(Path(a.recipe))},
            "easyr1_commit": a.easyr1_commit,
            "vllm": {"trainer": a.vllm_trainer, "server": a.vllm_server},
            "models": dict(m.split("=", 1) for m in a.model),
            "max_steps": a.max_steps,
        }
        job = {
            "job_id": a.job_id,
            "host": os.uname().nodename,
            "started_at": now_iso(),
            "git_commit": base["git"]["commit"],
            "resume_step": rp.step,
        }
        seg_name = seg_dir = ""
        if d.action == "run":
            seg = new_segment(run_dir, a.job_id, rp.step)
            seg_name, seg_dir = seg.name, str(segments_dir(run_dir) / seg.name)
            job["segment"] = seg.name
        else:
            job.update(status=d.action, message=d.message, ended_at=now_iso())
        update_manifest(run_dir, base, job, allow_recipe_change=a.allow_recipe_change)
    print(
        shell_vars(
            QC_ACTION=d.action,
            QC_MESSAGE=d.message,
            QC_EXIT=d.exit_code,
            QC_RESUME_STEP=rp.step,
            QC_CHECKPOINT_NOTES="; ".join(rp.notes),
            QC_SEGMENT=seg_name,
            QC_SEGMENT_DIR=seg_dir,
        ),
        end="",
    )
    return 0


def cmd_finish(a: argparse.Namespace) -> int:
    run_dir = Path(a.run_dir).resolve()
    with run_lock(run_dir):
        segments = load_segments(run_dir)
        seg = next((s for s in segments if s.name == a.segment), None)
        if seg is None:
            raise RunError(f"{run_dir}: no segment {a.segment!r}")
        rp = find_resume_point(run_dir / "checkpoints", require_lora=a.require_lora)
        seg.status, seg.ended_at, seg.end_step = a.status, now_iso(), rp.step
        seg.trainer_exit = a.trainer_exit
        seg.message = a.message or ""
        save_segment(run_dir, seg)
        summary = merge_run_log(run_dir, a.max_steps)
        d = decide_at_end(segments, a.max_steps, a.max_stalled)
        job = {
            "job_id": seg.job_id,
            "segment": seg.name,
            "ended_at": seg.ended_at,
            "end_step": rp.step,
            "status": seg.status,
            "trainer_exit": a.trainer_exit,
            "next": d.action,
        }
        update_manifest(run_dir, {}, job)
    missing = [s for s in summary.missing if s <= rp.step]
    print(
        shell_vars(
            QC_ACTION=d.action,
            QC_MESSAGE=d.message,
            QC_EXIT=d.exit_code,
            QC_END_STEP=rp.step,
            QC_LOGGED_STEPS=len(summary.steps),
            QC_MISSING_STEPS=",".join(map(str, missing)),
        ),
        end="",
    )
    return 0


def cmd_merge(a: argparse.Namespace) -> int:
    run_dir = Path(a.run_dir).resolve()
    with run_lock(run_dir):
        s = merge_run_log(run_dir, a.max_steps)
    print(
        f"run_log.jsonl: {len(s.steps)} steps"
        + (f" ({s.steps[0]}..{s.steps[-1]})" if s.steps else "")
        + (f"; missing {s.missing}" if s.missing else "")
        + (f"; superseded {s.superseded}" if s.superseded else "")
    )
    return 0


def record_restart(run_dir: Path, segment: str, what: str, reason: str = "") -> dict[str, int]:
    """Count one restart of ``what`` (:data:`RESTART_KINDS`) in the segment (``extra.restarts``) and in the run's
    ``manifest.json`` (``restarts``: totals over the run; the job's entry gets its own); returns the run totals."""
    if what not in RESTART_KINDS:
        raise RunError(f"unknown restart kind {what!r} (known: {', '.join(RESTART_KINDS)})")
    with run_lock(run_dir):
        seg = next((s for s in load_segments(run_dir) if s.name == segment), None)
        if seg is None:
            raise RunError(f"{run_dir}: no segment {segment!r}")
        counts = seg.extra.setdefault("restarts", {})
        counts[what] = counts.get(what, 0) + 1
        seg.extra.setdefault("restart_log", []).append({"what": what, "at": now_iso(), "reason": reason})
        save_segment(run_dir, seg)
        path = run_dir / "manifest.json"
        man = read_json(path) if path.exists() else {"jobs": []}
        totals = man.setdefault("restarts", {})
        totals[what] = totals.get(what, 0) + 1
        jobs = man.get("jobs", [])
        for job in [j for j in jobs if j.get("segment") == segment] or [
            j for j in jobs if j.get("job_id") == seg.job_id
        ]:
            job.setdefault("restarts", {})
            job["restarts"][what] = job["restarts"].get(what, 0) + 1
            break
        atomic_write_json(path, man)
    return dict(totals)


def cmd_restart(a: argparse.Namespace) -> int:
    totals = record_restart(Path(a.run_dir).resolve(), a.segment, a.what, a.reason)
    print(shell_vars(QC_RUN_RESTARTS=",".join(f"{k}={v}" for k, v in sorted(totals.items()))), end="")
    return 0


def cmd_outage(a: argparse.Namespace) -> int:
    """``QC_OUTAGE=1`` and ``QC_OUTAGE_MESSAGE`` when the segment's reward stopped on a server outage, else 0."""
    path = Path(a.segment_dir) / SERVER_OUTAGE
    try:
        info = read_json(path)
        message = str(info.get("message") or info)
    except (OSError, ValueError):
        print(shell_vars(QC_OUTAGE=0, QC_OUTAGE_MESSAGE=""), end="")
        return 0
    print(shell_vars(QC_OUTAGE=1, QC_OUTAGE_MESSAGE=" ".join(message.split())), end="")
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    from launch.plot import write_curves

    run_dir = Path(a.run_dir)
    out = write_curves(run_dir / "run_log.jsonl", Path(a.out) if a.out else run_dir / "curves.html")
    print(f"training curves: {out}")
    return 0


def cmd_last_step(a: argparse.Namespace) -> int:
    """The tracker's step (what EasyR1 last committed), 0 when none: cheap, for polling during a stop."""
    info, _ = read_tracker(Path(a.run_dir) / "checkpoints")
    print(int(info["last_global_step"]) if info else 0)
    return 0


def cmd_logged_step(a: argparse.Namespace) -> int:
    """The highest step in the current segment's experiment log (0 when none)."""
    rows, _ = _read_jsonl(Path(a.segment_dir) / "experiment_log.jsonl")
    print(max((r["step"] for r in rows if isinstance(r.get("step"), int)), default=0))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.runlog", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("plan", help="read the recipe: max_steps, checks, logger override (shell variables)")
    p.add_argument("--recipe", required=True)
    p.add_argument("--max-steps", default="", help="QUOTECITE_MAX_STEPS (empty: from the recipe or the data)")
    p.add_argument("--train-files", default="")
    p.add_argument("--repo", default=".", help="repository root: the recipe's relative paths start here")
    p.add_argument("overrides", nargs="*", help="the trainer's key=value overrides")
    p.set_defaults(fn=cmd_plan)

    for name, fn in (("prepare", cmd_prepare), ("finish", cmd_finish)):
        p = sub.add_parser(name)
        p.add_argument("--run-dir", required=True)
        p.add_argument("--max-steps", type=int, required=True)
        p.add_argument("--max-stalled", type=int, default=3)
        p.add_argument("--require-lora", type=int, default=1)
        p.set_defaults(fn=fn)
        if name == "prepare":
            p.add_argument("--job-id", required=True)
            p.add_argument("--repo", default=".")
            p.add_argument("--recipe", required=True)
            p.add_argument("--easyr1-commit", default="")
            p.add_argument("--vllm-trainer", default="")
            p.add_argument("--vllm-server", default="")
            p.add_argument("--model", action="append", default=[], help="role=name (policy, judge, embedder)")
            p.add_argument("--allow-recipe-change", type=int, default=0)
        else:
            p.add_argument("--segment", required=True)
            p.add_argument(
                "--status",
                required=True,
                choices=["stopped", "finished", "crashed", "terminated", "server_failed", "check_failed", "outage"],
            )
            p.add_argument("--trainer-exit", type=lambda v: int(v) if v else None, default=None)
            p.add_argument("--message", default="")

    p = sub.add_parser("restart", help="count a restart (judge, embed, trainer) in the segment and the manifest")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--segment", required=True)
    p.add_argument("--what", required=True, choices=RESTART_KINDS)
    p.add_argument("--reason", default="")
    p.set_defaults(fn=cmd_restart)
    p = sub.add_parser("outage", help="the reward's outage report of a segment, as shell variables")
    p.add_argument("--segment-dir", required=True)
    p.set_defaults(fn=cmd_outage)
    p = sub.add_parser("plot", help="training curves of RUN_DIR/run_log.jsonl as one HTML page")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="output HTML (default RUN_DIR/curves.html)")
    p.set_defaults(fn=cmd_plot)
    p = sub.add_parser("merge", help="rebuild run_log.jsonl and run_summary.json")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--max-steps", type=int, default=None)
    p.set_defaults(fn=cmd_merge)
    p = sub.add_parser("last-step", help="the checkpoint tracker's step (0: none)")
    p.add_argument("--run-dir", required=True)
    p.set_defaults(fn=cmd_last_step)
    p = sub.add_parser("logged-step", help="the highest step logged by a segment")
    p.add_argument("--segment-dir", required=True)
    p.set_defaults(fn=cmd_logged_step)

    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except RunError as e:
        print(f"runlog {a.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
