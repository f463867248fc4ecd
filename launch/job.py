"""The GRPO training job: one program for one Slurm job of a chain, whose dry run is the job itself.

``sbatch launch/grpo_8b.sh`` runs ``python -m launch.job`` (the script is its ``#SBATCH`` header and that line);
``bash launch/grpo_8b.sh --dry-run`` runs the same code with the printing executor (:mod:`launch.executor`), so what
the dry run prints is what the job does. ``--help`` lists every setting (:mod:`launch.settings`), ``--settings``
prints the resolved values.

One job, as a state machine (:class:`State`; each state is a method of :class:`Job`):

- ``PREPARE``: repair the checkpoints, pick the resume step, open a segment ``RUN_DIR/segments/JOBID-N`` (or decide
  that the run is complete / stalled: ``DONE`` / ``STOP``), check the disk for the checkpoints to come;
- ``SERVE``: start the judge replicas and the embedder on their GPUs, one after the other (each vLLM sizes its memory
  from what is free); each server's port is chosen on its node when it binds (``launch/layout.py run --port-file``),
  and the job waits for its ``/health`` with the reward's own wait (:func:`reward.servers.wait_for_health`);
- ``RAY`` (several trainer nodes only): a Ray cluster of this job's own (its own temp dir), the head here and a
  worker on each other trainer node, each started with the trainer's environment so every Ray worker sees it;
- ``CHECK``: the reward's pre-flight check against the live servers (first pass of a job only);
- ``TRAIN``: the trainer; while it runs, a server that dies is restarted, SIGUSR1 stops the trainer at its next
  checkpoint (or forwards the signal), a Ray node that dies stops it;
- ``END``: stop the servers and Ray; a trainer that stopped on a server outage is ``RESTART``-ed (fresh servers, a new
  segment) at most ``QUOTECITE_MAX_RESTARTS`` times;
- ``FINISH``: close the segment, merge the run log, decide: ``CHAIN``, ``DONE`` or ``STOP``;
- ``CHAIN``: ``scontrol requeue`` of this same job, its last action (:meth:`Job.state_chain`): the job keeps its id,
  every option the user gave ``sbatch``, its arguments and its submit-time environment, as submitit and PyTorch
  Lightning do. Nothing is read back from Slurm or retyped.

SIGTERM (scancel, preemption, a requeue by Slurm or an admin, wall time) stops everything at once and records the
segment as ``terminated``; Slurm itself then requeues the job (``--requeue``) or not. The one SIGTERM the job expects
is the one its own requeue brings: it ignores it and exits 0.

What Slurm does with a job that requeues itself (checked by hand on the local Slurm 22.05.8, and by
``tests/launch/test_launch.py``):

- the job's owner may requeue it (``scontrol requeue $SLURM_JOB_ID`` from inside the batch script; another user gets
  "Access/permission denied"); a job with ``Requeue=0`` (submitted with ``--no-requeue``, or ``JobRequeue=0`` in
  slurm.conf and no ``--requeue``) is refused: "Requested operation is presently disabled for job N", exit 1;
- Slurm answers at once (about 35 ms after ``scontrol`` returns) with SIGCONT and SIGTERM to every process of the
  job, then SIGKILL after ``KillWait``; the output file gets "slurmstepd: error: *** JOB N ON node CANCELLED AT ...
  DUE TO JOB REQUEUE ***" (not an error of the run), and with ``--open-mode=append`` the next run appends to it;
- the requeued job is PENDING with reason ``BeginTime``: it may start only ``cred_expire`` + 1 s (121 s by default)
  after its processes have all ended; its SubmitTime is reset (age priority starts over, as for a new job);
- the next run has the same job id and ``SLURM_RESTART_COUNT`` = 1, 2, ... (unset in the first run), its
  ``--signal`` warning re-armed (``--signal=B:USR1@...`` arrives again before the new wall time);
- no limit on the number of requeues was met (a job requeued itself 6 times); ``MaxBatchRequeue`` is not a setting of
  Slurm 22.05 (its source caps only the automatic requeues after a failed batch launch).

Everything keyed by the job id stays distinct across the runs of one id, or is meant to be shared: segments are
``JOBID-N`` with N counting that id's segments, the run log's job entries are keyed by segment, the step records
``logs/steps-JOBID.jsonl`` and the output file are appended to; the Ray temp dir ``/tmp/qcray-JOBID`` and Ray's
ports are reused only after every process of the previous run has ended (Slurm holds the job until then); the
wandb run is one per run folder; the smoke folder ``RUN_DIR/smoke/JOBID`` is where a requeued smoke run resumes.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: bash launch/grpo_8b.sh (or python -m launch.job)")

import argparse
import enum
import os
import re
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from core.errors import InputError
from launch import budget, budget_gpu, preflight, settings, smoke  # --- smoke: launch/smoke.py
from launch.checkpoints import find_resume_point
from launch.executor import Executor, JobStepError, PrintingExecutor, Proc, Step
from launch.layout import LayoutError, device_ids, plan_from_env, position_ranges
from launch.run_files import RunError
from launch.run_manifest import load_recipe, parse_overrides, recipe_value
from launch.runlog import (
    End,
    Start,
    finish,
    last_step,
    logged_step,
    plan_run,
    prepare,
    read_no_group_kept,
    read_outage,
    record_restart,
)
from launch.segments import load_segments
from launch.serving import WRAP_GRACE_S, NotHealthy, no_proxy_env, server_argv, wait_healthy
from reward.train import slurm_cpus

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launch" / "grpo_8b.sh"


class State(enum.Enum):
    PREPARE = "prepare"
    SERVE = "serve"
    RAY = "ray"
    CHECK = "check"
    TRAIN = "train"
    END = "end"
    RESTART = "restart"
    FINISH = "finish"
    CHAIN = "chain"
    DONE = "done"
    STOP = "stop"


class JobError(RuntimeError):
    """The job cannot go on; ``status`` is how its segment ends, ``logs`` the logs to show."""

    def __init__(
        self, message: str, status: str = "crashed", logs: tuple[Path, ...] = (), final: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.logs = logs
        self.final = final
        """Misconfiguration (a server that never became healthy, a failed reward check): the log says that the chain
        stops here."""


@dataclass
class Server:
    """One row of the server table: a judge replica (``judge``, ``judge2``, ...) or the embedder (``embed``)."""

    name: str
    role: str
    """``judge`` or ``embed``."""
    model: str
    node: str
    position: int
    device: str
    host: str
    """Where it listens and is reached: 127.0.0.1 on one node, its node's name on several."""
    preferred_port: int
    label: str
    proc: Proc | None = None
    port: int = 0
    log: Path = field(default_factory=Path)
    port_file: Path = field(default_factory=Path)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port or '{port}'}/v1"


def srun_cpus(environ) -> list[str]:
    """``["--cpus-per-task=N"]`` for every ``srun`` step of a job started with ``--cpus-per-task=N``: srun of Slurm
    22.05 and later no longer reads ``SLURM_CPUS_PER_TASK``, so a step would get, and be bound to, one CPU.

    >>> srun_cpus({"SLURM_CPUS_PER_TASK": "32"}), srun_cpus({})
    (['--cpus-per-task=32'], [])
    """
    raw = (environ.get("SLURM_CPUS_PER_TASK") or "").strip()
    if raw and (not raw.isdigit() or int(raw) < 1):
        raise InputError(f"SLURM_CPUS_PER_TASK={raw!r}: expected a whole number >= 1")
    return [f"--cpus-per-task={int(raw)}"] if raw else []


