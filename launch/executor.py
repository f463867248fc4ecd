"""The two executors of the training job (``launch/job.py``): one runs its steps, one prints them.

The job is written once, against :class:`Executor`; ``--dry-run`` hands it a :class:`PrintingExecutor`, so the
dry run walks the job's own code path and shows every step it would take (and nothing else). Each step is also a
record (:meth:`Step.record`): the running executor appends it to ``RUN_DIR/logs/steps-JOBID.jsonl``, the printing one
prints it with ``--steps-json``; ``tests/launch/test_launch_steps.py`` checks that the two lists are the same.

Kinds of step:

- ``call``: the job's own bookkeeping in Python (repair the checkpoints, open or close a segment, merge the run log);
  the printing executor prints what it would do and returns the outcome the dry run assumes;
- ``run``: a command run to its end (``scontrol requeue`` of this job, ``ray status``);
- ``start``: a program started in the background in its own process group (servers, the Ray nodes, the trainer);
  the printing executor returns a :class:`Proc` that has already ended with status 0;
- ``wait``: a wait for a condition (a server's ``/health``, every Ray node); the printing executor assumes it holds.
"""

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Step:
    """One step of the job: what the dry run prints and the job records."""

    kind: str
    name: str
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    """Variables set for the program on top of the job's environment (``env K=V ...`` in the printed line)."""
    gpus: str | None = None
    """``CUDA_VISIBLE_DEVICES`` of the program; ``None``: left as the job has it; ``""``: no GPU."""
    log: str = ""
    text: str = ""
    """What a ``call`` or ``wait`` does, in words."""

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.argv:
            out["argv"] = list(self.argv)
        if self.env:
            out["env"] = dict(self.env)
        if self.gpus is not None:
            out["gpus"] = self.gpus
        if self.log:
            out["log"] = self.log
        if self.text:
            out["text"] = self.text
        return out

    def shell(self) -> str:
        """The step as one shell line (``+ ...``), the form the dry run prints."""
        if self.kind in ("call", "wait"):
            return f"+ {self.text}" if self.kind == "wait" else f"+ [{self.name}] {self.text}"
        # every word quoted for the shell: a path with a blank, a quote or $(...) prints as the one word it is
        pre = "" if self.gpus is None else f"{shlex.quote(f'CUDA_VISIBLE_DEVICES={self.gpus}')} "
        env = ("env " + " ".join(shlex.quote(f"{k}={v}") for k, v in self.env.items()) + " ") if self.env else ""
        line = f"+ {pre}{env}{shlex.join(self.argv)}"
        if self.log:
            line += f" > {shlex.quote(self.log)} 2>&1"
        if self.kind == "start":
            line += f" &   # {self.name}"
        return line


class Proc:
    """A started program (its own process group); ``pid`` 0 for the printing executor's."""

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
        if self._p is None:
            return 0
        try:
            self._p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
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
        if self._p is None:
            return 0
        if self._p.poll() is None:
            self.kill_group(signal.SIGTERM)
            if self.wait(grace) is None:
                self.kill_group(signal.SIGKILL)
                self.wait(10)
        self.kill_group(signal.SIGKILL)  # what it left behind (vLLM workers, Ray's raylet)
        return self.poll()


class Executor:
    """Runs the steps of a job (the base class is the running one)."""

    dry = False

    def __init__(self, steps_file: Path | None = None, log: Callable[[str], None] | None = None) -> None:
        self.steps_file = steps_file
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))

    def _record(self, step: Step) -> None:
        if self.steps_file is None:
            return
        self.steps_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.steps_file, "a", encoding="utf-8") as f:  # one line per step, appended: a crash keeps the rest
            f.write(json.dumps(step.record(), sort_keys=True) + "\n")

    def note(self, text: str) -> None:
        """A comment: logged by the job, printed (``# ...``) by the dry run."""
        self.log(text)

    def call(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None) -> Any:
        self._record(Step("call", name, text=text))
        return fn()

    def wait(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None) -> Any:
        self._record(Step("wait", name, text=text))
        return fn()

    def run(self, step: Step, timeout: float | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run to the end; (exit status, stdout). ``env`` replaces the job's environment as the base."""
        self._record(step)
        full = self._env(step, env)
        try:
            r = subprocess.run(step.argv, env=full, capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired) as e:
            return 127, str(e)
        if r.returncode and r.stderr.strip():
            self.log(f"{step.name}: {r.stderr.strip().splitlines()[-1]}")
        return r.returncode, r.stdout

    def start(self, step: Step) -> Proc:
        self._record(step)
        log = open(step.log, "ab") if step.log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
        try:
            p = subprocess.Popen(step.argv, env=self._env(step), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        except OSError as e:
            raise JobStepError(f"cannot start {step.name} ({shlex.join(step.argv[:3])} ...): {e}") from e
        finally:
            if step.log:
                log.close()
        gpus = "" if step.gpus is None else f", CUDA_VISIBLE_DEVICES={step.gpus}"
        self.log(f"started {step.name} (pid {p.pid}{gpus}): {shlex.join(step.argv)}")
        return Proc(step.name, p)

    @staticmethod
    def _env(step: Step, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env.update(step.env)
        if step.gpus is not None:
            if step.gpus == "-":
                env.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                env["CUDA_VISIBLE_DEVICES"] = step.gpus
        return env

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class PrintingExecutor(Executor):
    """Prints each step (``+ ...``; ``--steps-json``: one JSON record a line) and runs nothing."""

    dry = True

    def __init__(self, as_json: bool = False, out=None) -> None:
        super().__init__(None, log=lambda msg: None)
        self.as_json = as_json
        self.out = out or sys.stdout

    def _print(self, step: Step) -> None:
        print(json.dumps(step.record(), sort_keys=True) if self.as_json else step.shell(), file=self.out)

    def note(self, text: str) -> None:
        if not self.as_json:
            print(f"# {text}", file=self.out)

    def call(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None) -> Any:
        self._print(Step("call", name, text=text))
        return dry_result

    def wait(self, name: str, text: str, fn: Callable[[], Any], dry_result: Any = None) -> Any:
        self._print(Step("wait", name, text=text))
        return dry_result

    def run(self, step: Step, timeout: float | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
        self._print(step)
        return 0, ""

    def start(self, step: Step) -> Proc:
        self._print(step)
        return Proc(step.name)

    def sleep(self, seconds: float) -> None:
        return None


class JobStepError(RuntimeError):
    """A step could not be carried out (a program that cannot start); the job ends with this message."""
