"""Run bookkeeping for chained training jobs: checkpoints, job segments, the merged run log, the manifest.

The training job (:mod:`launch.job`) calls :func:`plan_run` before it starts anything, :func:`prepare` at every
trainer start and :func:`finish` at every trainer end, and passes their typed records (:class:`Plan`,
:class:`Start`, :class:`End`) between its steps. A *run* lives in one folder ``RUN_DIR``::

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
trainer in a new segment of the same job, which resumes like any other (:func:`read_outage`, :func:`record_restart`).
``manifest.json`` counts every restart (``restarts``: ``judge``, ``embed``, ``trainer``), overall and per job; each
segment keeps its own in ``extra.restarts``.

The training batch: each step's ``train_batch`` comes from the reward's ``reward_batches.jsonl`` (see
:func:`merge_run_log`), the reward of the responses that trained. ``python -m launch.runlog plot RUN_DIR`` draws
the curves (:mod:`launch.plot`).

The parts live in :mod:`launch.run_files`, :mod:`launch.checkpoints`, :mod:`launch.segments`,
:mod:`launch.merge` and :mod:`launch.run_manifest`; this module holds the job's steps and the command line
(``plot``, ``merge``). Only the standard library is imported at module level (PyYAML only to read a recipe), so any
Python 3.11 runs it.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.runlog")

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import read_json_object
from data_prep.validate import bounded_int
from launch.checkpoints import (
    find_resume_point,
    read_tracker,
    repair_checkpoints,
)
from launch.merge import (
    merge_run_log,
    read_log_records,
)
from launch.run_files import (
    NO_GROUP_KEPT,
    RESTART_KINDS,
    SERVER_OUTAGE,
    RunError,
    atomic_write_json,
    now_iso,
    run_lock,
    sha256_file,
)
from launch.run_manifest import (
    absolute_path_overrides,
    check_recipe,
    git_state,
    load_recipe,
    parse_overrides,
    plan_max_steps,
    recipe_value,
    update_manifest,
)
from launch.segments import (
    Segment,
    decide_at_end,
    decide_at_start,
    load_segments,
    new_segment,
    save_segment,
    segments_dir,
)


# --------------------------------------------------------------------------------------------- the job's steps
@dataclass(frozen=True)
class Plan:
    """What :func:`plan_run` reads from the recipe and the overrides before the job starts anything."""

    max_steps: int
    """The trainer's ``trainer.max_steps``: the setting, the recipe, or worked out from the training data."""
    max_steps_from: str
    """Where :attr:`max_steps` came from, in words (``recipe trainer.max_steps``, the data's row count, ...)."""
    policy_model: str
    """``worker.actor.model.model_path``: the policy the run trains (empty when the recipe names none)."""
    require_lora: bool
    """Whether the recipe trains a LoRA adapter (``worker.actor.model.lora.rank > 0``): a checkpoint needs one."""
    recipe_sha256: str
    """The recipe file's SHA-256."""
    save_freq: int
    """``trainer.save_freq`` (checked > 0 by :func:`~launch.run_manifest.check_recipe`)."""
    save_limit: int | None
    """``trainer.save_limit``, None when neither the recipe nor an override sets it."""
    logger_override: str = ""
    """``trainer.logger=[..., file]`` when the recipe's loggers lack ``file`` (the merge reads its log), else empty."""
    path_overrides: tuple[str, ...] = ()
    """The recipe's relative paths made absolute and the reward's batch shape, as ``key=value`` overrides (the
    format prompt, the reward function, ``batch_groups``, ``keep_band``; only those that apply)."""


