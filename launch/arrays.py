"""The evaluation and data-prep Slurm programs, with the training job's executors (:mod:`launch.executor`).

``launch/eval_8b.sh`` and ``launch/prep_array.sh`` are their ``#SBATCH`` header, their help block and one line,
``python -m launch.arrays eval|prep SCRIPT [--dry-run | --help]``; the dry run walks the same code with the printing
executor. What each does, and its settings, is the help block of its script (``--help`` prints it).

- ``eval``: one job (judge and embedder on the last GPU, base and base + adapter inference on the other two in
  parallel, then ``eval resolve`` and ``eval score`` for both), or, with ``QUOTECITE_EVAL_SHARDS=N``, an inference
  array of N tasks and a scoring job after it (``QUOTECITE_EVAL_PHASE``: which one this is).
- ``prep``: a ``data_prep longdocurl --shard I/N`` array and a ``--finalize`` job after it
  (``QUOTECITE_PREP_PHASE``).

Both submit from a login node with ``sbatch --parsable`` (without this shell's ``SLURM_*`` variables or GPU list),
the second job ``--dependency=afterok:<array> --kill-on-invalid-dep=yes``; the jobs they submit run this same
script. Errors name the setting or input and end the program with status 1 (the last lines of the logs shown).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.arrays")

import argparse
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from core.errors import InputError
from launch import settings
from launch.executor import Executor, JobStepError, PrintingExecutor, Proc, Step
from launch.layout import PORT_TOKEN
from launch.serving import WRAP_GRACE_S, NotHealthy, no_proxy_env, server_argv, wait_healthy

REPO = Path(__file__).resolve().parents[1]


class Fail(Exception):
    """The program cannot go on: logged as ``error: ...`` with the last lines of ``logs``; exit 1 (143: SIGTERM)."""

    def __init__(self, message: str, logs: tuple[Path, ...] = (), code: int = 1) -> None:
        super().__init__(message)
        self.logs, self.code = logs, code


def help_text(script: Path) -> str:
    """The script's lines between ``# --- help ---`` and ``# --- end help ---``, without the comment marks."""
    block = script.read_text().split("# --- help ---\n", 1)[1].split("# --- end help ---\n", 1)[0]
    return "".join(re.sub(r"^# ?", "", line) + "\n" for line in block.splitlines())


