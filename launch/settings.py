"""Every ``QUOTECITE_*`` setting of the launch, once: name, default, unit, one line of help, a typed validator.

The training launch, the evaluation and data-prep arrays, the reward (through the variables the launch sets for the
trainer) and the test stand-ins read about a hundred ``QUOTECITE_*`` environment variables. They are all listed in
:data:`SETTINGS`; :func:`resolve` reads them from an environment mapping, checks every one that is set with its
validator (the option checks of :mod:`data_prep.validate` and a few small ones here), fills in the defaults and
reports *all* problems at once in one :class:`SettingsError`, an unknown ``QUOTECITE_*`` name included (with the
closest known one as a suggestion).

A default is written as the user would type it. ``{repo}`` stands for the repository root, ``{QUOTECITE_OTHER}`` for
another setting's resolved text (``QUOTECITE_CACHE_DIR`` defaults to ``{QUOTECITE_DATA_DIR}/cache``); a default that
names an unset setting is itself unset. As in the shell scripts (``${VAR:-default}``), a variable set to the empty
string counts as unset, except for a setting marked ``empty=True`` (``QUOTECITE_FLASH_ATTN=""`` skips flash-attn).

Commands: ``python -m launch.settings`` (or ``table``) prints the grouped table, ``markdown`` the same as a markdown
table (the documentation's settings reference, docs/settings.md), ``show`` the resolved values of this environment (exit 2 with one
``error:`` block when a setting is wrong).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.settings")

import argparse
import difflib
import ipaddress
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from data_prep.validate import bounded_float, bounded_int, nonneg_int, one_of, positive_float, positive_int

PREFIX = "QUOTECITE_"
REPO = Path(__file__).resolve().parents[1]
"""The repository this module is in (``python -m launch.settings show`` resolves ``{repo}`` to it)."""

JUDGE_MODEL = "Qwen/Qwen3.5-9B"
"""The judge served by vLLM and named in every judge request (``QUOTECITE_JUDGE_MODEL``'s default)."""
EMBED_MODEL = "Qwen/Qwen3-VL-Embedding-2B"
"""The quote embedder served by vLLM's pooling runner (``QUOTECITE_EMBED_MODEL``'s default)."""

GROUPS: dict[str, str] = {
    "run": "the training run",
    "chain": "the chain of Slurm jobs",
    "servers": "the judge and embedder servers",
    "models": "the models",
    "layout": "the split of the allocation",
    "ray": "the Ray cluster of a multi-node trainer",
    "software": "the GPU environments (launch/setup.py) and tools",
    "eval": "the evaluation (launch/eval_8b.sh)",
    "prep": "the data-prep array (launch/prep_array.sh)",
    "test": "tests, CI and benchmarks only",
}
"""The groups of :data:`SETTINGS`, in the order the tables show them."""
READERS = ("launch", "reward", "eval", "prep", "test")
"""Who reads a setting: the launch program, the trainer's reward (the launch sets these for it), the evaluation
array, the data-prep array, the tests and stand-ins."""

MAX_TEXT = 4096
"""A setting's value longer than this is refused (a path, a flag list, a URL list never is)."""


class SettingsError(InputError):
    """One or more ``QUOTECITE_*`` settings are wrong; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            text = f"{len(self.problems)} launch settings are wrong:\n" + "\n".join("  " + p for p in self.problems)
        super().__init__(text)


# ------------------------------------------------------------------------------------------------- validators
def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = name
    return fn


def _line(text: str, what: str = "a value") -> str:
    if len(text) > MAX_TEXT:
        raise ValueError(f"expected {what}, got {len(text)} characters")
    if any(c in text for c in "\0\n\r"):
        raise ValueError(f"expected {what} on one line (no NUL or newline)")
    return text


def text(value: str) -> str:
    """Any text on one line, not empty."""
    if not _line(value).strip():
        raise ValueError("expected a value, got only blanks")
    return value


def any_text(value: str) -> str:
    """Any text on one line, the empty string included."""
    return _line(value)


def path(value: str) -> Path:
    """A file or folder (not resolved here: a relative path is relative to where the launch runs)."""
    if not _line(value, "a path").strip():
        raise ValueError("expected a path, got only blanks")
    return Path(value)


def program(value: str) -> str:
    """A program: a path, or a name looked up on PATH (``python3``)."""
    if not _line(value, "a program").strip():
        raise ValueError("expected a program, got only blanks")
    return value


def flag(value: str) -> bool:
    """``1`` (on) or ``0`` (off)."""
    if value.strip() not in ("0", "1"):
        raise ValueError("expected 1 (on) or 0 (off)")
    return value.strip() == "1"


def flags(value: str) -> list[str]:
    """Command-line words, split as the shell would (``shlex.split``: quotes group, nothing is expanded)."""
    try:
        return shlex.split(_line(value, "command-line flags"))
    except ValueError as e:
        raise ValueError(f"cannot split into words: {str(e).lower()}") from None


_LAUNCH_SERVER_FLAGS = ("--port", "--host", "--served-model-name", "--model")


def server_flags(value: str) -> list[str]:
    """Extra ``vllm serve`` flags (:func:`flags`), never one the launch sets itself: ``--port`` (the job waits on
    the port it chose), ``--host``, ``--served-model-name`` and ``--model`` (the reward asks for the model id)."""
    words = flags(value)
    for w in words:
        name = w.split("=", 1)[0]
        if name in _LAUNCH_SERVER_FLAGS:
            raise ValueError(f"{name} is set by the launch (QUOTECITE_JUDGE_PORT or QUOTECITE_EMBED_PORT, the node, the model id); "
                             "leave it out")  # fmt: skip
    return words


def command(value: str) -> list[str]:
    """A program and its first arguments (``vllm serve``), split as the shell would; not empty."""
    words = flags(value)
    if not words:
        raise ValueError("expected a command, got only blanks")
    return words


URL_SCHEMES = frozenset({"http", "https"})
"""What a server URL may start with (``scheme://``)."""


def url(value: str) -> str:
    """An ``http://`` or ``https://`` URL with a host."""
    _line(value, "a URL")
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
    items = [item.strip() for item in _line(value, "URLs").split(",")]
    if not all(items):
        raise ValueError("expected comma-separated URLs, got an empty item")
    return [url(item) for item in items]


_MODEL_ID = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.\-/:@+]*")


def model_id(value: str) -> str:
    """A model name as vLLM serves it (``Qwen/Qwen3.5-9B``): letters, digits, ``_ . - / : @ +``, no blanks."""
    if len(value) > 256 or not _MODEL_ID.fullmatch(value):
        raise ValueError(f"expected a model id such as {JUDGE_MODEL} (no blanks or quotes)")
    return value


_VERSION = re.compile(r"[0-9]+(\.[0-9]+)*([A-Za-z0-9.+!-]*)")


def version(value: str) -> str:
    """A package version (``0.32.0``)."""
    if len(value) > 64 or not _VERSION.fullmatch(value.strip()):
        raise ValueError("expected a version such as 0.32.0")
    return value.strip()


_REV = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/\-]*")


