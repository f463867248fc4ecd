"""The first GPU day: ``bash launch/grpo_8b.sh --smoke`` runs the recipe for two steps and says what it measured.

What it changes, samples, runs after the job and compares: docs/cluster.md ("The smoke run"); ``--smoke --dry-run``
prints it. :mod:`launch.job` calls :func:`environment`, :func:`overrides` and :func:`check_inputs` before the job,
:func:`start_sampler` and :func:`after` around it; ``python -m launch.smoke sample`` is the sampler.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.smoke")

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import atomic_write_json, atomic_write_text, read_json
from launch.executor import Executor, Proc, Step
from launch.merge import read_log_records

SMOKE_STEPS = 2
QUESTIONS = 2  # the questions eval infer answers with the saved adapter (--limit)
SAMPLE_EVERY_S = 30.0
OWN_OVERRIDES = {"trainer.save_freq": "1", "trainer.val_freq": "1"}  # a checkpoint and a validation at each step
MEMORY_FILE = "smoke_memory.json"
SUMMARY_FILE = "smoke_summary.txt"
REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------- the plan
def environment(environ: Mapping[str, str], run_dir: Path, job_id: str) -> dict[str, str]:
    """The settings the smoke run changes: its own run folder ``RUN_DIR/smoke/JOBID``, two steps, no next job."""
    own = str(run_dir / "smoke" / job_id)
    return {"QUOTECITE_RUN_DIR": own, "QUOTECITE_MAX_STEPS": str(SMOKE_STEPS), "QUOTECITE_CHAIN": "0"}


def overrides(args: list[str]) -> list[str]:
    """The user's EasyR1 overrides, then the smoke's own; a user override of a key in :data:`OWN_OVERRIDES` fails."""
    for a in args:
        key = a.split("=", 1)[0]
        if key in OWN_OVERRIDES:
            raise InputError(
                f"EasyR1 override {a}: --smoke sets {key}={OWN_OVERRIDES[key]} itself (a checkpoint and a "
                "validation at each of its two steps); leave it out"
            )
    return [*args, *(f"{k}={v}" for k, v in OWN_OVERRIDES.items())]


def check_inputs(s, dry: bool) -> None:
    """Before any GPU time: the gold file and block cache ``eval infer`` needs at the end (it reads gold records,
    which the training parquet is not)."""
    if dry:
        return
    gold, cache = s.eval.eval_gold, s.eval.eval_cache_dir or s.run.cache_dir
    if not gold or not Path(gold).is_file():
        raise InputError(
            f"--smoke: QUOTECITE_EVAL_GOLD must name the gold JSONL eval infer answers {QUESTIONS} questions of "
            f"(got {str(gold or '')!r})"
        )
    if not cache or not Path(cache).is_dir():
        raise InputError(
            "--smoke: QUOTECITE_EVAL_CACHE_DIR (or QUOTECITE_CACHE_DIR) must name the block cache whose manifests "
            f"name the PDFs (got {str(cache or '')!r})"
        )


def start_sampler(job, ex: Executor) -> Proc:
    """The ``sstat`` and ``nvidia-smi`` sampler, in the background for the whole job."""
    run = job.run_dir
    if not ex.dry:
        (run / "logs").mkdir(parents=True, exist_ok=True)
    own = " ".join(f"{k}={v}" for k, v in OWN_OVERRIDES.items())
    ex.note(f"smoke run: {SMOKE_STEPS} steps in {run} (never a real run's checkpoints), {own}, no next job")
    argv = [job.software["launch_python"], "-m", "launch.smoke", "sample", "--job", job.job_id]
    argv += ["--out", str(run / MEMORY_FILE), "--every", f"{SAMPLE_EVERY_S:g}"]
    log = str(run / "logs" / "sstat.log")
    return ex.start(Step("start", "sstat", argv, env={"PYTHONPATH": str(REPO)}, gpus=None, log=log))


def after(job, ex: Executor, rc: int, sampler: Proc | None) -> int:
    """After the two steps: stop the sampler, ``eval infer`` of :data:`QUESTIONS` questions with the saved adapter
    on the first trainer GPU, the summary."""
    ex.note("smoke: stop the sampler")
    if sampler is not None:
        sampler.stop(10)
    s, run = job.s, job.run_dir
    adapter = run / "checkpoints" / f"global_step_{SMOKE_STEPS}" / "actor" / "lora_adapter"
    if rc != 0:
        job.log(f"smoke: the job ended with exit {rc}; no inference")
    elif not ex.dry and not (adapter / "adapter_config.json").is_file():
        job.log(f"smoke: no LoRA adapter at {adapter}; no inference")
        rc = 1
    else:
        py = list(s.eval.infer_cmd or []) or [job.software.get("server_python", "python3"), "-m", "eval", "infer"]
        out, log = run / "smoke_eval" / "predictions.jsonl", run / "logs" / "smoke_infer.log"
        gold = str(s.eval.eval_gold or "GOLD.jsonl")
        cache = str(s.eval.eval_cache_dir or s.run.cache_dir or "CACHE_DIR")
        argv = [*py, "--model", str(job.p.policy_model), "--lora", str(adapter), "--gold", gold]
        argv += ["--interface", "language", "--cache-dir", cache, "--limit", str(QUESTIONS), "--out", str(out)]
        gpu = job.trainer_gpus.split(",")[0]
        if not ex.dry:
            out.parent.mkdir(parents=True, exist_ok=True)
        env = {**job.software["env"], "PYTHONPATH": str(REPO)}
        rc = ex.start(Step("start", "infer", argv, env=env, gpus=gpu, log=str(log))).wait() or 0
        if rc:
            job.log(f"smoke: eval infer failed (exit {rc}); see {log}")
        else:
            job.log(f"smoke: eval infer answered with the adapter: {out}")
    est, est_notes = estimates(job)

    def summary() -> None:
        got, notes = measured(run, [int(g) for g in job.trainer_gpus.split(",") if g.isdigit()])
        text = summary_table(got, est, notes + est_notes)
        atomic_write_text(run / SUMMARY_FILE, text + "\n")
        print(text, file=sys.stderr, flush=True)

    what = "print the step seconds, host RSS and GPU memory measured next to python -m launch.budget memory and gpu"
    ex.call("smoke-summary", f"{what}; write {run / SUMMARY_FILE}", summary)
    if ex.dry:  # what the table will compare with, as far as this machine can tell
        host, trainer = est.get(HOST, "-"), est.get(TRAINER, "-")
        for line in [f"estimates to compare with: host peak {host}; trainer GPU {trainer}", *est_notes]:
            ex.note(f"smoke: {line}")
    return rc


# --------------------------------------------------------------------------------------------- the summary
STEP, HOST = "step time", "peak host RSS (sstat MaxRSS)"
TRAINER, RESERVED = "trainer GPU memory (nvidia-smi)", "trainer GPU (EasyR1 max reserved)"
SERVING = "serving GPU memory (nvidia-smi)"
ROWS = (STEP, HOST, TRAINER, RESERVED, SERVING)  # the table's rows: measured() and estimates() give their cells


def estimates(job) -> tuple[dict[str, str], list[str]]:
    """The estimate column, by row, and what could not be estimated: the budgets the job made for its recipe,
    overrides and layout (``python -m launch.budget memory`` and ``gpu``; the GPU kind from Slurm's gres, else the
    NVIDIA driver)."""
    cells, est, b = {}, job.host_estimate, job.gpu_budget
    if est is not None:
        cells[HOST] = f"{est.peak_gib:.1f} GiB (--mem={est.sbatch_mem})"
    if b is not None:
        need = {(p.gpu, p.phase): p.need_gib for p in b.phases}
        peak, phase = max((g, ph) for (on, ph), g in need.items() if on == "trainer")
        cells[TRAINER] = f"{peak:.1f} GiB ({phase}, {b.gpu.name} {b.gpu.gib:.0f} GiB)"
        cells[RESERVED] = _gib(need.get(("trainer", "update")), " (update)")
        cells[SERVING] = _gib(need.get(("server 1", "serving")))
    return cells, list(job.budget_skipped)


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 else None


def _metric(row: dict, group: str, key: str) -> float | None:
    """``row[group][key]``: EasyR1's file logger nests its metrics (``{"timing_s": {"step": 912.4}}``)."""
    values = row.get(group)
    return _number(values.get(key)) if isinstance(values, dict) else None