LAUNCH_SETS: dict[str, str] = {
    "config": "QUOTECITE_RECIPE",
    "trainer.save_checkpoint_path": "QUOTECITE_RUN_DIR (checkpoints are RUN_DIR/checkpoints)",
    "trainer.nnodes": "the allocation (sbatch --nodes)",
    "trainer.n_gpus_per_node": "QUOTECITE_TRAIN_GPUS_PER_NODE or the allocation (sbatch --gpus-per-node)",
    "trainer.find_last_checkpoint": "nothing: the chain always resumes from the last checkpoint",
    "trainer.max_steps": "QUOTECITE_MAX_STEPS",
    "data.train_files": "QUOTECITE_TRAIN_FILES",
    "data.val_files": "QUOTECITE_VAL_FILES",
}
"""EasyR1 keys the launch sets itself (it plans with them: steps, checkpoints, GPUs), with the setting to use
instead. Given as an override too, the user's would silently win in EasyR1 while the launch plans with its own."""

_OVERRIDE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)", re.S)


def check_overrides(args: list[str]) -> list[str]:
    """The job's EasyR1 overrides, each ``key=value`` with a dotted key of identifiers, never one of
    :data:`LAUNCH_SETS`, never a key twice; :class:`InputError` naming the first bad one and what to do instead.

    >>> check_overrides(["worker.rollout.n=5", "algorithm.kl_coef=0.01"])
    ['worker.rollout.n=5', 'algorithm.kl_coef=0.01']
    >>> check_overrides(["trainer.max_steps=5"])
    Traceback (most recent call last):
    ...
    core.errors.InputError: EasyR1 override trainer.max_steps=5: the launch sets trainer.max_steps itself; use QUOTECITE_MAX_STEPS
    """
    seen: dict[str, str] = {}
    for a in args:
        m = _OVERRIDE.fullmatch(a)
        if not m:
            raise InputError(f"EasyR1 override {a!r}: expected key=value with a dotted key (worker.rollout.n=5)")
        key = m.group(1)
        if key in LAUNCH_SETS:
            raise InputError(f"EasyR1 override {a}: the launch sets {key} itself; use {LAUNCH_SETS[key]}")
        if key in seen:
            raise InputError(f"EasyR1 override {a}: {key} is given twice ({seen[key]} and {a})")
        seen[key] = a
    return list(args)