def git_rev(value: str) -> str:
    """A git commit, tag or branch (``b44b311``): git's own ref-name rules, so no ``..``, ``//`` or ending ``/``
    (a revision also names a folder of the set-up: it can never lead out of it)."""
    v = value.strip()
    if len(value) > 256 or not _REV.fullmatch(v) or ".." in v or "//" in v or v.endswith(("/", ".", ".lock")):
        raise ValueError("expected a git commit, tag or branch")
    return v


def array_ids(value: str) -> str:
    """Slurm array task ids: ``1-8``, ``2,4``, ``1-3,7`` (each range low to high)."""
    items = _line(value, "array ids").replace(" ", "").split(",")
    for item in items:
        m = re.fullmatch(r"([0-9]{1,9})(?:-([0-9]{1,9}))?", item)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"expected array ids such as 1-8 or 2,4 ({item!r} is not)")
    return ",".join(items)


def max_array_id(ids: str) -> int:
    """The highest task id of :func:`array_ids`' text (``1-8,10`` -> 10)."""
    return max(int(part.split("-")[-1]) for part in ids.split(","))


TASKS_OF_SHARDS = (
    ("QUOTECITE_PREP_TASKS", "QUOTECITE_PREP_SHARDS"),
    ("QUOTECITE_EVAL_TASKS", "QUOTECITE_EVAL_SHARDS"),
)
"""(task ids, shard count) pairs: no task id may exceed its shard count."""


def node_counts(value: str) -> list[int]:
    """GPUs per node in Slurm's count form: ``8``, ``8(x2),4`` (one count for every node, or one per node)."""
    out: list[int] = []
    for item in _line(value, "GPU counts").split(","):
        m = re.fullmatch(r"\s*([0-9]{1,4})\s*(?:\(x([0-9]{1,5})\))?\s*", item)
        if not m:
            raise ValueError(f"{item.strip()!r} is not a count like 8 or 8(x2)")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) > 100_000:
        raise ValueError(f"{len(out)} nodes is more than any allocation")
    return out


def node_addresses(value: str) -> dict[str, str]:
    """``node=IP`` pairs, comma-separated, each IP not a loopback one (another node could not reach it).

    >>> node_addresses("gpu01=10.1.0.1, gpu02=10.1.0.2")
    {'gpu01': '10.1.0.1', 'gpu02': '10.1.0.2'}
    """
    out: dict[str, str] = {}
    for item in (x.strip() for x in _line(value, "node=IP pairs").split(",")):
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


