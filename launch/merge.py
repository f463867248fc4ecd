"""The merged run log: every step exactly once across segments (see :mod:`launch.runlog`, "How the merge keeps each
step once")."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text, loads_record, open_regular
from launch.run_files import REWARD_BATCHES, REWARD_COUNTERS, atomic_write_json, deep_merge, now_iso
from launch.segments import load_segments, segments_dir


# --------------------------------------------------------------------------------------------- merge
@dataclass
class MergeSummary:
    steps: list[int]
    """Steps present in the merged log, ascending."""
    missing: list[int]
    """Steps 1..max logged step (or ..max_steps) that no kept record covers: the first :data:`MAX_MISSING_LISTED`
    (``missing_total`` counts them all; a step of 1e12 is never a list of 1e12 numbers)."""
    superseded: dict[str, list[int]]
    """Per segment: steps whose records were dropped because a later segment resumed from an earlier step."""
    torn_lines: dict[str, int]
    """Per segment: lines that were not valid JSON (a job killed mid-write)."""
    reward_counters: dict[str, dict[str, float]]
    """Per segment: sums of the numeric counters without a step in ``reward_counters.jsonl``."""
    missing_total: int = 0
    """How many steps are missing (``missing`` lists at most :data:`MAX_MISSING_LISTED` of them)."""


MAX_MISSING_LISTED = 1000
"""At most this many missing steps are listed (the rest are counted); logged in the summary when hit."""


def missing_steps(present: list[int], top: int, cap: int = MAX_MISSING_LISTED) -> tuple[list[int], int]:
    """``(the first cap steps of 1..top absent from the sorted list present, how many are absent)`` in time linear
    in ``len(present) + cap``.

    >>> missing_steps([1, 3, 4], 6)
    ([2, 5, 6], 3)
    >>> missing_steps([10**12], 10**12, cap=2)
    ([1, 2], 999999999999)
    """
    listed: list[int] = []
    total, prev = 0, 0
    for s in [*(x for x in present if 1 <= x <= top), top + 1]:
        if s > prev + 1:
            total += s - prev - 1
            listed.extend(range(prev + 1, min(s, prev + 1 + cap - len(listed))))
        prev = max(prev, s)
    return listed, total


def read_log_records(path: Path) -> tuple[list[dict], int]:
    """The objects of a JSONL log that a killed job may have torn, and the number of lines that were not one
    (torn, or holding a number no step can be); ``([], 0)`` when the file does not exist."""
    if not path.exists():
        return [], 0
    rows, torn = [], 0
    with open_regular(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                obj = loads_record(line, f"{path}:{n}")
            except InputError:  # torn, or a number no step can be
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
        rows, n_torn = read_log_records(seg_dir / "experiment_log.jsonl")
        c_rows, c_torn = read_log_records(seg_dir / REWARD_COUNTERS)
        if n_torn + c_torn:
            torn[seg.name] = n_torn + c_torn
        for row in rows:
            if not isinstance(row.get("step"), int) or isinstance(row.get("step"), bool):
                continue
            step = row["step"]
            if step in records:
                records[step] = deep_merge(records[step], row)
            else:
                records[step], owners[step] = dict(row), seg.name
        b_rows, b_torn = read_log_records(seg_dir / REWARD_BATCHES)
        if b_torn:
            torn[seg.name] = torn.get(seg.name, 0) + b_torn
        for row in b_rows:
            n = row.get("batch")
            step = seg.resume_step + n if isinstance(n, int) and n >= 1 else None
            if step is not None and owners.get(step) == seg.name:
                records[step]["train_batch"] = {k: v for k, v in row.items() if k not in ("batch", "time")}
        for row in c_rows:
            step = row.get("step")
            body = {k: v for k, v in row.items() if k not in ("step", "time")}  # the reward stamps each line's time
            if isinstance(step, int) and step in records:
                records[step]["reward_counters"] = deep_merge(records[step].get("reward_counters", {}), body)
            elif not isinstance(step, int):
                tot = counters.setdefault(seg.name, {})
                for k, v in body.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        tot[k] = tot.get(k, 0) + v
    steps = sorted(records)
    top = max([*steps, *([max_steps] if max_steps else [])], default=0)
    missing, missing_total = missing_steps(steps, top)
    lines = [
        json.dumps({"step": s, "segment": owners[s], **{k: v for k, v in records[s].items() if k != "step"}})
        for s in steps
    ]
    atomic_write_text(run_dir / "run_log.jsonl", "".join(line + "\n" for line in lines))
    summary = MergeSummary(steps, missing, {k: sorted(v) for k, v in superseded.items()}, torn, counters,
                           missing_total)  # fmt: skip
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