class Job:
    """One Slurm job of a training chain (see the module docstring)."""

    def __init__(self, s: settings.Settings, args: list[str], ex: Executor, environ: dict[str, str],
                 probe: preflight.Probe | None = None) -> None:  # fmt: skip
        self.s = s
        self.probe = probe or preflight.Probe()
        """What the pre-flight checks read from the node (:mod:`launch.preflight`; tests give their own)."""
        self.args = check_overrides(list(args))
        self.ex = ex
        self.environ = dict(environ)
        self.job_id = environ.get("SLURM_JOB_ID") or ("JOBID" if ex.dry else f"local-{datetime.now():%Y%m%d%H%M%S}")
        self.in_slurm = bool(environ.get("SLURM_JOB_ID"))
        self.run_dir = Path(s.run.run_dir).resolve()
        self.recipe = Path(s.run.recipe).resolve()
        self.stop_requested = False
        self.stop_handled = False
        self.terminating = False
        self.restarts = 0
        self.server_restarts = 0
        self.segment = ""
        self.segment_dir = self.run_dir / "segments" / "JOBID-N"
        self.trainer: Proc | None = None
        self.check: Proc | None = None
        self.ray_procs: list[tuple[str, Proc]] = []
        self.ray_address = ""
        self.checked = False
        if not ex.dry:
            ex.log = self.log
        self._plan()

    # ------------------------------------------------------------------------------------------------ planning
    def _plan(self) -> None:
        s, env = self.s, self.environ
        self.software = self._software()
        try:
            self.alloc, self.layout = plan_from_env(env)
        except LayoutError as e:
            raise InputError(str(e)) from None
        self.first = self.layout.nodes[0]
        self.multi = self.layout.multi_node
        # --- pre-flight: node addresses, NCCL/Gloo, Ray's ports, wandb (launch/preflight.py)
        self.preflight_notes: list[str] = []
        self.addresses: dict[str, preflight.NodeAddress] = {}
        if self.multi:  # a name /etc/hosts maps to loopback is never what other nodes reach
            self.addresses = preflight.node_addresses(self.layout.nodes, preflight.this_node(env),
                                                      s.layout.node_addresses, self.probe)  # fmt: skip
            self.preflight_notes += [f"node address    {a.note}" for a in self.addresses.values() if a.note]
        self.net_env = preflight.network_env(env)
        self.preflight_notes.append(preflight.network_note(self.net_env, self.multi))
        self.ray_ports: preflight.RayPorts | None = None
        if self.layout.ray:  # checked free when the job runs (on the head node: here); a dry run only derives them
            self.ray_ports = preflight.ray_ports(self.job_id, None if self.ex.dry else self.probe.port_free)
            self.preflight_notes.append(self.ray_ports.describe())
        # --- end pre-flight
        if not self.ex.dry:  # every process of the job inherits it: the servers are reached directly, never by proxy
            hosts = [*self.layout.nodes, *(a.host for a in self.addresses.values() if a.host not in self.layout.nodes)]
            os.environ.update(no_proxy_env(hosts, os.environ))
        train_files = s.run.train_files or (f"{s.run.data_dir}/train.parquet" if s.run.data_dir else "")
        dry_max_steps: str | None = None  # a dry run without the training data: what its header says instead
        try:
            self.p = plan_run(self.recipe, "" if s.run.max_steps is None else str(s.run.max_steps), train_files, REPO,
                              self.args)  # fmt: skip
        except (RunError, InputError, OSError) as e:
            # a dry run may plan without the training data (max_steps then comes from it at run time); nothing else
            if not self.ex.dry or not self.recipe.is_file() or s.run.max_steps is not None:
                raise InputError(f"cannot plan the run from {self.recipe}: {e}") from None
            try:
                self.p = replace(plan_run(self.recipe, "0", "", REPO, self.args), max_steps_from="")
            except (RunError, InputError, OSError) as e2:
                raise InputError(f"cannot plan the run from {self.recipe}: {e2}") from None
            dry_max_steps = "<from the data at run time>"
        self.max_steps: int | str = self.p.max_steps if dry_max_steps is None else dry_max_steps
        self.trainer_gpus = ",".join(device_ids(self.layout.train_positions, self.alloc.devices, self.first))
        over = [f"config={self.recipe}", f"trainer.nnodes={len(self.layout.trainer_nodes)}",
                f"trainer.n_gpus_per_node={self.layout.train_gpus_per_node}",
                f"trainer.save_checkpoint_path={self.run_dir}/checkpoints", "trainer.find_last_checkpoint=true",
                f"trainer.max_steps={self.max_steps}"]  # fmt: skip
        if self.p.logger_override:
            over.append(self.p.logger_override)
        if s.run.train_files:
            over.append(f"data.train_files={s.run.train_files}")
        if s.run.val_files:
            over.append(f"data.val_files={s.run.val_files}")
        self.fit_at = len(over)  # --- pre-flight: where the job's own fitted overrides go (before the user's)
        over += self.args
        over += self.p.path_overrides
        self.overrides = over
        # --- pre-flight: wandb (one wandb run for every job of the run)
        self.wandb_env, wandb_note = preflight.wandb_env(self.run_dir, preflight.recipe_loggers(self.recipe, over[1:]),
                                                         env)  # fmt: skip
        if wandb_note:
            self.preflight_notes.append(wandb_note)
        # --- end pre-flight
        # --- pre-flight: save_freq against the stop grace, the validation batch, host memory, disk quota (issue 31)
        self._fit_overrides()
        # --- end pre-flight
        self.servers = self._server_table()
        self.cpus = srun_cpus(env)
        # --- pre-flight: Slurm before 22.05 cannot run two srun --overlap steps on one node (issue 31, finding 4)
        steps: dict[str, list[str]] = {}
        for srv in self.servers:
            if srv.node != self.first:
                steps.setdefault(srv.node, []).append(srv.name)
        if self.layout.ray:
            for i, node in enumerate(self.layout.trainer_nodes[1:], 1):
                steps.setdefault(node, []).append(f"ray_{i}")
        slurm_note = preflight.check_step_sharing(steps, self.probe)
        if slurm_note:
            self.preflight_notes.append(slurm_note)
        # --- end pre-flight

    # --- pre-flight (issue 31, findings 2, 5, 6): overrides the job passes, each printed in the dry run
    def _fit_overrides(self) -> None:
        """``trainer.save_freq`` lowered so a checkpoint falls within the stop grace (:func:`budget.plan_save_freq`),
        ``data.val_batch_size`` bounded (:func:`budget.plan_val_batch`), each unless the user set it; then the
        host-memory budget against the job's ``--mem`` (refused when its peak cannot fit) and the disk quota."""
        user = parse_overrides(self.args)
        try:
            recipe = load_recipe(self.recipe)
        except (InputError, RunError, OSError, ValueError) as e:
            self.preflight_notes.append(f"save_freq, validation batch and host memory not checked: {e}")
            return
        given = parse_overrides(self.overrides[1:])

        def value(key: str, default: Any = None) -> Any:
            return recipe_value(recipe, given, key, default)

        step_s, source = budget.step_seconds(self.run_dir, str(value("worker.actor.model.model_path", "")))
        sf = budget.plan_save_freq(value("trainer.save_freq", -1), step_s, source, self.s.run.stop_grace,
                                   "trainer.save_freq" in user, source.startswith("measured"))  # fmt: skip
        vb, vb_note = budget.plan_val_batch(value("data.val_batch_size", -1), value("data.rollout_batch_size", 512),
                                            "data.val_batch_size" in user)  # fmt: skip
        fitted = [o for o in (sf.override, vb) if o]
        self.overrides[self.fit_at : self.fit_at] = fitted
        self.fit_at += len(fitted)
        self.preflight_notes += [n for n in (sf.note, vb_note) if n]
        first_judges = sum(1 for node, _ in self.layout.judges if node == self.first)
        try:
            over = [o for o in self.overrides[1:] if not o.startswith("trainer.max_steps=")]  # not known in a dry run
            plan = budget.plan_from_recipe(self.recipe, over, None, self.layout.train_gpus_per_node,
                                           len(self.layout.trainer_nodes), judge_replicas=first_judges)  # fmt: skip
        except InputError as e:  # a model whose size is unknown: say so, do not stop the run for it
            self.preflight_notes.append(f"host memory     budget skipped: {e}")
        else:
            level, message = budget.check_host_memory(plan.estimate, budget.job_memory_mib(self.environ))
            if level == "refuse":
                raise InputError(f"not enough host memory for the job: {message}")
            self.preflight_notes.append(f"host memory     {'warning: ' if level == 'warn' else ''}{message}")
        self.preflight_notes.append(f"disk quota      {budget.read_quota(self.run_dir).note}")

    def _resume_overrides(self, resume_step: int) -> None:
        """A resumed job (``resume_step`` > 0) passes ``trainer.val_before_train=false``: the validation before
        training ran when the run started; every resume would repeat it. Kept when the user set the key."""
        key, off = "trainer.val_before_train", "trainer.val_before_train=false"
        if key in parse_overrides(self.args):
            return
        if resume_step > 0 and off not in self.overrides:
            self.overrides.insert(self.fit_at, off)
            msg = f"resuming from step {resume_step}: {off} (validation before training ran when the run started)"
            self.ex.note(msg)
            self.log(msg)
        elif resume_step <= 0 and off in self.overrides:
            self.overrides.remove(off)

    def _dry_resume_step(self) -> int:
        """The step the job would resume from (a read, for the dry run)."""
        try:
            return find_resume_point(self.run_dir / "checkpoints", self.p.require_lora).step
        except (OSError, ValueError, RunError):
            return 0

    # --- end pre-flight
    def _software(self) -> dict[str, Any]:
        """The programs of the job: the trainer's python, the servers' ``vllm``, and the versions for the manifest."""
        s = self.s
        if not s.software.env_setup:
            py = "python3"
            sw = {"trainer_python": py, "server_vllm": "vllm", "easyr1_commit": s.software.easyr1_commit or
                  "unknown (QUOTECITE_ENV_SETUP=0)", "vllm_trainer": "unknown", "vllm_server": "unknown",
                  "env": {}}  # fmt: skip
        else:
            from launch import setup

            if not self.ex.dry:
                problems = setup.readiness(REPO, self.environ)
                if problems:
                    raise InputError("the job's software or models are not set up (nothing was started):\n  "
                                     + "\n  ".join(problems))  # fmt: skip
            sw = setup.job_env(REPO, self.environ)
        sw.setdefault("env", {})
        s_py = s.run.python or str(REPO / ".venv" / "bin" / "python")
        sw["launch_python"] = s_py if Path(s_py).exists() or s.run.python else sys.executable
        # reward.train: EasyR1's verl.trainer.main, its wandb run also given the reward's samples
        sw["trainer_cmd"] = list(s.run.trainer_cmd or []) or [sw["trainer_python"], "-m", "reward.train"]
        sw["check_python"] = str(
            s.run.check_python or (sw["trainer_python"] if s.software.env_setup else sw["launch_python"])
        )
        serve = [sw["server_vllm"], "serve"]
        sw["judge_cmd"], sw["embed_cmd"] = (
            list(s.servers.judge_cmd or []) or serve,
            list(s.servers.embed_cmd or []) or serve,
        )
        if s.ray.ray_cmd:
            sw["ray"] = list(s.ray.ray_cmd)
        elif s.software.env_setup:
            sw["ray"] = [str(Path(sw["trainer_python"]).parent / "ray")]
        else:
            sw["ray"] = ["ray"]
        return sw

    def _server_table(self) -> list[Server]:
        s, out = self.s, []
        for i, (name, node, pos) in enumerate(self.layout.server_gpus()):
            role = "embed" if name == "embed" else "judge"
            here = node == self.first
            dev = device_ids([pos], self.alloc.devices, self.first)[0] if here else str(pos)
            host = self.addresses[node].host if self.multi else "127.0.0.1"
            where = f"{node} GPU {pos}" if self.multi else f"GPU {dev}"
            if role == "embed":
                port, label = s.servers.embed_port, f"embedding server ({s.models.embed_model} on {where})"
            else:
                port = s.servers.judge_port + i if s.servers.judge_port else 0
                if port > 65535:
                    raise InputError(f"judge replica {i + 1}'s port {port} (QUOTECITE_JUDGE_PORT={s.servers.judge_port} + "
                                     f"{i}) is past 65535: lower QUOTECITE_JUDGE_PORT, or 0 for any free port")  # fmt: skip
                label = f"judge server{f' {i + 1}' if i else ''} ({s.models.judge_model} on {where})"
            out.append(Server(name, role, s.models.embed_model if role == "embed" else s.models.judge_model, node, pos, dev, host,
                              port, label))  # fmt: skip
        return out

    def judge_url(self) -> str:
        return ",".join(v.url for v in self.servers if v.role == "judge")

    def embed_url(self) -> str:
        return next(v.url for v in self.servers if v.role == "embed")

    # ------------------------------------------------------------------------------------------------ helpers
    def log(self, msg: str) -> None:
        line = f"[{datetime.now():%Y-%m-%d %H:%M:%S}] [quotecite {self.job_id}] {msg}"
        if self.ex.dry:
            return
        print(line, file=sys.stderr, flush=True)
        if self.run_dir.is_dir():
            with open(self.run_dir / "chain.log", "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def on_node(self, name: str, node: str, positions: str, argv: list[str], log: Path, env: dict[str, str],
                port_file: Path | None = None, bind_host: str = "", prefer_port: int = 0) -> Proc:  # fmt: skip
        """Start ``argv`` on ``node`` (here when it is this job's first node, else as an srun step there) through
        ``launch/layout.py run``, which gives it that node's GPUs at ``positions``, chooses its port when asked, and
        kills what it leaves behind."""
        wrap = [self.software["launch_python"], str(REPO / "launch" / "layout.py"), "run", "--gpus", positions,
                "--grace", str(WRAP_GRACE_S)]  # fmt: skip
        if port_file is not None:
            wrap += ["--port-file", str(port_file), "--bind-host", bind_host]
            if prefer_port:
                wrap += ["--prefer-port", str(prefer_port)]
        wrap += ["--", *argv]
        if node == self.first:
            return self.ex.start(Step("start", name, wrap, env=env, log=str(log)))
        srun = ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--overlap", "--kill-on-bad-exit=1", *self.cpus,
                f"--job-name={name}", *wrap]  # fmt: skip
        return self.ex.start(Step("start", name, srun, env=env, gpus="-", log=str(log)))

    def nap(self, seconds: float) -> None:
        self.ex.sleep(seconds)

    def trainer_env(self) -> dict[str, str]:
        """What the trainer, its reward and every Ray worker must see: the servers, the run's folders, the repository
        on the path (the reward plugin imports reward/, data_prep/), offline model hubs, and its own Ray."""
        s = self.s
        env = {
            "QUOTECITE_JUDGE_URL": self.judge_url(),
            "QUOTECITE_EMBED_URL": self.embed_url(),
            "QUOTECITE_JUDGE_MODEL": s.models.judge_model,
            "QUOTECITE_EMBED_MODEL": s.models.embed_model,
            "QUOTECITE_CKPT_DIR": f"{self.run_dir}/checkpoints",
            "QUOTECITE_METRICS_DIR": str(self.segment_dir),
            "QUOTECITE_SEGMENT": self.segment or "JOBID-N",
            "PYTHONPATH": str(REPO) + (f":{self.environ['PYTHONPATH']}" if self.environ.get("PYTHONPATH") else ""),
            "RAY_AUTH_MODE": self.environ.get("RAY_AUTH_MODE", "disabled"),
            "WANDB_MODE": self.environ.get("WANDB_MODE", "offline"),
            "WANDB_DIR": str(self.run_dir),
            "RAY_TMPDIR": self.ray_tmp(),
            **self.software["env"],
        }
        # --- pre-flight: NCCL_SOCKET_IFNAME, NCCL_IB_*, GLOO_SOCKET_IFNAME as the job has them; WANDB_RUN_ID and
        # WANDB_RESUME (every job of the run into one wandb run)
        env.update(self.net_env)
        env.update(self.wandb_env)
        # --- end pre-flight
        if s.run.cache_dir or s.run.data_dir:
            env["QUOTECITE_CACHE_DIR"] = str(s.run.cache_dir or f"{s.run.data_dir}/cache")
        # Several trainer nodes: EasyR1's ray.init() joins this job's cluster; one: it starts a new one of its own
        # ("local"), never one that a stale /tmp/ray/ray_current_cluster names.
        env["RAY_ADDRESS"] = self.ray_address or "local"
        return env

    def ray_tmp(self) -> str:
        return str(self.s.ray.ray_tmpdir or f"/tmp/qcray-{self.job_id}")

    def read_port(self, srv: Server) -> int:
        try:
            return int(srv.port_file.read_text().strip())
        except (OSError, ValueError):
            return 0

    # ------------------------------------------------------------------------------------------------ states
    def run(self) -> int:
        if not self.ex.dry:
            self.run_dir.joinpath("logs").mkdir(parents=True, exist_ok=True)
            signal.signal(signal.SIGTERM, self._on_term)
            signal.signal(signal.SIGINT, self._on_term)
            signal.signal(signal.SIGUSR1, self._on_usr1)
        self.header()
        state = State.PREPARE
        try:
            while True:
                state = getattr(self, f"state_{state.value}")()
                if state in (State.DONE, State.STOP):
                    return self.exit_code
        except JobError as e:
            self._stop_all(5 if self.terminating else 20)
            if self.segment and not self.ex.dry:
                self._finish(e.status, None, str(e))
            self.log(f"error: {e}" + (". The chain stops here (no job submitted)." if e.final else ""))
            for path in e.logs:
                if path.is_file():
                    tail = path.read_text(errors="replace").splitlines()[-40:]
                    print(f"---- last 40 lines of {path}\n" + "\n".join(tail) + "\n----", file=sys.stderr)
            return 143 if self.terminating else 1
        except Exception as e:  # a bug in the launch: stop what runs, record the segment, keep the traceback
            self._stop_all(5)
            if self.segment and not self.ex.dry:
                self._finish("crashed", None, f"launch error: {type(e).__name__}: {e}")
            raise
        finally:
            self._stop_ray()

    def header(self) -> None:
        s, lay = self.s, self.layout
        ex = self.ex
        lines = [f"quotecite GRPO launch{', dry run (nothing is started)' if ex.dry else ''}",
                 f"repository      {REPO}", f"run folder      {self.run_dir}", f"recipe          {self.recipe}",
                 f"max_steps       {self.max_steps}" + (f" ({self.p.max_steps_from})" if self.p.max_steps_from else "")]  # fmt: skip
        if not self.multi:
            lines.append(f"GPU split       trainer CUDA_VISIBLE_DEVICES={self.trainer_gpus} (trainer.n_gpus_per_node="
                         f"{lay.train_gpus_per_node}); judge + embedder CUDA_VISIBLE_DEVICES="
                         f"{','.join(sorted({v.device for v in self.servers}))}")  # fmt: skip
            if len(lay.judges) > 1:
                lines.append(f"judge replicas  {len(lay.judges)}")
        else:
            lines.append(f"nodes           {len(lay.nodes)}: {' '.join(lay.nodes)} (GPUs per node: "
                         f"{' '.join(map(str, lay.gpus))}; {self.alloc.source})")  # fmt: skip
            lines.append(f"trainer         {len(lay.trainer_nodes)} node(s) x {lay.train_gpus_per_node} GPU(s): "
                         f"{' '.join(lay.trainer_nodes)}, GPU(s) {','.join(map(str, lay.train_positions))} on each "
                         f"(trainer.nnodes={len(lay.trainer_nodes)} trainer.n_gpus_per_node="
                         f"{lay.train_gpus_per_node})")  # fmt: skip
            if lay.ray:
                lines.append(f"Ray cluster     head on {lay.trainer_nodes[0]}, workers on "
                             f"{' '.join(lay.trainer_nodes[1:])}; the trainer runs with RAY_ADDRESS=<head>")  # fmt: skip
            else:
                lines.append("Ray cluster     none (one trainer node: EasyR1 starts its own)")
            lines.append(
                "serving         " + "; ".join(f"{v.name} on {v.node} GPU {v.position}" for v in self.servers)
            )
        if lay.idle:
            lines.append("idle GPUs       " + "; ".join(f"{n} GPU {position_ranges(p)}" for n, p in lay.idle.items()))
        lines += self.preflight_notes  # --- pre-flight (launch/preflight.py)
        lines.append(f"judge           {s.models.judge_model} at {self.judge_url()}")
        lines.append(f"embedder        {s.models.embed_model} at {self.embed_url()}")
        lines.append(f"stop on USR1    {s.run.trainer_stop} (grace {s.run.stop_grace:g}s); chain: "
                     f"{'scontrol requeue of this job' if s.chain.chain else 'off (QUOTECITE_CHAIN=0)'}, stop after "
                     f"{s.chain.max_stalled_jobs} jobs without progress; this is run "
                     f"{int(self.environ.get('SLURM_RESTART_COUNT') or 0) + 1} of job {self.job_id}")  # fmt: skip
        for line in lines:
            if ex.dry:
                ex.note(line)
            else:
                self.log(line)

    def state_prepare(self) -> State:
        if not self.ex.dry and not isinstance(self.max_steps, int):
            raise JobError(f"max_steps {self.max_steps!r} is not a number", "crashed")
        # --- GPU memory budget (launch/budget_gpu.py): refuse a recipe the GPUs cannot hold before any starts
        if self.restarts == 0:
            self._gpu_budget()
        # --- end GPU memory budget
        # --- pre-flight: NVIDIA driver and C compiler (launch/preflight.py), before any server starts
        if self.restarts == 0:
            for line in preflight.check_toolchain(self.environ, str(self.software.get("torch_server", "unknown")),
                                                  bool(self.s.software.env_setup), self.probe):  # fmt: skip
                self.ex.note(line)
        # --- end pre-flight
        models = {
            "policy": self.p.policy_model,
            "judge": self.s.models.judge_model,
            "embedder": self.s.models.embed_model,
        }
        sw = self.software

        def do() -> Start:
            return prepare(self.run_dir, self.job_id, max_steps=self.max_steps,
                           max_stalled=self.s.chain.max_stalled_jobs, require_lora=self.p.require_lora, repo=REPO,
                           recipe=self.recipe, easyr1_commit=sw["easyr1_commit"], vllm_trainer=sw["vllm_trainer"],
                           vllm_server=sw["vllm_server"], models=models,
                           allow_recipe_change=bool(self.s.run.allow_recipe_change),
                           job_extra={"allocation": self.alloc.source, "nodes": self.layout.nodes})  # fmt: skip

        d = self.ex.call("prepare", "repair the checkpoints, pick the resume step, open a segment "
                         "RUN_DIR/segments/JOBID-N, update manifest.json", do,
                         dry_result=Start(action="run", message="dry run", exit_code=0,
                                          resume_step=self._dry_resume_step(), segment="JOBID-N",
                                          segment_dir=self.segment_dir))  # fmt: skip
        if d.checkpoint_notes:
            self.log(f"checkpoints: {'; '.join(d.checkpoint_notes)}")
        if d.action == "done":
            self.log(f"{d.message}; nothing to do")
            self.exit_code = 0
            return State.DONE
        if d.action == "stop" or d.segment_dir is None:
            self.log(f"error: {d.message}")
            self.exit_code = d.exit_code
            return State.STOP
        self.segment, self.segment_dir = d.segment, d.segment_dir
        self.log(f"segment {self.segment}: {d.message}")
        self._resume_overrides(d.resume_step)  # --- pre-flight: no validation again at a resume
        if self.restarts == 0:
            self.ex.call("disk", "estimate the disk use of the checkpoints against the free space of the run folder "
                         "(refuse with the numbers, warn under the margin); prune checkpoints/incomplete/",
                         self._disk)  # fmt: skip
        return State.SERVE

    def _disk(self) -> None:
        """Checkpoints to come against free disk and the user's quota (refuse with the numbers, warn under the
        margin); ``checkpoints/incomplete/`` pruned."""
        pruned = budget.prune_incomplete(self.run_dir / "checkpoints", keep=1)
        if pruned.removed:
            self.log(f"pruned {len(pruned.removed)} old entr{'y' if len(pruned.removed) == 1 else 'ies'} of "
                     f"checkpoints/incomplete/ ({pruned.freed_bytes / 2**30:.1f} GiB)")  # fmt: skip
        try:
            level, message = budget.run_disk_check(self.recipe, self.overrides[1:], self.run_dir, self.max_steps,
                                                   n_gpus_per_node=self.layout.train_gpus_per_node,
                                                   nnodes=len(self.layout.trainer_nodes))  # fmt: skip
        except InputError as e:  # a model whose size is unknown: say so, do not stop the run for it
            self.log(f"checkpoint disk estimate skipped: {e}")
        else:
            if level == "refuse":
                raise JobError(f"not enough disk for the run's checkpoints: {message}", "crashed", final=True)
            self.log(("warning: " if level == "warn" else "") + f"checkpoint disk: {message}")
        # save_freq against the stop grace: planned before GPU time (Job._fit_overrides), printed in the header

    # --- GPU memory budget (launch/budget_gpu.py)
    def _gpu_budget(self) -> None:
        """Every phase of the recipe against the GPU kind Slurm names (``gpu:h200:3``), else the one the NVIDIA
        driver lists on this node (a file read: the dry run decides the same); a phase that cannot fit stops the
        job with the numbers (``InputError``: one ``error:`` line, dry run included); a model of unknown shapes or
        an unknown GPU skips the check, saying so."""
        try:
            recipe = budget_gpu.read_recipe(self.recipe, self.overrides[1:], self.layout.train_gpus_per_node
                                            * len(self.layout.trainer_nodes))  # fmt: skip
        except InputError as e:
            self.ex.note(f"GPU memory budget skipped: {e}")
            return
        gpu, source = budget_gpu.gpu_from_slurm(self.environ)
        if gpu is None:
            gpu, driver = budget_gpu.gpu_from_driver()
            if gpu is None:
                self.ex.note(f"GPU memory budget skipped: {source}; {driver}")
                return
            source = driver
        s = self.s
        serve_gpus = len({(node, pos) for _, node, pos in self.layout.server_gpus()})
        servers = budget_gpu.ServerPlan(s.models.judge_model, s.models.embed_model, s.servers.judge_gpu_util, s.servers.embed_gpu_util,
                                        serve_gpus, len(self.layout.judges))  # fmt: skip
        b = budget_gpu.estimate(recipe, gpu, servers)
        if b.refusal():
            raise InputError(f"the recipe cannot fit the GPUs ({source}; python -m launch.budget gpu --gpu ... shows "
                             f"the parts): {b.refusal()}")  # fmt: skip
        self.ex.note(f"GPU memory budget ({source}): {b.summary()}")

    # --- end GPU memory budget
    def state_serve(self) -> State:
        self.ex.note(f"servers on {'their nodes' if self.multi else 'GPU ' + self.servers[-1].device}, one after "
                     "the other (vLLM sizes its memory from what is free)")  # fmt: skip
        for srv in self.servers:
            self.serve(srv)
        return State.RAY if self.layout.ray else State.CHECK

    def serve(self, srv: Server) -> None:
        srv.log = self.segment_dir / f"{srv.name}.log"
        srv.port_file = self.segment_dir / f"{srv.name}.port"
        # a restart mid-job asks for the port the trainer already knows; a first start for the preferred one
        prefer, srv.port = srv.port or srv.preferred_port, 0
        if not self.ex.dry:
            srv.port_file.unlink(missing_ok=True)
        argv = server_argv(srv.role, self.s, srv.host, "{port}", self.software[f"{srv.role}_cmd"])
        srv.proc = self.on_node(srv.name, srv.node, str(srv.position), argv, srv.log, dict(self.software["env"]),
                                port_file=srv.port_file, bind_host=srv.host,
                                prefer_port=prefer)  # fmt: skip
        self.ex.wait(f"health-{srv.name}", f"wait until the /health of {srv.name} answers 200 on its port (read from "
                     f"{srv.port_file.name}; at most {self.s.servers.health_timeout:g}s), else stop: {srv.label} is not "
                     f"healthy, see {srv.log}", lambda: self._wait_health(srv))  # fmt: skip

    def _wait_health(self, srv: Server) -> None:
        def url() -> str:
            srv.port = self.read_port(srv)
            return f"http://{srv.host}:{srv.port}/health" if srv.port else ""

        try:
            took = wait_healthy(url, srv.label, self.s.servers.health_timeout, self.s.servers.health_poll, str(srv.log),
                                srv.proc.poll, stop=lambda: self.terminating)  # fmt: skip
        except NotHealthy as e:
            raise JobError(str(e), "server_failed", (srv.log,), final=True) from None
        self.log(f"{srv.label} is healthy at {srv.url} after {took:.0f}s")

    def state_ray(self) -> State:
        """A Ray cluster of this job's own: the head here, a worker on each other trainer node, every one started
        with the trainer's environment (EasyR1's ``ray.init(runtime_env=...)`` forwards only its own variables, so
        a reward actor on another node sees what its node's ``ray start`` saw)."""
        lay, s = self.layout, self.s
        ray, pos = self.software["ray"], ",".join(map(str, lay.train_positions))
        head = lay.trainer_nodes[0]
        head_addr = self.addresses[head].address
        port_file = self.segment_dir / "ray.port"
        if not self.ex.dry:
            port_file.unlink(missing_ok=True)
        self.ray_address = f"{head_addr}:{{port}}"
        env = self.trainer_env()
        env.pop("RAY_ADDRESS")
        self.ex.note(f"Ray cluster: head here ({head}), a worker on each other trainer node (srun steps, watched)")
        cpus = slurm_cpus(self.environ)  # Ray's worker pool sized by the job's CPUs, never the node's cores
        cpu_args = ["--num-cpus", str(cpus)] if cpus else []
        argv = [*ray, "start", "--head", "--block", "--node-ip-address", head_addr, "--port", "{port}",
                "--num-gpus", str(lay.train_gpus_per_node), *cpu_args, "--include-dashboard=false",
                "--disable-usage-stats", "--temp-dir", self.ray_tmp(),
                *(self.ray_ports.head_args() if self.ray_ports else [])]  # fmt: skip
        self.ray_procs = [(head, self.on_node("ray_0", head, pos, argv, self.segment_dir / f"ray-{head}.log", env,
                                              port_file=port_file, bind_host=head_addr,
                                              prefer_port=s.ray.ray_port or 0))]  # fmt: skip

        def head_port() -> None:
            deadline = time.monotonic() + s.ray.ray_timeout
            while True:
                try:
                    port = int(port_file.read_text().strip())
                except (OSError, ValueError):
                    port = 0
                if port:
                    rc, _ = Executor().run(Step("run", "ray-status", [*ray, "status", "--address",
                                                                      f"{head_addr}:{port}"]), timeout=30)  # fmt: skip
                    if rc == 0:
                        self.ray_address = f"{head_addr}:{port}"
                        return
                self._check_ray()
                if time.monotonic() >= deadline:
                    raise JobError(f"the Ray head on {head} did not answer within {s.ray.ray_timeout:g}s; see its log "
                                   f"{self.segment_dir}/ray-{head}.log", "crashed")  # fmt: skip
                time.sleep(1)

        self.ex.wait("ray-head", f"wait until `{shlex.join([*ray, 'status', '--address', self.ray_address])}` "
                     "answers", head_port)  # fmt: skip
        for i, node in enumerate(lay.trainer_nodes[1:], 1):
            argv = [*ray, "start", "--address", self.ray_address, "--block", "--node-ip-address",
                    self.addresses[node].address, "--num-gpus", str(lay.train_gpus_per_node), *cpu_args,
                    "--disable-usage-stats"]  # fmt: skip
            # no port block on worker nodes: nodes that share one host (a local Slurm, or two job steps on one
            # machine) would bind the same ports and time out at start; Ray picks free ones there
            self.ray_procs.append((node, self.on_node(f"ray_{i}", node, pos, argv, self.segment_dir / f"ray-{node}.log",
                                                      env)))  # fmt: skip
        self.ex.wait("ray-nodes", f"wait until `{shlex.join([*ray, 'status', '--address', self.ray_address])}` lists "
                     f"{len(lay.trainer_nodes)} active nodes (at most {s.ray.ray_timeout:g}s)", self._wait_ray)  # fmt: skip
        return State.CHECK

    def _wait_ray(self) -> None:
        ray, want = self.software["ray"], len(self.layout.trainer_nodes)
        deadline = time.monotonic() + self.s.ray.ray_timeout
        seen = 0
        while True:
            self._check_ray()
            rc, out = Executor().run(Step("run", "ray-status", [*ray, "status", "--address", self.ray_address]),
                                     timeout=30)  # fmt: skip
            seen = _active_nodes(out) if rc == 0 else 0
            if seen >= want:
                self.log(f"Ray cluster at {self.ray_address}: {seen} nodes ({' '.join(self.layout.trainer_nodes)}), "
                         f"{self.layout.train_gpus_per_node} GPU(s) each")  # fmt: skip
                return
            if time.monotonic() >= deadline:
                raise JobError(f"Ray sees {seen} of {want} trainer nodes after {self.s.ray.ray_timeout:g}s; see the logs "
                               f"{self.segment_dir}/ray-*.log", "crashed")  # fmt: skip
            time.sleep(1)

    def _check_ray(self) -> None:
        for i, (node, proc) in enumerate(self.ray_procs):
            rc = proc.poll() if not self.ex.dry else None
            if rc is not None:
                what = "head" if i == 0 else "worker (srun step)"
                raise JobError(f"Ray {what} on {node} exited (code {rc}); see its log {self.segment_dir}/ray-{node}.log",
                               "crashed")  # fmt: skip

    def _stop_ray(self) -> None:
        procs, self.ray_procs = self.ray_procs, []
        if procs:
            self.log(f"stopping the Ray cluster ({' '.join(n for n, _ in procs)})")
        for _, p in procs:
            p.kill_group(signal.SIGTERM)
        for _, p in procs:
            p.stop(10)

    def state_check(self) -> State:
        if not self.s.run.preflight:
            if self.restarts == 0:
                self.ex.note("reward check skipped (QUOTECITE_PREFLIGHT=0)")
                self.log("reward check skipped (QUOTECITE_PREFLIGHT=0)")
            return State.TRAIN
        if self.checked or self.stop_requested:
            return State.TRAIN
        self.checked = True
        self.ex.note("reward check (data, cache, one judge and one embedding request); a failure stops the job, "
                     "no resubmission")  # fmt: skip
        log = self.segment_dir / "check.log"
        argv = [self.software["check_python"], "-m", "reward", "check", "--recipe", str(self.recipe), "--judge-url",
                self.judge_url(), "--judge-model", self.s.models.judge_model, "--embed-url", self.embed_url(), "--",
                *self.overrides[1:]]  # fmt: skip
        self.log(f"reward check: the training data, the block cache and both servers (log: {log})")
        self.check = self.ex.start(Step("start", "check", argv, env=self.trainer_env(), gpus="", log=str(log)))
        rc = self.check.wait()
        while rc is None:
            rc = self.check.wait(1)
        self.check = None
        if rc == 0:
            self.log("reward check passed")
            return State.TRAIN
        text = log.read_text(errors="replace") if log.is_file() else ""
        lines = [ln.removeprefix("reward check failed: ") for ln in text.splitlines()
                 if ln.startswith("reward check failed: ")]  # fmt: skip
        msg = f"reward check failed (exit {rc}): {'; '.join(lines) or f'see its log {log}'}"
        raise JobError(msg, "check_failed", (log,), final=True)

    def state_train(self) -> State:
        s = self.s
        if self.stop_requested:
            self.log("SIGUSR1 arrived before training started: not starting the trainer")
            self.status, self.trainer_rc, self.end_message = "stopped", None, ""
            return State.END
        self.ex.note(f"trainer (EasyR1's driver) here, on the Ray cluster: {' '.join(self.layout.trainer_nodes)}"
                     if self.layout.ray else f"trainer on GPUs {self.trainer_gpus}")  # fmt: skip
        self.trainer = self.ex.start(Step("start", "trainer", [*self.software["trainer_cmd"], *self.overrides],
                                          env=self.trainer_env(), gpus=self.trainer_gpus,
                                          log=str(self.segment_dir / "trainer.log")))  # fmt: skip
        self.ex.note(
            f"on SIGUSR1: {'forward SIGUSR1 to the trainer' if s.run.trainer_stop == 'signal' else 'stop the trainer once checkpoint_tracker.json advances and that step is logged'} (at most {s.run.stop_grace:g}s); on SIGTERM: stop everything and record the segment (Slurm requeues the job or not)"
        )  # noqa: E501
        self.ex.note(f"while training: a judge or embedder process that dies is restarted (at most "
                     f"{s.servers.max_server_restarts} per job); a trainer that stops on a server outage gets both servers "
                     f"restarted and resumes in a new segment (at most {s.run.max_restarts} per job)")  # fmt: skip
        self.status, self.trainer_rc, self.end_message = "", None, ""
        stop_deadline = stop_base = log_wait_until = 0.0
        while not self.ex.dry and self.trainer.poll() is None:
            self.nap(s.run.poll_seconds)
            try:
                self._check_servers()
                self._check_ray()
            except JobError as e:
                self.log(f"error: {e}; stopping the trainer")
                self.trainer_rc = self.trainer.stop(30)
                self.status, self.end_message = e.status, str(e)
                return State.END
            if self.stop_requested and not self.stop_handled:
                self.stop_handled = True
                stop_deadline = time.monotonic() + s.run.stop_grace
                if s.run.trainer_stop == "signal":
                    self.log(f"SIGUSR1: asking the trainer to save and exit (at most {s.run.stop_grace:g}s)")
                    self.trainer.signal(signal.SIGUSR1)
                else:
                    stop_base = last_step(self.run_dir)
                    self.log(f"SIGUSR1: stopping the trainer after its next checkpoint (now at step {stop_base}; at "
                             f"most {s.run.stop_grace:g}s)")  # fmt: skip
            if self.stop_handled:
                if time.monotonic() >= stop_deadline:
                    self.log(f"no checkpoint within {s.run.stop_grace:g}s of SIGUSR1; stopping the trainer now (steps "
                             "since the last checkpoint are lost)")  # fmt: skip
                    self.trainer.stop(30)
                elif s.run.trainer_stop == "checkpoint":
                    now = last_step(self.run_dir)
                    if now > stop_base:
                        if not log_wait_until:  # EasyR1 logs a step's metrics right after saving its checkpoint
                            log_wait_until = time.monotonic() + s.run.log_wait
                        if logged_step(self.segment_dir) >= now or time.monotonic() >= log_wait_until:
                            self.log(f"checkpoint global_step_{now} is complete; stopping the trainer")
                            self.trainer.stop(30)
        self.trainer_rc = self.trainer.wait()
        if self.stop_handled:
            self.status = "stopped"
        elif self.trainer_rc == 0:
            self.status = "finished"
        else:
            self.status = "crashed"
            try:
                self._check_ray()
            except JobError as e:
                self.end_message = str(e)
        self.log(f"trainer ended (exit {self.trainer_rc}, {self.status})")
        return State.END

    def _check_servers(self) -> None:
        """Restart a server process that died while the trainer runs (the reward waits out the gap)."""
        for srv in self.servers:
            rc = srv.proc.poll() if srv.proc else None
            if rc is None:
                continue
            srv.proc.stop(1)
            if self.server_restarts >= self.s.servers.max_server_restarts:
                raise JobError(f"{srv.label} exited (code {rc}) mid-job after {self.server_restarts} restarts in this "
                               f"job (QUOTECITE_MAX_SERVER_RESTARTS={self.s.servers.max_server_restarts}); see {srv.log}",
                               "server_failed")  # fmt: skip
            self.server_restarts += 1
            self.log(f"{srv.label} exited (code {rc}) mid-job; restarting it ({self.server_restarts} of at most "
                     f"{self.s.servers.max_server_restarts} in this job)")  # fmt: skip
            totals = record_restart(self.run_dir, self.segment, srv.role, f"exited with code {rc}")
            self.log("restarts in this run: " + ",".join(f"{k}={v}" for k, v in sorted(totals.items())))
            self.serve(srv)

    def state_end(self) -> State:
        self.ex.note("stop the servers, close the segment, merge the run log, decide")
        self._stop_servers()
        self._stop_ray()
        if self.status == "crashed" and not self.ex.dry:
            resume = next((sg.resume_step for sg in load_segments(self.run_dir) if sg.name == self.segment), 0)
            empty = read_no_group_kept(self.segment_dir, resume)
            if empty is not None:
                self.status, self.end_message = "no_group_kept", empty
                return State.FINISH
            outage = read_outage(self.segment_dir)
            if outage is not None:
                self.end_message = f"stopped on a server outage: {outage}"
                if self.restarts < self.s.run.max_restarts:
                    return State.RESTART
                self.log(f"the trainer {self.end_message}; {self.s.run.max_restarts} restarts in this job already "
                         "(QUOTECITE_MAX_RESTARTS)")  # fmt: skip
        return State.FINISH

    def state_restart(self) -> State:
        self.restarts += 1
        self.log(
            f"the trainer {self.end_message}; restarting the judge and embedding servers and the trainer from "
            f"the last complete checkpoint ({self.restarts} of at most {self.s.run.max_restarts} in this job)"
        )
        self._finish("outage", self.trainer_rc, self.end_message)
        outage = self.end_message.removeprefix("stopped on a server outage: ")
        self.ray_address = ""
        nxt = self.state_prepare()
        if nxt is State.SERVE:
            record_restart(self.run_dir, self.segment, "trainer", outage)
        else:
            self.log(f"not restarting: {nxt.value}")
        return nxt

    def _finish(self, status: str, rc: int | None, message: str) -> End:
        return self.ex.call("finish", "close the segment (its status and end step), merge the run log, decide",
                            lambda: finish(self.run_dir, self.segment, status=status, trainer_exit=rc, message=message,
                                           max_steps=self.max_steps, max_stalled=self.s.chain.max_stalled_jobs,
                                           require_lora=self.p.require_lora),
                            dry_result=End(action="continue", message="dry run", exit_code=0, end_step=0,
                                           logged_steps=0))  # fmt: skip

    def state_finish(self) -> State:
        d = self._finish(self.status, self.trainer_rc, self.end_message)
        self.ex.call("samples-page", "write RUN_DIR/samples.html, the samples browser of the reward's sampled "
                     "groups (when the run has any)", self._samples_page)  # fmt: skip
        if d.missing_steps:
            self.log(f"warning: no metrics for steps {','.join(map(str, d.missing_steps))} (see run_summary.json)")
        self.log(f"run log: {d.logged_steps} steps; last complete checkpoint: step {d.end_step} of "
                 f"{self.max_steps}")  # fmt: skip
        self.exit_code = d.exit_code
        self.decision = d
        if d.action == "continue":
            return State.CHAIN
        if d.action == "done":
            self.log(d.message)
            return State.DONE
        self.log(f"error: {d.message}")
        return State.STOP

    def _samples_page(self) -> None:
        from launch.samples_page import collect_steps, write_samples_page

        try:
            if collect_steps(self.run_dir):
                self.log(f"samples browser: {write_samples_page(self.run_dir)}")
        except (InputError, OSError, ValueError) as e:  # a damaged sample never fails the job
            self.log(f"warning: no samples page: {e}")

    def resubmit_hint(self) -> str:
        """The command that continues the run by hand (a new job of the script, with this job's arguments)."""
        return (f"cd {REPO} && QUOTECITE_RUN_DIR={shlex.quote(str(self.run_dir))} sbatch [your sbatch options] "
                + shlex.join(["launch/grpo_8b.sh", *self.args]))  # fmt: skip

    def state_chain(self) -> State:
        """Continue the run in this same job: ``scontrol requeue`` (see the module docstring for what Slurm does).
        Everything is closed and recorded before; the SIGTERM Slurm answers with is expected: ignored, exit 0.
        A refused requeue (``Requeue=0``, permission) stops the chain with the reason and the command that resumes
        by hand: a fresh ``sbatch`` from inside the job would fall back to the script's header and lose the options
        the user gave (partition, account, nodes, ``--signal``), so the job does not guess them."""
        msg = self.decision.message if hasattr(self, "decision") else ""
        if not self.ex.dry and not self.in_slurm:
            self.log(f"{msg} -- not under Slurm: run this script again to resume")
            return State.DONE
        if not self.s.chain.chain:
            self.log(f"{msg} -- QUOTECITE_CHAIN=0: not requeueing; to resume: {self.resubmit_hint()}")
            return State.DONE
        self.ex.note("if the run is not complete and the job made progress: requeue this same job (same id, options "
                     "and arguments); Slurm then sends SIGTERM to the whole job, which exits 0")  # fmt: skip
        if not self.ex.dry:  # from here on, Slurm's SIGTERM is the requeue's; scontrol inherits the ignore
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                signal.signal(sig, signal.SIG_IGN)
            restart = int(self.environ.get("SLURM_RESTART_COUNT") or 0)
            self.log(f"{msg} -- by requeueing job {self.job_id} (run {restart + 1} of it ends here)")
        said: list[str] = []  # the executor's line with scontrol's reason, when it refuses
        log, self.ex.log = self.ex.log, said.append
        try:
            rc, _ = self.ex.run(Step("run", "requeue", ["scontrol", "requeue", self.job_id]), timeout=120)
        finally:
            self.ex.log = log
        if rc != 0:
            signal.signal(signal.SIGTERM, self._on_term)
            reason = said[-1].removeprefix("requeue: ") if said else f"exit {rc}"
            raise JobError(f"the job could not requeue itself (scontrol requeue {self.job_id}: {reason}); the chain "
                           f"stops here. To resume: {self.resubmit_hint()}", "stopped")  # fmt: skip
        return State.DONE

    # ------------------------------------------------------------------------------------------------ stopping
    def _stop_servers(self, grace: float = 20) -> None:
        # a server runs under launch/layout.py run, in a session of its own: the wrapper kills it WRAP_GRACE_S after
        # SIGTERM. Killing the wrapper sooner would leave the server running past the job (and, on a requeue,
        # holding the node's GPU and port), so the wrapper always gets longer than that.
        grace = max(grace, WRAP_GRACE_S + 3)
        for srv in reversed(self.servers):
            if srv.proc is not None and srv.proc.poll() is None:
                self.log(f"stopping {srv.label}")
            if srv.proc is not None:
                srv.proc.stop(grace)

    def _stop_all(self, grace: float) -> None:
        for p, what in ((self.trainer, "trainer"), (self.check, "reward check")):
            if p is not None and p.poll() is None:
                self.log(f"stopping {what} (pid {p.pid})")
                p.stop(grace)
        self._stop_servers(grace)
        self._stop_ray()

    def _on_usr1(self, *_: Any) -> None:
        self.stop_requested = True

    def _on_term(self, *_: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self.terminating = True
        self.log("SIGTERM: stopping (the job does not requeue itself; Slurm requeues it or not)")
        raise JobError("SIGTERM from Slurm (cancel, preemption, requeue or wall time)", "terminated")

    exit_code = 0


def _active_nodes(status_out: str) -> int:
    """Active nodes in ``ray status`` output."""
    n, active = 0, False
    for line in status_out.splitlines():
        if line.startswith("Active:"):
            active = True
            continue
        if line[:1].isupper():
            active = False
        if active and "node_" in line:
            n += 1
    return n


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="launch/grpo_8b.sh", add_help=False, description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print every step of this job; run nothing")
    ap.add_argument("--steps-json", action="store_true", help="with --dry-run: the steps as JSON lines")
    ap.add_argument("--settings", action="store_true", help="print every setting's resolved value and exit")
    ap.add_argument("--smoke", action="store_true", help="two steps, then eval infer (launch/smoke.py)")
    ap.add_argument("-h", "--help", action="store_true")
    settings.add_layer_arguments(ap)
    a, rest = ap.parse_known_args(argv)
    if a.help:
        print(__doc__)
        print("usage: sbatch launch/grpo_8b.sh [key=value ...]   (EasyR1 overrides)\n"
              "       bash launch/grpo_8b.sh --dry-run [--steps-json] [key=value ...]\n"
              "       bash launch/grpo_8b.sh --settings\n"
              "       sbatch launch/grpo_8b.sh --smoke [key=value ...]   (two steps in RUN_DIR/smoke/JOBID, "
              "then eval infer; launch/smoke.py)\n"
              "  settings: --config FILE (YAML, by group) and --set group.field=VALUE, over the environment's\n")  # fmt: skip
        print(settings.render_help())
        return 0
    unknown = [x for x in rest if x.startswith("-")]
    if unknown:
        print(f"error: unknown option {unknown[0]} (options: --dry-run, --steps-json, --settings, --smoke, --config, "
              "--set, --help; "
              "everything else is key=value for EasyR1)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        s = settings.resolve(os.environ, REPO, file=a.config, sets=a.set)
        os.environ.update(s.env(("file", "command line")))  # every step and child sees the values the job sees
        # --- smoke (launch/smoke.py): its own run folder, two steps, no next job, save and validate at each step
        if a.smoke:
            job_id = os.environ.get("SLURM_JOB_ID") or ("JOBID" if a.dry_run else f"local-{datetime.now():%Y%m%d%H%M%S}")  # fmt: skip
            os.environ.update(smoke.environment(os.environ, Path(s.run.run_dir).resolve(), job_id))
            s, rest = settings.resolve(os.environ, REPO), smoke.overrides(rest)  # --config/--set: in os.environ now
            smoke.check_inputs(s, a.dry_run or a.settings)
        # --- end smoke
        if a.settings:
            print(settings.render_resolved(s))
            return 0
        if a.dry_run:
            ex: Executor = PrintingExecutor(as_json=a.steps_json)
        else:
            job_id = os.environ.get("SLURM_JOB_ID") or f"local-{socket.gethostname()}-{os.getpid()}"
            steps = Path(s.run.run_dir).resolve() / "logs" / f"steps-{job_id}.jsonl"
            ex = Executor(steps)
        job = Job(s, rest, ex, dict(os.environ))
        if not a.smoke:
            return job.run()
        # --- smoke: the memory sampler for the whole job; then eval infer with the saved adapter, the summary
        sampler = smoke.start_sampler(job, ex)
        rc = 1
        try:
            rc = job.run()
        finally:
            rc = smoke.after(job, ex, rc, sampler)
        return rc
        # --- end smoke
    except (InputError, RunError, JobStepError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