def step_seconds(value: str) -> tuple[int, float]:
    """``STEP:SECONDS`` (a stand-in trainer pauses SECONDS in the middle of saving STEP)."""
    head, sep, tail = value.partition(":")
    if not sep:
        raise ValueError("expected STEP:SECONDS")
    try:
        return positive_int(head), positive_float(tail)
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"expected STEP:SECONDS: {e}") from None


port = _named(bounded_int(0, 65535), "port")
"""A TCP port, 0 .. 65535 (0: any free port)."""
fraction = _named(bounded_float(0.0, 1.0, lo_open=True), "fraction")
"""A share, more than 0 and at most 1."""
seconds = positive_float
"""A duration in seconds, finite and > 0."""


# ------------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Setting:
    """One ``QUOTECITE_*`` environment variable."""

    name: str
    default: str | None
    """As the user would type it; None: unset. :func:`resolve` fills in ``{repo}`` and ``{QUOTECITE_OTHER}``."""
    unit: str
    help: str
    """One line."""
    parse: Callable[[str], Any]
    group: str
    readers: str
    """Comma-separated, from :data:`READERS`."""
    empty: bool = False
    """The empty string is a value (not "unset")."""

    @property
    def short(self) -> str:
        """The attribute name on :class:`Settings`: ``QUOTECITE_HEALTH_TIMEOUT`` -> ``health_timeout``."""
        return self.name.removeprefix(PREFIX).lower()

    @property
    def reader_set(self) -> frozenset[str]:
        return frozenset(r.strip() for r in self.readers.split(","))

    @property
    def refers_to(self) -> tuple[str, ...]:
        """The settings named in the default (``{QUOTECITE_DATA_DIR}``)."""
        return tuple(m for m in _TEMPLATE.findall(self.default or "") if m != "repo")


_TEMPLATE = re.compile(r"\{(repo|QUOTECITE_[A-Z0-9_]+)\}")

_L, _RW, _EV, _PR, _T = READERS


def _s(name: str, default: str | None, unit: str, parse: Callable[[str], Any], group: str, readers: str,
       help: str, empty: bool = False) -> Setting:  # fmt: skip
    return Setting(PREFIX + name, default, unit, help, parse, group, readers, empty)


