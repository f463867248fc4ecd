"""The first GPU day: ``bash launch/grpo_8b.sh --smoke`` runs the recipe for two steps and says what it measured.

The training job of :mod:`launch.job` as it is, with these differences (``--smoke --dry-run`` prints them all):

- its own run folder, ``RUN_DIR/smoke/JOBID`` (a requeued job resumes in it; a real run's checkpoints are never
  touched), ``QUOTECITE_MAX_STEPS=2`` and no next job (``QUOTECITE_CHAIN=0``);
- ``trainer.save_freq=1`` and ``trainer.val_freq=1`` as EasyR1 overrides the launch sets itself (given by the user
  too, they are refused): both steps save a checkpoint and run validation;
- a sampler (``python -m launch.smoke sample``, step ``sstat``) started before the servers: every
  :data:`SAMPLE_EVERY_S` seconds Slurm's ``sstat`` (each job step's ``MaxRSS``, the peak host memory so far) and,
  when ``nvidia-smi`` is there, each GPU's memory in use, into ``smoke_memory.json`` of the run folder (rewritten
  whole after each sample). Outside Slurm, or without ``sstat``, the file says so and the run goes on;
- after the job, ``python -m eval infer --lora RUN/checkpoints/global_step_2/actor/lora_adapter --limit 2`` on the
  evaluation's gold file (``QUOTECITE_EVAL_GOLD``, ``QUOTECITE_EVAL_CACHE_DIR``: ``eval infer`` reads gold records,
  which the training parquet is not), on the first trainer GPU;
- then a table, printed and written to ``smoke_summary.txt``: the step seconds of EasyR1's ``experiment_log.jsonl``
  (``timing_s/step``), the peak host RSS from ``sstat``, the GPU memory from ``nvidia-smi`` and EasyR1's
  ``perf/max_memory_reserved_gb``, next to what ``python -m launch.budget memory`` and ``python -m launch.budget
  gpu`` estimate for the same recipe and overrides (:func:`summary_table`).
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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import atomic_write_json, atomic_write_text, read_json
from launch.executor import Executor, Proc, Step
from launch.merge import read_log_records

SMOKE_STEPS = 2
"""Training steps of the smoke run (``QUOTECITE_MAX_STEPS``)."""
QUESTIONS = 2
"""Questions ``eval infer`` answers with the saved adapter (``--limit``)."""
SAMPLE_EVERY_S = 30.0
"""Seconds between two samples of ``sstat`` and ``nvidia-smi``."""
OWN_OVERRIDES = {"trainer.save_freq": "1", "trainer.val_freq": "1"}
"""EasyR1 keys the smoke run sets itself: a checkpoint and a validation at each of its steps."""
MEMORY_FILE = "smoke_memory.json"
SUMMARY_FILE = "smoke_summary.txt"
GIB = 2**30


# --------------------------------------------------------------------------------------------- the plan
def environment(environ: Mapping[str, str], run_dir: Path, job_id: str) -> dict[str, str]:
    """The settings the smoke run changes: its own run folder ``RUN_DIR/smoke/JOBID``, two steps, no next job.

    >>> environment({}, Path("/r/run"), "42")["QUOTECITE_RUN_DIR"]
    '/r/run/smoke/42'
    """
    return {"QUOTECITE_RUN_DIR": str(run_dir / "smoke" / job_id), "QUOTECITE_MAX_STEPS": str(SMOKE_STEPS),
            "QUOTECITE_CHAIN": "0"}  # fmt: skip


def overrides(args: list[str]) -> list[str]:
    """The user's EasyR1 overrides and the smoke's own; a user override of one of :data:`OWN_OVERRIDES` is refused.

    >>> overrides(["worker.rollout.n=5"])
    ['worker.rollout.n=5', 'trainer.save_freq=1', 'trainer.val_freq=1']
    """
    for a in args:
        key = a.split("=", 1)[0]
        if key in OWN_OVERRIDES:
            raise InputError(f"EasyR1 override {a}: --smoke sets {key}={OWN_OVERRIDES[key]} itself (a checkpoint and a "
                             "validation at each of its two steps); leave it out")  # fmt: skip
    return [*args, *(f"{k}={v}" for k, v in OWN_OVERRIDES.items())]


def adapter_dir(run_dir: Path, step: int = SMOKE_STEPS) -> Path:
    """Where EasyR1 saves the LoRA adapter of ``step`` (what ``eval infer --lora`` takes)."""
    return run_dir / "checkpoints" / f"global_step_{step}" / "actor" / "lora_adapter"


def check_inputs(s, dry: bool) -> None:
    """Before any GPU time: the gold file and the block cache ``eval infer`` needs at the end."""
    if dry:
        return
    gold, cache = s.eval.eval_gold, s.eval.eval_cache_dir or s.run.cache_dir
    if not gold or not Path(gold).is_file():
        raise InputError(f"--smoke: QUOTECITE_EVAL_GOLD must name the gold JSONL eval infer answers {QUESTIONS} "
                         f"questions of (got {str(gold or '') !r})")  # fmt: skip
    if not cache or not Path(cache).is_dir():
        raise InputError("--smoke: QUOTECITE_EVAL_CACHE_DIR (or QUOTECITE_CACHE_DIR) must name the block cache whose "
                         f"manifests name the PDFs (got {str(cache or '')!r})")  # fmt: skip


def start_sampler(job, ex: Executor) -> Proc:
    """The ``sstat`` sampler, in the background for the whole job."""
    run = job.run_dir
    if not ex.dry:
        (run / "logs").mkdir(parents=True, exist_ok=True)
    argv = [job.software["launch_python"], "-m", "launch.smoke", "sample", "--job", job.job_id, "--out",
            str(run / MEMORY_FILE), "--every", f"{SAMPLE_EVERY_S:g}"]  # fmt: skip
    ex.note(
        f"smoke run: {SMOKE_STEPS} steps in {run} (never a real run's checkpoints), "
        + " ".join(f"{k}={v}" for k, v in OWN_OVERRIDES.items())
        + ", no next job (QUOTECITE_CHAIN=0)"
    )
    ex.note(f"smoke: host memory from sstat (each job step's MaxRSS) and GPU memory from nvidia-smi every "
            f"{SAMPLE_EVERY_S:g}s into {run / MEMORY_FILE}")  # fmt: skip
    return ex.start(Step("start", "sstat", argv, env={"PYTHONPATH": str(job_repo())}, gpus=None,
                         log=str(run / "logs" / "sstat.log")))  # fmt: skip


def job_repo() -> Path:
    return Path(__file__).resolve().parents[1]


def after(job, ex: Executor, rc: int, sampler: Proc | None) -> int:
    """After the two steps: stop the sampler, ``eval infer`` with the saved adapter, the summary."""
    ex.note("smoke: stop the sampler")
    if sampler is not None:
        sampler.stop(10)
    run = job.run_dir
    adapter = adapter_dir(run)
    if rc == 0 and (ex.dry or (adapter / "adapter_config.json").is_file()):
        rc = infer(job, ex, adapter)
    elif rc == 0:
        job.log(f"smoke: no LoRA adapter at {adapter}; no inference")
        rc = 1
    else:
        job.log(f"smoke: the job ended with exit {rc}; no inference")
    ex.call("smoke-summary", f"print what the run measured (step seconds of EasyR1's experiment_log.jsonl, peak host "
            f"RSS from sstat, GPU memory) next to python -m launch.budget memory and gpu; write {run / SUMMARY_FILE}",
            lambda: _summary(job))  # fmt: skip
    if ex.dry:  # what the table will compare with, as far as this machine can tell
        e = estimates(job)
        host = "-" if e.host_mem_gib is None else f"{e.host_peak_gib:.1f} GiB (--mem={e.host_mem_gib:.0f}G)"
        trainer = max(((g, ph) for (w, ph), g in e.gpu_phases.items() if w == "trainer"), default=None)
        gpu = "-" if trainer is None else f"{trainer[0]:.1f} GiB ({trainer[1]}, {e.gpu})"
        ex.note(f"smoke: estimates to compare with: host peak {host}; trainer GPU {gpu}")
        for n in e.notes:
            ex.note(f"smoke: {n}")
    return rc


def infer(job, ex: Executor, adapter: Path) -> int:
    s, run = job.s, job.run_dir
    py = list(s.eval.infer_cmd or []) or [job.software.get("server_python", "python3"), "-m", "eval", "infer"]
    gold = str(s.eval.eval_gold or "GOLD.jsonl")
    cache = str(s.eval.eval_cache_dir or s.run.cache_dir or "CACHE_DIR")
    out = run / "smoke_eval" / "predictions.jsonl"
    argv = [*py, "--model", str(job.p.policy_model), "--lora", str(adapter), "--gold", gold, "--interface",
            "language", "--cache-dir", cache, "--limit", str(QUESTIONS), "--out", str(out)]  # fmt: skip
    gpu = job.trainer_gpus.split(",")[0]
    ex.note(f"smoke: eval infer with the adapter of step {SMOKE_STEPS} on {QUESTIONS} questions (GPU {gpu})")
    if not ex.dry:
        out.parent.mkdir(parents=True, exist_ok=True)
    env = {**job.software["env"], "PYTHONPATH": str(job_repo())}
    p = ex.start(Step("start", "infer", argv, env=env, gpus=gpu, log=str(run / "logs" / "smoke_infer.log")))
    rc = p.wait()
    if rc:
        job.log(f"smoke: eval infer failed (exit {rc}); see {run / 'logs' / 'smoke_infer.log'}")
    else:
        job.log(f"smoke: eval infer answered with the adapter: {out}")
    return rc or 0


def estimates(job) -> Estimates:
    """What ``python -m launch.budget memory`` and ``gpu`` estimate for the job's recipe, overrides and layout (the GPU
    kind from Slurm's gres, else the NVIDIA driver)."""
    from launch import budget, budget_gpu

    s, lay, est = job.s, job.layout, Estimates()
    over, world = job.overrides[1:], lay.train_gpus_per_node * len(lay.trainer_nodes)
    try:
        e = budget.plan_from_recipe(job.recipe, over, n_gpus_per_node=lay.train_gpus_per_node,
                                    nnodes=len(lay.trainer_nodes), judge_replicas=len(lay.judges)).estimate  # fmt: skip
        by = {ph: sum(g for (_, g, _), p in zip(e.parts, e.phases, strict=True) if p == ph)
              for ph in ("always", "start", "training")}  # fmt: skip
        est.host_mem_gib, est.host_peak_gib = float(e.total_gib), by["always"] + max(by["start"], by["training"])
    except InputError as err:
        est.notes.append(f"launch.budget memory: {err}")
    gpu, _ = budget_gpu.gpu_from_slurm(job.environ)
    if gpu is None:
        gpu, _ = budget_gpu.gpu_from_driver()
    if gpu is None:
        est.notes.append("launch.budget gpu: no GPU kind known (Slurm's gres or the NVIDIA driver)")
        return est
    try:
        servers = budget_gpu.ServerPlan(s.models.judge_model, s.models.embed_model, s.servers.judge_gpu_util, s.servers.embed_gpu_util,
                                        len({(n, p) for _, n, p in lay.server_gpus()}), len(lay.judges))  # fmt: skip
        b = budget_gpu.estimate(budget_gpu.read_recipe(job.recipe, over, world), gpu, servers)
        est.gpu = f"{gpu.name} {gpu.gib:.0f} GiB"
        est.gpu_phases = {(p.gpu, p.phase): p.need_gib for p in b.phases}
    except InputError as err:
        est.notes.append(f"launch.budget gpu: {err}")
    return est


