"""The launch's settings: one typed object, frozen dataclasses by group, one default and one docstring per field.

docs/settings.md is the user's guide (the layers, ``--config``, ``--set``, the table generated from here). A field is
made by :func:`opt`; the docstring under it is its help; ``s.servers.health_timeout`` is ``QUOTECITE_HEALTH_TIMEOUT``.
In any value, ``{repo}`` is the repository and ``{QUOTECITE_X}`` a setting above (unset, a default is unset too). As
in a shell's ``${VAR:-default}``, an empty value counts as unset, except for a setting made with ``empty=True``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.settings")

import argparse
import ast
import difflib
import ipaddress
import itertools
import json
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import read_yaml
from data_prep.validate import bounded_float, bounded_int, nonneg_int, one_of, positive_float, positive_int

PREFIX = "QUOTECITE_"
REPO = Path(__file__).resolve().parents[1]
READERS = ("launch", "reward", "eval", "prep", "test")
"""Who reads a setting: the launch, the trainer's reward (the launch sets these for it), the two arrays, the tests."""
SOURCES = ("default", "file", "environment", "command line")
"""Where a value can come from, lowest layer first."""
MAX_TEXT = 4096
"""A setting's value longer than this is refused (a path, a flag list, a URL list never is)."""
URL_SCHEMES = frozenset({"http", "https"})
"""What a server URL may start with (``scheme://``)."""


class SettingsError(InputError):
    """One or more ``QUOTECITE_*`` settings are wrong; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        head = f"{len(problems)} launch settings are wrong:\n  " if len(problems) > 1 else ""
        super().__init__(head + "\n  ".join(problems))


# ------------------------------------------------------------------------------------------------- validators
def _one_line(value: str) -> str:
    """``value`` if it is one line of at most :data:`MAX_TEXT` characters (:func:`resolve` checks every value)."""
    if len(value) > MAX_TEXT:
        raise ValueError(f"expected at most {MAX_TEXT} characters, got {len(value)}")
    if any(c in value for c in "\0\n\r"):
        raise ValueError("expected one line (no NUL or newline)")
    return value


def text(value: str) -> str:
    """Any text, not only blanks."""
    if not value.strip():
        raise ValueError("expected a value, got only blanks")
    return value


def path(value: str) -> Path:
    """A file or folder (not resolved: a relative path is relative to where the launch runs)."""
    return Path(text(value))


def flag(value: str) -> bool:
    """``1`` (on) or ``0`` (off)."""
    if value.strip() not in ("0", "1"):
        raise ValueError("expected 1 (on) or 0 (off)")
    return value.strip() == "1"


def flags(value: str) -> list[str]:
    """Command-line words, split as the shell would (quotes group, nothing is expanded)."""
    try:
        return shlex.split(value)
    except ValueError as e:
        raise ValueError(f"cannot split into words: {str(e).lower()}") from None


def command(value: str) -> list[str]:
    """A program and its first arguments (``vllm serve``), split as the shell would; not empty."""
    return flags(text(value))


def server_flags(value: str) -> list[str]:
    """Extra ``vllm serve`` flags, none the launch sets (the job waits on its port, the reward names the model)."""
    words = flags(value)
    for name in (w.split("=", 1)[0] for w in words):
        if name in ("--port", "--host", "--served-model-name", "--model"):
            raise ValueError(f"{name} is set by the launch (QUOTECITE_*_PORT, the node, the model id); leave it out")
    return words


def url(value: str) -> str:
    """An ``http://`` or ``https://`` URL with a host."""
    try:
        parts = urllib.parse.urlsplit(value.strip())
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError as e:
        raise ValueError(f"not a URL: {e}") from None
    if parts.scheme not in URL_SCHEMES or not parts.hostname:
        raise ValueError("expected an http:// or https:// URL with a host")
    return value.strip()


def urls(value: str) -> list[str]:
    """One URL or several, comma-separated (the replicas of one judge)."""
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise ValueError("expected comma-separated URLs, got an empty item")
    return [url(item) for item in items]


def _matching(pattern: str, what: str, max_len: int = 256) -> Callable[[str], str]:
    """A validator of text that, stripped, fully matches ``pattern``."""

    def parse(value: str) -> str:
        if len(value) > max_len or not re.fullmatch(pattern, value.strip()):
            raise ValueError(f"expected {what}")
        return value.strip()

    return parse


model_id = _matching(r"[A-Za-z0-9_.][A-Za-z0-9_.\-/:@+]*", "a model id such as Qwen/Qwen3.5-9B (no blanks or quotes)")
version = _matching(r"[0-9]+(\.[0-9]+)*[A-Za-z0-9.+!-]*", "a version such as 0.32.0", 64)
step_seconds = _matching(r"[1-9][0-9]{0,8}:[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?", "STEP:SECONDS such as 3:1.5")
git_rev = _matching(r"(?!.*(\.\.|//))[A-Za-z0-9][A-Za-z0-9._/\-]*(?<![/.])(?<!\.lock)", "a git commit, tag or branch")
"""By git's ref-name rules (no ``..``, ``//``, ending ``/``, ``.`` or ``.lock``): it names a set-up folder too."""


