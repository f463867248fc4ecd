"""The GRPO training job: one Slurm job of a chain, a state machine (:data:`State`, one ``Job.state_*`` method each)
whose dry run is the job itself with the printing executor (docs/cluster.md). Its last action continues the chain: a
``scontrol requeue`` of itself, whose SIGTERM it ignores; any other SIGTERM stops everything and records the segment.

Measured on Slurm 22.05.8 (``tests/launch/test_launch.py``): only the job's owner may requeue it, never a job with
``Requeue=0`` ("Requested operation is presently disabled for job N"). Slurm sends SIGCONT and SIGTERM to every process
within ~35 ms; the job pends (``BeginTime``) until ``cred_expire`` + 1 s (121 s) after its last process ended, then
runs again with the same id and ``--signal`` re-armed (no requeue limit met in 6). So what is keyed by the job id is
per run (segments ``JOBID-N``) or shared on purpose (``logs/steps-JOBID.jsonl``, ``/tmp/qcray-JOBID``, Ray's ports).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from core.errors import InputError
from launch import budget, budget_gpu, preflight, runlog, serving, settings, setup, smoke
from launch.checkpoints import find_resume_point
from launch.executor import Executor, JobStepError, PrintingExecutor, Proc, Step
from launch.layout import LayoutError, device_ids, plan_from_env, position_ranges
from launch.run_files import RunError
from launch.run_manifest import load_recipe, parse_overrides, recipe_value
from launch.segments import load_segments
from launch.serving import WRAP_GRACE_S, NotHealthy, no_proxy_env, read_port, server_argv, wait_healthy
from reward.train import slurm_cpus

REPO = Path(__file__).resolve().parents[1]
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


State = enum.Enum("State", "PREPARE SERVE RAY CHECK TRAIN END RESTART FINISH CHAIN DONE STOP")
"""The job's states: each but DONE and STOP is the method ``Job.state_<name>``, which returns the next state."""


class JobError(RuntimeError):
    """The job cannot go on: ``status`` ends its segment, ``logs`` are shown, ``final`` says the chain stops here."""

    def __init__(self, message: str, status: str = "crashed", logs: tuple = (), final: bool = False) -> None:
        super().__init__(message)
        self.status, self.logs, self.final = status, logs, final


@dataclass
class Server:
    """A judge replica (``judge``, ``judge2``, ...) or the embedder (``embed``); ``host``: 127.0.0.1 on one node."""

    name: str
    role: str
    node: str
    position: int
    device: str
    host: str
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
    """``--cpus-per-task=N`` for every ``srun`` step: since Slurm 22.05 srun no longer reads ``SLURM_CPUS_PER_TASK``.

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
"""EasyR1 keys the launch sets (and plans with) itself, and the setting to use instead: as an override too, the
user's would silently win in EasyR1 while the launch plans with its own."""

_OVERRIDE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=(.*)", re.S)


def check_overrides(args: list[str]) -> list[str]:
    """The job's EasyR1 overrides, each ``key=value`` with a dotted key, none of :data:`LAUNCH_SETS`, no key twice."""
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


def _active_nodes(status_out: str) -> int:
    """Active nodes in ``ray status`` output: the lines of its ``Active:`` section."""
    m = re.search(r"^Active:$(.*?)(?=^[A-Z]|\Z)", status_out, re.M | re.S)
    return m.group(1).count("node_") if m else 0


def _job_id(environ, dry: bool) -> str:
    return environ.get("SLURM_JOB_ID") or ("JOBID" if dry else f"local-{datetime.now():%Y%m%d%H%M%S}")