def _summary(job) -> None:
    run = job.run_dir
    gpus = [int(g) for g in job.trainer_gpus.split(",") if g.isdigit()]
    text = summary_table(read_measured(run), estimates(job), gpus)
    atomic_write_text(run / SUMMARY_FILE, text + "\n")
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------- measured
@dataclass
class Measured:
    """What the smoke run measured."""

    step_seconds: dict[int, float] = field(default_factory=dict)
    """EasyR1's ``timing_s/step`` of each step (checkpoint and validation included)."""
    reserved_gib: dict[int, float] = field(default_factory=dict)
    """EasyR1's ``perf/max_memory_reserved_gb`` of each step (the actor's peak on its GPU, vLLM's freed part out)."""
    rss_gib: dict[str, float] = field(default_factory=dict)
    """Job step (``123.batch``) -> its largest ``MaxRSS`` over the samples."""
    gpu_gib: dict[int, float] = field(default_factory=dict)
    """GPU index -> its largest memory in use over the samples (``nvidia-smi``)."""
    notes: list[str] = field(default_factory=list)


@dataclass
class Estimates:
    host_mem_gib: float | None = None
    """``python -m launch.budget memory``'s ``--mem`` (margin included)."""
    host_peak_gib: float | None = None
    """The same before the margin."""
    gpu: str = ""
    gpu_phases: dict[tuple[str, str], float] = field(default_factory=dict)
    """(``trainer`` or ``server N``, phase) -> GiB (``python -m launch.budget gpu``)."""
    notes: list[str] = field(default_factory=list)