def gpu_split(n_first: int, n_second: int, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    """The job's GPUs (Slurm's ``CUDA_VISIBLE_DEVICES`` when set, else 0..N-1): the first ``n_first``, the next
    ``n_second``."""
    given = environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [g for g in given.split(",") if g.strip()] if given else [str(i) for i in range(n_first + n_second)]
    if len(gpus) < n_first + n_second:
        raise Fail(f"this job sees {len(gpus)} GPU(s) (CUDA_VISIBLE_DEVICES={given or 'unset'}), needs "
                   f"{n_first + n_second}")  # fmt: skip
    return gpus[:n_first], gpus[n_first : n_first + n_second]


class Program:
    """What both programs share: the executor, the log, the processes to stop, the submission of two jobs."""

    def __init__(self, dry: bool, s: settings.Settings, job_id: str, run_dir: Path | None = None) -> None:
        self.s, self.dry, self.job_id, self.run_dir = s, dry, job_id, run_dir
        self.ex: Executor = PrintingExecutor() if dry else Executor(log=self.log)
        self.procs: list[Proc] = []
        self.terminating = False

    def log(self, msg: str) -> None:
        """A timestamped line on stderr (the Slurm log) and in RUN_DIR/chain.log when there is one."""
        if self.dry:
            return
        line = f"[{datetime.now():%Y-%m-%d %H:%M:%S}] [quotecite {self.job_id}] {msg}"
        print(line, file=sys.stderr, flush=True)
        if self.run_dir is not None and self.run_dir.is_dir():
            with open(self.run_dir / "chain.log", "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def say(self, text: str) -> None:
        """A line of the dry run's plan (``# ...``); nothing when running."""
        if self.dry:
            self.ex.note(text)

    def start(self, step: Step) -> Proc:
        p = self.ex.start(step)
        self.procs.append(p)
        return p

    def run(self, step: Step) -> int:
        """Run to its end, its output into this program's (the Slurm log); the dry run prints it."""
        if self.dry:
            return self.ex.run(step)[0]
        self.log(f"{step.name}: {shlex.join(step.argv)}")
        try:
            return subprocess.run(step.argv, env=Executor._env(step), stdin=subprocess.DEVNULL).returncode
        except OSError as e:
            raise Fail(f"cannot run {step.name} ({step.argv[0]}): {e}") from None

    def stop_all(self, grace: float = 20) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                self.log(f"stopping {p.name} (pid {p.pid})")
            p.stop(max(grace, WRAP_GRACE_S + 3))
        self.procs = []

    def on_term(self, *_: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.terminating = True
        raise Fail("SIGTERM: stopping", code=143)

    def submit(self, array: list[str], final: Callable[[str], list[str]], what: tuple[str, str]) -> tuple[str, str]:
        """``sbatch`` the array job, then the job ``final(array_id)`` after it; their ids."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")
                 and k not in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")}  # fmt: skip
        rc, out = self.ex.run(Step("run", "sbatch", ["sbatch", "--parsable", *array]), env=clean)
        if rc:
            raise Fail(f"sbatch of the {what[0]} failed")
        first = out.strip().split(";")[0]
        rc, out = self.ex.run(Step("run", "sbatch", ["sbatch", "--parsable", *final(first)]), env=clean)
        if rc:
            raise Fail(f"sbatch of the {what[1]} failed ({what[0]} {first} was submitted; scancel it or submit the "
                       f"{what[1]})")  # fmt: skip
        return first, out.strip().split(";")[0]


# ============================================================================================== evaluation
class Eval(Program):
    def __init__(self, dry: bool, environ: dict[str, str]) -> None:
        s = settings.resolve(environ, REPO, {"eval"})
        super().__init__(dry, s, environ.get("SLURM_JOB_ID", "local"), Path(s.run.run_dir).resolve())
        self.environ = environ
        self.shards, self.phase = s.eval.eval_shards, s.eval.eval_phase or ""
        self.software()
        if s.eval.eval_step is not None:
            self.step = s.eval.eval_step
        else:
            from launch.runlog import last_step

            self.step = last_step(self.run_dir)
        self.adapter = self.run_dir / f"checkpoints/global_step_{self.step}/actor/lora_adapter"
        self.policy = s.models.policy_model or ""
        if not self.policy:
            from launch.setup import recipe_policy

            try:
                self.policy = recipe_policy(REPO, {**environ, "QUOTECITE_RECIPE": str(s.run.recipe)})
            except (InputError, OSError):  # said when the job runs (check_inputs), shown as missing in the dry run
                self.policy = ""
        self.out = Path(s.eval.eval_out or self.run_dir / f"eval/step_{self.step}").resolve()
        if not dry:
            self.check_inputs()
        self.gold, self.cache = str(s.eval.eval_gold or "GOLD.jsonl"), str(s.eval.eval_cache_dir or "CACHE_DIR")
        if self.phase and not self.shards:
            raise Fail(f"QUOTECITE_EVAL_PHASE={self.phase} needs QUOTECITE_EVAL_SHARDS")
        pdf = ["--pdf-dir", str(s.eval.eval_pdf_dir)] if s.eval.eval_pdf_dir else []
        self.infer_common = ["--gold", self.gold, "--interface", "language", "--cache-dir", self.cache, *pdf,
                             *(s.eval.eval_infer_args or [])]  # fmt: skip

    def software(self) -> None:
        """The programs, said (never a silent fallback): ``eval infer`` the server venv's python (vLLM), ``eval
        resolve``/``score`` QUOTECITE_PYTHON, else the project's .venv, else the server venv's; ``vllm serve``."""
        s = self.s
        from launch import setup

        sw = setup.job_env(REPO, self.environ)
        self.sw_env = sw["env"] if s.software.env_setup else {}
        self.problems = setup.readiness(REPO, self.environ) if s.software.env_setup else []
        server = f"the server venv, vLLM {sw['vllm_server']}"
        if s.eval.infer_cmd:
            self.infer, infer_what = list(s.eval.infer_cmd), "QUOTECITE_INFER_CMD"
        elif s.software.env_setup:
            self.infer, infer_what = [sw["server_python"], "-m", "eval", "infer"], server
        elif shutil.which("python3"):
            self.infer, infer_what = [shutil.which("python3"), "-m", "eval", "infer"], "python3 on PATH, QUOTECITE_ENV_SETUP=0"  # fmt: skip
        else:
            raise Fail("no python3 on PATH for eval infer (QUOTECITE_ENV_SETUP=0); set QUOTECITE_INFER_CMD, or use "
                       "the server venv: python -m launch.setup setup --only server")  # fmt: skip
        venv = REPO / ".venv" / "bin" / "python"
        if s.run.python:
            self.py, py_what = str(s.run.python), "QUOTECITE_PYTHON"
        elif os.access(venv, os.X_OK):
            self.py, py_what = str(venv), "the project's .venv"
        elif s.software.env_setup and (self.dry or os.access(sw["server_python"], os.X_OK)):
            self.py, py_what = sw["server_python"], server
        else:
            raise Fail(f"no python for eval resolve/score: neither {REPO}/.venv (make install) nor the server venv "
                       "(python -m launch.setup setup --only server); or set QUOTECITE_PYTHON")  # fmt: skip
        self.serve_cmd = {"judge": list(s.servers.judge_cmd or []), "embed": list(s.servers.embed_cmd or [])}
        for role in self.serve_cmd:
            self.serve_cmd[role] = self.serve_cmd[role] or [
                sw["server_vllm"] if s.software.env_setup else "vllm",
                "serve",
            ]
        self.pythons = [f"eval infer:          {shlex.join(self.infer)} ({infer_what})",
                        f"eval resolve, score: {self.py} ({py_what})"]  # fmt: skip
        if self.problems and not self.dry:
            for line in self.problems:
                self.log(f"missing: {line}")
            raise Fail(f"the set-up is incomplete ({len(self.problems)} missing, above); jobs never install or "
                       "download: run the commands above on a login node (or as a CPU job), then resubmit")  # fmt: skip
        if not self.dry:
            os.environ.update(self.sw_env)
            os.environ.update(no_proxy_env([socket.gethostname()], os.environ))
            for line in self.pythons:
                self.log(f"python for {line}")

    def check_inputs(self) -> None:
        s = self.s
        if not (self.step > 0 and (self.adapter / "adapter_config.json").is_file()):
            raise Fail(f"no LoRA adapter at {self.adapter} (set QUOTECITE_RUN_DIR or QUOTECITE_EVAL_STEP)")
        if not (s.eval.eval_gold and Path(s.eval.eval_gold).is_file()):
            raise Fail(f"QUOTECITE_EVAL_GOLD must name the gold JSONL (got '{s.eval.eval_gold or ''}')")
        if not (s.eval.eval_cache_dir and Path(s.eval.eval_cache_dir).is_dir()):
            raise Fail(f"QUOTECITE_EVAL_CACHE_DIR must name the block cache (got '{s.eval.eval_cache_dir or ''}')")
        if not self.policy:
            raise Fail("no base model: set QUOTECITE_POLICY_MODEL")
        # The paper's two-call judge reads CiteVQA's prompts from the user's checkout: fail now, not after inference.
        score = f" {shlex.join(s.eval.eval_score_args or [])} "
        if " --judge-protocol rubric " not in score and " --citevqa-dir " not in score:
            if not (s.eval.citevqa_dir and Path(s.eval.citevqa_dir).is_dir()):
                raise Fail("QUOTECITE_CITEVQA_DIR must name a CiteVQA checkout (its prompts/ are the judge's; got "
                           f"'{s.eval.citevqa_dir or ''}'), or pass --judge-protocol rubric in QUOTECITE_EVAL_SCORE_ARGS")  # fmt: skip

    def header(self, title: str, when: str) -> None:
        none = f" (none yet: the run's last complete checkpoint {when})" if self.step == 0 else ""
        self.say(f"quotecite evaluation{title}")
        if self.s.software.env_setup:
            from launch.setup import status

            self.say("set-up (python -m launch.setup status):")
            for line in status(REPO, self.environ).table().splitlines() + [f"missing: {x}" for x in self.problems]:
                self.say(line)
            self.say("every process runs with " + " ".join(f"{k}={v}" for k, v in self.sw_env.items()))
        self.say(f"checkpoint      step {self.step}: {self.adapter}{none}")
        self.say(f"base model      {self.policy or '<QUOTECITE_POLICY_MODEL>'}")
        self.say(f"output          {self.out}")
        for line in self.pythons:
            self.say(f"python          {line}")

    def main(self) -> int:
        if not self.dry:
            for sub in ("base", "lora", "logs"):
                (self.out / sub).mkdir(parents=True, exist_ok=True)
        if not self.shards:
            return self.one_job()
        if not self.phase:
            return self.submit_array()
        return self.infer_task() if self.phase == "infer" else self.score_job()

    # ------------------------------------------------------------------------------------------ the steps
    def infer_pair(self, tag: str, gpus: list[str], base_out: Path, lora_out: Path, *flags: str) -> None:
        """Base inference on ``gpus[0]`` and base + adapter on ``gpus[1]``, in parallel; fails when one fails."""
        procs, logs = [], []
        for side, out, lora, gpu in (("base", base_out, [], gpus[0]),
                                     ("lora", lora_out, ["--lora", str(self.adapter)], gpus[1])):  # fmt: skip
            logs.append(self.out / "logs" / f"infer_{side}{tag}.log")
            argv = [*self.infer, "--model", self.policy, *lora, "--out", str(out), *self.infer_common, *flags]
            procs.append(self.start(Step("start", f"infer_{side}", argv, {"PYTHONPATH": str(REPO)}, gpu,
                                         str(logs[-1]))))  # fmt: skip
        rcs = [p.wait() for p in procs]
        if any(rcs):
            raise Fail(f"inference failed (base exit {rcs[0]}, LoRA exit {rcs[1]})", tuple(logs))
        self.procs = [p for p in self.procs if p not in procs]

    def serve(self, gpu: str) -> dict[str, str]:
        """The judge, then the embedder, on ``gpu``, each waited for; the env of resolve and score."""
        s, urls = self.s, {}
        for role, model, pref in (
            ("judge", s.models.judge_model, s.servers.judge_port),
            ("embed", s.models.embed_model, s.servers.embed_port),
        ):
            label = f"{'judge server' if role == 'judge' else 'embedding server'} ({model} on GPU {gpu})"
            log, port_file = self.out / "logs" / f"{role}.log", self.out / "logs" / f"{role}.port"
            if not self.dry:
                port_file.unlink(missing_ok=True)
            argv = [sys.executable, str(REPO / "launch" / "layout.py"), "run", "--gpus", "0", "--grace",
                    str(WRAP_GRACE_S), "--port-file", str(port_file), "--bind-host", "127.0.0.1",
                    *(["--prefer-port", str(pref)] if pref else []), "--",
                    *server_argv(role, s, "127.0.0.1", PORT_TOKEN, self.serve_cmd[role])]  # fmt: skip
            proc = self.start(Step("start", role, argv, gpus=gpu, log=str(log)))

            def port(port_file: Path = port_file) -> int:
                try:
                    return int(port_file.read_text().strip())
                except (OSError, ValueError):
                    return 0

            def wait(proc: Proc = proc, label: str = label, log: Path = log, port: Callable = port) -> int:
                try:
                    took = wait_healthy(lambda: f"http://127.0.0.1:{port()}/health" if port() else "", label,
                                        s.servers.health_timeout, s.servers.health_poll, str(log), proc.poll,
                                        stop=lambda: self.terminating)  # fmt: skip
                except NotHealthy as e:
                    raise Fail(str(e), (log,)) from None
                self.log(f"{label} is healthy at http://127.0.0.1:{port()}/v1 after {took:.0f}s")
                return port()

            got = self.ex.wait(f"health-{role}", f"wait until the /health of {role} answers 200 on its port (read "
                               f"from {port_file.name}; at most {s.servers.health_timeout:g}s), else stop: {label} is not "
                               f"healthy, see {log}", wait, dry_result=pref or PORT_TOKEN)  # fmt: skip
            urls[role] = f"http://127.0.0.1:{got}/v1"
        return {"QUOTECITE_JUDGE_URL": urls["judge"], "QUOTECITE_EMBED_URL": urls["embed"],
                "QUOTECITE_JUDGE_MODEL": s.models.judge_model, "QUOTECITE_EMBED_MODEL": s.models.embed_model,
                "PYTHONPATH": str(REPO)}  # fmt: skip

    def resolve_and_score(self, env: dict[str, str]) -> None:
        s = self.s
        for side, label in (("base", "base"), ("lora", f"grpo-step{self.step}")):
            d = self.out / side
            resolve = [self.py, "-m", "eval", "resolve", "--pred", str(d / "predictions.jsonl"), "--gold", self.gold,
                       "--cache-dir", self.cache, "--out", str(d / "citations.jsonl"), *(s.eval.eval_resolve_args or [])]  # fmt: skip
            if self.run(Step("run", f"resolve-{side}", resolve, env)):
                raise Fail(f"eval resolve failed for {side}")
            score = [self.py, "-m", "eval", "score", "--gold", self.gold, "--pred", str(d / "citations.jsonl"), "--out",
                     str(d / "score"), "--cache-dir", self.cache, "--judge-url", env["QUOTECITE_JUDGE_URL"],
                     "--judge-model", s.models.judge_model, "--label", label, *(s.eval.eval_score_args or [])]  # fmt: skip
            if self.run(Step("run", f"score-{side}", score, env)):
                raise Fail(f"eval score failed for {side}")

    def shard_out(self, side: str, i: int) -> Path:
        return self.out / side / f"predictions.shard-{i}-of-{self.shards}.jsonl"  # as eval.infer.shard_file

    # ------------------------------------------------------------------------------------------ the modes
    def one_job(self) -> int:
        infer_gpus, (server_gpu,) = gpu_split(2, 1, self.environ)
        self.header(", dry run (nothing is started)" if self.dry else "", "when the job runs")
        self.say(f"GPU split       base inference CUDA_VISIBLE_DEVICES={infer_gpus[0]}, LoRA inference "
                 f"CUDA_VISIBLE_DEVICES={infer_gpus[1]}; judge + embedder CUDA_VISIBLE_DEVICES={server_gpu}")  # fmt: skip
        self.log(f"evaluating step {self.step} of {self.run_dir} into {self.out}")
        self.say(f"1. servers on GPU {server_gpu}, one after the other")
        env = self.serve(server_gpu)
        self.say("2. inference, base and base + adapter in parallel")
        self.infer_pair("", infer_gpus, self.out / "base/predictions.jsonl", self.out / "lora/predictions.jsonl")
        self.say("3. resolve quotes through the embedder, then score with the judge")
        self.resolve_and_score(env)
        self.stop_all()
        self.log(f"done: {self.out}/base/score and {self.out}/lora/score")
        return 0

    def submit_array(self) -> int:
        s, n = self.s, self.shards
        tasks = s.eval.eval_tasks or f"1-{n}"
        export = (f"--export=ALL,QUOTECITE_REPO={REPO},QUOTECITE_RUN_DIR={self.run_dir},QUOTECITE_EVAL_STEP="
                  f"{self.step},QUOTECITE_EVAL_OUT={self.out},QUOTECITE_EVAL_SHARDS={n},QUOTECITE_EVAL_PHASE=")  # fmt: skip
        extra, script = list(s.eval.eval_sbatch_args or []), str(REPO / "launch" / "eval_8b.sh")
        array = [f"--array={tasks}", "--gpus-per-node=2", f"--output={self.out}/logs/infer-%A_%a.out", *extra,
                 export + "infer", script]  # fmt: skip

        def score(job: str) -> list[str]:
            return [f"--dependency=afterok:{job}", "--kill-on-invalid-dep=yes", "--gpus-per-node=1",
                    f"--output={self.out}/logs/score-%j.out", *extra, export + "score", script]  # fmt: skip

        self.header(" as a Slurm array, dry run (nothing is submitted)", "at submission")
        self.say(f"shards          {n} (1-based, by a hash of the gold index), array tasks {tasks}")
        if self.dry and Path(self.gold).is_file():
            from data_prep.shards import shard_plan
            from eval.schemas import read_gold

            for line in shard_plan([g.key for g in read_gold(self.gold)[: self.limit()]], n, "questions"):
                self.say(line[2:])
        self.say("1. the inference array, 2 GPUs a task:")
        if self.dry:  # the plan of every task and of the scoring job, between the two sbatch lines
            self.ex.run(Step("run", "sbatch-1", ["sbatch", "--parsable", *array]))
            gpus, _ = gpu_split(2, 0, self.environ)
            for i in range(1, n + 1):
                self.say(f"  task {i}, shard {i}/{n}:")
                self.infer_pair(f"-{i}", gpus, self.shard_out("base", i), self.shard_out("lora", i), "--shard",
                                f"{i}/{n}")  # fmt: skip
            self.say("2. the scoring job, 1 GPU, after every task succeeded (cancelled if one fails):")
            self.ex.run(Step("run", "sbatch-2", ["sbatch", "--parsable", *score("ARRAYJOB")]))
            return self.score_job()
        array_job, score_job = self.submit(array, score, ("inference array", "scoring job"))
        print(f"array job {array_job}: inference shards {tasks} of {n} (logs {self.out}/logs/infer-{array_job}_*.out)")
        print(f"score job {score_job}: after afterok:{array_job} (log {self.out}/logs/score-{score_job}.out)")
        return 0

    def limit(self) -> int | None:
        """``--limit N`` of QUOTECITE_EVAL_INFER_ARGS (the questions inference answers), else None."""
        words = list(self.s.eval.eval_infer_args or [])
        for i, w in enumerate(words):
            if w == "--limit" and i + 1 < len(words) and words[i + 1].isdigit():
                return int(words[i + 1])
            if w.startswith("--limit=") and w[8:].isdigit():
                return int(w[8:])
        return None

    def infer_task(self) -> int:
        task, n = self.environ.get("SLURM_ARRAY_TASK_ID", ""), self.shards
        if not (task.isdigit() and 1 <= int(task) <= n):
            raise Fail(f"QUOTECITE_EVAL_PHASE=infer runs as array task 1..{n} (SLURM_ARRAY_TASK_ID='{task}')")
        i = int(task)
        gpus, _ = gpu_split(2, 0, self.environ)
        self.log(f"inference shard {i}/{n} of step {self.step} into {self.out}")
        self.infer_pair(f"-{i}", gpus, self.shard_out("base", i), self.shard_out("lora", i), "--shard", f"{i}/{n}")
        self.log(f"done: shard {i}/{n}")
        return 0

    def score_job(self) -> int:
        _, (gpu,) = gpu_split(0, 1, self.environ)
        self.log(f"scoring step {self.step} of {self.run_dir} from {self.shards} inference shards in {self.out}")
        self.say(f"  servers on GPU {gpu}, one after the other:")
        env = self.serve(gpu)
        self.say(
            f"  merge the {self.shards} shards of each side into predictions.jsonl (fails on a missing question):"
        )
        for side in ("base", "lora"):
            self.ex.call(f"merge-{side}", f"eval.infer.merge_shards: the {self.shards} shards of {side} into "
                         f"{self.out}/{side}/predictions.jsonl", lambda side=side: self.merge(side))  # fmt: skip
        self.say("  resolve quotes through the embedder, then score with the judge:")
        self.resolve_and_score(env)
        self.stop_all()
        self.log(f"done: {self.out}/base/score and {self.out}/lora/score")
        return 0

    def merge(self, side: str) -> None:
        from eval.infer import merge_shards

        path = self.out / side / "predictions.jsonl"
        try:
            n = merge_shards(Path(self.gold), path, self.shards, self.limit())
        except (InputError, OSError) as e:
            raise Fail(f"merging the {side} inference shards failed: {e}") from None
        print(f"{path}: {n} predictions merged from {self.shards} shards", flush=True)


# ============================================================================================== data prep
class Prep(Program):
    def __init__(self, dry: bool, environ: dict[str, str]) -> None:
        s = settings.resolve(environ, REPO, {"prep"})
        job = environ.get("SLURM_ARRAY_JOB_ID") or environ.get("SLURM_JOB_ID") or "local"
        task = environ.get("SLURM_ARRAY_TASK_ID", "")
        super().__init__(dry, s, job + (f"_{task}" if task else ""))
        self.environ, self.task = environ, task
        self.phase = s.prep.prep_phase or ("shard" if task else "")  # submitted as the array by hand: a task
        self.shards = s.prep.prep_shards
        if s.source("QUOTECITE_PREP_SHARDS") == "default" and self.phase == "shard":
            top = environ.get("SLURM_ARRAY_TASK_MAX", "")
            if not (top.isdigit() and int(top) >= 1):
                raise Fail(f"QUOTECITE_PREP_SHARDS must be a whole number of shards >= 1 (got '{top}')")
            self.shards = int(top)
        self.tasks = environ.get("QUOTECITE_PREP_TASKS") or f"1-{self.shards}"
        self.out = Path(s.prep.prep_out).resolve()
        self.log_dir = Path(s.prep.prep_log_dir or self.out / "logs").resolve()
        self.cmd = list(s.prep.prep_cmd or [str(s.run.python or sys.executable), "-m", "data_prep", "longdocurl"])
        self.args = ["--jsonl", str(s.prep.prep_jsonl or "LongDocURL.jsonl"), "--pdf-dir", str(s.prep.prep_pdf_dir or "PDF_DIR"),
                     "--out", str(self.out), *(s.prep.prep_args or [])]  # fmt: skip
        if not dry and self.phase != "shard":
            if not (s.prep.prep_jsonl and Path(s.prep.prep_jsonl).is_file()):
                raise Fail(f"QUOTECITE_PREP_JSONL must name LongDocURL.jsonl (got '{s.prep.prep_jsonl or ''}')")
            if not (s.prep.prep_pdf_dir and Path(s.prep.prep_pdf_dir).is_dir()):
                raise Fail(f"QUOTECITE_PREP_PDF_DIR must name the PDF folder (got '{s.prep.prep_pdf_dir or ''}')")

    def main(self) -> int:
        n = self.shards
        if self.phase == "shard":
            if not self.task.isdigit():
                raise Fail("QUOTECITE_PREP_PHASE=shard runs as an array task (no SLURM_ARRAY_TASK_ID)")
            if self.task in self.environ.get("QUOTECITE_PREP_FAIL_TASK", "").split(
                ","
            ):  # checked by resolve() when set
                raise Fail(f"test hook QUOTECITE_PREP_FAIL_TASK: task {self.task} fails before doing any work")
            what, flags, why = f"shard {self.task}/{n}", ["--shard", f"{self.task}/{n}"], ""
        elif self.phase == "final":
            what, flags, why = "final step", ["--finalize"], "; rerun the missing shards, then this step"
        else:
            return self.submit_array()
        rc = self.run(Step("run", what, [*self.cmd, *self.args, *flags]))
        if rc:
            raise Fail(f"{what} failed (exit {rc}){why}")
        self.log(f"done: {what if self.phase == 'shard' else self.out}")
        return 0

    def submit_array(self) -> int:
        n, s = self.shards, self.s
        export = f"--export=ALL,QUOTECITE_REPO={REPO},QUOTECITE_PREP_OUT={self.out},QUOTECITE_PREP_SHARDS={n}"
        extra, script = list(s.prep.prep_sbatch_args or []), str(REPO / "launch" / "prep_array.sh")
        array = [f"--array={self.tasks}", f"--output={self.log_dir}/shard-%A_%a.out", *extra,
                 f"{export},QUOTECITE_PREP_PHASE=shard", script]  # fmt: skip

        def final(job: str) -> list[str]:
            return [f"--dependency=afterok:{job}", "--kill-on-invalid-dep=yes", f"--output={self.log_dir}/final-%j.out",
                    *extra, f"{export},QUOTECITE_PREP_PHASE=final", script]  # fmt: skip

        jsonl = s.prep.prep_jsonl
        self.say("quotecite data prep as a Slurm array, dry run (nothing is submitted)")
        self.say(f"input           {jsonl or '<QUOTECITE_PREP_JSONL>'}, PDFs under "
                 f"{s.prep.prep_pdf_dir or '<QUOTECITE_PREP_PDF_DIR>'}")  # fmt: skip
        self.say(f"output          {self.out} (logs {self.log_dir})")
        self.say(f"shards          {n} (1-based, by a hash of doc_no), array tasks {self.tasks}")
        if self.dry and jsonl and Path(jsonl).is_file():
            from data_prep.longdocurl import load_records
            from data_prep.shards import shard_plan

            try:
                plan = shard_plan({r.doc_no for r in load_records(jsonl)}, n, "documents")
            except (InputError, OSError) as e:
                raise Fail(f"cannot read {jsonl}: {e}") from None
            for line in plan:
                self.say(line[2:])
        if self.dry:
            self.say(f"1. the array job (task I runs shard I/{n}):")
            self.ex.run(Step("run", "sbatch-1", ["sbatch", "--parsable", *array]))
            for i in range(1, n + 1):
                self.say(f"  task {i}: {shlex.join([*self.cmd, *self.args, '--shard', f'{i}/{n}'])}")
            self.say("2. the final step, after every task succeeded (cancelled if one fails):")
            self.ex.run(Step("run", "sbatch-2", ["sbatch", "--parsable", *final("ARRAYJOB")]))
            self.say(f"  runs: {shlex.join([*self.cmd, *self.args, '--finalize'])}")
            return 0
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Fail(f"cannot create the log folder {self.log_dir}: {e}") from None
        array_job, final_job = self.submit(array, final, ("array job", "final step"))
        print(f"array job {array_job}: shards {self.tasks} of {n} (logs {self.log_dir}/shard-{array_job}_*.out)")
        print(f"final job {final_job}: after afterok:{array_job} (log {self.log_dir}/final-{final_job}.out)")
        return 0


# ============================================================================================== command line
PROGRAMS = {"eval": Eval, "prep": Prep}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in PROGRAMS:
        print(
            "usage: python -m launch.arrays eval|prep SCRIPT [--dry-run] [--config FILE] [--set KEY=VALUE ...] | --help",
            file=sys.stderr,
        )
        return 2
    kind, script, rest = argv[0], Path(argv[1]), argv[2:]
    if "-h" in rest or "--help" in rest:
        sys.stdout.write(help_text(script))
        return 0
    ap = argparse.ArgumentParser(prog=str(script), add_help=False)
    ap.add_argument("--dry-run", action="store_true")
    settings.add_layer_arguments(ap)
    a, unknown = ap.parse_known_args(rest)
    if unknown:
        print(f"error: unknown argument '{unknown[0]}' (settings: the environment, --config FILE, --set KEY=VALUE; "
              "see --help)", file=sys.stderr)  # fmt: skip
        return 2
    prog: Program | None = None
    try:
        # --config and --set: into this environment, so the array's jobs and every step see the same values
        os.environ.update(settings.resolve(os.environ, REPO, {kind}, a.config, a.set).env(("file", "command line")))
        prog = PROGRAMS[kind](a.dry_run, dict(os.environ))
        if not prog.dry:
            signal.signal(signal.SIGTERM, prog.on_term)
            signal.signal(signal.SIGINT, prog.on_term)
        return prog.main()
    except settings.SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except (Fail, InputError, JobStepError) as e:
        code, logs = (e.code, e.logs) if isinstance(e, Fail) else (1, ())
        line = f"[{datetime.now():%Y-%m-%d %H:%M:%S}] [quotecite {prog.job_id if prog else os.environ.get('SLURM_JOB_ID', 'local')}] error: {e}"
        if prog is not None and not prog.dry:
            prog.log(f"error: {e}")
        else:
            print(line, file=sys.stderr, flush=True)
        for path in logs:
            if path.is_file():
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-40:])
                print(f"---- last 40 lines of {path}\n{tail}\n----", file=sys.stderr)
        return code
    finally:
        if prog is not None:
            prog.stop_all(5 if prog.terminating else 20)


if __name__ == "__main__":
    sys.exit(main())