def array_ids(value: str) -> str:
    """Slurm array task ids: ``1-8``, ``2,4``, ``1-3,7`` (each range low to high)."""
    items = value.replace(" ", "").split(",")
    for item in items:
        m = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", item)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"expected array ids such as 1-8 or 2,4 ({item!r} is not)")
    return ",".join(items)


def node_counts(value: str) -> list[int]:
    """GPUs per node in Slurm's count form: ``8``, ``8(x2),4`` (one count for every node, or one per node)."""
    out: list[int] = []
    for item in value.split(","):
        m = re.fullmatch(r"\s*([0-9]{1,4})\s*(?:\(x([1-9][0-9]{0,4})\))?\s*", item)
        if not m:
            raise ValueError(f"{item.strip()!r} is not a count like 8 or 8(x2) (a repeat names at least one node)")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) > 100_000:
        raise ValueError(f"{len(out)} nodes is more than any allocation")
    return out


def node_addresses(value: str) -> dict[str, str]:
    """``node=IP`` pairs (``gpu01=10.1.0.1,gpu02=10.1.0.2``); not a loopback IP, which no other node can reach."""
    out: dict[str, str] = {}
    for item in (x.strip() for x in value.split(",")):
        node, sep, addr = (x.strip() for x in item.partition("="))
        if not sep or not node or not addr:
            raise ValueError(f"expected node=IP pairs such as gpu01=10.1.0.1 ({item!r} is not one)")
        try:
            ip = ipaddress.ip_address(addr)
        except ValueError:
            raise ValueError(f"{node}={addr}: {addr!r} is not an IP address") from None
        if ip.is_loopback:
            raise ValueError(f"{node}={addr}: a loopback address cannot be reached from the other nodes")
        if node in out:
            raise ValueError(f"{node} is given twice")
        out[node] = str(ip)
    return out


port = bounded_int(0, 65535)
fraction = bounded_float(0.0, 1.0, lo_open=True)
seconds = positive_float


# ------------------------------------------------------------------------------------------------- the settings
_TEMPLATE = re.compile(r"\{(repo|QUOTECITE_[A-Z0-9_]+)\}")


def opt(default: str | None, parse: Callable[[str], Any], unit: str, readers: str, empty: bool = False) -> Any:
    """One setting's field: its default as the user would type it (the field's typed default is it parsed, None for a
    template), its validator, unit, who reads it (comma-separated, from :data:`READERS`) and whether the empty string
    is a value rather than "unset"."""
    typed = None if default is None or _TEMPLATE.search(default) else parse(default)
    meta = {"default": default, "parse": parse, "unit": unit, "readers": readers, "empty": empty}
    return field(default=typed, metadata=meta)  # a list default would need a factory: dataclass refuses it at import


@dataclass(frozen=True)
class Run:
    """The training run."""

    repo: Path | None = opt("{repo}", path, "path", "launch,eval,prep")
    """The repository (default: found from SLURM_SUBMIT_DIR or the script's place); on a shared file system."""
    config: Path | None = opt(None, path, "path", "launch,eval,prep")
    """YAML file of settings by group (servers: {judge_port: 8010}), under the environment and --set."""
    run_dir: Path | None = opt("{repo}/runs/qwen3vl_8b_grpo", path, "path", "launch,eval")
    """Run folder: run log, segments, checkpoints, logs."""
    recipe: Path | None = opt("{repo}/recipes/qwen3vl_8b_grpo.yaml", path, "path", "launch,eval")
    """EasyR1 config of the run."""
    data_dir: Path | None = opt(None, path, "path", "launch,reward")
    """Data folder the recipe reads (train.parquet, val.parquet, images/)."""
    cache_dir: Path | None = opt("{QUOTECITE_DATA_DIR}/cache", path, "path", "launch,reward")
    """Block cache the reward reads (the recipe's reward cache_dir)."""
    ckpt_dir: Path | None = opt("{QUOTECITE_RUN_DIR}/checkpoints", path, "path", "launch,reward")
    """Checkpoints and experiment_log.jsonl (the recipe's save_checkpoint_path; set by the launch)."""
    train_files: str | None = opt("{QUOTECITE_DATA_DIR}/train.parquet", text, "path", "launch")
    """Training data, counted for max_steps (set in the environment: overrides the recipe's data.train_files)."""
    val_files: str | None = opt(None, text, "path", "launch")
    """Validation data (set: overrides the recipe's data.val_files)."""
    max_steps: int | None = opt(None, positive_int, "count", "launch")
    """Steps of the run (default: the recipe's trainer.max_steps, else EasyR1's formula on the data)."""
    trainer_cmd: list[str] | None = opt(None, command, "flags", "launch")
    """The trainer program (default: the trainer venv's python -m reward.train, EasyR1's verl.trainer.main)."""
    trainer_stop: str = opt("checkpoint", one_of("checkpoint", "signal"), "", "launch")
    """After SIGUSR1: stop the trainer after its next checkpoint, or forward the signal."""
    stop_grace: float = opt("3000", seconds, "s", "launch")
    """From SIGUSR1 until the trainer is stopped regardless (keep it under the --signal lead time)."""
    poll_seconds: float = opt("5", seconds, "s", "launch")
    """How often the job looks at the trainer and the servers."""
    log_wait: float = opt("120", seconds, "s", "launch")
    """How long a stopped trainer's step may take to reach the metrics log."""
    max_restarts: int = opt("3", nonneg_int, "count", "launch")
    """Trainer restarts per job after a judge/embedder outage."""
    preflight: bool = opt("1", flag, "0/1", "launch")
    """Run the reward's check against the live servers before training."""
    check_python: str | None = opt(None, text, "path", "launch")
    """Python of the reward check (default: the trainer's, where the reward runs)."""
    allow_recipe_change: bool = opt("0", flag, "0/1", "launch")
    """Let a resumed run continue with a changed recipe."""
    python: str | None = opt(None, text, "path", "launch,eval,prep")
    """Python of the launch's own tools (default: REPO/.venv/bin/python, which `make install` builds)."""
    metrics_dir: Path | None = opt(None, path, "path", "reward")
    """Segment folder the reward writes its counters and samples to (set by the launch)."""
    segment: str | None = opt(None, text, "", "reward")
    """The trainer's segment name (set by the launch)."""