# fmt: off
SETTINGS: tuple[Setting, ...] = (
    # --- run
    _s("REPO", "{repo}", "path", path, "run", f"{_L},{_EV},{_PR}",
       "the repository (default: found from SLURM_SUBMIT_DIR or the script's place); on a shared file system"),
    _s("RUN_DIR", "{repo}/runs/qwen3vl_8b_grpo", "path", path, "run", f"{_L},{_EV}",
       "run folder: run log, segments, checkpoints, logs"),
    _s("RECIPE", "{repo}/recipes/qwen3vl_8b_grpo.yaml", "path", path, "run", f"{_L},{_EV}",
       "EasyR1 config of the run"),
    _s("DATA_DIR", None, "path", path, "run", f"{_L},{_RW}",
       "data folder the recipe reads (train.parquet, val.parquet, images/)"),
    _s("CACHE_DIR", "{QUOTECITE_DATA_DIR}/cache", "path", path, "run", f"{_L},{_RW}",
       "block cache the reward reads (the recipe's reward cache_dir)"),
    _s("CKPT_DIR", "{QUOTECITE_RUN_DIR}/checkpoints", "path", path, "run", f"{_L},{_RW}",
       "checkpoints and experiment_log.jsonl (the recipe's save_checkpoint_path; set by the launch)"),
    _s("TRAIN_FILES", "{QUOTECITE_DATA_DIR}/train.parquet", "path", text, "run", _L,
       "training data, counted for max_steps (set in the environment: overrides the recipe's data.train_files)"),
    _s("VAL_FILES", None, "path", text, "run", _L, "validation data (set: overrides the recipe's data.val_files)"),
    _s("MAX_STEPS", None, "count", positive_int, "run", _L,
       "steps of the run (default: the recipe's trainer.max_steps, else EasyR1's formula on the data)"),
    _s("TRAINER_CMD", None, "flags", command, "run", _L,
       "the trainer program (default: the trainer venv's python -m reward.train, EasyR1's verl.trainer.main)"),
    _s("TRAINER_STOP", "checkpoint", "", one_of("checkpoint", "signal"), "run", _L,
       "after SIGUSR1: stop the trainer after its next checkpoint, or forward the signal"),
    _s("STOP_GRACE", "3000", "s", seconds, "run", _L,
       "from SIGUSR1 until the trainer is stopped regardless (keep it under the --signal lead time)"),
    _s("POLL_SECONDS", "5", "s", seconds, "run", _L, "how often the job looks at the trainer and the servers"),
    _s("LOG_WAIT", "120", "s", seconds, "run", _L,
       "how long a stopped trainer's step may take to reach the metrics log"),
    _s("MAX_RESTARTS", "3", "count", nonneg_int, "run", _L,
       "trainer restarts per job after a judge/embedder outage"),
    _s("PREFLIGHT", "1", "0/1", flag, "run", _L, "run the reward's check against the live servers before training"),
    _s("CHECK_PYTHON", None, "path", program, "run", _L,
       "python of the reward check (default: the trainer's, where the reward runs)"),
    _s("ALLOW_RECIPE_CHANGE", "0", "0/1", flag, "run", _L, "let a resumed run continue with a changed recipe"),
    _s("PYTHON", None, "path", program, "run", f"{_L},{_EV},{_PR}",
       "python of the launch's own tools (default: REPO/.venv/bin/python, else python3)"),
    _s("METRICS_DIR", None, "path", path, "run", _RW,
       "segment folder the reward writes its counters and samples to (set by the launch)"),
    _s("SEGMENT", None, "", text, "run", _RW, "the trainer's segment name (set by the launch)"),
    # --- chain
    _s("CHAIN", "1", "0/1", flag, "chain", _L,
       "requeue this job (scontrol requeue, same options) when it ends before max_steps"),
    _s("MAX_STALLED_JOBS", "3", "count", nonneg_int, "chain", _L,
       "jobs in a row without a new checkpoint before the chain stops (0: never)"),
    # --- models
    _s("JUDGE_MODEL", JUDGE_MODEL, "model id", model_id, "models", f"{_L},{_RW},{_EV}",
       "the judge vLLM serves and the reward names"),
    _s("EMBED_MODEL", EMBED_MODEL, "model id", model_id, "models", f"{_L},{_EV}", "the quote embedder vLLM serves"),
    _s("JUDGE_WEIGHTS", None, "path", path, "models", f"{_L},{_EV}",
       "local folder of the judge's weights (default: the model id, from HF_HOME)"),
    _s("EMBED_WEIGHTS", None, "path", path, "models", f"{_L},{_EV}",
       "local folder of the embedder's weights (default: the model id, from HF_HOME)"),
    _s("POLICY_MODEL", None, "model id", text, "models", _EV,
       "base model of the evaluated policy (default: the recipe's worker.actor.model.model_path)"),
    # --- servers
    _s("JUDGE_URL", None, "URLs", urls, "servers", f"{_RW},{_EV},{_T}",
       "judge base URL(s), comma-separated replicas (set by the launch)"),
    _s("EMBED_URL", None, "URL", url, "servers", f"{_RW},{_EV},{_T}", "embedder base URL (set by the launch)"),
    _s("JUDGE_PORT", "8000", "port", port, "servers", f"{_L},{_EV}", "judge port (replica i: +i-1; 0: any free port)"),
    _s("EMBED_PORT", "8001", "port", port, "servers", f"{_L},{_EV}", "embedder port (0: any free port)"),
    _s("JUDGE_GPU_UTIL", "0.55", "fraction", fraction, "servers", f"{_L},{_EV}",
       "share of its GPU's memory the judge's vLLM takes"),
    _s("EMBED_GPU_UTIL", "0.25", "fraction", fraction, "servers", f"{_L},{_EV}",
       "share of its GPU's memory the embedder's vLLM takes"),
    _s("JUDGE_MAX_MODEL_LEN", "32768", "tokens", positive_int, "servers", f"{_L},{_EV}", "the judge's context length"),
    _s("EMBED_MAX_MODEL_LEN", "8192", "tokens", positive_int, "servers", f"{_L},{_EV}",
       "the embedder's context length"),
    _s("JUDGE_ARGS", None, "flags", server_flags, "servers", f"{_L},{_EV}", "extra vllm serve flags of the judge"),
    _s("EMBED_ARGS", None, "flags", server_flags, "servers", f"{_L},{_EV}", "extra vllm serve flags of the embedder"),
    _s("JUDGE_CMD", None, "flags", command, "servers", f"{_L},{_EV}",
       "the judge's server program (default: the server venv's vllm serve)"),
    _s("EMBED_CMD", None, "flags", command, "servers", f"{_L},{_EV}",
       "the embedder's server program (default: the server venv's vllm serve)"),
    _s("HEALTH_TIMEOUT", "1800", "s", seconds, "servers", f"{_L},{_EV}",
       "how long each server may take to answer /health"),
    _s("HEALTH_POLL", "2", "s", seconds, "servers", f"{_L},{_EV}", "pause between two /health polls"),
    _s("MAX_SERVER_RESTARTS", "5", "count", nonneg_int, "servers", _L,
       "restarts per job of a server process that dies while the trainer runs"),
    # --- layout
    _s("SERVE_GPUS", "1", "count", positive_int, "layout", _L, "GPUs for the servers (the last of the allocation)"),
    _s("JUDGE_REPLICAS", "1", "count", positive_int, "layout", _L, "judge servers, one per serving GPU"),
    _s("TRAIN_GPUS_PER_NODE", None, "count", positive_int, "layout", _L,
       "trainer GPUs per node (default: 2 on one node, else what the first node has left)"),
    _s("NODE_GPUS", None, "count", node_counts, "layout", _L,
       "GPUs per node in Slurm's form, 8(x2),4 (default: SLURM_GPUS_ON_NODE)"),
    _s("NODE_ADDRESSES", None, "node=IP,...", node_addresses, "layout", _L,
       "several nodes: the IP each node is reached by (default: its name; for names /etc/hosts maps to loopback)"),
    # --- ray
    _s("RAY_CMD", None, "flags", command, "ray", _L, "the ray program (default: next to the trainer's python)"),
    _s("RAY_PORT", "6379", "port", port, "ray", _L, "the Ray head's GCS port (taken: a free one; 0: any)"),
    _s("RAY_TIMEOUT", "300", "s", seconds, "ray", _L, "how long every trainer node may take to join Ray"),
    _s("RAY_TMPDIR", None, "path", path, "ray", _L, "Ray's --temp-dir"),
    # --- software
    _s("ENV_SETUP", "1", "0/1", flag, "software", f"{_L},{_EV}",
       "install/use the GPU environments of launch/setup.py (0: the programs on PATH)"),
    _s("ENV_ROOT", "{repo}/.venv-gpu", "path", path, "software", f"{_L},{_EV}", "folder of the GPU environments"),
    _s("ENV_PYTHON", None, "path", program, "software", f"{_L},{_EV}",
       "python that builds them (default: python3.11, python3.12, python3)"),
    _s("EASYR1_REPO", "https://github.com/hiyouga/EasyR1.git", "URL", text, "software", f"{_L},{_EV}",
       "git repository of EasyR1"),
    _s("EASYR1_COMMIT", "b44b311", "git rev", git_rev, "software", f"{_L},{_EV}", "EasyR1 commit the trainer runs"),
    _s("VLLM_SERVER", "0.32.0", "version", version, "software", f"{_L},{_EV}", "vLLM version of the server venv"),
    _s("FLASH_ATTN", "flash-attn==2.8.3", "pip spec", any_text, "software", f"{_L},{_EV}",
       "flash-attn for the trainer venv (empty: skip)", empty=True),
    _s("ENV_LOCK_WAIT", "7200", "s", seconds, "software", f"{_L},{_EV}",
       "how long a job waits for another job's install"),
    _s("ENV_IN_CI", "0", "0/1", flag, "software", f"{_L},{_EV}", "allow `python -m launch.setup setup` to install where CI=true"),
    _s("HF_HOME", None, "path", path, "software", f"{_L},{_EV}",
       "HF_HOME of the jobs' model weights (default: $HF_HOME, else REPO/.hf); the jobs run offline"),
    _s("MODELS_CHECK", "1", "0/1", flag, "software", f"{_L},{_EV}", "check that the model weights are in HF_HOME"),
    _s("MINERU_BIN", None, "path", program, "software", _PR,
       "mineru-kit of the MinerU parser (default: REPO/.venv-mineru/bin/mineru-kit)"),
    # --- eval
    _s("EVAL_STEP", None, "count", nonneg_int, "eval", _EV,
       "checkpoint step to evaluate (default: the run's last complete checkpoint)"),
    _s("EVAL_GOLD", None, "path", path, "eval", _EV, "gold JSONL (required)"),
    _s("EVAL_CACHE_DIR", None, "path", path, "eval", _EV, "block cache (required)"),
    _s("EVAL_PDF_DIR", None, "path", path, "eval", _EV, "folder of <doc_key>.pdf (default: the PDFs the cache names)"),
    _s("EVAL_OUT", None, "path", path, "eval", _EV, "output folder (default: RUN_DIR/eval/step_N)"),
    _s("CITEVQA_DIR", None, "path", path, "eval", f"{_EV},{_T}",
       "a CiteVQA checkout: its prompts/ are the two-call judge's (or --judge-protocol rubric)"),
    _s("INFER_CMD", None, "flags", command, "eval", _EV,
       "the inference program (default: the server venv's python -m eval infer)"),
    _s("EVAL_INFER_ARGS", None, "flags", flags, "eval", _EV, "extra eval infer flags"),
    _s("EVAL_RESOLVE_ARGS", None, "flags", flags, "eval", _EV, "extra eval resolve flags"),
    _s("EVAL_SCORE_ARGS", None, "flags", flags, "eval", _EV, "extra eval score flags"),
    _s("EVAL_SHARDS", "0", "count", nonneg_int, "eval", _EV, "array mode: inference shards (0: one job)"),
    _s("EVAL_TASKS", None, "ids", array_ids, "eval", _EV, "array mode: task ids to submit (default 1-N)"),
    _s("EVAL_SBATCH_ARGS", None, "flags", flags, "eval", _EV, "array mode: extra sbatch options for both jobs"),
    _s("EVAL_PHASE", None, "", one_of("infer", "score"), "eval", _EV, "set by array mode for its jobs"),
    # --- prep
    _s("PREP_JSONL", None, "path", path, "prep", _PR, "LongDocURL.jsonl (required)"),
    _s("PREP_PDF_DIR", None, "path", path, "prep", _PR,
       "folder of the LongDocURL PDFs (required; searched recursively)"),
    _s("PREP_OUT", "{repo}/data/longdocurl", "path", path, "prep", _PR, "output folder"),
    _s("PREP_SHARDS", "8", "count", positive_int, "prep", _PR,
       "shards = array tasks (an array task started by hand: SLURM_ARRAY_TASK_MAX)"),
    _s("PREP_TASKS", "1-{QUOTECITE_PREP_SHARDS}", "ids", array_ids, "prep", _PR, "array task ids to submit"),
    _s("PREP_ARGS", None, "flags", flags, "prep", _PR,
       "extra data_prep longdocurl flags (every task and the final job)"),
    _s("PREP_SBATCH_ARGS", None, "flags", flags, "prep", _PR, "extra sbatch options for both jobs"),
    _s("PREP_LOG_DIR", "{QUOTECITE_PREP_OUT}/logs", "path", path, "prep", _PR, "Slurm logs"),
    _s("PREP_CMD", None, "flags", command, "prep", _PR, "the program (default: PYTHON -m data_prep longdocurl)"),
    _s("PREP_PHASE", None, "", one_of("shard", "final"), "prep", _PR,
       "set by the script for its jobs (unset: submit)"),
    # --- test
    _s("PREP_FAIL_TASK", None, "ids", array_ids, "test", _T, "test hook: array task ids that exit 1 at once"),
    _s("SLURM", None, "0/1", flag, "test", _T, "the local Slurm of .ci/slurm_up.sh is up (the Slurm tests run)"),
    _s("SLURM_CONF", "/etc/slurm/slurm.conf", "path", path, "test", _T, "where .ci/slurm_up.sh writes its config"),
    _s("SLURM_WAIT", "60", "s", seconds, "test", _T, "how long .ci/slurm_up.sh waits for each daemon"),
    _s("SLURM_LAYOUT", "multi", "", one_of("single", "multi"), "test", _T, "the local Slurm's nodes"),
    _s("SLURM_TEST_TIMEOUT", "180", "s", seconds, "test", _T, "how long any one wait of a Slurm test may take"),
    _s("STANDIN_STEP_SECONDS", "1.0", "s", seconds, "test", _T, "the stand-in trainer's step time"),
    _s("STANDIN_SLOW_SAVE", None, "STEP:s", step_seconds, "test", _T, "the stand-in pauses mid-save of STEP"),
    _s("STANDIN_FAIL_AT_START", None, "", text, "test", _T, "the stand-in trainer exits 1 with this message"),
    _s("STANDIN_NO_GROUP_AT", None, "step", positive_int, "test", _T,
       "at this step the stand-in's reward keeps no group and it exits as EasyR1 does"),
    _s("STANDIN_RAY_INIT", "0", "0/1", flag, "test", _T, "a one-node stand-in trainer calls ray.init() as EasyR1"),
    _s("STANDIN_GATE", None, "path", path, "test", _T, "the stand-in starts step N once this file holds N"),
    _s("VENDOR", "{repo}/../shared/vendor", "path", path, "test", _T, "vendored upstream checkouts (CiteVQA)"),
    _s("FIXTURES", "{repo}/../shared/fixtures", "path", path, "test", _T, "shared test fixtures"),
    _s("BENCH_ATTENTION", "small", "", one_of("small", "8b"), "test", _T, "the attention benchmark's shapes"),
    _s("BENCH_ENCODER", "none", "", text, "test", _T, "encoder of the prep-array benchmark"),
    _s("BENCH_PARTITION", None, "", text, "test", _T, "Slurm partition of the prep-array benchmark"),
    _s("BENCH_OUT", None, "path", path, "test", _T, "where a benchmark writes its JSON (default: its own folder)"),
)
# fmt: on
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


