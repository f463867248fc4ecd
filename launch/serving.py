"""The judge's and the embedder's server command lines and the wait for a server's ``/health``, written once.

The training job (:mod:`launch.job`) calls them directly; the evaluation and data-prep scripts (``slurm/common.sh``)
through the command line:

    python -m launch.serving argv judge|embed --host H --port P [--cmd "vllm serve"]   # one argument a line
    python -m launch.serving wait-health URL --pid PID --timeout S --label TEXT --log FILE

The wait is the reward's own (:func:`reward.servers.wait_for_health`: exponential backoff, capped), ended at once
when the server's process exits.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.serving")

import argparse
import os
import shlex
import sys
import time
from collections.abc import Callable

from launch import settings

ROLES = ("judge", "embed")


def server_argv(role: str, s: settings.Settings, host: str, port: str | int, cmd: list[str]) -> list[str]:
    """The command line of a judge or embedder server (``cmd``: the program, default ``vllm serve``).

    The judge sees up to the recipe's ``max_crops`` (6) crops per request. Its reply format needs no server flag:
    each request carries its own constraint without free whitespace (:func:`reward.judge_prompt.reply_regex`), so
    the judge scores on any vLLM server, this one or one a user started by hand. The embedder runs vLLM's
    pooling runner (last-token hidden state, L2-normalised: the encoder's embedding). The weights are
    ``QUOTECITE_{JUDGE,EMBED}_WEIGHTS`` (a local folder) when set, else the model id; the served name is the model id.
    """
    if role == "embed":
        return [*cmd, str(s.embed_weights or s.embed_model), "--host", host, "--port", str(port),
                "--served-model-name", s.embed_model, "--runner", "pooling",
                "--gpu-memory-utilization", str(s.embed_gpu_util), "--max-model-len", str(s.embed_max_model_len),
                *(s.embed_args or [])]  # fmt: skip
    if role != "judge":
        raise ValueError(f"server role {role!r}: expected one of {', '.join(ROLES)}")
    return [*cmd, str(s.judge_weights or s.judge_model), "--host", host, "--port", str(port),
            "--served-model-name", s.judge_model, "--gpu-memory-utilization", str(s.judge_gpu_util),
            "--max-model-len", str(s.judge_max_model_len), "--limit-mm-per-prompt", '{"image": 8}',
            *(s.judge_args or [])]  # fmt: skip


class NotHealthy(RuntimeError):
    """A server that exited or did not answer in time; the message names it, its URL and its log."""


def wait_healthy(url: str | Callable[[], str], label: str, timeout_s: float, poll_s: float, log: str,
                 exited: Callable[[], int | None], stop: Callable[[], bool] = lambda: False) -> float:  # fmt: skip
    """Wait until ``url`` (``.../health``; a callable while the port is not known yet) answers 200; the seconds it
    took. :class:`NotHealthy` when ``exited()`` returns the server's exit status, or after ``timeout_s``."""
    from reward.servers import HEALTH_BACKOFF_S, ServerOutageError, wait_for_health

    started = time.monotonic()

    def alive() -> str:
        rc = exited()
        return f"exited (code {rc})" if rc is not None else ("the job is stopping" if stop() else "")

    current = url if callable(url) else (lambda: url)
    try:
        wait_for_health(current, started + timeout_s, started, label, timeout_s, alive=alive,
                        backoff_s=(min(HEALTH_BACKOFF_S[0], poll_s), max(poll_s * 4, poll_s)))  # fmt: skip
    except ServerOutageError:
        why, where = alive(), current() or "its port"
        if why.startswith("exited"):
            raise NotHealthy(f"{label} {why} before answering {where}; see its log: {log}") from None
        raise NotHealthy(f"{label} did not answer {where} within {timeout_s:g}s; see its log: {log}") from None
    return time.monotonic() - started


def _pid_exit(pid: int) -> Callable[[], int | None]:
    """Whether process ``pid`` (not our child: the script's) still runs; its status is not ours to read."""

    def check() -> int | None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -1
        except PermissionError:
            return None
        try:  # a zombie of the calling shell counts as ended
            with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
                return -1 if f.read().rsplit(")", 1)[1].split()[0] == "Z" else None
        except (OSError, IndexError):
            return None

    return check


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m launch.serving", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    a = sub.add_parser("argv", help="a server's command line, one argument a line")
    a.add_argument("role", choices=ROLES)
    a.add_argument("--host", required=True)
    a.add_argument("--port", required=True)
    a.add_argument("--cmd", default="vllm serve", help="the program (QUOTECITE_JUDGE_CMD / QUOTECITE_EMBED_CMD)")
    w = sub.add_parser("wait-health", help="wait until URL answers 200 while process PID runs")
    w.add_argument("url")
    w.add_argument("--pid", type=int, required=True)
    w.add_argument("--timeout", type=float, required=True)
    w.add_argument("--poll", type=float, default=2.0)
    w.add_argument("--label", required=True)
    w.add_argument("--log", default="")
    args = ap.parse_args(argv)
    try:
        s = settings.resolve(os.environ, settings.REPO)
    except settings.SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.what == "argv":
        print("\n".join(server_argv(args.role, s, args.host, args.port, shlex.split(args.cmd))))
        return 0
    try:
        took = wait_healthy(args.url, args.label, args.timeout, args.poll, args.log, _pid_exit(args.pid))
    except NotHealthy as e:
        print(e)
        return 1
    print(f"{args.label} is healthy ({args.url} after {took:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