@dataclass(frozen=True)
class Chain:
    """The chain of Slurm jobs."""

    chain: bool = opt("1", flag, "0/1", "launch")
    """Requeue this job (scontrol requeue, same options) when it ends before max_steps."""
    max_stalled_jobs: int = opt("3", nonneg_int, "count", "launch")
    """Jobs in a row without a new checkpoint before the chain stops (0: never)."""


@dataclass(frozen=True)
class Servers:
    """The judge and embedder servers."""

    judge_url: list[str] | None = opt(None, urls, "URLs", "reward,eval,test")
    """Judge base URL(s), comma-separated replicas (set by the launch)."""
    embed_url: str | None = opt(None, url, "URL", "reward,eval,test")
    """Embedder base URL (set by the launch)."""
    judge_port: int = opt("8000", port, "port", "launch,eval")
    """Judge port (replica i: +i-1; 0: any free port)."""
    embed_port: int = opt("8001", port, "port", "launch,eval")
    """Embedder port (0: any free port)."""
    judge_gpu_util: float = opt("0.55", fraction, "fraction", "launch,eval")
    """Share of its GPU's memory the judge's vLLM takes."""
    embed_gpu_util: float = opt("0.25", fraction, "fraction", "launch,eval")
    """Share of its GPU's memory the embedder's vLLM takes."""
    judge_max_model_len: int = opt("32768", positive_int, "tokens", "launch,eval")
    """The judge's context length."""
    embed_max_model_len: int = opt("8192", positive_int, "tokens", "launch,eval")
    """The embedder's context length."""
    judge_args: list[str] | None = opt(None, server_flags, "flags", "launch,eval")
    """Extra vllm serve flags of the judge."""
    embed_args: list[str] | None = opt(None, server_flags, "flags", "launch,eval")
    """Extra vllm serve flags of the embedder."""
    judge_cmd: list[str] | None = opt(None, command, "flags", "launch,eval")
    """The judge's server program (default: the server venv's vllm serve)."""
    embed_cmd: list[str] | None = opt(None, command, "flags", "launch,eval")
    """The embedder's server program (default: the server venv's vllm serve)."""
    health_timeout: float = opt("1800", seconds, "s", "launch,eval")
    """How long each server may take to answer /health."""
    health_poll: float = opt("2", seconds, "s", "launch,eval")
    """Pause between two /health polls."""
    max_server_restarts: int = opt("5", nonneg_int, "count", "launch")
    """Restarts per job of a server process that dies while the trainer runs."""


@dataclass(frozen=True)
class Models:
    """The models."""

    judge_model: str = opt("Qwen/Qwen3.5-9B", model_id, "model id", "launch,reward,eval")
    """The judge vLLM serves and the reward names."""
    embed_model: str = opt("Qwen/Qwen3-VL-Embedding-2B", model_id, "model id", "launch,eval")
    """The quote embedder vLLM serves."""
    judge_weights: Path | None = opt(None, path, "path", "launch,eval")
    """Local folder of the judge's weights (default: the model id, from HF_HOME)."""
    embed_weights: Path | None = opt(None, path, "path", "launch,eval")
    """Local folder of the embedder's weights (default: the model id, from HF_HOME)."""
    policy_model: str | None = opt(None, text, "model id", "eval")
    """Base model of the evaluated policy (default: the recipe's worker.actor.model.model_path)."""


@dataclass(frozen=True)
class Layout:
    """The split of the allocation."""

    serve_gpus: int = opt("1", positive_int, "count", "launch")
    """GPUs for the servers (the last of the allocation)."""
    judge_replicas: int = opt("1", positive_int, "count", "launch")
    """Judge servers, one per serving GPU."""
    train_gpus_per_node: int | None = opt(None, positive_int, "count", "launch")
    """Trainer GPUs per node (default: 2 on one node, else what the first node has left)."""
    node_gpus: list[int] | None = opt(None, node_counts, "count", "launch")
    """GPUs per node in Slurm's form, 8(x2),4 (default: SLURM_GPUS_ON_NODE)."""
    node_addresses: dict[str, str] | None = opt(None, node_addresses, "node=IP,...", "launch")
    """Several nodes: the IP each node is reached by (default: its name; for names /etc/hosts maps to loopback)."""


