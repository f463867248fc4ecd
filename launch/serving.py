"""The judge's and the embedder's server command lines and the wait for a server's ``/health``, written once.

The training job (:mod:`launch.job`) and the evaluation and data-prep arrays (:mod:`launch.arrays`) call them.
The wait is the reward's own (:func:`reward.servers.wait_for_health`: exponential backoff, capped), ended at once
when the server's process exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from launch import settings

ROLES = ("judge", "embed")
WRAP_GRACE_S = 5
"""Seconds ``launch/layout.py run`` gives the program it wraps from SIGTERM until it kills it (``--grace``)."""


def no_proxy_env(nodes: list[str], environ) -> dict[str, str]:
    """``NO_PROXY``/``no_proxy`` with loopback and the given node names added to what the environment had: httpx
    (the reward, the health waits) honours ``HTTP(S)_PROXY`` for every host not listed there, so on a cluster that
    exports a proxy every request to a server on a node would go to the proxy and the health wait would time out.

    >>> no_proxy_env(["gpu01", "gpu02"], {"NO_PROXY": "internal.example"})["NO_PROXY"]
    'internal.example,localhost,127.0.0.1,::1,gpu01,gpu02'
    """
    have = [h for h in (environ.get("NO_PROXY") or environ.get("no_proxy") or "").split(",") if h.strip()]
    hosts = have + [h for h in ("localhost", "127.0.0.1", "::1", *nodes) if h not in have]
    value = ",".join(hosts)
    return {"NO_PROXY": value, "no_proxy": value}


def server_argv(role: str, s: settings.Settings, host: str, port: str | int, cmd: list[str]) -> list[str]:
    """The command line of a judge or embedder server (``cmd``: the program, default ``vllm serve``).

    The judge sees up to the recipe's ``max_crops`` (6) crops per request. Its reply format needs no server flag:
    each request carries its own constraint without free whitespace (:func:`reward.judge_prompt.reply_regex`), so
    the judge scores on any vLLM server, this one or one a user started by hand. The embedder runs vLLM's
    pooling runner (last-token hidden state, L2-normalised: the encoder's embedding). The weights are
    ``QUOTECITE_{JUDGE,EMBED}_WEIGHTS`` (a local folder) when set, else the model id; the served name is the model id.
    """
    if role == "embed":
        return [*cmd, str(s.models.embed_weights or s.models.embed_model), "--host", host, "--port", str(port),
                "--served-model-name", s.models.embed_model, "--runner", "pooling",
                "--gpu-memory-utilization", str(s.servers.embed_gpu_util), "--max-model-len", str(s.servers.embed_max_model_len),
                *(s.servers.embed_args or [])]  # fmt: skip
    if role != "judge":
        raise ValueError(f"server role {role!r}: expected one of {', '.join(ROLES)}")
    return [*cmd, str(s.models.judge_weights or s.models.judge_model), "--host", host, "--port", str(port),
            "--served-model-name", s.models.judge_model, "--gpu-memory-utilization", str(s.servers.judge_gpu_util),
            "--max-model-len", str(s.servers.judge_max_model_len), "--limit-mm-per-prompt", '{"image": 8}',
            *(s.servers.judge_args or [])]  # fmt: skip


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