class Job:
    """One Slurm job of a training chain (see the module docstring)."""

    def __init__(
        self,
        s: settings.Settings,
        args: list[str],
        ex: Executor,
        environ: dict,
        probe=None,
        layers: Sequence[str] = (),
    ) -> None:
        self.s, self.ex, self.environ, self.layers = s, ex, dict(environ), list(layers)  # layers: --config, --set
        self.probe = probe or preflight.Probe()  # what the pre-flight checks read from the node (tests give theirs)
        self.args = check_overrides(list(args))
        self.job_id = _job_id(environ, ex.dry)
        self.run_dir = Path(s.run.run_dir).resolve()
        self.recipe = Path(s.run.recipe).resolve()
        self.stop_requested = self.terminating = self.checked = False
        self.restarts = self.server_restarts = self.exit_code = 0
        self.segment, self.segment_dir = "", self.run_dir / "segments" / "JOBID-N"
        self.ray_tmp = str(s.ray.ray_tmpdir or f"/tmp/qcray-{self.job_id}")
        self.trainer: Proc | None = None
        self.check: Proc | None = None
        self.ray_procs: list[tuple[str, Proc]] = []
        self.ray_address = ""
        self.decision: runlog.End | None = None
        if not ex.dry:  # a note is then a line of the job's log
            ex.log = self.log
        self._plan()

    # ------------------------------------------------------------------------------------------------ planning
    def _plan(self) -> None:
        """Everything the job decides before it starts anything: its programs, placement, run plan, overrides and
        servers; the pre-flight checks' notes are header lines (:meth:`_preflight`, :meth:`_budgets`)."""
        s, lay = self.s, self.s.layout
        self.software = self._software()
        try:
            self.alloc, self.layout = plan_from_env(
                self.environ, None, lay.serve_gpus, lay.judge_replicas, lay.train_gpus_per_node, lay.node_gpus
            )
        except LayoutError as e:
            raise InputError(str(e)) from None
        self.first, self.multi = self.layout.nodes[0], self.layout.multi_node
        self.trainer_gpus = ",".join(device_ids(self.layout.train_positions, self.alloc.devices, self.first))
        self._plan_run()
        over = [
            f"config={self.recipe}",
            f"trainer.nnodes={len(self.layout.trainer_nodes)}",
            f"trainer.n_gpus_per_node={self.layout.train_gpus_per_node}",
            f"trainer.save_checkpoint_path={self.run_dir}/checkpoints",
            "trainer.find_last_checkpoint=true",
            f"trainer.max_steps={self.max_steps}",
            self.p.logger_override,
            f"data.train_files={s.run.train_files}" if s.run.train_files else "",
            f"data.val_files={s.run.val_files}" if s.run.val_files else "",
        ]
        self.overrides = [o for o in over if o]
        self.fit_at = len(self.overrides)  # where the job's own fitted overrides go (before the user's)
        self.overrides += [*self.args, *self.p.path_overrides]
        stalled = s.chain.max_stalled_jobs  # what runlog's prepare() and finish() both take:
        self.runlog_kw = {"max_steps": self.max_steps, "max_stalled": stalled, "require_lora": self.p.require_lora}
        self.cpus = srun_cpus(self.environ)
        self.preflight_notes: list[str] = []
        self._preflight()
        self._budgets()
        self.servers = self._server_table()

    def _preflight(self) -> None:
        """:mod:`launch.preflight`'s checks of the nodes: their addresses, NCCL/Gloo, Ray's ports, wandb, Slurm."""
        lay, env, notes = self.layout, self.environ, self.preflight_notes
        self.addresses: dict[str, preflight.NodeAddress] = {}
        if self.multi:  # a name /etc/hosts maps to loopback is never what other nodes reach
            here = preflight.this_node(env)
            self.addresses = preflight.node_addresses(lay.nodes, here, self.s.layout.node_addresses, self.probe)
            notes += [f"node address    {a.note}" for a in self.addresses.values() if a.note]
        self.net_env = preflight.network_env(env)
        notes.append(preflight.network_note(self.net_env, self.multi))
        self.ray_ports: preflight.RayPorts | None = None
        if lay.ray:  # checked free when the job runs (on the head node: here); a dry run only derives them
            self.ray_ports = preflight.ray_ports(self.job_id, None if self.ex.dry else self.probe.port_free)
            notes.append(self.ray_ports.describe())
        if not self.ex.dry:  # every process of the job inherits it: the servers are reached directly, never by proxy
            hosts = [*lay.nodes, *(a.host for a in self.addresses.values() if a.host not in lay.nodes)]
            os.environ.update(no_proxy_env(hosts, os.environ))
        loggers = preflight.recipe_loggers(self.recipe, self.overrides[1:])
        self.wandb_env, wandb_note = preflight.wandb_env(self.run_dir, loggers, env)  # one wandb run per run folder
        notes.append(wandb_note)
        # Slurm before 22.05 cannot run two srun --overlap steps on one node (issue 31, finding 4)
        steps: dict[str, list[str]] = {}
        ray = [(f"ray_{i}", node) for i, node in enumerate(lay.trainer_nodes[1:], 1)] if lay.ray else []
        for name, node in [*((name, node) for name, node, _ in lay.server_gpus()), *ray]:
            if node != self.first:
                steps.setdefault(node, []).append(name)
        notes.append(preflight.check_step_sharing(steps, self.probe))

    def _plan_run(self) -> None:
        """``self.p`` and ``self.max_steps``; a dry run may plan without the training data (nothing else may)."""
        s = self.s
        train_files = s.run.train_files or (f"{s.run.data_dir}/train.parquet" if s.run.data_dir else "")

        def plan(max_steps: str, files: str):
            try:
                return runlog.plan_run(self.recipe, max_steps, files, REPO, self.args)
            except (RunError, InputError, OSError) as e:
                raise InputError(f"cannot plan the run from {self.recipe}: {e}") from None

        try:
            self.p = plan("" if s.run.max_steps is None else str(s.run.max_steps), train_files)
            self.max_steps: int | str = self.p.max_steps
        except InputError:
            if not self.ex.dry or not self.recipe.is_file() or s.run.max_steps is not None:
                raise
            self.p = replace(plan("0", ""), max_steps_from="")
            self.max_steps = "<from the data at run time>"

    def _budgets(self) -> None:
        """Issue 31, findings 2, 5, 6 (:mod:`launch.budget`, :mod:`launch.budget_gpu`): ``trainer.save_freq`` lowered
        to fit the stop grace and ``data.val_batch_size`` bounded (each unless the user set it); host memory against
        ``--mem`` and every phase of the recipe against the GPU kind (refused when it cannot fit; an unknown model or
        GPU skips, saying so); the disk quota."""
        notes, user, lay = self.preflight_notes, parse_overrides(self.args), self.layout
        self.host_estimate: budget.Estimate | None = None  # kept for the smoke run's summary (launch/smoke.py)
        self.gpu_budget: budget_gpu.GpuBudget | None = None
        self.budget_skipped: list[str] = []  # why either is None
        try:
            recipe = load_recipe(self.recipe)
        except (InputError, RunError, OSError, ValueError) as e:
            notes.append(f"save_freq, validation batch, host and GPU memory not checked: {e}")
            self.budget_skipped.append(f"launch.budget: {e}")
            return
        given = parse_overrides(self.overrides[1:])

        def value(key: str, default: Any = None) -> Any:
            return recipe_value(recipe, given, key, default)

        step_s, source = budget.step_seconds(self.run_dir, str(value("worker.actor.model.model_path", "")))
        save_freq, measured = value("trainer.save_freq", -1), source.startswith("measured")
        grace = self.s.run.stop_grace
        sf = budget.plan_save_freq(save_freq, step_s, source, grace, "trainer.save_freq" in user, measured)
        val_batch, rollout_batch = value("data.val_batch_size", -1), value("data.rollout_batch_size", 512)
        vb, vb_note = budget.plan_val_batch(val_batch, rollout_batch, "data.val_batch_size" in user)
        fitted = [o for o in (sf.override, vb) if o]
        self.overrides[self.fit_at : self.fit_at] = fitted
        self.fit_at += len(fitted)
        notes += [sf.note, vb_note]
        over = [o for o in self.overrides[1:] if not o.startswith("trainer.max_steps=")]  # not known in a dry run
        gpus, nnodes = lay.train_gpus_per_node, len(lay.trainer_nodes)
        try:
            judges = sum(1 for node, _ in lay.judges if node == self.first)
            plan = budget.plan_from_recipe(self.recipe, over, None, gpus, nnodes, judge_replicas=judges)
        except InputError as e:  # a model whose size is unknown: say so, do not stop the run for it
            notes.append(f"host memory     budget skipped: {e}")
            self.budget_skipped.append(f"launch.budget memory: {e}")
        else:
            self.host_estimate = plan.estimate
            level, message = budget.check_host_memory(plan.estimate, budget.job_memory_mib(self.environ))
            if level == "refuse":
                raise InputError(f"not enough host memory for the job: {message}")
            notes.append(f"host memory     {'warning: ' if level == 'warn' else ''}{message}")
        gpu, source = budget_gpu.gpu_from_slurm(self.environ)  # gpu:h200:3, else what the driver lists
        if gpu is None:
            gpu, driver = budget_gpu.gpu_from_driver()
            source = driver if gpu else f"{source}; {driver}"
        m, sv, serve_gpus = self.s.models, self.s.servers, len({(node, pos) for _, node, pos in lay.server_gpus()})
        servers = budget_gpu.ServerPlan(
            m.judge_model, m.embed_model, sv.judge_gpu_util, sv.embed_gpu_util, serve_gpus, len(lay.judges)
        )
        try:
            if gpu is None:
                raise InputError(source)
            b = budget_gpu.budget_from_recipe(self.recipe, self.overrides[1:], gpu, gpus * nnodes, servers)
        except InputError as e:
            notes.append(f"GPU memory budget skipped: {e}")
            self.budget_skipped.append(f"launch.budget gpu: {e}")
        else:
            self.gpu_budget = b
            if b.refusal():
                raise InputError(
                    f"the recipe cannot fit the GPUs ({source}; python -m launch.budget gpu --gpu ... shows the "
                    f"parts): {b.refusal()}"
                )
            notes.append(f"GPU memory budget ({source}): {b.summary()}")
        notes.append(f"disk quota      {budget.read_quota(self.run_dir).note}")

    def _resume_overrides(self, resume_step: int) -> None:
        """A resumed job passes ``trainer.val_before_train=false`` (the validation ran when the run started), unless
        the user set the key."""
        key, off = "trainer.val_before_train", "trainer.val_before_train=false"
        if key in parse_overrides(self.args):
            return
        if resume_step > 0 and off not in self.overrides:
            self.overrides.insert(self.fit_at, off)
            self.ex.note(
                f"resuming from step {resume_step}: {off} (validation before training ran when the run started)"
            )
        elif resume_step <= 0 and off in self.overrides:
            self.overrides.remove(off)

    def _software(self) -> dict[str, Any]:
        """The programs of the job (the trainer's python, the servers' ``vllm``, Ray) and the manifest's versions:
        :func:`launch.setup.job_env`, whose environment (HF_HOME, offline) the job takes on with its set-up."""
        s = self.s
        problems = [] if self.ex.dry or not s.software.env_setup else setup.readiness(REPO, self.environ)
        if problems:
            raise InputError(
                "the job's software or models are not set up (nothing was started):\n  " + "\n  ".join(problems)
            )
        sw = setup.job_env(REPO, self.environ)  # QUOTECITE_ENV_SETUP=0: python3, vllm and ray on PATH
        if not s.software.env_setup:
            sw["env"] = {}
        py = s.run.python or str(REPO / ".venv" / "bin" / "python")
        sw["launch_python"] = py if Path(py).exists() or s.run.python else sys.executable
        # reward.train: EasyR1's verl.trainer.main, its wandb run also given the reward's samples
        sw["trainer_cmd"] = list(s.run.trainer_cmd or []) or [sw["trainer_python"], "-m", "reward.train"]
        default_check = sw["trainer_python"] if s.software.env_setup else sw["launch_python"]
        sw["check_python"] = str(s.run.check_python or default_check)
        serve = [sw["server_vllm"], "serve"]
        sw["judge_cmd"] = list(s.servers.judge_cmd or []) or serve
        sw["embed_cmd"] = list(s.servers.embed_cmd or []) or serve
        ray = str(Path(sw["trainer_python"]).parent / "ray") if s.software.env_setup else "ray"
        sw["ray"] = list(s.ray.ray_cmd or []) or [ray]
        return sw

    def _server_table(self) -> list[Server]:
        s, out = self.s, []
        for i, (name, node, pos) in enumerate(self.layout.server_gpus()):
            dev = device_ids([pos], self.alloc.devices, self.first)[0] if node == self.first else str(pos)
            host = self.addresses[node].host if self.multi else "127.0.0.1"
            where = f"{node} GPU {pos}" if self.multi else f"GPU {dev}"
            if name == "embed":
                role, port = "embed", s.servers.embed_port
                label = f"embedding server ({s.models.embed_model} on {where})"
            else:
                role, port = "judge", s.servers.judge_port + i if s.servers.judge_port else 0
                if port > 65535:
                    raise InputError(
                        f"judge replica {i + 1}'s port {port} (QUOTECITE_JUDGE_PORT={s.servers.judge_port} + {i}) is "
                        "past 65535: lower QUOTECITE_JUDGE_PORT, or 0 for any free port"
                    )
                label = f"judge server{f' {i + 1}' if i else ''} ({s.models.judge_model} on {where})"
            out.append(Server(name, role, node, pos, dev, host, port, label))
        return out

    def url(self, role: str) -> str:
        """The URL of the embedder, or the judge replicas' comma-separated (reward/servers.py)."""
        return ",".join(v.url for v in self.servers if v.role == role)

    # ------------------------------------------------------------------------------------------------ helpers
    def log(self, msg: str) -> None:
        """A line on stderr and in ``RUN_DIR/chain.log`` (a dry run logs nothing)."""
        if not self.ex.dry:
            serving.log(self.job_id, msg, self.run_dir)

    def on_node(self, name: str, node: str, gpus: str, argv: list, log: Path, env: dict, port: tuple = ()) -> Proc:
        """Start ``argv`` on ``node`` (here on the first node, else as an srun step) under ``launch/layout.py run``,
        which gives it that node's GPUs at positions ``gpus`` and kills what it leaves; ``port``: ``(port_file,
        bind_host, preferred port or 0)`` for a program whose port the wrapper binds."""
        wrap = [self.software["launch_python"], str(REPO / "launch" / "layout.py"), "run", "--gpus", gpus]
        wrap += ["--grace", str(WRAP_GRACE_S)]
        if port:
            if not self.ex.dry:
                port[0].unlink(missing_ok=True)
            wrap += ["--port-file", str(port[0]), "--bind-host", port[1]]
            wrap += ["--prefer-port", str(port[2])] if port[2] else []
        wrap += ["--", *argv]
        if node == self.first:
            return self.ex.start(Step("start", name, wrap, env=env, log=str(log)))
        srun = ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--overlap", "--kill-on-bad-exit=1", *self.cpus]
        srun += [f"--job-name={name}", *wrap]
        return self.ex.start(Step("start", name, srun, env=env, gpus="-", log=str(log)))

    def trainer_env(self) -> dict[str, str]:
        """What the trainer, its reward and every Ray worker see: the servers, the run's folders, the repository on
        the path (the reward imports reward/, data_prep/), the network and wandb settings, and its own Ray."""
        s, env = self.s, self.environ
        out = {
            "QUOTECITE_JUDGE_URL": self.url("judge"),
            "QUOTECITE_EMBED_URL": self.url("embed"),
            "QUOTECITE_JUDGE_MODEL": s.models.judge_model,
            "QUOTECITE_EMBED_MODEL": s.models.embed_model,
            "QUOTECITE_CKPT_DIR": f"{self.run_dir}/checkpoints",
            "QUOTECITE_METRICS_DIR": str(self.segment_dir),
            "QUOTECITE_SEGMENT": self.segment or "JOBID-N",
            "PYTHONPATH": str(REPO) + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else ""),
            "RAY_AUTH_MODE": env.get("RAY_AUTH_MODE", "disabled"),
            "WANDB_MODE": env.get("WANDB_MODE", "offline"),
            "WANDB_DIR": str(self.run_dir),
            "RAY_TMPDIR": self.ray_tmp,
            **self.software["env"],
            **self.net_env,
            **self.wandb_env,
        }
        if s.run.cache_dir or s.run.data_dir:
            out["QUOTECITE_CACHE_DIR"] = str(s.run.cache_dir or f"{s.run.data_dir}/cache")
        # several trainer nodes: EasyR1's ray.init() joins this job's cluster; one: it starts a new one of its own
        # ("local"), never one that a stale /tmp/ray/ray_current_cluster names
        out["RAY_ADDRESS"] = self.ray_address or "local"
        return out

    # ------------------------------------------------------------------------------------------------ states
    def run(self) -> int:
        if not self.ex.dry:
            self.run_dir.joinpath("logs").mkdir(parents=True, exist_ok=True)
            for sig in SIGNALS:
                signal.signal(sig, self._on_usr1 if sig == signal.SIGUSR1 else self._on_term)
        self.header()
        # before any server starts: the NVIDIA driver against the server venv's CUDA, and a C compiler for Triton
        torch_server = str(self.software.get("torch_server", "unknown"))
        for line in preflight.check_toolchain(self.environ, torch_server, self.s.software.env_setup, self.probe):
            self.ex.note(line)
        state = State.PREPARE
        try:
            while state not in (State.DONE, State.STOP):
                state = getattr(self, f"state_{state.name.lower()}")()
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
        s, lay, gpn = self.s, self.layout, self.layout.train_gpus_per_node
        steps_from = f" ({self.p.max_steps_from})" if self.p.max_steps_from else ""
        lines = [
            f"quotecite GRPO launch{', dry run (nothing is started)' if self.ex.dry else ''}",
            f"repository      {REPO}",
            f"run folder      {self.run_dir}",
            f"recipe          {self.recipe}",
            f"max_steps       {self.max_steps}{steps_from}",
        ]
        if not self.multi:
            servers = ",".join(sorted({v.device for v in self.servers}))
            split = f"trainer CUDA_VISIBLE_DEVICES={self.trainer_gpus} (trainer.n_gpus_per_node={gpn})"
            lines.append(f"GPU split       {split}; judge + embedder CUDA_VISIBLE_DEVICES={servers}")
            if len(lay.judges) > 1:
                lines.append(f"judge replicas  {len(lay.judges)}")
        else:
            nnodes, trainers = len(lay.trainer_nodes), " ".join(lay.trainer_nodes)
            positions = ",".join(map(str, lay.train_positions))
            ray = "none (one trainer node: EasyR1 starts its own)"
            if lay.ray:
                workers = " ".join(lay.trainer_nodes[1:])
                ray = f"head on {lay.trainer_nodes[0]}, workers on {workers}; the trainer runs with RAY_ADDRESS=<head>"
            lines += [
                f"nodes           {len(lay.nodes)}: {' '.join(lay.nodes)} (GPUs per node: "
                f"{' '.join(map(str, lay.gpus))}; {self.alloc.source})",
                f"trainer         {nnodes} node(s) x {gpn} GPU(s): {trainers}, GPU(s) {positions} on each "
                f"(trainer.nnodes={nnodes} trainer.n_gpus_per_node={gpn})",
                f"Ray cluster     {ray}",
                "serving         " + "; ".join(f"{v.name} on {v.node} GPU {v.position}" for v in self.servers),
            ]
        if lay.idle:
            lines.append("idle GPUs       " + "; ".join(f"{n} GPU {position_ranges(p)}" for n, p in lay.idle.items()))
        chain = "scontrol requeue of this job" if s.chain.chain else "off (QUOTECITE_CHAIN=0)"
        run_n = int(self.environ.get("SLURM_RESTART_COUNT") or 0) + 1
        lines += [
            *filter(None, self.preflight_notes),
            f"judge           {s.models.judge_model} at {self.url('judge')}",
            f"embedder        {s.models.embed_model} at {self.url('embed')}",
            f"stop on USR1    {s.run.trainer_stop} (grace {s.run.stop_grace:g}s); chain: {chain}, stop after "
            f"{s.chain.max_stalled_jobs} jobs without progress; this is run {run_n} of job {self.job_id}",
            "on SIGTERM      stop everything (by process group) and record the segment; Slurm requeues the job or not",
            f"restarts        at most {s.servers.max_server_restarts} of a dead judge or embedder, "
            f"{s.run.max_restarts} of the trainer after a server outage (in a new segment), in this job",
        ]
        for line in lines:
            self.ex.note(line)

    def state_prepare(self) -> State:
        sw, m = self.software, self.s.models
        kw = {k: sw[k] for k in ("easyr1_commit", "vllm_trainer", "vllm_server")}  # for manifest.json
        kw["models"] = {"policy": self.p.policy_model, "judge": m.judge_model, "embedder": m.embed_model}
        kw["job_extra"] = {"allocation": self.alloc.source, "nodes": self.layout.nodes}
        kw.update(repo=REPO, recipe=self.recipe, allow_recipe_change=bool(self.s.run.allow_recipe_change))
        do = partial(runlog.prepare, self.run_dir, self.job_id, **kw, **self.runlog_kw)
        what = "repair the checkpoints, pick the resume step, open a segment RUN_DIR/segments/JOBID-N, update "
        dry = None
        if self.ex.dry:
            dry = runlog.Start(
                "run", "dry run", 0, self._dry_resume_step(), segment="JOBID-N", segment_dir=self.segment_dir
            )
        d = self.ex.call("prepare", what + "manifest.json", do, dry_result=dry)
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
        self._resume_overrides(d.resume_step)
        if self.restarts == 0:
            what = "estimate the disk use of the checkpoints against the free space of the run folder (refuse with "
            what += "the numbers, warn under the margin); prune checkpoints/incomplete/"
            self.ex.call("disk", what, self._disk)
        return State.SERVE

    def _dry_resume_step(self) -> int:
        """The step the job would resume from (a read, for the dry run)."""
        try:
            return find_resume_point(self.run_dir / "checkpoints", self.p.require_lora).step
        except (OSError, ValueError, RunError):
            return 0

    def _disk(self) -> None:
        """Prune ``checkpoints/incomplete/``; the checkpoints to come against free disk and quota."""
        pruned = budget.prune_incomplete(self.run_dir / "checkpoints", keep=1)
        n = len(pruned.removed)
        if n:
            self.log(
                f"pruned {n} old entr{'y' if n == 1 else 'ies'} of checkpoints/incomplete/ "
                f"({pruned.freed_bytes / 2**30:.1f} GiB)"
            )
        size = {"n_gpus_per_node": self.layout.train_gpus_per_node, "nnodes": len(self.layout.trainer_nodes)}
        try:
            over = self.overrides[1:]
            level, message = budget.run_disk_check(self.recipe, over, self.run_dir, self.max_steps, **size)
        except InputError as e:  # a model whose size is unknown: say so, do not stop the run for it
            self.log(f"checkpoint disk estimate skipped: {e}")
            return
        if level == "refuse":
            raise JobError(f"not enough disk for the run's checkpoints: {message}", final=True)
        self.log(("warning: " if level == "warn" else "") + f"checkpoint disk: {message}")

    def state_serve(self) -> State:
        where = "their nodes" if self.multi else "GPU " + self.servers[-1].device
        self.ex.note(f"servers on {where}, one after the other (vLLM sizes its memory from what is free)")
        for srv in self.servers:
            self.serve(srv)
        return State.RAY if self.layout.ray else State.CHECK

    def serve(self, srv: Server) -> None:
        """Start ``srv`` and wait for its ``/health``; a restart asks for the port the trainer already knows."""
        srv.log = self.segment_dir / f"{srv.name}.log"
        srv.port_file = self.segment_dir / f"{srv.name}.port"
        prefer, srv.port = srv.port or srv.preferred_port, 0
        argv = server_argv(srv.role, self.s, srv.host, "{port}", self.software[f"{srv.role}_cmd"])
        port = (srv.port_file, srv.host, prefer)
        srv.proc = self.on_node(srv.name, srv.node, str(srv.position), argv, srv.log, dict(self.software["env"]), port)

        def health_url() -> str:
            srv.port = read_port(srv.port_file)
            return f"http://{srv.host}:{srv.port}/health" if srv.port else ""

        def wait() -> None:
            sv = self.s.servers
            args = (health_url, srv.label, sv.health_timeout, sv.health_poll, str(srv.log), srv.proc.poll)
            try:
                took = wait_healthy(*args, stop=lambda: self.terminating)
            except NotHealthy as e:
                raise JobError(str(e), "server_failed", (srv.log,), final=True) from None
            self.log(f"{srv.label} is healthy at {srv.url} after {took:.0f}s")

        self.ex.wait(
            f"health-{srv.name}",
            f"wait until the /health of {srv.name} answers 200 on its port (read from {srv.port_file.name}; at most "
            f"{self.s.servers.health_timeout:g}s), else stop: {srv.label} is not healthy, see {srv.log}",
            wait,
        )

    def state_ray(self) -> State:
        """A Ray cluster of this job's own, each node started with the trainer's environment: EasyR1's
        ``ray.init(runtime_env=...)`` forwards only its own variables to a reward actor on another node."""
        lay, s, ray, timeout = self.layout, self.s, self.software["ray"], f"{self.s.ray.ray_timeout:g}s"
        pos, gpus, head = ",".join(map(str, lay.train_positions)), str(lay.train_gpus_per_node), lay.trainer_nodes[0]
        head_addr, port_file = self.addresses[head].address, self.segment_dir / "ray.port"
        self.ray_address = f"{head_addr}:{{port}}"
        env = {k: v for k, v in self.trainer_env().items() if k != "RAY_ADDRESS"}
        self.ex.note(f"Ray cluster: head here ({head}), a worker on each other trainer node (srun steps, watched)")
        cpus = slurm_cpus(self.environ)  # Ray's worker pool sized by the job's CPUs, never the node's cores
        each = ["--block", "--num-gpus", gpus, *(["--num-cpus", str(cpus)] if cpus else []), "--disable-usage-stats"]
        argv = [*ray, "start", "--head", "--node-ip-address", head_addr, "--port", "{port}", *each]
        argv += ["--include-dashboard=false", "--temp-dir", self.ray_tmp, *self.ray_ports.head_args()]
        port, head_log = (port_file, head_addr, s.ray.ray_port or 0), self.segment_dir / f"ray-{head}.log"
        self.ray_procs = [(head, self.on_node("ray_0", head, pos, argv, head_log, env, port))]

        def head_up() -> str:
            port = read_port(port_file)
            if port and self._ray_status(f"{head_addr}:{port}")[0] == 0:
                self.ray_address = f"{head_addr}:{port}"
                return ""
            return f"the Ray head on {head} did not answer within {timeout}; see its log {head_log}"

        self._ray_wait("ray-head", "answers", head_up)
        for i, node in enumerate(lay.trainer_nodes[1:], 1):
            # no port block on worker nodes: nodes that share one host (a local Slurm, or two job steps on one
            # machine) would bind the same ports and time out at start; Ray picks free ones there
            argv = [*ray, "start", "--address", self.ray_address, "--node-ip-address", self.addresses[node].address]
            log = self.segment_dir / f"ray-{node}.log"
            self.ray_procs.append((node, self.on_node(f"ray_{i}", node, pos, [*argv, *each], log, env)))
        want, nodes = len(lay.trainer_nodes), " ".join(lay.trainer_nodes)

        def all_nodes() -> str:
            rc, out = self._ray_status(self.ray_address)
            seen = _active_nodes(out) if rc == 0 else 0
            if seen < want:
                logs = f"{self.segment_dir}/ray-*.log"
                return f"Ray sees {seen} of {want} trainer nodes after {timeout}; see the logs {logs}"
            self.log(f"Ray cluster at {self.ray_address}: {seen} nodes ({nodes}), {gpus} GPU(s) each")
            return ""

        self._ray_wait("ray-nodes", f"lists {want} active nodes (at most {timeout})", all_nodes)
        return State.CHECK

    def _ray_status(self, address: str) -> tuple[int, str]:
        return Executor().run(Step("run", "ray-status", [*self.software["ray"], "status", "--address", address]), 30)

    def _ray_wait(self, name: str, until: str, not_yet: Callable[[], str]) -> None:
        """Poll ``not_yet()`` every second while the Ray processes live, until it says nothing; what it last said is
        the error after ``QUOTECITE_RAY_TIMEOUT``."""

        def wait() -> None:
            deadline = time.monotonic() + self.s.ray.ray_timeout
            while True:
                self._check_ray()
                why = not_yet()
                if not why:
                    return
                if time.monotonic() >= deadline:
                    raise JobError(why)
                time.sleep(1)

        status = shlex.join([*self.software["ray"], "status", "--address", self.ray_address])
        self.ex.wait(name, f"wait until `{status}` {until}", wait)

    def _check_ray(self) -> None:
        for i, (node, proc) in enumerate(self.ray_procs):
            rc = None if self.ex.dry else proc.poll()
            if rc is not None:
                what = "head" if i == 0 else "worker (srun step)"
                raise JobError(
                    f"Ray {what} on {node} exited (code {rc}); see its log {self.segment_dir}/ray-{node}.log"
                )

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
            return State.TRAIN
        if self.checked or self.stop_requested:
            return State.TRAIN
        self.checked = True
        log = self.segment_dir / "check.log"
        self.ex.note(
            f"reward check (data, cache, one judge and one embedding request; log: {log}); a failure stops the job, "
            "no resubmission"
        )
        argv = [self.software["check_python"], "-m", "reward", "check", "--recipe", str(self.recipe)]
        argv += ["--judge-url", self.url("judge"), "--judge-model", self.s.models.judge_model]
        argv += ["--embed-url", self.url("embed"), "--", *self.overrides[1:]]
        self.check = self.ex.start(Step("start", "check", argv, env=self.trainer_env(), gpus="", log=str(log)))
        rc, self.check = self.check.wait(), None
        if rc == 0:
            self.log("reward check passed")
            return State.TRAIN
        text = log.read_text(errors="replace") if log.is_file() else ""
        prefix = "reward check failed: "
        lines = [ln.removeprefix(prefix) for ln in text.splitlines() if ln.startswith(prefix)]
        msg = f"reward check failed (exit {rc}): {'; '.join(lines) or f'see its log {log}'}"
        raise JobError(msg, "check_failed", (log,), final=True)

    def state_train(self) -> State:
        s, grace = self.s, f"{self.s.run.stop_grace:g}s"
        self.status, self.trainer_rc, self.end_message = "", None, ""
        if self.stop_requested:
            self.log("SIGUSR1 arrived before training started: not starting the trainer")
            self.status = "stopped"
            return State.END
        on_ray = f"trainer (EasyR1's driver) here, on the Ray cluster: {' '.join(self.layout.trainer_nodes)}"
        self.ex.note(on_ray if self.layout.ray else f"trainer on GPUs {self.trainer_gpus}")
        argv, log = [*self.software["trainer_cmd"], *self.overrides], self.segment_dir / "trainer.log"
        env = self.trainer_env()
        self.trainer = self.ex.start(Step("start", "trainer", argv, env=env, gpus=self.trainer_gpus, log=str(log)))
        signal_mode = s.run.trainer_stop == "signal"
        stop_deadline = stop_base = log_wait_until = 0.0  # stop_deadline: SIGUSR1 is being handled
        while not self.ex.dry and self.trainer.poll() is None:
            self.ex.sleep(s.run.poll_seconds)
            try:
                self._check_servers()
                self._check_ray()
            except JobError as e:
                self.log(f"error: {e}; stopping the trainer")
                self.trainer_rc = self.trainer.stop(30)
                self.status, self.end_message = e.status, str(e)
                return State.END
            if not self.stop_requested:
                continue
            if not stop_deadline:
                stop_deadline, stop_base = time.monotonic() + s.run.stop_grace, runlog.last_step(self.run_dir)
                if signal_mode:
                    self.log(f"SIGUSR1: asking the trainer to save and exit (at most {grace})")
                    self.trainer.signal(signal.SIGUSR1)
                else:
                    self.log(
                        f"SIGUSR1: stopping the trainer after its next checkpoint (now at step {stop_base}; at "
                        f"most {grace})"
                    )
            if time.monotonic() >= stop_deadline:
                self.log(
                    f"no checkpoint within {grace} of SIGUSR1; stopping the trainer now (steps since the last "
                    "checkpoint are lost)"
                )
                self.trainer.stop(30)
            elif not signal_mode and (now := runlog.last_step(self.run_dir)) > stop_base:
                if not log_wait_until:  # EasyR1 logs a step's metrics right after saving its checkpoint
                    log_wait_until = time.monotonic() + s.run.log_wait
                if runlog.logged_step(self.segment_dir) >= now or time.monotonic() >= log_wait_until:
                    self.log(f"checkpoint global_step_{now} is complete; stopping the trainer")
                    self.trainer.stop(30)
        self.trainer_rc = self.trainer.wait()
        if stop_deadline:
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
        most = self.s.servers.max_server_restarts
        for srv in self.servers:
            rc = srv.proc.poll() if srv.proc else None
            if rc is None:
                continue
            srv.proc.stop(1)
            if self.server_restarts >= most:
                raise JobError(
                    f"{srv.label} exited (code {rc}) mid-job after {self.server_restarts} restarts in this "
                    f"job (QUOTECITE_MAX_SERVER_RESTARTS={most}); see {srv.log}",
                    "server_failed",
                )
            self.server_restarts += 1
            self.log(
                f"{srv.label} exited (code {rc}) mid-job; restarting it ({self.server_restarts} of at most "
                f"{most} in this job)"
            )
            totals = runlog.record_restart(self.run_dir, self.segment, srv.role, f"exited with code {rc}")
            self.log("restarts in this run: " + ",".join(f"{k}={v}" for k, v in sorted(totals.items())))
            self.serve(srv)

    def state_end(self) -> State:
        self.ex.note("stop the servers, close the segment, merge the run log, decide")
        self._stop_all(20)  # the trainer has ended
        if self.status == "crashed" and not self.ex.dry:
            resume = next((sg.resume_step for sg in load_segments(self.run_dir) if sg.name == self.segment), 0)
            empty = runlog.read_no_group_kept(self.segment_dir, resume)
            if empty is not None:
                self.status, self.end_message = "no_group_kept", empty
                return State.FINISH
            outage = runlog.read_outage(self.segment_dir)
            if outage is not None:
                self.end_message = f"stopped on a server outage: {outage}"
                if self.restarts < self.s.run.max_restarts:
                    return State.RESTART
                self.log(
                    f"the trainer {self.end_message}; {self.s.run.max_restarts} restarts in this job already "
                    "(QUOTECITE_MAX_RESTARTS)"
                )
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
            runlog.record_restart(self.run_dir, self.segment, "trainer", outage)
        else:
            self.log(f"not restarting: {nxt.name.lower()}")
        return nxt

    def _finish(self, status: str, rc: int | None, message: str) -> runlog.End:
        do = partial(
            runlog.finish,
            self.run_dir,
            self.segment,
            status=status,
            trainer_exit=rc,
            message=message,
            **self.runlog_kw,
        )
        what = "close the segment (its status and end step), merge the run log, decide"
        dry = runlog.End(action="continue", message="dry run", exit_code=0, end_step=0, logged_steps=0)
        return self.ex.call("finish", what, do, dry_result=dry)

    def state_finish(self) -> State:
        d = self.decision = self._finish(self.status, self.trainer_rc, self.end_message)
        what = "write RUN_DIR/samples.html, the samples browser of the reward's sampled groups (when the run has any)"
        self.ex.call("samples-page", what, self._samples_page)
        if d.missing_steps:
            self.log(f"warning: no metrics for steps {','.join(map(str, d.missing_steps))} (see run_summary.json)")
        self.log(f"run log: {d.logged_steps} steps; last complete checkpoint: step {d.end_step} of {self.max_steps}")
        self.exit_code = d.exit_code
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
        script = shlex.join(["launch/grpo_8b.sh", *self.layers, *self.args])
        return f"cd {REPO} && QUOTECITE_RUN_DIR={shlex.quote(str(self.run_dir))} sbatch [your sbatch options] {script}"

    def state_chain(self) -> State:
        """Continue the run in this same job: ``scontrol requeue``, once everything is closed and recorded. A refused
        requeue stops the chain with the reason and the command that resumes by hand: an ``sbatch`` from inside the
        job would fall back to the script's header and lose the user's options (partition, nodes, ``--signal``)."""
        msg = self.decision.message if self.decision else ""
        if not self.ex.dry and not self.environ.get("SLURM_JOB_ID"):
            self.log(f"{msg} -- not under Slurm: run this script again to resume")
            return State.DONE
        if not self.s.chain.chain:
            self.log(f"{msg} -- QUOTECITE_CHAIN=0: not requeueing; to resume: {self.resubmit_hint()}")
            return State.DONE
        self.ex.note(
            "if the run is not complete and the job made progress: requeue this same job (same id, options "
            "and arguments); Slurm then sends SIGTERM to the whole job, which exits 0"
        )
        if not self.ex.dry:  # from here on, Slurm's SIGTERM is the requeue's; scontrol inherits the ignore
            self._ignore_signals()
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
            raise JobError(
                f"the job could not requeue itself (scontrol requeue {self.job_id}: {reason}); the chain "
                f"stops here. To resume: {self.resubmit_hint()}",
                "stopped",
            )
        return State.DONE

    # ------------------------------------------------------------------------------------------------ stopping
    def _stop_all(self, grace: float) -> None:
        """Stop the trainer, the reward check, the servers (last first) and Ray."""
        # the wrapper (launch/layout.py run) kills its server WRAP_GRACE_S after SIGTERM; killing the wrapper sooner
        # would leave the server holding the node's GPU and port past the job, so the wrapper gets longer
        procs = [(self.trainer, "trainer", grace), (self.check, "reward check", grace)]
        procs += [(v.proc, v.label, max(grace, WRAP_GRACE_S + 3)) for v in reversed(self.servers)]
        for p, what, wait in procs:
            if p is not None and p.poll() is None:
                self.log(f"stopping {what} (pid {p.pid})")
            if p is not None:
                p.stop(wait)
        self._stop_ray()

    def _ignore_signals(self) -> None:
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def _on_usr1(self, *_: Any) -> None:
        self.stop_requested = True

    def _on_term(self, *_: Any) -> None:
        self._ignore_signals()
        self.terminating = True
        self.log("SIGTERM: stopping (the job does not requeue itself; Slurm requeues it or not)")
        raise JobError("SIGTERM from Slurm (cancel, preemption, requeue or wall time)", "terminated")


