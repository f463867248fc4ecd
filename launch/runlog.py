"""Run bookkeeping for chained training jobs, and ``python -m launch.runlog plot|merge`` (docs/cluster.md).

:mod:`launch.job` calls :func:`plan_run` before it starts anything, :func:`prepare` at every trainer start and
:func:`finish` at every trainer end. A run lives in one folder ``RUN_DIR``::

    checkpoints/               trainer.save_checkpoint_path (EasyR1's step folders and tracker; its
                               experiment_log.jsonl links to the current segment's); incomplete/: torn saves
    segments/<jobid>-<n>/      one per trainer start (n counts the restarts of that job id): segment.json,
                               experiment_log.jsonl, reward_counters.jsonl, server and trainer logs
    run_log.jsonl              merged metrics, each step exactly once (:mod:`launch.merge`); run_summary.json
    manifest.json              commits, recipe hash, vLLM versions, models, jobs, restarts (:mod:`launch.run_manifest`)
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.runlog")

import argparse
import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import atomic_write_json, read_json_object, refuse_page_output
from data_prep.validate import bounded_int
from launch import run_manifest
from launch.checkpoints import find_resume_point, read_tracker, repair_checkpoints
from launch.merge import merge_run_log, read_log_records
from launch.plot import write_curves
from launch.run_files import NO_GROUP_KEPT, RESTART_KINDS, SERVER_OUTAGE, RunError, now_iso, run_lock, sha256_file
from launch.segments import decide_at_end, decide_at_start, load_segments, new_segment, save_segment, segments_dir


@dataclass(frozen=True)
class Plan:
    """What :func:`plan_run` reads from the recipe and the overrides before the job starts anything."""

    max_steps: int
    max_steps_from: str  # where max_steps came from, in words (the setting, the recipe, the data's row count)
    policy_model: str  # worker.actor.model.model_path (empty when the recipe names none)
    require_lora: bool  # worker.actor.model.lora.rank > 0: a complete checkpoint needs the adapter
    logger_override: str = ""  # trainer.logger=[..., file] when the recipe's loggers lack file (the merge reads it)
    path_overrides: tuple[str, ...] = ()  # run_manifest.absolute_path_overrides


def plan_run(recipe_path: Path, max_steps: str, train_files: str, repo: Path, args: list[str]) -> Plan:
    """Read the recipe with the trainer's ``key=value`` overrides ``args``: max_steps (``max_steps`` is the user's
    setting, empty for the recipe's or the data's), the chaining checks, the logger list, and the recipe's relative
    paths made absolute against ``repo``. A recipe that would break chaining is a RunError."""
    overrides = run_manifest.parse_overrides(args)
    recipe = run_manifest.load_recipe(Path(recipe_path))
    errors = run_manifest.check_recipe(recipe, overrides)
    if errors:
        raise RunError(f"recipe {recipe_path}: " + "; ".join(errors))
    get = partial(run_manifest.recipe_value, recipe, overrides)
    train = train_files or str(get("data.train_files") or "")
    max_steps_n, how = run_manifest.plan_max_steps(recipe, overrides, max_steps, train)
    logger = get("trainer.logger", ["console"])
    if isinstance(logger, str):
        logger = [x.strip() for x in logger.strip("[]").split(",") if x.strip()]
    return Plan(
        max_steps=max_steps_n,
        max_steps_from=how,
        policy_model=str(get("worker.actor.model.model_path") or ""),
        require_lora=int(get("worker.actor.model.lora.rank", 0) or 0) > 0,
        logger_override="" if "file" in logger else "trainer.logger=[" + ",".join([*logger, "file"]) + "]",
        path_overrides=tuple(run_manifest.absolute_path_overrides(recipe, overrides, Path(repo).resolve())),
    )


@dataclass(frozen=True)
class Start:
    """What :func:`prepare` decided at a trainer start."""

    action: str  # run (train, in segment), done (the run is complete) or stop (an error, or no progress)
    message: str  # the decision in one line, for the job log
    exit_code: int  # the job's exit status when it does not train
    resume_step: int  # the last complete checkpoint's step (0: none)
    checkpoint_notes: tuple[str, ...] = ()  # what the checkpoint repair did
    segment: str = ""  # the new segment's name <jobid>-<n> when action is run
    segment_dir: Path | None = None  # RUN_DIR/segments/<segment> when action is run


@dataclass(frozen=True)
class End:
    """What :func:`finish` decided at a trainer's end."""

    action: str  # continue (requeue), restart (after an outage, in this job), done, stop or none (Slurm decides)
    message: str
    exit_code: int
    end_step: int  # the last complete checkpoint's step
    logged_steps: int  # how many steps the merged run_log.jsonl holds
    missing_steps: tuple[int, ...] = ()  # checkpointed steps with no metrics (killed between the two; capped)


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
        tag = f"{job_id}-{sum(1 for s in segments if s.job_id == job_id)}"
        rp = repair_checkpoints(run_dir / "checkpoints", tag, require_lora=require_lora)
        for s in segments:
            if s.status == "running" or s.end_step is None:  # its job was killed without cleanup
                if s.status == "running":
                    s.status, s.message = "died", "killed without cleanup (no end recorded)"
                s.end_step = rp.step if s.end_step is None else s.end_step
                save_segment(run_dir, s)
        merge_run_log(run_dir, max_steps)
        d = decide_at_start(segments, rp.step, max_steps, max_stalled)
        base = {
            "run_dir": str(run_dir),
            "git": run_manifest.git_state(Path(repo)),
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
        run_manifest.update_manifest(run_dir, base, job, allow_recipe_change=allow_recipe_change)
    return Start(d.action, d.message, d.exit_code, rp.step, rp.notes, seg_name, seg_dir)


SEGMENT_END_STATUSES = tuple(
    "stopped finished crashed terminated server_failed check_failed outage no_group_kept".split()
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
        seg.status, seg.ended_at, seg.end_step, seg.trainer_exit = status, now_iso(), rp.step, trainer_exit
        seg.message = message or ""
        save_segment(run_dir, seg)
        summary = merge_run_log(run_dir, max_steps)
        d = decide_at_end(segments, max_steps, max_stalled)
        ended = dict(ended_at=seg.ended_at, end_step=rp.step, status=status, trainer_exit=trainer_exit, next=d.action)
        run_manifest.update_manifest(run_dir, {}, {"job_id": seg.job_id, "segment": seg.name, **ended})
    missing = tuple(s for s in summary.missing if s <= rp.step)
    return End(d.action, d.message, d.exit_code, rp.step, len(summary.steps), missing)


def record_restart(run_dir: Path, segment: str, what: str, reason: str = "") -> dict[str, int]:
    """Count one restart of ``what`` (:data:`RESTART_KINDS`) in the segment (``extra.restarts``) and in the run's
    ``manifest.json`` (``restarts``: totals over the run; the job's entry gets its own); returns the run totals."""
    if what not in RESTART_KINDS:
        raise RunError(f"unknown restart kind {what!r} (known: {', '.join(RESTART_KINDS)})")
    with run_lock(run_dir):
        seg = next((s for s in load_segments(run_dir) if s.name == segment), None)
        if seg is None:
            raise RunError(f"{run_dir}: no segment {segment!r}")
        path = run_dir / "manifest.json"
        man = read_json_object(path, "run manifest") if path.exists() else {"jobs": []}
        job = next((j for j in man.get("jobs", []) if j.get("segment") == segment), {})  # prepare() wrote it
        for counts in [d.setdefault("restarts", {}) for d in (seg.extra, man, job)]:
            counts[what] = counts.get(what, 0) + 1
        seg.extra.setdefault("restart_log", []).append({"what": what, "at": now_iso(), "reason": reason})
        save_segment(run_dir, seg)
        atomic_write_json(path, man)
    return dict(man["restarts"])


def read_outage(segment_dir: Path) -> str | None:
    """The reward's outage report of a segment (one line), or None when its reward did not stop on an outage."""
    try:
        info = read_json_object(Path(segment_dir) / SERVER_OUTAGE, "outage report")
        message = str(info.get("message") or info)
    except (OSError, ValueError):
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
    info, _ = read_tracker(Path(run_dir) / "checkpoints")  # a missing or corrupt tracker is None
    return info["last_global_step"] if info else 0


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
    line = f"run_log.jsonl: {len(s.steps)} steps" + (f" ({s.steps[0]}..{s.steps[-1]})" if s.steps else "")
    if s.missing_total > len(s.missing):
        line += f"; missing {s.missing_total} step(s) (first {len(s.missing)}: {s.missing[0]}..{s.missing[-1]})"
    elif s.missing:
        line += f"; missing {s.missing}"
    print(line + (f"; superseded {s.superseded}" if s.superseded else ""))
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
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
