"""The merged run log ``RUN_DIR/run_log.jsonl``: every step exactly once across segments.

Segments are replayed in start order. One that resumed from step ``r`` rolled the model back to ``r``, so every
record of a step ``> r`` from an earlier segment is superseded and the rerun's replaces it; several lines for one
step (training, then validation metrics) merge into one record. EasyR1 logs a step right *after* saving its
checkpoint, so a job killed in between keeps a step no rerun logs: ``run_summary.json`` lists it as ``missing``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_json, atomic_write_text, loads_record, open_regular
from launch.run_files import REWARD_BATCHES, REWARD_COUNTERS, now_iso
from launch.segments import load_segments, segments_dir

MAX_MISSING_LISTED = 1000  # the rest are counted: a step of 1e12 is no list of 1e12 numbers


@dataclass
class MergeSummary:
    steps: list[int]  # the steps in the merged log, ascending
    missing: list[int]  # the first MAX_MISSING_LISTED of steps 1..max(last step, max_steps) no record covers
    superseded: dict[str, list[int]]  # per segment: steps a later segment's resume dropped
    torn_lines: dict[str, int]  # per segment: lines that were not valid JSON (a job killed mid-write)
    reward_counters: dict[str, dict[str, float]]  # per segment: sums of reward_counters.jsonl lines with no step
    missing_total: int = 0


def missing_steps(present: list[int], top: int, cap: int = MAX_MISSING_LISTED) -> tuple[list[int], int]:
    """``(the first cap steps of 1..top absent from the sorted list present, how many are absent)`` in time linear
    in ``len(present) + cap``.

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
            try:
                obj = loads_record(line, f"{path}:{n}") if line else None
            except InputError:
                torn += 1
                continue
            if isinstance(obj, dict):
                rows.append(obj)
    return rows, torn


def deep_merge(base: dict, extra: dict) -> dict:
    """``extra`` merged into a copy of ``base``; nested dicts merge key by key, other values are replaced."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def merge_run_log(run_dir: Path, max_steps: int | None = None) -> MergeSummary:
    """Merge every segment's ``experiment_log.jsonl`` into ``run_log.jsonl`` (one record per step, with its
    ``segment``) and write ``run_summary.json``, both atomically. Step-keyed ``reward_counters.jsonl`` lines join
    their step; the reward's ``reward_batches.jsonl`` records become each step's ``train_batch``: the reward of the
    responses that trained, where EasyR1's ``reward/*`` keys average every response generated in the attempts."""
    records: dict[int, dict] = {}  # step -> its record, with the segment that first logged it
    superseded: dict[str, list[int]] = {}
    torn: dict[str, int] = {}
    counters: dict[str, dict[str, float]] = {}
    for seg in load_segments(run_dir):
        for step in [s for s in records if s > seg.resume_step]:
            superseded.setdefault(records.pop(step)["segment"], []).append(step)
        logs = {}
        for name in ("experiment_log.jsonl", REWARD_BATCHES, REWARD_COUNTERS):
            logs[name], n_torn = read_log_records(segments_dir(run_dir) / seg.name / name)
            if n_torn:
                torn[seg.name] = torn.get(seg.name, 0) + n_torn
        for row in logs["experiment_log.jsonl"]:
            step = row.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                records[step] = deep_merge(records.get(step, {"step": step, "segment": seg.name}), row)
        for row in logs[REWARD_BATCHES]:
            n = row.get("batch")
            step = seg.resume_step + n if isinstance(n, int) and n >= 1 else None
            if step in records and records[step]["segment"] == seg.name:
                records[step]["train_batch"] = {k: v for k, v in row.items() if k not in ("batch", "time")}
        for row in logs[REWARD_COUNTERS]:
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
    missing, missing_total = missing_steps(steps, max([*steps, max_steps or 0]))
    atomic_write_text(run_dir / "run_log.jsonl", "".join(json.dumps(records[s]) + "\n" for s in steps))
    superseded = {k: sorted(v) for k, v in superseded.items()}
    summary = MergeSummary(steps, missing, superseded, torn, counters, missing_total)
    first, last = (steps[0], steps[-1]) if steps else (None, None)
    head = {"n_steps": len(steps), "first_step": first, "last_step": last, "max_steps": max_steps}
    # the step list is run_log.jsonl itself
    atomic_write_json(run_dir / "run_summary.json", {**head, **asdict(summary), "steps": None, "merged_at": now_iso()})
    return summary
