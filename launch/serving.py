"""The judge's and the embedder's server command lines and the wait for a server's ``/health``, written once for the
training job (:mod:`launch.job`) and the arrays (:mod:`launch.arrays`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from launch import settings

ROLES = ("judge", "embed")
WRAP_GRACE_S = 5
"""Seconds ``launch/layout.py run`` gives the program it wraps from SIGTERM until it kills it (``--grace``)."""


def no_proxy_env(nodes: list[str], environ) -> dict[str, str]:
    """``NO_PROXY``/``no_proxy``: the environment's plus loopback and ``nodes`` (httpx sends a request to any other
    host through ``HTTP(S)_PROXY``: a cluster's proxy would stand between the job and its servers).

    >>> no_proxy_env(["gpu01", "gpu02"], {"NO_PROXY": "internal.example"})["NO_PROXY"]
    'internal.example,localhost,127.0.0.1,::1,gpu01,gpu02'
    """
    have = [h for h in (environ.get("NO_PROXY") or environ.get("no_proxy") or "").split(",") if h.strip()]
    value = ",".join(have + [h for h in ("localhost", "127.0.0.1", "::1", *nodes) if h not in have])
    return {"NO_PROXY": value, "no_proxy": value}


def stamp(job_id: str, msg: str) -> str:
    """A log line of the job or array ``job_id``: ``[time] [quotecite JOB] msg``."""
    return f"[{datetime.now():%Y-%m-%d %H:%M:%S}] [quotecite {job_id}] {msg}"


def log(job_id: str, msg: str, run_dir: Path | None) -> None:
    """A stamped line on stderr (the Slurm log) and in ``RUN_DIR/chain.log`` when that folder exists."""
    line = stamp(job_id, msg)
    print(line, file=sys.stderr, flush=True)
    if run_dir is not None and run_dir.is_dir():
        with open(run_dir / "chain.log", "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_port(port_file: Path) -> int:
    """The port ``launch/layout.py run --port-file`` wrote for a server; 0 while there is none."""
    try:
        return int(port_file.read_text().strip())
    except (OSError, ValueError):
        return 0


def server_argv(role: str, s: settings.Settings, host: str, port: str | int, cmd: list[str]) -> list[str]:
    """The judge's or the embedder's server command line, ``cmd`` its program (``vllm serve``): the weights of
    ``QUOTECITE_{JUDGE,EMBED}_WEIGHTS`` (else the model id) served as the model id. The judge takes up to 8 images a
    request (the recipe shows at most ``max_crops``, 6; each request carries its own reply format); the embedder is
    vLLM's pooling runner."""
    m, srv = s.models, s.servers
    if role == "judge":
        model, weights, util, max_len = m.judge_model, m.judge_weights, srv.judge_gpu_util, srv.judge_max_model_len
        own = ["--limit-mm-per-prompt", '{"image": 8}', *(srv.judge_args or [])]
    elif role == "embed":
        model, weights, util, max_len = m.embed_model, m.embed_weights, srv.embed_gpu_util, srv.embed_max_model_len
        own = ["--runner", "pooling", *(srv.embed_args or [])]
    else:
        raise ValueError(f"server role {role!r}: expected one of {', '.join(ROLES)}")
    argv = [*cmd, str(weights or model), "--host", host, "--port", str(port), "--served-model-name", model]
    return [*argv, "--gpu-memory-utilization", str(util), "--max-model-len", str(max_len), *own]


class NotHealthy(RuntimeError):
    """A server that exited or did not answer in time; the message names it, its URL and its log."""


def wait_healthy(
    url: str | Callable[[], str],
    label: str,
    timeout_s: float,
    poll_s: float,
    log: str,
    exited: Callable[[], int | None],
    stop: Callable[[], bool] = lambda: False,
) -> float:
    """Wait until ``url`` (``.../health``; a callable while the port is not known yet) answers 200: the reward's own
    wait, ended at once when ``exited()`` returns the server's exit status. The seconds it took; :class:`NotHealthy`
    when the server exited or after ``timeout_s``."""
    from reward.servers import HEALTH_BACKOFF_S, ServerOutageError, wait_for_health

    def alive() -> str:
        rc = exited()
        return f"exited (code {rc})" if rc is not None else ("the job is stopping" if stop() else "")

    started, backoff = time.monotonic(), (min(HEALTH_BACKOFF_S[0], poll_s), poll_s * 4)
    try:
        wait_for_health(url, started + timeout_s, started, label, timeout_s, alive=alive, backoff_s=backoff)
    except ServerOutageError:
        why, where = alive(), (url() if callable(url) else url) or "its port"
        if why.startswith("exited"):
            raise NotHealthy(f"{label} {why} before answering {where}; see its log: {log}") from None
        raise NotHealthy(f"{label} did not answer {where} within {timeout_s:g}s; see its log: {log}") from None
    return time.monotonic() - started