@dataclass(frozen=True)
class Ray:
    """The Ray cluster of a multi-node trainer."""

    ray_cmd: list[str] | None = opt(None, command, "flags", "launch")
    """The ray program (default: next to the trainer's python)."""
    ray_port: int = opt("6379", port, "port", "launch")
    """The Ray head's GCS port (taken: a free one; 0: any)."""
    ray_timeout: float = opt("300", seconds, "s", "launch")
    """How long every trainer node may take to join Ray."""
    ray_tmpdir: Path | None = opt(None, path, "path", "launch")
    """Ray's --temp-dir."""


@dataclass(frozen=True)
class Software:
    """The GPU environments (launch/setup.py) and tools."""

    env_setup: bool = opt("1", flag, "0/1", "launch,eval")
    """Install/use the GPU environments of launch/setup.py (0: the programs on PATH)."""
    env_root: Path | None = opt("{repo}/.venv-gpu", path, "path", "launch,eval")
    """Folder of the GPU environments."""
    env_python: str | None = opt(None, text, "path", "launch,eval")
    """Python that builds them (default: python3.11, python3.12, python3)."""
    easyr1_repo: str = opt("https://github.com/hiyouga/EasyR1.git", text, "URL", "launch,eval")
    """Git repository of EasyR1."""
    easyr1_commit: str = opt("b44b311", git_rev, "git rev", "launch,eval")
    """EasyR1 commit the trainer runs."""
    vllm_server: str = opt("0.32.0", version, "version", "launch,eval")
    """VLLM version of the server venv."""
    flash_attn: str = opt("flash-attn==2.8.3", str, "pip spec", "launch,eval", empty=True)
    """Flash-attn for the trainer venv (empty: skip)."""
    env_in_ci: bool = opt("0", flag, "0/1", "launch,eval")
    """Allow `python -m launch.setup setup` to install where CI=true."""
    hf_home: Path | None = opt(None, path, "path", "launch,eval")
    """HF_HOME of the jobs' model weights (default: $HF_HOME, else REPO/.hf); the jobs run offline."""
    models_check: bool = opt("1", flag, "0/1", "launch,eval")
    """Check that the model weights are in HF_HOME."""
    mineru_bin: str | None = opt(None, text, "path", "prep")
    """Mineru-kit of the MinerU parser (default: REPO/.venv-mineru/bin/mineru-kit)."""


@dataclass(frozen=True)
class Eval:
    """The evaluation (launch/eval_8b.sh)."""

    eval_step: int | None = opt(None, nonneg_int, "count", "eval")
    """Checkpoint step to evaluate (default: the run's last complete checkpoint)."""
    eval_gold: Path | None = opt(None, path, "path", "eval")
    """Gold JSONL (required)."""
    eval_cache_dir: Path | None = opt(None, path, "path", "eval")
    """Block cache (required)."""
    eval_pdf_dir: Path | None = opt(None, path, "path", "eval")
    """Folder of <doc_key>.pdf (default: the PDFs the cache names)."""
    eval_out: Path | None = opt(None, path, "path", "eval")
    """Output folder (default: RUN_DIR/eval/step_N)."""
    citevqa_dir: Path | None = opt(None, path, "path", "eval,test")
    """A CiteVQA checkout: its prompts/ are the two-call judge's (or --judge-protocol rubric)."""
    infer_cmd: list[str] | None = opt(None, command, "flags", "eval")
    """The inference program (default: the server venv's python -m eval infer)."""
    eval_infer_args: list[str] | None = opt(None, flags, "flags", "eval")
    """Extra eval infer flags."""
    eval_resolve_args: list[str] | None = opt(None, flags, "flags", "eval")
    """Extra eval resolve flags."""
    eval_score_args: list[str] | None = opt(None, flags, "flags", "eval")
    """Extra eval score flags."""
    eval_shards: int = opt("0", nonneg_int, "count", "eval")
    """Array mode: inference shards (0: one job)."""
    eval_tasks: str | None = opt(None, array_ids, "ids", "eval")
    """Array mode: task ids to submit (default 1-N)."""
    eval_sbatch_args: list[str] | None = opt(None, flags, "flags", "eval")
    """Array mode: extra sbatch options for both jobs."""
    eval_phase: str | None = opt(None, one_of("infer", "score"), "", "eval")
    """Set by array mode for its jobs."""


@dataclass(frozen=True)
class Prep:
    """The data-prep array (launch/prep_array.sh)."""

    prep_jsonl: Path | None = opt(None, path, "path", "prep")
    """LongDocURL.jsonl (required)."""
    prep_pdf_dir: Path | None = opt(None, path, "path", "prep")
    """Folder of the LongDocURL PDFs (required; searched recursively)."""
    prep_out: Path | None = opt("{repo}/data/longdocurl", path, "path", "prep")
    """Output folder."""
    prep_shards: int = opt("8", positive_int, "count", "prep")
    """Shards = array tasks (an array task started by hand: SLURM_ARRAY_TASK_MAX)."""
    prep_tasks: str | None = opt("1-{QUOTECITE_PREP_SHARDS}", array_ids, "ids", "prep")
    """Array task ids to submit."""
    prep_args: list[str] | None = opt(None, flags, "flags", "prep")
    """Extra data_prep longdocurl flags, the same for every task and the final job (part of each done-marker's key)."""
    prep_sbatch_args: list[str] | None = opt(None, flags, "flags", "prep")
    """Extra sbatch options for both jobs."""
    prep_log_dir: Path | None = opt("{QUOTECITE_PREP_OUT}/logs", path, "path", "prep")
    """Slurm logs."""
    prep_cmd: list[str] | None = opt(None, command, "flags", "prep")
    """The program (default: PYTHON -m data_prep longdocurl)."""
    prep_phase: str | None = opt(None, one_of("shard", "final"), "", "prep")
    """Set by the script for its jobs (unset: submit)."""


