"""Job segments of a run (one per start of the trainer) and the decisions taken at a segment's start and end.

EasyR1's ``file`` logger truncates ``experiment_log.jsonl`` at every start (docs/cluster.md), so each segment gets
its own file (:func:`new_segment`) and :mod:`launch.merge` joins them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.io import atomic_write_json, read_json_object
from launch.run_files import LOGGED_FILES, RunError, now_iso


@dataclass
class Segment:
    """One start of the trainer inside one Slurm job, saved as ``segments/<name>/segment.json``."""

    name: str  # <jobid>-<n>: n counts earlier segments of the same job id (its requeues and restarts)
    job_id: str
    seq: int  # start order within the run (1, 2, ...)
    started_at: str
    resume_step: int  # step of the checkpoint this segment resumed from (0: from the start)
    status: str = "running"  # running, died or one of launch.runlog.SEGMENT_END_STATUSES
    ended_at: str | None = None
    end_step: int | None = None  # the last complete checkpoint when the segment ended
    trainer_exit: int | None = None
    message: str = ""
    host: str = ""
    extra: dict = field(default_factory=dict)


def segments_dir(run_dir: Path) -> Path:
    return run_dir / "segments"


def load_segments(run_dir: Path) -> list[Segment]:
    """All segments of the run, in start order."""
    paths = sorted(segments_dir(run_dir).glob("*/segment.json"))
    return sorted((segment_of(read_json_object(p, "segment"), p) for p in paths), key=lambda s: s.seq)


_FIELD_TYPES = dict(
    name=str, job_id=str, seq=int, started_at=str, resume_step=int, status=str, end_step=int | None, extra=dict
)
_EXPECTED = {str: "a string", int: "a whole number >= 0", int | None: "a whole number >= 0 or null", dict: "an object"}


def segment_of(d: dict, path: Path) -> Segment:
    """A :class:`Segment` from a ``segment.json`` record, every field checked (:class:`RunError` naming the file and
    the field: a torn or hand-edited file never becomes a segment with a textual step)."""
    for key, kind in _FIELD_TYPES.items():
        v = d.get(key, {} if kind is dict else None)
        if not isinstance(v, kind) or isinstance(v, bool) or (isinstance(v, int) and v < 0):
            raise RunError(f"segment file {path}: field {key!r} is {v!r}, expected {_EXPECTED[kind]}")
    return Segment(**{k: v for k, v in d.items() if k in Segment.__dataclass_fields__})


def save_segment(run_dir: Path, seg: Segment) -> None:
    atomic_write_json(segments_dir(run_dir) / seg.name / "segment.json", asdict(seg))


def new_segment(run_dir: Path, job_id: str, resume_step: int) -> Segment:
    """Create ``segments/<jobid>-<n>/`` and point EasyR1's truncating log files at it."""
    existing = load_segments(run_dir)
    n = sum(1 for s in existing if s.job_id == job_id)
    seq = max((s.seq for s in existing), default=0) + 1
    seg = Segment(f"{job_id}-{n}", job_id, seq, now_iso(), resume_step, host=os.uname().nodename)
    (segments_dir(run_dir) / seg.name).mkdir(parents=True)
    save_segment(run_dir, seg)
    ckpt_dir = run_dir / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    for name in LOGGED_FILES:
        link = ckpt_dir / name
        tmp = ckpt_dir / f".{name}.{os.getpid()}.lnk"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(Path("..") / "segments" / seg.name / name)
        if link.exists() and not link.is_symlink():  # a log written before segments existed: keep it
            os.replace(link, segments_dir(run_dir) / f"pre-segment-{name}")
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
    """What the chain does next: ``run`` this job, ``continue`` (the job requeues itself), ``done``, ``stop``
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
        why = (
            f"{stalled} jobs in a row made no progress (still at step {resume_step}, max_stalled_jobs={max_stalled}); "
            "not training. See the trainer logs under segments/; fix the cause and submit again with a larger "
            "QUOTECITE_MAX_STALLED_JOBS or after removing the stalled segments."
        )
        return Decision("stop", why, 1)
    return Decision("run", f"resuming from step {resume_step}" if resume_step else "starting from step 0")


def decide_at_end(segments: list[Segment], max_steps: int, max_stalled: int) -> Decision:
    """What follows the segment that just ended (the last of ``segments``)."""
    seg = segments[-1]
    end = seg.end_step or 0
    if seg.status in ("server_failed", "check_failed", "no_group_kept"):  # a rerun would fail the same way
        return Decision("stop", f"not resubmitting: {seg.message}", 1)
    if seg.status == "outage" and end < max_steps:
        return Decision("restart", f"server outage at step {end}: restarting the servers and the trainer", 0)
    if seg.status == "terminated":
        why = "job was cancelled or requeued by Slurm; no new job submitted (a requeued job resumes by itself)"
        return Decision("none", why, 143)
    if end >= max_steps:
        return Decision("done", f"run complete: global_step_{end} reaches max_steps={max_steps}")
    if seg.status == "finished":
        why = f"the trainer exited normally at step {end} < max_steps={max_steps}; not resubmitting"
        return Decision("stop", why + " (does the recipe's trainer.max_steps agree with the launch's?)", 1)
    stalled = stalled_count(segments)
    if max_stalled > 0 and stalled >= max_stalled:
        why = f"{stalled} jobs in a row made no progress (stuck at step {end}); not resubmitting. Last trainer exit"
        return Decision("stop", f"{why} code {seg.trainer_exit}; see segments/{seg.name}/trainer.log", 1)
    crashed = seg.status == "crashed"
    why = f"trainer {'crashed' if crashed else 'stopped'} at step {end} of {max_steps}; the run continues"
    return Decision("continue", why, int(crashed))