def plan_run(recipe_path: Path, max_steps: str, train_files: str, repo: Path, args: list[str]) -> Plan:
    """Read the recipe (with the trainer's ``key=value`` overrides ``args``): max_steps (``max_steps``: the
    user's setting, empty for the recipe's or the data's), the chaining checks, the logger list, and the
    recipe's relative paths made absolute against ``repo``. A recipe that would break chaining is a RunError."""
    overrides = parse_overrides(args)
    recipe = load_recipe(Path(recipe_path))
    errors = check_recipe(recipe, overrides)
    if errors:
        raise RunError(f"recipe {recipe_path}: " + "; ".join(errors))
    train = train_files or str(recipe_value(recipe, overrides, "data.train_files", "") or "")
    max_steps_n, how = plan_max_steps(recipe, overrides, max_steps, train)
    logger = recipe_value(recipe, overrides, "trainer.logger", ["console"])
    if isinstance(logger, str):
        logger = [x.strip() for x in logger.strip("[]").split(",") if x.strip()]
    lora_rank = int(recipe_value(recipe, overrides, "worker.actor.model.lora.rank", 0) or 0)
    paths = absolute_path_overrides(recipe, overrides, Path(repo).resolve())
    save_limit = recipe_value(recipe, overrides, "trainer.save_limit", None)
    return Plan(
        max_steps=max_steps_n,
        max_steps_from=how,
        policy_model=str(recipe_value(recipe, overrides, "worker.actor.model.model_path", "") or ""),
        require_lora=lora_rank > 0,
        recipe_sha256=sha256_file(Path(recipe_path)),
        save_freq=int(recipe_value(recipe, overrides, "trainer.save_freq", -1)),
        save_limit=None if save_limit is None else int(save_limit),
        logger_override="" if "file" in logger else "trainer.logger=[" + ",".join([*logger, "file"]) + "]",
        path_overrides=tuple(
            v
            for k in ("data.format_prompt", "worker.reward.reward_function", "batch_groups", "keep_band")
            if (v := paths.get(k, ""))
        ),
    )


@dataclass(frozen=True)
class Start:
    """What :func:`prepare` decided at a trainer start."""

    action: str
    """``run`` (train, in :attr:`segment`), ``done`` (the run is complete) or ``stop`` (an error, or no progress)."""
    message: str
    """The decision in one line, for the job log."""
    exit_code: int
    """The job's exit status when it does not train."""
    resume_step: int
    """The last complete checkpoint's step (0: none): where the trainer resumes."""
    checkpoint_notes: tuple[str, ...] = ()
    """What the checkpoint repair did (a torn tracker rewritten, folders moved to ``incomplete/``)."""
    segment: str = ""
    """The new segment's name ``<jobid>-<n>``; empty unless :attr:`action` is ``run``."""
    segment_dir: Path | None = None
    """``RUN_DIR/segments/<segment>``; None unless :attr:`action` is ``run``."""


@dataclass(frozen=True)
class End:
    """What :func:`finish` decided at a trainer's end."""

    action: str
    """``continue`` (requeue this job), ``restart`` (after an outage, in this job), ``done``, ``stop`` or ``none``
    (:class:`~launch.segments.Decision`)."""
    message: str
    """The decision in one line, for the job log."""
    exit_code: int
    """The job's exit status."""
    end_step: int
    """The last complete checkpoint's step at the end of the segment."""
    logged_steps: int
    """How many steps the merged ``run_log.jsonl`` holds."""
    missing_steps: tuple[int, ...] = ()
    """Checkpointed steps with no metrics (killed between the checkpoint and its log line; listed, capped)."""


def _close_stale(run_dir: Path, segments: list[Segment], resume_step: int) -> None:
    for s in segments:
        changed = False
        if s.status == "running":
            s.status, s.message, changed = "died", "killed without cleanup (no end recorded)", True
        if s.end_step is None:
            s.end_step, changed = resume_step, True
        if changed:
            save_segment(run_dir, s)


