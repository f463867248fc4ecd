"""EasyR1's checkpoints in a run: which step folder is complete, where to resume, repairing a torn save (see
:mod:`launch.runlog`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.io import read_json
from launch.run_files import CHECKPOINT_TRACKER, INCOMPLETE_DIR, SHARD_RE, STEP_DIR_RE, atomic_write_json


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
            if not p.is_file():  # a folder or a dangling link named like a shard is none
                return f"shard actor/{p.name} is not a file"
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
        info = read_json(path, "checkpoint tracker")
    except (OSError, ValueError) as e:
        return None, f"corrupt: {e}"
    step = info.get("last_global_step") if isinstance(info, dict) else None
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        # EasyR1 writes a whole step >= 0; a negative, fractional, textual or missing one is no step to resume at
        return None, f"corrupt: last_global_step is {step!r}, not a whole number >= 0"
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
