"""The evaluation and data-prep Slurm programs: ``launch/eval_8b.sh`` and ``launch/prep_array.sh`` run ``python -m
launch.arrays eval|prep SCRIPT [--dry-run | --help]``; what each does: the script's ``--help`` and docs/cluster.md.
The dry run walks the same code with the training job's printing executor. Errors name the setting or input; exit 1."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.arrays")

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

from core.errors import InputError
from launch import serving, settings, setup
from launch.executor import Executor, JobStepError, PrintingExecutor, Proc, Step
from launch.layout import PORT_TOKEN
from launch.runlog import last_step
from launch.serving import WRAP_GRACE_S, NotHealthy, no_proxy_env, read_port, server_argv, wait_healthy

REPO = Path(__file__).resolve().parents[1]
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES")


class Fail(Exception):
    """The program cannot go on: logged as ``error: ...`` with the last lines of ``logs``; exit status 1."""

    def __init__(self, message: str, logs: tuple[Path, ...] = ()) -> None:
        super().__init__(message)
        self.logs = logs


class Program:
    """What both programs share: the log, the processes to stop, the array of shards and its final job. A subclass
    names its settings (``QUOTECITE_{KIND}_...``), script, phases (the tasks', the final job's) and their GPUs."""

    KIND, SCRIPT, PHASES = "", "", ("", "")
    GPUS: tuple[list[str], list[str]] = ([], [])

    def __init__(self, dry: bool, s: settings.Settings, run_dir: Path | None = None) -> None:
        self.s, self.dry, self.run_dir = s, dry, run_dir
        self.task = os.environ.get("SLURM_ARRAY_TASK_ID", "")
        job = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID") or "local"
        self.job_id = job + (f"_{self.task}" if self.task else "")
        self.ex: Executor = PrintingExecutor() if dry else Executor(log=self.log)
        self.procs: list[Proc] = []
        self.terminating = False

    def log(self, msg: str) -> None:
        """A stamped line on stderr (the Slurm log) and in RUN_DIR/chain.log when there is one; none when dry."""
        if not self.dry:
            serving.log(self.job_id, msg, self.run_dir)

    def say(self, text: str) -> None:
        """A line of the dry run's plan (``# ...``); nothing when running."""
        if self.dry:
            self.ex.note(text)

    def start(self, step: Step) -> Proc:
        self.procs.append(self.ex.start(step))
        return self.procs[-1]

    def run(self, step: Step, advice: str = "") -> None:
        """Run to its end, its output into the Slurm log; fail when it fails. The dry run prints it."""
        if self.dry:
            self.ex.run(step)
            return
        self.log(f"{step.name}: {shlex.join(step.argv)}")
        try:
            rc = subprocess.run(step.argv, env=Executor._env(step), stdin=subprocess.DEVNULL).returncode
        except OSError as e:
            raise Fail(f"cannot run {step.name} ({step.argv[0]}): {e}") from None
        if rc:
            raise Fail(f"{step.name} failed (exit {rc}){advice}")

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                self.log(f"stopping {p.name} (pid {p.pid})")
            p.stop(WRAP_GRACE_S + 3 if self.terminating else 20)
        self.procs = []

    def on_term(self, *_: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.terminating = True
        self.log("SIGTERM: stopping")
        raise SystemExit(143)

    def main(self) -> None:
        n, (task_phase, final_phase) = self.shards, self.PHASES
        if self.phase == task_phase:
            if not (self.task.isdigit() and 1 <= int(self.task) <= n):
                raise Fail(
                    f"QUOTECITE_{self.KIND}_PHASE={task_phase} runs as array task 1..{n} "
                    f"(SLURM_ARRAY_TASK_ID='{self.task}')"
                )
            self.run_task(int(self.task))
        elif self.phase == final_phase:
            self.run_final()
        elif n:
            self.submit()
        else:
            self.one_job()

    def submit(self) -> None:
        """``sbatch`` the array (task I runs shard I/N), then the final job after it; the dry run prints their plans."""
        n, (first, second), logs = self.shards, self.PHASES, self.log_dir
        self.plan_header()
        self.say(f"1. the array job, task I runs shard I/{n}:")
        if not self.dry:
            logs.mkdir(parents=True, exist_ok=True)
        array_job = self.sbatch(first, [f"--array={self.tasks}", *self.GPUS[0], f"--output={logs}/{first}-%A_%a.out"])
        if self.dry:
            for i in range(1, n + 1):
                self.plan_task(i)
        self.say(f"2. the {second} job, after every task succeeded (cancelled if one fails):")
        final_job = self.sbatch(second, [*self.GPUS[1], f"--output={logs}/{second}-%j.out"], array_job)
        if self.dry:
            return self.plan_final()
        print(f"array job {array_job}: shards {self.tasks} of {n} (logs {logs}/{first}-{array_job}_*.out)")
        print(f"{second} job {final_job}: after afterok:{array_job} (log {logs}/{second}-{final_job}.out)")

    def sbatch(self, phase: str, opts: list[str], after: str = "") -> str:
        """``sbatch --parsable`` of the script in ``phase``, without this shell's ``SLURM_*`` and GPU variables; the
        job id (``ARRAYJOB`` when dry). ``after``: run after every task of that job succeeded, cancelled if one fails."""
        what = f"{phase} job" if after else "array job"
        keys = {"REPO": REPO, **self.exports, f"{self.KIND}_SHARDS": self.shards, f"{self.KIND}_PHASE": phase}
        export = "--export=ALL," + ",".join(f"QUOTECITE_{k}={v}" for k, v in keys.items())
        if after:
            opts = [f"--dependency=afterok:{after}", "--kill-on-invalid-dep=yes", *opts]
        argv = ["sbatch", "--parsable", *opts, *(self.sbatch_args or []), export, str(REPO / "launch" / self.SCRIPT)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in GPU_VARIABLES}
        rc, out = self.ex.run(Step("run", "sbatch", argv), env=env)
        if rc:
            then = f" (array job {after} was submitted; scancel it or submit the {what})" if after else ""
            raise Fail(f"sbatch of the {what} failed{then}")
        return out.strip().split(";")[0] or "ARRAYJOB"

    def plan_shards(self, keys, noun: str) -> None:
        from data_prep.shards import shard_plan

        for line in shard_plan(keys, self.shards, noun):
            self.say(line[2:])


class Eval(Program):
    KIND, SCRIPT, PHASES = "EVAL", "eval_8b.sh", ("infer", "score")
    GPUS = (["--gpus-per-node=2"], ["--gpus-per-node=1"])

    def __init__(self, dry: bool, s: settings.Settings) -> None:
        super().__init__(dry, s, Path(s.run.run_dir).resolve())
        e = s.eval
        self.shards, self.phase, self.sbatch_args = e.eval_shards, e.eval_phase, e.eval_sbatch_args
        if self.phase and not self.shards:
            raise Fail(f"QUOTECITE_EVAL_PHASE={self.phase} needs QUOTECITE_EVAL_SHARDS")
        self.tasks = e.eval_tasks or f"1-{self.shards}"
        self.software()
        self.step = e.eval_step if e.eval_step is not None else last_step(self.run_dir)
        self.adapter = self.run_dir / f"checkpoints/global_step_{self.step}/actor/lora_adapter"
        self.policy = s.models.policy_model or ""
        with contextlib.suppress(InputError, OSError):  # said by check_inputs, shown as missing in the dry run
            self.policy = self.policy or setup.recipe_policy(REPO, os.environ)
        self.out = Path(e.eval_out or self.run_dir / f"eval/step_{self.step}").resolve()
        self.log_dir = self.out / "logs"
        self.exports = {"RUN_DIR": self.run_dir, "EVAL_STEP": self.step, "EVAL_OUT": self.out}
        self.gold, self.cache = str(e.eval_gold or "GOLD.jsonl"), str(e.eval_cache_dir or "CACHE_DIR")
        if not dry:
            self.check_inputs()
            for sub in ("base", "lora", "logs"):
                (self.out / sub).mkdir(parents=True, exist_ok=True)

    def software(self) -> None:
        """The programs and where each comes from (never a silent fallback); when running, the set-up checked and its
        environment (HF_HOME, offline, NO_PROXY) taken on."""
        s, ready = self.s, self.s.software.env_setup
        sw = setup.job_env(REPO)  # QUOTECITE_ENV_SETUP=0: python3 and vllm on PATH
        self.sw_env, self.problems = (sw["env"], setup.readiness(REPO)) if ready else ({}, [])
        if not (s.eval.infer_cmd or ready or shutil.which("python3")):
            raise Fail(
                "no python3 on PATH for eval infer (QUOTECITE_ENV_SETUP=0); set QUOTECITE_INFER_CMD, or use the "
                "server venv: python -m launch.setup setup --only server"
            )
        self.infer = list(s.eval.infer_cmd or [sw["server_python"], "-m", "eval", "infer"])
        infer_what = f"the server venv, vLLM {sw['vllm_server']}" if ready else "python3 on PATH"
        if s.eval.infer_cmd:
            infer_what = "QUOTECITE_INFER_CMD"
        self.py = str(s.run.python or sys.executable)  # the script's: QUOTECITE_PYTHON, else the project's .venv
        py_what = "QUOTECITE_PYTHON" if s.run.python else "the python of this program"
        vllm = [sw["server_vllm"], "serve"]
        self.serve_cmd = {"judge": list(s.servers.judge_cmd or vllm), "embed": list(s.servers.embed_cmd or vllm)}
        self.pythons = [
            f"eval infer:          {shlex.join(self.infer)} ({infer_what})",
            f"eval resolve, score: {self.py} ({py_what})",
        ]
        if self.dry:
            return
        for line in self.problems:
            self.log(f"missing: {line}")
        if self.problems:
            raise Fail(
                f"the set-up is incomplete ({len(self.problems)} missing, above); jobs never install or download: "
                "run the commands above on a login node (or as a CPU job), then resubmit"
            )
        os.environ.update(self.sw_env)
        os.environ.update(no_proxy_env([socket.gethostname()], os.environ))
        for line in self.pythons:
            self.log(f"python for {line}")

    def check_inputs(self) -> None:
        e = self.s.eval
        if not (self.step > 0 and (self.adapter / "adapter_config.json").is_file()):
            raise Fail(f"no LoRA adapter at {self.adapter} (set QUOTECITE_RUN_DIR or QUOTECITE_EVAL_STEP)")
        if not (e.eval_gold and Path(e.eval_gold).is_file()):
            raise Fail(f"QUOTECITE_EVAL_GOLD must name the gold JSONL (got '{e.eval_gold or ''}')")
        if not (e.eval_cache_dir and Path(e.eval_cache_dir).is_dir()):
            raise Fail(f"QUOTECITE_EVAL_CACHE_DIR must name the block cache (got '{e.eval_cache_dir or ''}')")
        if not self.policy:
            raise Fail("no base model: set QUOTECITE_POLICY_MODEL")
        # The paper's two-call judge reads CiteVQA's prompts from the user's checkout: fail now, not after inference.
        score = f" {shlex.join(e.eval_score_args or [])} "
        own_prompts = " --judge-protocol rubric " in score or " --citevqa-dir " in score
        if not own_prompts and not (e.citevqa_dir and Path(e.citevqa_dir).is_dir()):
            raise Fail(
                "QUOTECITE_CITEVQA_DIR must name a CiteVQA checkout (its prompts/ are the judge's; got "
                f"'{e.citevqa_dir or ''}'), or pass --judge-protocol rubric in QUOTECITE_EVAL_SCORE_ARGS"
            )

    def gpus(self, need: int) -> list[str]:
        """The job's first ``need`` GPUs: those of ``CUDA_VISIBLE_DEVICES`` (Slurm's) when set, else 0..need-1."""
        given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        gpus = [g for g in given.split(",") if g.strip()] if given else [str(i) for i in range(need)]
        if len(gpus) < need:
            raise Fail(f"this job sees {len(gpus)} GPU(s) (CUDA_VISIBLE_DEVICES={given or 'unset'}), needs {need}")
        return gpus[:need]

    def header(self, title: str, when: str) -> None:
        """The dry run's first lines: the set-up, the checkpoint, the model, the output, the pythons."""
        self.say(f"quotecite evaluation{title}")
        if self.s.software.env_setup:
            table = setup.status(REPO).table().splitlines()
            for line in ["set-up (python -m launch.setup status):", *table, *(f"missing: {x}" for x in self.problems)]:
                self.say(line)
            self.say("every process runs with " + " ".join(f"{k}={v}" for k, v in self.sw_env.items()))
        none = f" (none yet: the run's last complete checkpoint {when})" if self.step == 0 else ""
        self.say(f"checkpoint      step {self.step}: {self.adapter}{none}")
        self.say(f"base model      {self.policy or '<QUOTECITE_POLICY_MODEL>'}")
        self.say(f"output          {self.out}")
        for line in self.pythons:
            self.say(f"python          {line}")

    def one_job(self) -> None:
        base, lora, servers = self.gpus(3)
        self.header(", dry run (nothing is started)" if self.dry else "", "when the job runs")
        self.say(
            f"GPU split       base inference CUDA_VISIBLE_DEVICES={base}, LoRA inference "
            f"CUDA_VISIBLE_DEVICES={lora}; judge + embedder CUDA_VISIBLE_DEVICES={servers}"
        )
        self.log(f"evaluating step {self.step} of {self.run_dir} into {self.out}")
        self.evaluate(servers, [base, lora])

    def plan_header(self) -> None:
        self.header(" as a Slurm array, dry run (nothing is submitted)", "at submission")
        self.say(f"shards          {self.shards} (1-based, by a hash of the gold index), array tasks {self.tasks}")
        if self.dry and Path(self.gold).is_file():
            from eval.schemas import read_gold

            self.plan_shards([g.key for g in read_gold(self.gold)[: self.limit()]], "questions")

    def run_task(self, i: int) -> None:
        self.say(f"  task {i}, shard {i}/{self.shards}:")
        self.log(f"inference shard {i}/{self.shards} of step {self.step} into {self.out}")
        self.infer_pair(self.gpus(2), i)
        self.log(f"done: shard {i}/{self.shards}")

    def run_final(self) -> None:
        self.log(f"scoring step {self.step} of {self.run_dir} from {self.shards} inference shards in {self.out}")
        self.evaluate(self.gpus(1)[0])

    plan_task, plan_final = run_task, run_final  # the dry run prints the array's jobs as they would run

    def limit(self) -> int | None:
        """``--limit N`` of QUOTECITE_EVAL_INFER_ARGS (the questions inference answers), else None."""
        found = re.search(r"(?:^| )--limit[= ](\d+)(?: |$)", shlex.join(self.s.eval.eval_infer_args or []))
        return int(found[1]) if found else None

    def evaluate(self, gpu: str, infer_gpus: list[str] | None = None) -> None:
        """The servers on ``gpu``; inference on ``infer_gpus``, else the merge of the array's shards; then ``eval
        resolve`` (quotes to blocks, through the embedder) and ``eval score`` (with the judge) of both sides."""
        self.say(f"servers on GPU {gpu}, one after the other:")
        env, n, e = self.serve(gpu), self.shards, self.s.eval
        if infer_gpus:
            self.say("inference, base and base + adapter in parallel:")
            self.infer_pair(infer_gpus)
        else:
            self.say(f"merge the {n} shards of each side into predictions.jsonl (fails on a missing question):")
            for side in ("base", "lora"):
                text = f"eval.infer.merge_shards: the {n} shards of {side} into {self.out}/{side}/predictions.jsonl"
                self.ex.call(f"merge-{side}", text, partial(self.merge, side))
        self.say("resolve quotes through the embedder, then score with the judge:")
        for side, label in (("base", "base"), ("lora", f"grpo-step{self.step}")):
            d, files = self.out / side, ["--gold", self.gold, "--cache-dir", self.cache]
            resolve = ["--pred", str(d / "predictions.jsonl"), *files, "--out", str(d / "citations.jsonl")]
            score = ["--pred", str(d / "citations.jsonl"), *files, "--out", str(d / "score"), "--label", label]
            score += ["--judge-url", env["QUOTECITE_JUDGE_URL"], "--judge-model", self.s.models.judge_model]
            for what, args, extra in (("resolve", resolve, e.eval_resolve_args), ("score", score, e.eval_score_args)):
                argv = [self.py, "-m", "eval", what, *args, *(extra or [])]
                self.run(Step("run", f"eval {what} of {side}", argv, env))
        self.stop_all()
        self.log(f"done: {self.out}/base/score and {self.out}/lora/score")

    def infer_pair(self, gpus: list[str], i: int = 0) -> None:
        """Base inference on ``gpus[0]`` and base + adapter on ``gpus[1]`` in parallel, of shard ``i`` (0: all)."""
        e, procs, logs = self.s.eval, [], []
        pdf = ["--pdf-dir", str(e.eval_pdf_dir)] if e.eval_pdf_dir else []
        common = ["--gold", self.gold, "--interface", "language", "--cache-dir", self.cache, *pdf]
        for side, gpu, lora in (("base", gpus[0], []), ("lora", gpus[1], ["--lora", str(self.adapter)])):
            logs.append(self.log_dir / f"infer_{side}{f'-{i}' if i else ''}.log")
            shard = ["--shard", f"{i}/{self.shards}"] if i else []
            name = f"predictions.shard-{i}-of-{self.shards}.jsonl" if i else "predictions.jsonl"  # as eval.infer's
            argv = [*self.infer, "--model", self.policy, *lora, "--out", str(self.out / side / name), *common]
            argv += [*(e.eval_infer_args or []), *shard]
            step = Step("start", f"infer_{side}", argv, {"PYTHONPATH": str(REPO)}, gpu, str(logs[-1]))
            procs.append(self.start(step))
        rcs = [p.wait() for p in procs]
        if any(rcs):
            raise Fail(f"inference failed (base exit {rcs[0]}, LoRA exit {rcs[1]})", tuple(logs))
        self.procs = [p for p in self.procs if p not in procs]

    def serve(self, gpu: str) -> dict[str, str]:
        """The judge, then the embedder, on ``gpu``, each waited for; the env of resolve and score."""
        m, sv, env = self.s.models, self.s.servers, {"PYTHONPATH": str(REPO)}
        for role, model, prefer in (("judge", m.judge_model, sv.judge_port), ("embed", m.embed_model, sv.embed_port)):
            label = f"{'judge' if role == 'judge' else 'embedding'} server ({model} on GPU {gpu})"
            log, port_file = self.log_dir / f"{role}.log", self.log_dir / f"{role}.port"
            if not self.dry:
                port_file.unlink(missing_ok=True)
            wrap = [sys.executable, str(REPO / "launch" / "layout.py"), "run", "--gpus", "0", "--grace"]
            wrap += [str(WRAP_GRACE_S), "--port-file", str(port_file), "--bind-host", "127.0.0.1"]
            wrap += ["--prefer-port", str(prefer)] if prefer else []
            argv = [*wrap, "--", *server_argv(role, self.s, "127.0.0.1", PORT_TOKEN, self.serve_cmd[role])]
            proc = self.start(Step("start", role, argv, gpus=gpu, log=str(log)))
            text = f"wait for the /health of {role} on the port in {port_file.name} (at most {sv.health_timeout:g}s)"
            wait = partial(self.healthy, proc, label, log, port_file)
            port = self.ex.wait(f"health-{role}", text, wait, prefer or PORT_TOKEN)
            env[f"QUOTECITE_{role.upper()}_URL"] = f"http://127.0.0.1:{port}/v1"
            env[f"QUOTECITE_{role.upper()}_MODEL"] = model
        return env

    def healthy(self, proc: Proc, label: str, log: Path, port_file: Path) -> int:
        """Wait for a server's ``/health`` on the port it wrote; the port."""

        def url() -> str:
            return f"http://127.0.0.1:{port}/health" if (port := read_port(port_file)) else ""

        sv = self.s.servers
        try:
            took = wait_healthy(url, label, sv.health_timeout, sv.health_poll, str(log), proc.poll, self.stopping)
        except NotHealthy as e:
            raise Fail(str(e), (log,)) from None
        port = read_port(port_file)
        self.log(f"{label} is healthy at http://127.0.0.1:{port}/v1 after {took:.0f}s")
        return port

    def stopping(self) -> bool:
        return self.terminating

    def merge(self, side: str) -> None:
        from eval.infer import merge_shards

        path = self.out / side / "predictions.jsonl"
        try:
            n = merge_shards(Path(self.gold), path, self.shards, self.limit())
        except (InputError, OSError) as e:
            raise Fail(f"merging the {side} inference shards failed: {e}") from None
        print(f"{path}: {n} predictions merged from {self.shards} shards", flush=True)


class Prep(Program):
    KIND, SCRIPT, PHASES = "PREP", "prep_array.sh", ("shard", "final")

    def __init__(self, dry: bool, s: settings.Settings) -> None:
        super().__init__(dry, s)
        p = s.prep
        self.phase = p.prep_phase or ("shard" if self.task else "")  # submitted as the array by hand: a task
        self.shards, self.tasks, self.sbatch_args = p.prep_shards, p.prep_tasks, p.prep_sbatch_args
        if s.source("QUOTECITE_PREP_SHARDS") == "default" and self.phase == "shard":
            top = os.environ.get("SLURM_ARRAY_TASK_MAX", "")
            if not (top.isdigit() and int(top) >= 1):
                raise Fail(f"QUOTECITE_PREP_SHARDS must be a whole number of shards >= 1 (got '{top}')")
            self.shards = int(top)
        self.out, self.log_dir = Path(p.prep_out).resolve(), Path(p.prep_log_dir).resolve()
        self.exports = {"PREP_OUT": self.out}
        self.cmd = list(p.prep_cmd or [str(s.run.python or sys.executable), "-m", "data_prep", "longdocurl"])
        self.cmd += ["--jsonl", str(p.prep_jsonl or "LongDocURL.jsonl"), "--pdf-dir", str(p.prep_pdf_dir or "PDF_DIR")]
        self.cmd += ["--out", str(self.out), *(p.prep_args or [])]
        if not dry and self.phase != "shard":
            if not (p.prep_jsonl and Path(p.prep_jsonl).is_file()):
                raise Fail(f"QUOTECITE_PREP_JSONL must name LongDocURL.jsonl (got '{p.prep_jsonl or ''}')")
            if not (p.prep_pdf_dir and Path(p.prep_pdf_dir).is_dir()):
                raise Fail(f"QUOTECITE_PREP_PDF_DIR must name the PDF folder (got '{p.prep_pdf_dir or ''}')")

    def plan_header(self) -> None:
        jsonl, pdfs = self.s.prep.prep_jsonl, self.s.prep.prep_pdf_dir
        self.say("quotecite data prep as a Slurm array, dry run (nothing is submitted)")
        self.say(f"input           {jsonl or '<QUOTECITE_PREP_JSONL>'}, PDFs in {pdfs or '<QUOTECITE_PREP_PDF_DIR>'}")
        self.say(f"output          {self.out} (logs {self.log_dir})")
        self.say(f"shards          {self.shards} (1-based, by a hash of doc_no), array tasks {self.tasks}")
        if self.dry and jsonl and Path(jsonl).is_file():
            from data_prep.longdocurl import load_records

            self.plan_shards({r.doc_no for r in load_records(jsonl)}, "documents")

    def plan_task(self, i: int) -> None:
        self.say(f"  task {i}: {shlex.join([*self.cmd, '--shard', f'{i}/{self.shards}'])}")

    def plan_final(self) -> None:
        self.say(f"  runs: {shlex.join([*self.cmd, '--finalize'])}")

    def run_task(self, i: int) -> None:
        if str(i) in (self.s.test.prep_fail_task or "").split(","):
            raise Fail(f"test hook QUOTECITE_PREP_FAIL_TASK: task {i} fails before doing any work")
        self.run(Step("run", f"shard {i}/{self.shards}", [*self.cmd, "--shard", f"{i}/{self.shards}"]))
        self.log(f"done: shard {i}/{self.shards}")

    def run_final(self) -> None:
        self.run(Step("run", "final step", [*self.cmd, "--finalize"]), "; rerun the missing shards, then this step")
        self.log(f"done: {self.out}")


PROGRAMS = {"eval": Eval, "prep": Prep}
USAGE = "usage: python -m launch.arrays eval|prep SCRIPT [--dry-run] [--config FILE] [--set KEY=VALUE ...] | --help"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in PROGRAMS:
        print(USAGE, file=sys.stderr)
        return 2
    kind, script, rest = argv[0], Path(argv[1]), argv[2:]
    if "-h" in rest or "--help" in rest:  # the script's lines between the help markers, then the settings it reads
        block = script.read_text().split("# --- help ---\n", 1)[1].split("# --- end help ---\n", 1)[0]
        sys.stdout.write("".join(re.sub(r"^# ?", "", line) + "\n" for line in block.splitlines()))
        sys.stdout.write("\n" + settings.render_help(readers={kind}))
        return 0
    ap = argparse.ArgumentParser(prog=f"bash {script}", add_help=False)
    ap.add_argument("--dry-run", action="store_true")
    settings.add_layer_arguments(ap)
    a = ap.parse_args(rest)
    prog: Program | None = None
    try:
        s = settings.resolve_into(os.environ, REPO, {kind}, a.config, a.set)  # the array's jobs and steps: the same
        prog = PROGRAMS[kind](a.dry_run, s)
        if not prog.dry:
            signal.signal(signal.SIGTERM, prog.on_term)
            signal.signal(signal.SIGINT, prog.on_term)
        prog.main()
        return 0
    except (Fail, InputError, JobStepError, OSError) as e:  # InputError: a settings.SettingsError too
        job = prog.job_id if prog else os.environ.get("SLURM_JOB_ID", "local")
        serving.log(job, f"error: {e}", prog.run_dir if prog and not prog.dry else None)
        for path in e.logs if isinstance(e, Fail) else ():
            if path.is_file():
                tail = "\n".join(path.read_text(errors="replace").splitlines()[-40:])
                print(f"---- last 40 lines of {path}\n{tail}\n----", file=sys.stderr)
        return 1
    finally:
        if prog is not None:
            prog.stop_all()


if __name__ == "__main__":
    sys.exit(main())