@dataclass(frozen=True)
class Test:
    """Tests, CI and benchmarks only."""

    prep_fail_task: str | None = opt(None, array_ids, "ids", "test")
    """Test hook: array task ids that exit 1 at once."""
    slurm: bool | None = opt(None, flag, "0/1", "test")
    """The local Slurm of .ci/slurm_up.sh is up (the Slurm tests run)."""
    slurm_conf: Path = opt("/etc/slurm/slurm.conf", path, "path", "test")
    """Where .ci/slurm_up.sh writes its config."""
    slurm_wait: float = opt("60", seconds, "s", "test")
    """How long .ci/slurm_up.sh waits for each daemon."""
    slurm_layout: str = opt("multi", one_of("single", "multi"), "", "test")
    """The local Slurm's nodes."""
    slurm_test_timeout: float = opt("180", seconds, "s", "test")
    """How long any one wait of a Slurm test may take."""
    standin_step_seconds: float = opt("1.0", seconds, "s", "test")
    """The stand-in trainer's step time."""
    standin_slow_save: str | None = opt(None, step_seconds, "STEP:s", "test")
    """The stand-in pauses mid-save of STEP."""
    standin_fail_at_start: str | None = opt(None, text, "", "test")
    """The stand-in trainer exits 1 with this message."""
    standin_no_group_at: int | None = opt(None, positive_int, "step", "test")
    """At this step the stand-in's reward keeps no group and it exits as EasyR1 does."""
    standin_ray_init: bool = opt("0", flag, "0/1", "test")
    """A one-node stand-in trainer calls ray.init() as EasyR1."""
    standin_gate: Path | None = opt(None, path, "path", "test")
    """The stand-in starts step N once this file holds N."""
    vendor: Path | None = opt("{repo}/../shared/vendor", path, "path", "test")
    """Vendored upstream checkouts (CiteVQA)."""
    fixtures: Path | None = opt("{repo}/../shared/fixtures", path, "path", "test")
    """Shared test fixtures."""
    bench_attention: str = opt("small", one_of("small", "8b"), "", "test")
    """The attention benchmark's shapes."""
    bench_encoder: str = opt("none", text, "", "test")
    """Encoder of the prep-array benchmark."""
    bench_partition: str | None = opt(None, text, "", "test")
    """Slurm partition of the prep-array benchmark."""
    bench_out: Path | None = opt(None, path, "path", "test")
    """Where a benchmark writes its JSON (default: its own folder)."""


@dataclass(frozen=True)
class Settings:
    """Every setting, typed, by group: ``s.servers.health_timeout`` is ``QUOTECITE_HEALTH_TIMEOUT``'s value (None:
    unset). Made by :func:`resolve`; a ``name`` below is ``QUOTECITE_X``, ``group.x`` or ``x``."""

    run: Run = field(default_factory=Run)
    chain: Chain = field(default_factory=Chain)
    servers: Servers = field(default_factory=Servers)
    models: Models = field(default_factory=Models)
    layout: Layout = field(default_factory=Layout)
    ray: Ray = field(default_factory=Ray)
    software: Software = field(default_factory=Software)
    eval: Eval = field(default_factory=Eval)
    prep: Prep = field(default_factory=Prep)
    test: Test = field(default_factory=Test)
    provenance: dict[str, tuple[str, str | None]] = field(default_factory=dict, repr=False, compare=False)
    """``QUOTECITE_X`` -> (source, text) of every setting :func:`resolve` read: source is one of :data:`SOURCES`;
    text is the value as typed, the default filled in (None: unset)."""

    def source(self, name: str) -> str:
        return self.provenance[BY_KEY[name].name][0]

    def text(self, name: str) -> str | None:
        return self.provenance[BY_KEY[name].name][1]

    def env(self, sources: tuple[str, ...] = SOURCES) -> dict[str, str]:
        """Every set setting (from ``sources``) as text for a child or the next job, which resolves it back to the
        same values. ``env(("file", "command line"))``: what a child would not see in this process's environment."""
        return {n: t for n, (src, t) in self.provenance.items() if t is not None and src in sources}


_GROUP_CLASSES: dict[str, type] = {f.name: f.default_factory for f in fields(Settings) if f.name != "provenance"}


@dataclass(frozen=True)
class Setting:
    """One ``QUOTECITE_*`` setting as the tables and the checks see it, made from its field by :func:`_table`."""

    name: str  # QUOTECITE_HEALTH_TIMEOUT
    short: str  # health_timeout: the field
    key: str  # servers.health_timeout: its name in a settings file and in --set
    group: str
    help: str  # the field's docstring on one line
    reader_set: frozenset[str]
    refers_to: tuple[str, ...]  # the settings its default names (above it: tests/launch/test_settings.py)
    default: str | None  # the rest: as given to opt()
    parse: Callable[[str], Any]
    unit: str
    readers: str
    empty: bool