HELP = """\
usage: sbatch launch/grpo_8b.sh [key=value ...]   (EasyR1 overrides)
       bash launch/grpo_8b.sh --dry-run [--steps-json] [key=value ...]
       bash launch/grpo_8b.sh --settings
       sbatch launch/grpo_8b.sh --smoke [key=value ...]   (two steps in RUN_DIR/smoke/JOBID, then eval infer; \
launch/smoke.py)
  settings: --config FILE (YAML, by group) and --set group.field=VALUE, over the environment's
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="launch/grpo_8b.sh", add_help=False)  # --help: the docstring, HELP, settings
    ap.add_argument("--dry-run", action="store_true", help="print every step of this job; run nothing")
    ap.add_argument("--steps-json", action="store_true", help="with --dry-run: the steps as JSON lines")
    ap.add_argument("--settings", action="store_true", help="print every setting's resolved value and exit")
    ap.add_argument("--smoke", action="store_true", help="two steps, then eval infer (launch/smoke.py)")
    ap.add_argument("-h", "--help", action="store_true")
    settings.add_layer_arguments(ap)
    a, rest = ap.parse_known_args(argv)
    if a.help:
        print(__doc__)
        print(HELP)
        print(settings.render_help())
        return 0
    unknown = [x for x in rest if x.startswith("-")]
    if unknown:
        print(
            f"error: unknown option {unknown[0]} (options: --dry-run, --steps-json, --settings, --smoke, --config, "
            "--set, --help; everything else is key=value for EasyR1)",
            file=sys.stderr,
        )
        return 2
    try:
        s = settings.resolve_into(os.environ, REPO, file=a.config, sets=a.set)  # every step and child: the same
        if a.smoke:  # launch/smoke.py: its own run folder, two steps, no next job, save and validate at each step
            job_id = _job_id(os.environ, a.dry_run)
            os.environ.update(smoke.environment(os.environ, Path(s.run.run_dir).resolve(), job_id))
            s, rest = settings.resolve(os.environ, REPO), smoke.overrides(rest)  # --config/--set: in os.environ now
            smoke.check_inputs(s, a.dry_run or a.settings)
        if a.settings:
            print(settings.render_resolved(s))
            return 0
        if a.dry_run:
            ex: Executor = PrintingExecutor(as_json=a.steps_json)
        else:
            job_id = os.environ.get("SLURM_JOB_ID") or f"local-{socket.gethostname()}-{os.getpid()}"
            ex = Executor(Path(s.run.run_dir).resolve() / "logs" / f"steps-{job_id}.jsonl")
        layers = [*(["--config", str(a.config.absolute())] if a.config else []), *(f"--set={x}" for x in a.set)]
        job = Job(s, rest, ex, dict(os.environ), layers=layers)
        if not a.smoke:
            return job.run()
        sampler = smoke.start_sampler(job, ex)  # smoke: sstat for the whole job, then eval infer and the summary
        rc = 1
        try:
            rc = job.run()
        finally:
            rc = smoke.after(job, ex, rc, sampler)
        return rc
    except (InputError, RunError, JobStepError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