def _gib(v: float | None, what: str = "") -> str:
    return "-" if v is None else f"{v:.1f} GiB{what}"


def _secs(t: float) -> str:
    return f"{t:.0f}" if t >= 100 else f"{t:.1f}"


def measured(run_dir: Path, trainer_gpus: list[int]) -> tuple[dict[str, str], list[str]]:
    """The measured column, by row, and what could not be read: EasyR1's ``timing_s/step`` and
    ``perf/max_memory_reserved_gb`` of each step (a rerun step: its last record), the peaks of the samples.
    ``trainer_gpus``: the ``nvidia-smi`` indices of the trainer's GPUs; every other GPU is taken as a serving GPU."""
    seconds, reserved, rss, gpus, notes = {}, {}, {}, {}, []
    logs = sorted(run_dir.glob("segments/*/experiment_log.jsonl"))
    if not logs:
        notes.append(f"no experiment_log.jsonl under {run_dir}/segments")
    for log in logs:
        rows, torn = read_log_records(log)
        if torn:
            notes.append(f"{log}: {torn} torn line(s) left out")
        for row in rows:
            step = row.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                if t := _metric(row, "timing_s", "step"):
                    seconds[step] = t
                if (g := _metric(row, "perf", "max_memory_reserved_gb")) is not None:
                    reserved[step] = g
    samples, d = run_dir / MEMORY_FILE, {"samples": []}
    if samples.is_file():
        d = read_json(samples)
    else:
        notes.append(f"no memory samples ({samples} does not exist)")
    if not isinstance(d, dict) or not isinstance(d.get("samples"), list):
        raise InputError(f"{samples}: expected an object with a samples list")
    notes += [str(n) for n in d.get("notes", [])]
    for smp in d["samples"]:
        for job_step, kib in (smp.get("max_rss_kib") or {}).items():
            if (v := _number(kib)) is not None:
                rss[job_step] = max(rss.get(job_step, 0.0), v / 2**20)
        for g in smp.get("gpus") or []:
            idx, mib = g.get("index"), _number(g.get("memory_used_mib"))
            if isinstance(idx, int) and mib is not None:
                gpus[idx] = max(gpus.get(idx, 0.0), mib / 1024)
    times = [seconds[k] for k in sorted(seconds)]
    each = "; ".join(f"{k} {v:.1f}" for k, v in sorted(rss.items()))
    trainer = set(trainer_gpus)
    step = "- (no timing_s/step logged)"
    if times:
        step = f"{_secs(statistics.median(times))} s (steps: {', '.join(map(_secs, times))})"
    cells = {
        STEP: step,
        HOST: _gib(sum(rss.values()) if rss else None, f" ({each})" if each else ""),
        TRAINER: _gib(max((v for i, v in gpus.items() if not trainer or i in trainer), default=None)),
        RESERVED: _gib(max(reserved.values(), default=None)),
        SERVING: _gib(max((v for i, v in gpus.items() if trainer and i not in trainer), default=None)),
    }
    return cells, notes