def _table() -> tuple[dict[str, str], tuple[Setting, ...]]:
    """The groups (name -> what they cover, from the class docstring) and one :class:`Setting` per field, its help
    the string under the field in this file."""
    docs = {}
    for node in ast.parse(Path(__file__).read_text(encoding="utf-8")).body:
        for a, b in itertools.pairwise(node.body if isinstance(node, ast.ClassDef) else []):
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                docs[a.target.id] = " ".join(str(b.value.value).split())
    groups, rows = {}, []
    for group, cls in _GROUP_CLASSES.items():
        groups[group] = cls.__doc__[0].lower() + cls.__doc__[1:].rstrip(".")
        for f in fields(cls):
            readers = frozenset(f.metadata["readers"].split(","))
            refs = tuple(r for r in _TEMPLATE.findall(f.metadata["default"] or "") if r != "repo")
            name, key = PREFIX + f.name.upper(), f"{group}.{f.name}"
            rows.append(Setting(name, f.name, key, group, docs.get(f.name, ""), readers, refs, **f.metadata))
    return groups, tuple(rows)


GROUPS, SETTINGS = _table()
"""The groups (name -> what they cover, in the tables' order) and one :class:`Setting` per field."""
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
BY_KEY: dict[str, Setting] = {**{s.short: s for s in SETTINGS}, **{s.key: s for s in SETTINGS}, **BY_NAME}
"""A setting by ``group.field``, ``field`` or ``QUOTECITE_FIELD`` (every field name is unique across groups)."""


# ------------------------------------------------------------------------------------------------- resolving
def _suggest(key: str, known, prefix: str = "") -> str:
    """`` (did you mean X?)`` for the known name closest to ``key`` (compared without ``prefix``), else ``""``."""
    names = [str(k).removeprefix(prefix) for k in known]
    close = difflib.get_close_matches(key.removeprefix(prefix), names, n=1, cutoff=0.6)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def _as_text(s: Setting, value: Any) -> str:
    """A settings file's value as it would be typed in the environment (true: 1, a list of flags: the words quoted,
    other lists: comma-separated, node addresses: node=IP,...)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return shlex.join(map(str, value)) if s.unit == "flags" else ",".join(map(str, value))
    if isinstance(value, dict) and s.parse is node_addresses:
        return ",".join(f"{k}={v}" for k, v in value.items())
    raise ValueError(f"expected a {s.unit or 'text'} value, got a {type(value).__name__}")


def _read_file(path: Path, problems: list[str]) -> dict[str, str]:
    """A settings file's values by ``QUOTECITE_X`` name; its problems, each naming the file, go to ``problems``."""
    where, out = f"settings file {path}", {}
    try:
        data = read_yaml(path, "settings file")
    except (InputError, OSError) as e:
        problems.append(f"{where}: {e}")
        return out
    if not isinstance(data, dict):
        if data is not None:
            problems.append(f"{where}: expected groups of settings ({', '.join(GROUPS)}), got a {type(data).__name__}")
        return out
    for group, values in data.items():
        if group not in GROUPS:
            hint = _suggest(str(group), GROUPS)
            problems.append(f"{where}: {group!r} is not a group{hint} (groups: {', '.join(GROUPS)})")
            continue
        if not isinstance(values, dict):
            problems.append(f"{where}: {group}: expected its settings as name: value")
            continue
        for short, value in values.items():
            s, other = BY_KEY.get(f"{group}.{short}"), BY_KEY.get(str(short))
            if s is None:
                in_group = [x.short for x in SETTINGS if x.group == group]
                hint = f" ({short} is in group {other.group})" if other else _suggest(str(short), in_group)
                problems.append(f"{where}: {group}.{short} is not a setting{hint}")
            elif s.name == PREFIX + "CONFIG":
                problems.append(f"{where}: {s.key} cannot be set in a settings file")
            elif value is not None:
                try:
                    out[s.name] = _as_text(s, value)
                except ValueError as e:
                    problems.append(f"{where}: {s.key}: {e}")
    return out


def _pick(s: Setting, layers: dict[str, Mapping[str, str]]) -> tuple[str, str | None]:
    """(source, text) of ``s`` from the highest layer that sets it, else (``default``, its default)."""
    for source, layer in layers.items():
        raw = layer.get(s.name)
        if raw is not None and (raw != "" or s.empty):
            return source, raw
    return "default", s.default