def prepare(run_dir: Path, job_id: str, *, max_steps: int, max_stalled: int, require_lora: bool, repo: Path,
            recipe: Path, easyr1_commit: str = "", vllm_trainer: str = "", vllm_server: str = "",
            models: dict[str, str] | None = None, allow_recipe_change: bool = False,
            job_extra: dict[str, Any] | None = None) -> Start:  # fmt: skip
    """At a trainer start: repair the checkpoints, pick the resume step, close stale segments, decide, open a
    segment when the decision is ``run``, record the job in ``manifest.json`` (with the commits, vLLM versions
    and ``models`` by role; ``job_extra`` goes into the job's entry)."""
    run_dir = Path(run_dir).resolve()
    with run_lock(run_dir):
        segments = load_segments(run_dir)
        ckpt = run_dir / "checkpoints"
        tag = f"{job_id}-{sum(1 for s in segments if s.job_id == job_id)}"
        rp = repair_checkpoints(ckpt, tag, require_lora=require_lora)
        _close_stale(run_dir, segments, rp.step)
        merge_run_log(run_dir, max_steps)
        d = decide_at_start(segments, rp.step, max_steps, max_stalled)
        base = {
            "run_dir": str(run_dir),
            "git": git_state(Path(repo)),
            "recipe": {"path": str(recipe), "sha256": sha256_file(Path(recipe))},
            "easyr1_commit": easyr1_commit,
            "vllm": {"trainer": vllm_trainer, "server": vllm_server},
            "models": dict(models or {}),
            "max_steps": max_steps,
        }
        job = {
            **(job_extra or {}),
            "job_id": job_id,
            "host": os.uname().nodename,
            "started_at": now_iso(),
            "git_commit": base["git"]["commit"],
            "resume_step": rp.step,
        }
        seg_name, seg_dir = "", None
        if d.action == "run":
            seg = new_segment(run_dir, job_id, rp.step)
            seg_name, seg_dir = seg.name, segments_dir(run_dir) / seg.name
            job["segment"] = seg.name
        else:
            job.update(status=d.action, message=d.message, ended_at=now_iso())
        update_manifest(run_dir, base, job, allow_recipe_change=allow_recipe_change)
    return Start(action=d.action, message=d.message, exit_code=d.exit_code, resume_step=rp.step,
                 checkpoint_notes=tuple(rp.notes), segment=seg_name, segment_dir=seg_dir)  # fmt: skip


SEGMENT_END_STATUSES = (
    "stopped",
    "finished",
    "crashed",
    "terminated",
    "server_failed",
    "check_failed",
    "outage",
    "no_group_kept",
)


def finish(run_dir: Path, segment: str, *, status: str, trainer_exit: int | None, message: str, max_steps: int,
           max_stalled: int, require_lora: bool = True) -> End:  # fmt: skip
    """At a trainer's end: close the segment with ``status`` (:data:`SEGMENT_END_STATUSES`), the trainer's exit
    status and ``message``, merge the run log, decide what the chain does next."""
    if status not in SEGMENT_END_STATUSES:
        raise RunError(f"unknown segment status {status!r} (known: {', '.join(SEGMENT_END_STATUSES)})")
    run_dir = Path(run_dir).resolve()
    with run_lock(run_dir):
        segments = load_segments(run_dir)
        seg = next((s for s in segments if s.name == segment), None)
        if seg is None:
            raise RunError(f"{run_dir}: no segment {segment!r}")
        rp = find_resume_point(run_dir / "checkpoints", require_lora=require_lora)
        seg.status, seg.ended_at, seg.end_step = status, now_iso(), rp.step
        seg.trainer_exit = trainer_exit
        seg.message = message or ""
        save_segment(run_dir, seg)
        summary = merge_run_log(run_dir, max_steps)
        d = decide_at_end(segments, max_steps, max_stalled)
        job = {
            "job_id": seg.job_id,
            "segment": seg.name,
            "ended_at": seg.ended_at,
            "end_step": rp.step,
            "status": seg.status,
            "trainer_exit": trainer_exit,
            "next": d.action,
        }
        update_manifest(run_dir, {}, job)
    missing = tuple(s for s in summary.missing if s <= rp.step)
    return End(action=d.action, message=d.message, exit_code=d.exit_code, end_step=rp.step,
               logged_steps=len(summary.steps), missing_steps=missing)  # fmt: skip


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
        man = read_json_object(path, "run manifest") if path.exists() else {"jobs": []}
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


def read_outage(segment_dir: Path) -> str | None:
    """The reward's outage report of a segment (one line), or None when its reward did not stop on an outage."""
    try:
        info = read_json_object(Path(segment_dir) / SERVER_OUTAGE, "outage report")
        message = str(info.get("message") or info)
    except (OSError, ValueError, AttributeError):
        return None
    return " ".join(message.split())


