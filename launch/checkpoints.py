"""EasyR1's checkpoints in a run: which step folder is complete, where to resume, repairing a torn save.

EasyR1 at b44b311 (``RayPPOTrainer._save_checkpoint``) prunes old checkpoints (``save_limit``), writes
``global_step_N/actor/`` (shards; ``huggingface/``, with LoRA ``lora_adapter/``), ``dataloader.pt``, and only then
rewrites ``checkpoint_tracker.json`` (plain ``open("w")``); its ``find_latest_ckpt`` trusts the tracker alone (a
missing folder means step 0, a torn tracker a failed ``json.load``). So the tracker is the commit point:
:func:`find_resume_point` takes the tracker's step when that folder passes :func:`check_step_dir`, else the newest
older one that does; a torn tracker was cut off after its folder was finished, so the newest passing folder counts;
no tracker, nothing counts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core.io import atomic_write_json, read_json
from launch.run_files import CHECKPOINT_TRACKER, INCOMPLETE_DIR, SHARD_RE, STEP_DIR_RE


def step_dirs(ckpt_dir: Path) -> dict[int, Path]:
    """``{step: folder}`` for every ``global_step_N`` folder directly in ``ckpt_dir``."""
    found = [(STEP_DIR_RE.match(p.name), p) for p in ckpt_dir.iterdir()] if ckpt_dir.is_dir() else []
    return {int(m.group(1)): p for m, p in found if m and p.is_dir()}


def check_step_dir(path: Path, require_lora: bool = True) -> str:
    """Why ``path`` is not a complete checkpoint (model, optim and extra_state shards of every rank of one world size,
    the LoRA adapter when ``require_lora``, ``dataloader.pt``; none empty); ``""`` when it is."""
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
    adapter = ("adapter_model.safetensors", "adapter_config.json") if require_lora else ()
    for f in [*(actor / "lora_adapter" / name for name in adapter), path / "dataloader.pt"]:
        if not f.is_file() or f.stat().st_size == 0:
            return f"{f.relative_to(path)} missing or empty"
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
    """Where a job resumes: the last complete checkpoint's ``step`` (0: none, from the start) and ``path``."""

    step: int
    path: Path | None
    incomplete: tuple[int, ...] = ()  # steps of folders never to resume from (newer than step, or failing the check)
    notes: tuple[str, ...] = ()  # why each decision differs from the tracker
    tracker_step: int | None = None  # the tracker's last_global_step (None: missing or unreadable)


def find_resume_point(ckpt_dir: Path, require_lora: bool = True) -> ResumePoint:
    """The last complete checkpoint in ``ckpt_dir`` (the rule is in the module docstring); reads only."""
    dirs = step_dirs(ckpt_dir)
    tracker, problem = read_tracker(ckpt_dir)
    if problem == "missing":
        notes = [f"no {CHECKPOINT_TRACKER}: no step folder was ever committed; starting from step 0"] if dirs else []
        return ResumePoint(0, None, tuple(sorted(dirs)), tuple(notes))
    tracker_step = tracker["last_global_step"] if tracker else None
    notes = [] if tracker else [f"{CHECKPOINT_TRACKER} is {problem} (cut off while being rewritten)"]
    limit = max(dirs, default=0) if tracker_step is None else tracker_step
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
    for step in rp.incomplete:
        (ckpt_dir / INCOMPLETE_DIR).mkdir(exist_ok=True)
        os.replace(ckpt_dir / f"global_step_{step}", ckpt_dir / INCOMPLETE_DIR / f"global_step_{step}.{tag}")
    tracker_path = ckpt_dir / CHECKPOINT_TRACKER
    if rp.step == 0:
        if tracker_path.exists():
            (ckpt_dir / INCOMPLETE_DIR).mkdir(exist_ok=True)
            os.replace(tracker_path, ckpt_dir / INCOMPLETE_DIR / f"{CHECKPOINT_TRACKER}.{tag}")
    elif rp.tracker_step != rp.step:
        tracker, _ = read_tracker(ckpt_dir)
        info = {"best_val_reward_score": 0.0, **(tracker or {}), "last_global_step": rp.step}
        info["best_global_step"] = min(int(info.get("best_global_step", rp.step)), rp.step)
        info["last_actor_path"] = str((rp.path / "actor").resolve())
        atomic_write_json(tracker_path, info)
    return rp