# ------------------------------------------------------------------------------------------------- resolving
def _show(value: str) -> str:
    """A value for a message: quoted, cut short when long."""
    if len(value) > 60:
        return f"{value[:40]!r}... ({len(value)} characters)"
    return repr(value)


class Settings:
    """The resolved settings: ``s.health_timeout`` is ``QUOTECITE_HEALTH_TIMEOUT``'s typed value (None: unset)."""

    def __init__(self, resolved: dict[str, tuple[Any, str, str | None]]):
        # name -> (value, source, text), in SETTINGS order
        object.__setattr__(self, "_resolved", resolved)

    def __getattr__(self, short: str) -> Any:
        if short.startswith("_"):
            raise AttributeError(short)
        name = PREFIX + short.upper()
        if name not in BY_NAME or short != short.lower():
            close = difflib.get_close_matches(short, [s.short for s in SETTINGS], n=1)
            raise AttributeError(f"no setting {short!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if name not in self._resolved:
            raise AttributeError(f"{name} was not resolved (resolve() was asked for other readers)")
        return self._resolved[name][0]

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Settings are read-only")

    def _get(self, name: str) -> tuple[Any, str, str | None]:
        name = name if name.startswith(PREFIX) else PREFIX + name.upper()
        if name not in self._resolved:
            raise KeyError(name)
        return self._resolved[name]

    def source(self, name: str) -> str:
        """``"environment"`` or ``"default"`` (``name``: ``QUOTECITE_X`` or the short name)."""
        return self._get(name)[1]

    def text(self, name: str) -> str | None:
        """The setting as a string (the default filled in), None when unset."""
        return self._get(name)[2]

    def items(self) -> list[tuple[Setting, Any, str]]:
        """(setting, value, source) of every resolved setting, in :data:`SETTINGS` order."""
        return [(BY_NAME[n], v, src) for n, (v, src, _) in self._resolved.items()]

    def env(self) -> dict[str, str]:
        """Every set setting as a string, to hand to a child or the next job (resolves back to the same values)."""
        return {n: t for n, (_, _, t) in self._resolved.items() if t is not None}

    def __repr__(self) -> str:
        given = sum(1 for _, source, _ in self._resolved.values() if source == "environment")
        return f"Settings({len(self._resolved)} settings, {given} from the environment)"


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """The problems of every ``QUOTECITE_*`` name in ``env`` that is not a setting (with a suggestion)."""
    out = []
    for name in sorted(k for k in env if k.startswith(PREFIX) and k not in BY_NAME):
        tail = name.removeprefix(PREFIX)
        close = difflib.get_close_matches(tail, [n.removeprefix(PREFIX) for n in BY_NAME], n=1, cutoff=0.6)
        hint = f" (did you mean {PREFIX}{close[0]}?)" if close else ""
        out.append(f"{name} is not a setting{hint}; `python -m launch.settings` lists them")
    return out


def resolve(env: Mapping[str, str], repo: Path, readers: set[str] | None = None) -> Settings:
    """Read, check and complete the settings of ``env`` (``{repo}`` in a default: ``repo``).

    ``readers``: resolve only the settings read by these, the ones their defaults name and the ones set in ``env``;
    None: all. Every ``QUOTECITE_*`` variable of ``env`` is checked either way (an unknown name is a problem).
    Raises one :class:`SettingsError` listing every problem.
    """
    if readers is not None and not set(readers) <= set(READERS):
        raise ValueError(f"readers must be among {READERS}, got {sorted(readers)}")
    problems = unknown_names(env)
    wanted = [s for s in SETTINGS if readers is None or s.reader_set & set(readers) or env.get(s.name)]
    texts: dict[str, str | None] = {}
    resolved: dict[str, tuple[Any, str, str | None]] = {}
    failed: set[str] = set()

    def one(s: Setting, stack: tuple[str, ...] = ()) -> None:
        if s.name in resolved or s.name in failed:
            return
        if s.name in stack:
            raise RuntimeError(f"settings defaults refer to each other in a circle: {' -> '.join(stack + (s.name,))}")
        raw = env.get(s.name)
        if raw is not None and (raw != "" or s.empty):
            source, value_text, derived = "environment", raw, ""
        else:
            source, value_text, derived = "default", s.default, ""
            if value_text is not None:
                parts = {}
                for ref in s.refers_to:
                    one(BY_NAME[ref], stack + (s.name,))
                    if ref in failed:  # reported there
                        failed.add(s.name)
                        return
                    parts[ref] = texts[ref]
                if any(v is None for v in parts.values()):
                    value_text = None  # the default names an unset setting: unset too
                else:
                    value_text = _TEMPLATE.sub(lambda m: str(repo) if m[1] == "repo" else parts[m[1]], value_text)
                    if parts:
                        derived = f" (its default, from {', '.join(parts)})"
        if value_text is None:
            texts[s.name] = None
            resolved[s.name] = (None, source, None)
            return
        try:
            value = s.parse(value_text)
        except (argparse.ArgumentTypeError, ValueError) as e:  # InputError is a ValueError
            failed.add(s.name)
            problems.append(f"{s.name}={_show(value_text)}{derived}: {e}")
            return
        texts[s.name] = value_text
        resolved[s.name] = (value, source, value_text)

    for s in wanted:
        one(s)
    for tasks, shards in TASKS_OF_SHARDS:  # array task ids beyond the shard count would run shards that do not exist
        if resolved.get(tasks, (None,))[0] and resolved.get(shards, (None,))[0]:
            top = max_array_id(resolved[tasks][0])
            if top > resolved[shards][0]:
                problems.append(f"{tasks}={resolved[tasks][2]}: task {top} is past {shards}={resolved[shards][0]} "
                                f"(ids are 1..{resolved[shards][0]})")  # fmt: skip
    if problems:
        raise SettingsError(problems)
    order = [s.name for s in SETTINGS if s.name in resolved]
    return Settings({n: resolved[n] for n in order})


# ------------------------------------------------------------------------------------------------- rendering
def _default_text(s: Setting) -> str:
    if s.default is None:
        return "-"
    return s.default if s.default != "" else '""'


TEST_GROUP = "test"
"""The tests', CI's and benchmarks' own knobs: validated with the rest, kept out of the user's table (``--help``,
the settings reference); ``python -m launch.settings table --test`` lists them."""


def _groups(test: bool) -> list[str]:
    return [TEST_GROUP] if test else [g for g in GROUPS if g != TEST_GROUP]


def render_help(test: bool = False) -> str:
    """The user's settings grouped, one line each: name, default, unit, help (for the launch's ``--help``);
    ``test``: the tests' and benchmarks' knobs instead."""
    shown = [s for s in SETTINGS if s.group in _groups(test)]
    w_name = max(len(s.name) for s in shown)
    w_def = min(28, max(len(_default_text(s)) for s in shown))
    w_unit = max(len(s.unit) for s in shown)
    lines = [
        "Settings (environment variables; '-': unset; {repo}: the repository; {QUOTECITE_X}: that setting's value).",
        "`python -m launch.settings show` prints the values this environment resolves to; "
        + ("these are the tests' and benchmarks' own." if test else "`table --test`: the tests' and benchmarks'."),
    ]
    for group in _groups(test):
        lines += ["", f"{group}: {GROUPS[group]}"]
        for s in (s for s in shown if s.group == group):
            d = _default_text(s)
            if len(d) > w_def:
                lines.append(f"  {s.name:<{w_name}}  {d}")
                d = ""
                name = ""
            else:
                name = s.name
            lines.append(f"  {name:<{w_name}}  {d:<{w_def}}  {s.unit:<{w_unit}}  {s.help}".rstrip())
    return "\n".join(lines) + "\n"


def _md(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|")


def render_markdown(test: bool = False) -> str:
    """The same table in markdown, one row per setting (docs/settings.md, generated at build time)."""
    lines = ["| setting | default | unit | group | help |", "|---|---|---|---|---|"]
    for group in _groups(test):
        for s in (s for s in SETTINGS if s.group == group):
            d = "" if s.default is None else f"`{_md(s.default) or chr(34) * 2}`"
            lines.append(f"| `{s.name}` | {d} | {_md(s.unit)} | {group} | {_md(s.help)} |")
    return "\n".join(lines) + "\n"


def render_resolved(s: Settings) -> str:
    """``NAME = value (source)`` for every resolved setting."""
    items = s.items()
    if not items:
        return ""
    w = max(len(setting.name) for setting, _, _ in items)
    lines = []
    for setting, _, source in items:
        t = s.text(setting.name)
        shown = "(unset)" if t is None else (t if t != "" else '""')
        lines.append(f"{setting.name:<{w}} = {shown} ({source})")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launch.settings", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="table", choices=("table", "markdown", "show", "shell", "check"),
                        help="table (default): every setting; markdown: the same for the documentation; show: the values "
                        "this environment resolves to; shell NAME...: those values as bash assignments (the "
                        "scripts' defaults come from here)")  # fmt: skip
    parser.add_argument("names", nargs="*", help="shell: the settings to print (QUOTECITE_...)")
    parser.add_argument("--test", action="store_true",
                        help="table, markdown: the tests', CI's and benchmarks' knobs instead of the user's settings")  # fmt: skip
    parser.add_argument("--readers", default=None,
                        help=f"show: only what these read (comma-separated: {', '.join(READERS)})")  # fmt: skip
    args = parser.parse_args(argv)
    if args.what == "table":
        sys.stdout.write(render_help(args.test))
    elif args.what == "markdown":
        sys.stdout.write(render_markdown(args.test))
    else:
        readers = None if args.readers is None else {r.strip() for r in args.readers.split(",") if r.strip()}
        if readers is not None and not readers <= set(READERS):
            parser.error(f"--readers: expected some of {', '.join(READERS)}, got {args.readers!r}")
        try:
            s = resolve(os.environ, REPO, readers)
        except SettingsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.what == "check":  # the scripts' first step: every setting they read, checked (errors above)
            return 0
        if args.what == "shell":
            known = {x.name for x in SETTINGS}
            bad = [n for n in args.names if n not in known]
            if bad:
                print(f"error: not a setting: {', '.join(bad)}", file=sys.stderr)
                return 2
            for n in args.names:
                print(f"{n}={shlex.quote(s.text(n) or '')}")
            return 0
        sys.stdout.write(render_resolved(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