def _nested(row: dict, *keys: str) -> Any:
    """``row["timing_s/step"]`` (flat) or ``row["timing_s"]["step"]`` (EasyR1's file logger unflattens)."""
    flat = row.get("/".join(keys))
    if flat is not None:
        return flat
    for k in keys:
        if not isinstance(row, dict):
            return None
        row = row.get(k)
    return row


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v == v and v >= 0 else None


def read_experiment_log(path: Path, m: Measured) -> None:
    """Step seconds and EasyR1's reserved GPU memory of each step of one ``experiment_log.jsonl`` (a rerun step: its
    last record)."""
    rows, torn = read_log_records(path)
    if torn:
        m.notes.append(f"{path}: {torn} torn line(s) left out")
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        if (t := _number(_nested(row, "timing_s", "step"))) is not None and t > 0:
            m.step_seconds[step] = t
        if (g := _number(_nested(row, "perf", "max_memory_reserved_gb"))) is not None:
            m.reserved_gib[step] = g


def read_samples(path: Path, m: Measured) -> None:
    """The peaks of the sampler's file (:func:`sample_once` records)."""
    if not path.is_file():
        m.notes.append(f"no memory samples ({path} does not exist)")
        return
    d = read_json(path)
    if not isinstance(d, dict) or not isinstance(d.get("samples"), list):
        raise InputError(f"{path}: expected an object with a samples list")
    m.notes += [str(n) for n in d.get("notes", [])]
    for smp in d["samples"]:
        for step, kib in (smp.get("max_rss_kib") or {}).items():
            if (v := _number(kib)) is not None:
                m.rss_gib[step] = max(m.rss_gib.get(step, 0.0), v * 1024 / GIB)
        for g in smp.get("gpus") or []:
            idx, mib = g.get("index"), _number(g.get("memory_used_mib"))
            if isinstance(idx, int) and mib is not None:
                m.gpu_gib[idx] = max(m.gpu_gib.get(idx, 0.0), mib * 2**20 / GIB)