def summary_table(got: dict[str, str], estimated: dict[str, str], notes: list[str]) -> str:
    """The measured column next to the estimates, one row of :data:`ROWS` a quantity (``-``: none), then notes."""
    rows = [(name, got.get(name, "-"), estimated.get(name, "-")) for name in ROWS]
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    head = f"{'smoke run':<{w0}}  {'measured':<{w1}}  estimate (python -m launch.budget memory, gpu)"
    lines = [head, f"{'-' * w0}  {'-' * w1}  --------"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    return "\n".join(lines + [f"note: {n}" for n in notes])


# --------------------------------------------------------------------------------------------- the sampler
def parse_rss(text: str) -> float | None:
    """``sstat``'s ``MaxRSS`` (``123456K``, ``1.5G``, bytes without a unit) in KiB; None when empty or unreadable."""
    t = text.strip().upper()
    unit = "KMGT".find(t[-1:]) if t[-1:].isalpha() else -1
    try:
        return float(t[:-1]) * 1024**unit if unit >= 0 else float(t) / 1024
    except ValueError:
        return None


def _query(argv: list[str]) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of a query program; (None, "", why) when it cannot run."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, "", str(e)
    return r.returncode, r.stdout, r.stderr


def sample(job_id: str, sstat: str | None, smi: str | None) -> dict[str, Any]:
    """One sample: each running step's ``MaxRSS`` (KiB) of ``job_id`` from ``sstat`` (and a note when it fails),
    each GPU's memory (MiB) from ``nvidia-smi``; a tool that is None is not asked."""
    smp: dict[str, Any] = {}
    if sstat:
        argv = [sstat, "--allsteps", "--noheader", "--parsable2", "--format=JobID,MaxRSS", "-j", job_id]
        rc, out, err = _query(argv)
        smp["max_rss_kib"] = {}
        for line in out.splitlines():
            step, _, rss = line.partition("|")
            if (kib := parse_rss(rss)) is not None and step.strip():
                smp["max_rss_kib"][step.strip()] = kib
        if rc != 0:
            smp["note"] = f"sstat: {err}" if rc is None else f"sstat exit {rc}: {err.strip()[-200:]}"
    if smi:
        _, out, _ = _query([smi, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"])
        smp["gpus"] = []
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 3 and all(p.replace(".", "", 1).isdigit() for p in parts):
                idx, used, total = parts
                smp["gpus"].append(
                    {"index": int(idx), "memory_used_mib": float(used), "memory_total_mib": float(total)}
                )
    return smp


def sample_loop(job_id: str, out: Path, every: float, count: int | None = None) -> None:
    """Sample until SIGTERM (or ``count`` samples), rewriting ``out`` whole after each."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # SystemExit: the write in progress cleans up after itself
    notes: list[str] = []
    sstat, smi = shutil.which("sstat"), shutil.which("nvidia-smi")
    if not sstat:
        notes.append("no sstat on this machine: host memory not sampled")
    elif not job_id or job_id.startswith(("local", "JOBID")):
        notes.append(f"job {job_id} is not a Slurm job: host memory not sampled")
        sstat = None
    if not smi:
        notes.append("no nvidia-smi on this machine: GPU memory not sampled")
    doc: dict[str, Any] = {"job": job_id, "every_s": every, "notes": notes, "samples": []}
    t0 = time.monotonic()
    while count is None or len(doc["samples"]) < count:
        if doc["samples"]:
            time.sleep(every)
        when = {"time": datetime.now(UTC).isoformat(timespec="seconds"), "elapsed_s": round(time.monotonic() - t0, 1)}
        doc["samples"].append({**when, **sample(job_id, sstat, smi)})
        atomic_write_json(out, doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.smoke", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["sample"], help="sample sstat and nvidia-smi into a JSON file until SIGTERM")
    ap.add_argument("--job", required=True, help="the Slurm job id")
    ap.add_argument("--out", type=Path, required=True, help="the JSON file (rewritten after each sample)")
    ap.add_argument("--every", type=float, default=SAMPLE_EVERY_S, help="seconds between two samples")
    ap.add_argument("--count", type=int, default=None, help="stop after this many samples (default: at SIGTERM)")
    args = ap.parse_args(argv)
    if not args.every > 0:
        ap.error(f"--every {args.every}: expected seconds > 0")
    try:
        sample_loop(args.job, args.out, args.every, args.count)
    except InputError as e:  # the file cannot be written
        ap.exit(1, f"error: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