def resolve(
    env: Mapping[str, str],
    repo: Path,
    readers: set[str] | None = None,
    file: Path | None = None,
    sets: Sequence[str] = (),
) -> Settings:
    """Read, check and complete the settings: each from ``--set`` (``sets``), else the environment ``env``, else the
    settings file (``file``, else ``QUOTECITE_CONFIG``), else its default (``{repo}`` in a default: ``repo``).

    ``readers``: resolve only the settings read by these, the ones their defaults name and the ones set in a layer;
    None: all (the others keep their field defaults). Every ``QUOTECITE_*`` variable of ``env`` is checked either way
    (an unknown name is a problem). Raises one :class:`SettingsError` listing every problem.
    """
    if readers is not None and not set(readers) <= set(READERS):
        raise ValueError(f"readers must be among {READERS}, got {sorted(readers)}")
    problems = [
        f"{name} is not a setting{_suggest(name, BY_NAME, PREFIX)}; `python -m launch.settings` lists them"
        for name in sorted(k for k in env if k.startswith(PREFIX) and k not in BY_NAME)
    ]
    cli = {}
    for item in sets:
        key, sep, value = item.partition("=")
        setting = BY_KEY.get(key.strip())
        if not sep:
            problems.append(f"--set {item!r}: expected KEY=VALUE (KEY as group.field, e.g. servers.judge_port)")
        elif setting is None:
            hint = _suggest(key.strip(), BY_KEY)
            problems.append(f"--set {key.strip()}: not a setting{hint}; `python -m launch.settings` lists them")
        else:
            cli[setting.name] = value
    config = file or cli.get(PREFIX + "CONFIG") or env.get(PREFIX + "CONFIG")
    layers = {"command line": cli, "environment": env, "file": _read_file(Path(config), problems) if config else {}}
    picked = {s.name: _pick(s, layers) for s in SETTINGS}
    order = {s.name: i for i, s in enumerate(SETTINGS)}

    def above(ref: str, name: str) -> bool:  # a value may name only a setting listed above its own
        return order.get(ref, len(order)) < order[name]

    refs = {n: tuple(r for r in _TEMPLATE.findall(raw or "") if r != "repo") for n, (_, raw) in picked.items()}
    wanted = {n for n, (source, _) in picked.items() if readers is None or source != "default"}
    wanted |= {s.name for s in SETTINGS if s.reader_set & set(readers or ())}
    for s in reversed(SETTINGS):
        if s.name in wanted:
            wanted.update(r for r in refs[s.name] if above(r, s.name))
    values, provenance = {}, {}
    for s in (s for s in SETTINGS if s.name in wanted):
        source, raw = picked[s.name]
        origin = {"file": f" (from {config})", "command line": " (from --set)"}.get(source, "")
        if raw is not None and (refs[s.name] or "{repo}" in raw):  # a template, in a default or a user's value
            given, wrong = raw, [r for r in refs[s.name] if not above(r, s.name)]
            if source != "default" and wrong:
                problems.append(f"{s.name}={raw!r}{origin}: {{{wrong[0]}}} is not a setting above this one")
                continue
            if any(ref not in values for ref in refs[s.name]):
                continue  # a setting it is made from is wrong: reported there
            parts = {"repo": str(repo)} | {ref: provenance[ref][1] for ref in refs[s.name]}
            for ref, ref_text in parts.items():  # naming an unset setting, a default is unset too
                raw = None if raw is None or ref_text is None else raw.replace(f"{{{ref}}}", ref_text)
            if source == "default":
                origin = f" (its default, from {', '.join(s.refers_to)})" if s.refers_to else ""
            elif raw is None:
                unset = next(ref for ref in refs[s.name] if provenance[ref][1] is None)
                problems.append(f"{s.name}={given!r}{origin}: {{{unset}}} is unset")
                continue
        try:
            values[s.name] = None if raw is None else s.parse(_one_line(raw))
        except (argparse.ArgumentTypeError, ValueError) as e:  # InputError is a ValueError
            shown = f"{raw[:40]!r}... ({len(raw)} characters)" if len(raw) > 60 else repr(raw)
            problems.append(f"{s.name}={shown}{origin}: {e}")
            continue
        provenance[s.name] = (source, raw)
    for tasks, shards in (("PREP_TASKS", "PREP_SHARDS"), ("EVAL_TASKS", "EVAL_SHARDS")):
        ids, count = (values.get(PREFIX + name) for name in (tasks, shards))
        top = max(int(part.split("-")[-1]) for part in ids.split(",")) if ids else 0
        if count and top > count:  # task ids past the shard count would run shards that do not exist
            problems.append(f"{PREFIX}{tasks}={ids}: task {top} is past {PREFIX}{shards}={count} (ids are 1..{count})")
    if problems:
        raise SettingsError(problems)
    groups = {g: {} for g in GROUPS}
    for name, value in values.items():
        groups[BY_NAME[name].group][BY_NAME[name].short] = value
    return Settings(**{g: cls(**groups[g]) for g, cls in _GROUP_CLASSES.items()}, provenance=provenance)


def resolve_into(
    env: MutableMapping[str, str],
    repo: Path,
    readers: set[str] | None = None,
    file: Path | None = None,
    sets: Sequence[str] = (),
) -> Settings:
    """:func:`resolve`, then the file's and command line's values put into ``env`` (a program's ``os.environ``), and
    ``file`` as ``QUOTECITE_CONFIG``: every child, and every later :func:`resolve` of ``env``, sees the same values
    and reads no other settings file."""
    s = resolve(env, repo, readers, file, sets)
    env.update(s.env(("file", "command line")))
    if file is not None:
        env[PREFIX + "CONFIG"] = str(Path(file).absolute())
    return s