def read_measured(run_dir: Path) -> Measured:
    """Everything the smoke run folder holds: every segment's experiment log and the memory samples."""
    m = Measured()
    logs = sorted(run_dir.glob("segments/*/experiment_log.jsonl"))
    if not logs:
        m.notes.append(f"no experiment_log.jsonl under {run_dir}/segments")
    for log in logs:
        read_experiment_log(log, m)
    read_samples(run_dir / MEMORY_FILE, m)
    return m


def _gib(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} GiB"


def _secs(t: float) -> str:
    return f"{t:.0f}" if t >= 100 else f"{t:.1f}"


def summary_table(m: Measured, e: Estimates, trainer_gpus: list[int] | None = None) -> str:
    """The smoke run's measurements next to the budgets' estimates, one row a quantity.

    ``trainer_gpus``: the indices ``nvidia-smi`` reports for the trainer's GPUs; every other sampled GPU is taken as
    a serving GPU."""
    rows: list[tuple[str, str, str]] = []
    times = [m.step_seconds[k] for k in sorted(m.step_seconds)]
    if times:
        each = ", ".join(_secs(t) for t in times)
        rows.append(("step time", f"{_secs(statistics.median(times))} s (steps: {each})", "-"))
    else:
        rows.append(("step time", "- (no timing_s/step logged)", "-"))
    total = sum(m.rss_gib.values()) if m.rss_gib else None
    steps = "; ".join(f"{k} {v:.1f}" for k, v in sorted(m.rss_gib.items()))
    host_est = "-" if e.host_mem_gib is None else f"{e.host_peak_gib:.1f} GiB, --mem={e.host_mem_gib:.0f}G"
    rows.append(("peak host RSS (sstat MaxRSS)", _gib(total) + (f" ({steps})" if steps else ""),
                 f"{host_est} (launch.budget memory)"))  # fmt: skip
    trainer_need = max((g for (w, _), g in e.gpu_phases.items() if w == "trainer"), default=None)
    phase = next((ph for (w, ph), g in e.gpu_phases.items() if w == "trainer" and g == trainer_need), "")
    tg = set(trainer_gpus or [])
    on_trainer = [v for i, v in m.gpu_gib.items() if i in tg] if tg else list(m.gpu_gib.values())
    est_txt = "-" if trainer_need is None else f"{trainer_need:.1f} GiB ({phase}; launch.budget gpu, {e.gpu})"
    rows.append(("trainer GPU memory (nvidia-smi)", _gib(max(on_trainer, default=None)), est_txt))
    update = e.gpu_phases.get(("trainer", "update"))
    reserved = max(m.reserved_gib.values(), default=None)
    rows.append(("trainer GPU (EasyR1 max reserved)", _gib(reserved),
                 "-" if update is None else f"{update:.1f} GiB (update)"))  # fmt: skip
    serving = [v for i, v in m.gpu_gib.items() if tg and i not in tg]
    server_need = e.gpu_phases.get(("server 1", "serving"))
    rows.append(("serving GPU memory (nvidia-smi)", _gib(max(serving, default=None)), _gib(server_need)))
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    lines = [f"{'smoke run':<{w0}}  {'measured':<{w1}}  estimate", f"{'-' * w0}  {'-' * w1}  --------"]
    lines += [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows]
    lines += [f"note: {n}" for n in [*m.notes, *e.notes]]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- the sampler
