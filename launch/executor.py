"""The training job's two executors (docs/cluster.md): :class:`Executor` runs the job's steps and appends each to
``RUN_DIR/logs/steps-JOBID.jsonl``; ``--dry-run`` hands the job a :class:`PrintingExecutor`, which prints them and
runs nothing, so the dry run walks the job's own code path."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class JobStepError(RuntimeError):
    """A step could not be carried out (a program that cannot start); the job ends with this message."""


@dataclass
class Step:
    """One step of the job: what the dry run prints and the job records."""

    kind: str
    """``call`` (the job's own Python), ``run`` (to its end), ``start`` (in the background) or ``wait``."""
    name: str
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Variables set on top of the job's environment."""
    gpus: str | None = None
    """``CUDA_VISIBLE_DEVICES`` of the program; ``None``: as the job has it; ``""``: no GPU; ``"-"``: unset."""
    log: str = ""
    text: str = ""
    """What a ``call`` or ``wait`` does, in words."""

    def record(self) -> dict[str, Any]:
        """The step as a JSON object: its non-empty fields (``gpus`` also when ``""``)."""
        return {k: v for k, v in asdict(self).items() if v or (k == "gpus" and v is not None)}

    def shell(self) -> str:
        """The step as one shell line (``+ ...``), every word quoted, the form the dry run prints."""
        if self.kind == "wait":
            return f"+ {self.text}"
        if self.kind == "call":
            return f"+ [{self.name}] {self.text}"
        pre = "" if self.gpus is None else f"{shlex.quote(f'CUDA_VISIBLE_DEVICES={self.gpus}')} "
        env = "".join(f"{shlex.quote(f'{k}={v}')} " for k, v in self.env.items())
        line = f"+ {pre}{'env ' if env else ''}{env}{shlex.join(self.argv)}"
        if self.log:
            line += f" > {shlex.quote(self.log)} 2>&1"
        return line + (f" &   # {self.name}" if self.kind == "start" else "")


class Proc:
    """A started program (its own process group); ``pid`` 0 for the printing executor's, which has ended with 0."""

    def __init__(self, name: str, popen: subprocess.Popen | None = None) -> None:
        self.name = name
        self._p = popen
        self.pid = popen.pid if popen else 0

    def poll(self) -> int | None:
        """The exit status (128+N for signal N), or None while it runs."""
        if self._p is None:
            return 0
        rc = self._p.poll()
        return None if rc is None else (128 - rc if rc < 0 else rc)

    def wait(self, timeout: float | None = None) -> int | None:
        """:meth:`poll` once it has ended, at most ``timeout`` seconds from now."""
        if self._p is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._p.wait(timeout)
        return self.poll()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the program alone (not its group: a trainer that saves on SIGUSR1)."""
        if self._p is not None and self._p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._p.send_signal(sig)

    def kill_group(self, sig: int) -> None:
        if self._p is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def stop(self, grace: float) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; then kill whatever it left in the group."""
        if self.poll() is None:
            self.kill_group(signal.SIGTERM)
            if self.wait(grace) is None:
                self.kill_group(signal.SIGKILL)
                self.wait(10)
        self.kill_group(signal.SIGKILL)  # what it left behind (vLLM workers, Ray's raylet)
        return self.poll()


class Executor:
    """Runs the steps of a job and records each in ``steps_file``; :class:`PrintingExecutor` prints them instead."""

    dry = False

    def __init__(self, steps_file: Path | None = None, log: Callable[[str], None] | None = None) -> None:
        self.steps_file = steps_file
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def _record(self, step: Step) -> None:
        if self.steps_file is not None:  # one line per step, appended: a crash keeps the rest
            self.steps_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.steps_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(step.record(), sort_keys=True) + "\n")

    def note(self, text: str) -> None:
        """A comment: logged by the job, printed (``# ...``) by the dry run."""
        self.log(text)

    def call(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None, kind: str = "call") -> Any:
        """``fn()``; the dry run returns ``dry_result`` instead."""
        self._record(Step(kind, name, text=text))
        return dry_result if self.dry else fn()

    def wait(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None) -> Any:
        """:meth:`call` of a ``fn`` that waits for a condition."""
        return self.call(name, text, fn, dry_result, "wait")

    def run(self, step: Step, timeout: float | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run to the end; (exit status, stdout). ``env`` replaces the job's environment as the base."""
        self._record(step)
        if self.dry:
            return 0, ""
        full = self._env(step, env)
        try:
            r = subprocess.run(
                step.argv, env=full, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return 127, str(e)
        if r.returncode and r.stderr.strip():
            self.log(f"{step.name}: {r.stderr.strip().splitlines()[-1]}")
        return r.returncode, r.stdout

    def start(self, step: Step) -> Proc:
        """Start the program in the background, in a process group of its own, its output to ``step.log``."""
        self._record(step)
        if self.dry:
            return Proc(step.name)
        try:
            with open(step.log or os.devnull, "ab") as log:
                p = subprocess.Popen(
                    step.argv,
                    env=self._env(step),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as e:
            raise JobStepError(f"cannot start {step.name} ({shlex.join(step.argv[:3])} ...): {e}") from e
        gpus = "" if step.gpus is None else f", CUDA_VISIBLE_DEVICES={step.gpus}"
        self.log(f"started {step.name} (pid {p.pid}{gpus}): {shlex.join(step.argv)}")
        return Proc(step.name, p)

    @staticmethod
    def _env(step: Step, base: dict[str, str] | None = None) -> dict[str, str]:
        env = {**(os.environ if base is None else base), **step.env}
        if step.gpus == "-":
            env.pop("CUDA_VISIBLE_DEVICES", None)
        elif step.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = step.gpus
        return env

    def sleep(self, seconds: float) -> None:
        if not self.dry:
            time.sleep(seconds)


class PrintingExecutor(Executor):
    """Prints each step (``+ ...``; ``--steps-json``: one JSON record a line) and runs nothing."""

    dry = True

    def __init__(self, as_json: bool = False, out=None) -> None:
        super().__init__(None, log=lambda msg: None)
        self.as_json = as_json
        self.out = out or sys.stdout

    def _record(self, step: Step) -> None:
        print(json.dumps(step.record(), sort_keys=True) if self.as_json else step.shell(), file=self.out)

    def note(self, text: str) -> None:
        if not self.as_json:
            print(f"# {text}", file=self.out)