# ------------------------------------------------------------------------------------------------- rendering
def _by_group(test: bool, readers: set[str] | None = None) -> dict[str, list[Setting]]:
    """The user's settings by group, or (``test``) the tests', CI's and benchmarks' own (kept out of the user's
    tables: ``--help``, the settings reference); ``readers``: only those these read."""
    groups = {g: [s for s in SETTINGS if s.group == g and (readers is None or s.reader_set & readers)] for g in GROUPS}
    return {g: rows for g, rows in groups.items() if rows and (g == "test") == test}


def _default_text(s: Setting) -> str:
    return "-" if s.default is None else s.default or '""'


def render_help(test: bool = False, readers: set[str] | None = None) -> str:
    """The user's settings by group, one line each: name, default, unit, help (the launch's ``--help``); ``test``:
    the tests' and benchmarks' knobs instead; ``readers``: only the settings these read (an array's ``--help``)."""
    groups = _by_group(test, readers)
    shown = [s for rows in groups.values() for s in rows]
    w_name = max(len(s.name) for s in shown)
    w_def = min(28, max(len(_default_text(s)) for s in shown))
    w_unit = max(len(s.unit) for s in shown)
    lines = [
        "Settings (environment variables; '-': unset; {repo}: the repository; {QUOTECITE_X}: that setting's value).",
        "`python -m launch.settings show` prints the values this environment resolves to; "
        + ("these are the tests' and benchmarks' own." if test else "`table --test`: the tests' and benchmarks'."),
    ]
    for group, rows in groups.items():
        lines += ["", f"{group}: {GROUPS[group]}"]
        for s in rows:
            name, default = s.name, _default_text(s)
            if len(default) > w_def:  # a long default on a line of its own
                lines.append(f"  {name:<{w_name}}  {default}")
                name, default = "", ""
            lines.append(f"  {name:<{w_name}}  {default:<{w_def}}  {s.unit:<{w_unit}}  {s.help}".rstrip())
    return "\n".join(lines) + "\n"


def _md(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|")


def render_markdown(test: bool = False) -> str:
    """The same table in markdown (docs/settings.md, generated when the site is built)."""
    lines = ["| setting | default | unit | key (--config, --set) | help |", "|---|---|---|---|---|"]
    for rows in _by_group(test).values():
        for s in rows:
            default = "" if s.default is None else f"`{_md(s.default) or chr(34) * 2}`"
            lines.append(f"| `{s.name}` | {default} | {_md(s.unit)} | `{s.key}` | {_md(s.help)} |")
    return "\n".join(lines) + "\n"


def render_yaml(test: bool = False) -> str:
    """A ``--config`` to start from: every user setting (``test``: the tests' knobs) by group, its help, then it with
    its default, commented out (a file of the defaults would pin them against a later release's)."""
    lines = [
        "# quotecite launch settings: --config FILE (or QUOTECITE_CONFIG); the environment and --set override it.",
        "# Uncomment and change what you need; `python -m launch.settings show --config FILE` checks it.",
    ]
    for group, rows in _by_group(test).items():
        lines += ["", f"{group}:  # {GROUPS[group]}"]
        for s in rows:
            lines.append(f"  # {s.help}" + (f" [{s.unit}]" if s.unit else ""))
            lines.append(f"  # {s.short}: {json.dumps(s.default) if s.default is not None else 'null'}")
    return "\n".join(lines) + "\n"


def render_resolved(s: Settings) -> str:
    """``NAME = value (source)`` for every resolved setting."""
    w = max((len(name) for name in s.provenance), default=0)
    shown = {name: "(unset)" if t is None else t or '""' for name, (_, t) in s.provenance.items()}
    return "".join(f"{name:<{w}} = {shown[name]} ({s.source(name)})\n" for name in s.provenance)


# ------------------------------------------------------------------------------------------------- command line
def add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config FILE`` and ``--set KEY=VALUE``: the file and command-line layers of :func:`resolve`."""
    config_help = "a YAML file of settings by group (QUOTECITE_CONFIG); the environment overrides it"
    parser.add_argument("--config", type=Path, metavar="FILE", help=config_help)
    set_help = "one setting (KEY: group.field such as servers.judge_port); overrides the environment"
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.settings", description=__doc__.split("\n\n")[0])
    render = {"table": render_help, "markdown": render_markdown, "yaml": render_yaml}
    what = "table (default), markdown (for the docs), yaml (a --config to start from), show (the values)"
    parser.add_argument("what", nargs="?", default="table", choices=[*render, "show"], help=what)
    parser.add_argument("--test", action="store_true", help="table, markdown, yaml: the tests' and benchmarks' knobs")
    add_layer_arguments(parser)
    parser.add_argument("--readers", help=f"show: only what these read (comma-separated: {', '.join(READERS)})")
    args = parser.parse_args(argv)
    if args.what in render:
        sys.stdout.write(render[args.what](args.test))
        return 0
    readers = None if args.readers is None else {r.strip() for r in args.readers.split(",") if r.strip()}
    if readers is not None and not readers <= set(READERS):
        parser.error(f"--readers: expected some of {', '.join(READERS)}, got {args.readers!r}")
    try:
        sys.stdout.write(render_resolved(resolve(os.environ, REPO, readers, args.config, args.set)))
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