def read_no_group_kept(segment_dir: Path, resume_step: int = 0) -> str | None:
    """The reward's report of an attempt that kept no group (:data:`~launch.run_files.NO_GROUP_KEPT`), as the one
    line the job ends with, or None when there is none."""
    try:
        info = read_json_object(Path(segment_dir) / NO_GROUP_KEPT, "no-group-kept report")
    except (OSError, ValueError):
        return None
    d = info.get("dropped") if isinstance(info.get("dropped"), dict) else {}
    batch = info.get("batch") if isinstance(info.get("batch"), int) else "?"
    step = resume_step + batch if isinstance(batch, int) else "?"
    return (f"training stopped at step {step}: attempt {info.get('attempt', '?')} of its batch kept no group of "
            f"{info.get('groups', '?')} ({d.get('zero_variance', 0)} with equal rewards, {d.get('all_unscorable', 0)} "
            f"unscorable, {d.get('out_of_band', 0)} out of the keep band); EasyR1 b44b311 stops at the first such "
            "attempt (No sample is kept after filtering), and a requeue would meet the same batch: check the judge "
            "and the policy's outputs (segments' samples/) before resuming from the last checkpoint")  # fmt: skip


def last_step(run_dir: Path) -> int:
    """The tracker's step (what EasyR1 last committed), 0 when none: cheap, for polling during a stop."""
    try:
        info, _ = read_tracker(Path(run_dir) / "checkpoints")
        return int(info["last_global_step"]) if info else 0
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def logged_step(segment_dir: Path) -> int:
    """The highest step in a segment's experiment log (0 when none)."""
    try:
        rows, _ = read_log_records(Path(segment_dir) / "experiment_log.jsonl")
    except (OSError, ValueError):
        return 0
    return max((r["step"] for r in rows if isinstance(r.get("step"), int)), default=0)


# --------------------------------------------------------------------------------------------- command line
def cmd_merge(a: argparse.Namespace) -> int:
    run_dir = Path(a.run_dir).resolve()
    if not run_dir.is_dir():  # a misspelt run folder is said, never created and merged as an empty run
        raise RunError(f"run folder {a.run_dir}: not a folder")
    if not any((run_dir / "segments").glob("*/segment.json")):  # nothing to merge: a good run_log.jsonl is kept
        raise RunError(f"run folder {a.run_dir}: no segments/*/segment.json to merge (is this a run folder?); "
                       "run_log.jsonl is left as it is")  # fmt: skip
    with run_lock(run_dir):
        s = merge_run_log(run_dir, a.max_steps)
    print(
        f"run_log.jsonl: {len(s.steps)} steps"
        + (f" ({s.steps[0]}..{s.steps[-1]})" if s.steps else "")
        + (f"; missing {s.missing_total} step(s)" if s.missing_total > len(s.missing) else "")
        + (f"; missing {s.missing}" if s.missing and s.missing_total == len(s.missing) else "")
        + (f" (first {len(s.missing)}: {s.missing[0]}..{s.missing[-1]})" if s.missing_total > len(s.missing) else "")
        + (f"; superseded {s.superseded}" if s.superseded else "")
    )
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    from core.io import refuse_page_output
    from launch.plot import write_curves

    run_dir = Path(a.run_dir)
    out = Path(a.out) if a.out else run_dir / "curves.html"
    refuse_page_output(out, run_dir)
    out = write_curves(run_dir / "run_log.jsonl", out)
    print(f"training curves: {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.runlog", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("plot", help="training curves of RUN_DIR/run_log.jsonl as one HTML page")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="output HTML (default RUN_DIR/curves.html)")
    p.set_defaults(fn=cmd_plot)
    p = sub.add_parser("merge", help="rebuild run_log.jsonl and run_summary.json")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--max-steps", type=bounded_int(1, 10**9), default=None)
    p.set_defaults(fn=cmd_merge)

    a = ap.parse_args(argv)
    try:
        return a.fn(a)
    except (RunError, InputError) as e:
        print(f"runlog {a.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