def parse_rss(text: str) -> float | None:
    """``sstat``'s ``MaxRSS`` (``123456K``, ``1.5G``, bytes without a unit) in KiB; None when empty.

    >>> parse_rss("2048K"), parse_rss("1.5M"), parse_rss("1G"), parse_rss("")
    (2048.0, 1536.0, 1048576.0, None)
    """
    t = text.strip()
    if not t:
        return None
    mult = {"K": 1, "M": 1024, "G": 1024**2, "T": 1024**3}
    try:
        if t[-1].upper() in mult:
            return float(t[:-1]) * mult[t[-1].upper()]
        return float(t) / 1024
    except ValueError:
        return None


def sstat_rss(job_id: str, sstat: str = "sstat") -> tuple[dict[str, float], str]:
    """Each running step's ``MaxRSS`` (KiB) of ``job_id``, and a note when ``sstat`` gave nothing."""
    argv = [sstat, "--allsteps", "--noheader", "--parsable2", "--format=JobID,MaxRSS", "-j", job_id]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {}, f"sstat: {e}"
    out: dict[str, float] = {}
    for line in r.stdout.splitlines():
        step, _, rss = line.partition("|")
        if (kib := parse_rss(rss)) is not None and step.strip():
            out[step.strip()] = kib
    note = "" if r.returncode == 0 else f"sstat exit {r.returncode}: {r.stderr.strip()[-200:]}"
    return out, note


def gpu_memory(nvidia_smi: str = "nvidia-smi") -> list[dict[str, Any]]:
    """Each GPU's index and memory in use (MiB), from ``nvidia-smi``; empty when it gives nothing."""
    argv = [nvidia_smi, "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and all(p.replace(".", "", 1).isdigit() for p in parts):
            out.append({"index": int(parts[0]), "memory_used_mib": float(parts[1]),
                        "memory_total_mib": float(parts[2])})  # fmt: skip
    return out


def sample_loop(job_id: str, out: Path, every: float, count: int | None = None) -> None:
    """Sample until SIGTERM (or ``count`` samples), rewriting ``out`` whole after each."""
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    notes: list[str] = []
    sstat = shutil.which("sstat")
    in_slurm = job_id and not job_id.startswith(("local", "JOBID"))
    if not sstat:
        notes.append("no sstat on this machine: host memory not sampled")
    elif not in_slurm:
        notes.append(f"job {job_id} is not a Slurm job: host memory not sampled")
    smi = shutil.which("nvidia-smi")
    if not smi:
        notes.append("no nvidia-smi on this machine: GPU memory not sampled")
    doc: dict[str, Any] = {"job": job_id, "every_s": every, "notes": notes, "samples": []}
    t0, n = time.monotonic(), 0
    while not stop["now"] and (count is None or n < count):
        smp: dict[str, Any] = {"time": datetime.now(UTC).isoformat(timespec="seconds"),
                               "elapsed_s": round(time.monotonic() - t0, 1)}  # fmt: skip
        if sstat and in_slurm:
            smp["max_rss_kib"], note = sstat_rss(job_id, sstat)
            if note:
                smp["note"] = note
        if smi:
            smp["gpus"] = gpu_memory(smi)
        doc["samples"].append(smp)
        atomic_write_json(out, doc)
        n += 1
        end = time.monotonic() + every
        while not stop["now"] and time.monotonic() < end and (count is None or n < count):
            time.sleep(min(1.0, every))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.smoke", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sp = sub.add_parser("sample", help="sample sstat and nvidia-smi into a JSON file until SIGTERM")
    sp.add_argument("--job", required=True, help="the Slurm job id")
    sp.add_argument("--out", type=Path, required=True, help="the JSON file (rewritten after each sample)")
    sp.add_argument("--every", type=float, default=SAMPLE_EVERY_S, help="seconds between two samples")
    sp.add_argument("--count", type=int, default=None, help="stop after this many samples (default: at SIGTERM)")
    sm = sub.add_parser("summary", help="the summary table of a smoke run folder (measured side only)")
    sm.add_argument("--run-dir", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        if args.what == "sample":
            if not args.every > 0:
                raise InputError(f"--every {args.every}: expected seconds > 0")
            sample_loop(args.job, args.out, args.every, args.count)
            return 0
        print(summary_table(read_measured(args.run_dir), Estimates()))
        return 0
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
