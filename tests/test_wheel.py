"""A built wheel works on its own: it holds the prompts, and installed into a fresh environment it runs the demo and
scores responses with the http judge from outside the checkout.

How the fresh environment is made, offline and in seconds:

* the wheel is built from a copy of what it ships (``pyproject.toml``, ``README.md`` and the packages named in
  ``[tool.setuptools.packages.find]``) with ``pip wheel --no-deps --no-build-isolation --no-index``, so no build
  folder lands in the checkout and nothing is downloaded (setuptools comes from the running environment);
* ``python -m venv --without-pip`` makes an empty environment whose own ``site-packages`` comes first on its path;
* the project's dependencies are *not* reinstalled: one ``.pth`` line appends the running environment's
  ``site-packages`` after the fresh one. A path line in a ``.pth`` file is only added to ``sys.path``; the ``.pth``
  files inside that folder are not processed, so the editable install's import hook (which maps ``data_prep`` and
  friends to the checkout) never runs in the fresh environment;
* the wheel is installed into it with ``pip --python ENV/bin/python install --no-deps --no-index``;
* every command runs with the working directory in a temporary folder and no ``PYTHONPATH``, and the test checks
  that the packages are imported from the fresh environment, not from the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.openai_server import ScriptedOpenAIServer, chat_completion

pytestmark = [pytest.mark.wheel, pytest.mark.timeout(600)]

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGES = sorted(p.rstrip("*") for p in CONFIG["tool"]["setuptools"]["packages"]["find"]["include"])
PROMPTS = ("judge.txt", "language_interface.jinja", "coordinate_interface.jinja")


def _run(cmd: list[str], cwd: Path, timeout: float = 300, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "QUOTECITE_", "VIRTUAL_ENV"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", **env_extra)
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("wheel-src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=skip)
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "--no-index", "-q",
          "-w", str(dist)], cwd=dist)  # fmt: skip
    (whl,) = dist.glob("quotecite-*.whl")
    return whl


@pytest.fixture(scope="module")
def env_python(wheel, tmp_path_factory) -> Path:
    env = tmp_path_factory.mktemp("fresh-env") / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], cwd=env.parent)
    py = env / "bin" / "python"
    purelib = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=env).stdout.strip()
    )
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    (purelib / "zz_quotecite_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
         cwd=env.parent)  # fmt: skip
    return py


def test_the_wheel_holds_the_packages_and_the_prompts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for prompt in PROMPTS:
        assert f"recipes/prompts/{prompt}" in names
    assert "recipes/qwen3vl_8b_grpo.yaml" in names and "recipes/__init__.py" in names
    for pkg in PACKAGES:  # every module and every data file of the packages (package-data must name new kinds)
        source = {p.relative_to(REPO).as_posix() for p in (REPO / pkg).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}  # fmt: skip
        assert source <= names, f"files of {pkg} missing from the wheel: {sorted(source - names)}"
    assert not any(n.startswith(("tests/", "benchmarks/", "launch/")) for n in names)


def test_the_installed_packages_and_prompts_come_from_the_fresh_environment(env_python, tmp_path):
    probe = (
        "import json, core, data_prep, reward, eval, recipes\n"
        "from reward.judge_prompt import DEFAULT_PROMPT\n"
        "from eval.infer import PROMPTS_DIR\n"
        "print(json.dumps({'modules': [m.__file__ for m in (core, data_prep, reward, eval, recipes)],"
        " 'judge': str(DEFAULT_PROMPT), 'prompts': str(PROMPTS_DIR), 'text': recipes.read_prompt('judge.txt')}))"
    )
    got = json.loads(_run([str(env_python), "-c", probe], cwd=tmp_path).stdout)
    env = env_python.parents[1]
    for path in [*got["modules"], got["judge"], got["prompts"]]:
        assert Path(path).is_relative_to(env) and not Path(path).is_relative_to(REPO), path
    assert got["text"] == (REPO / "recipes" / "prompts" / "judge.txt").read_text(encoding="utf-8")


def test_a_wheel_install_runs_the_demo_and_scores_with_the_http_judge(env_python, tmp_path):
    work = tmp_path / "outside"
    work.mkdir()
    # the demo's training step runs in tests/trl (a real GRPO run); here the wheel's own parts, without it
    out = _run([str(env_python), "-m", "quotecite", "demo", "--out", "demo", "--no-train"], cwd=work)
    assert "demo finished" in out.stdout
    assert (work / "demo" / "reward" / "reward_demo.jsonl").is_file()
    assert (work / "demo" / "eval" / "language" / "report.html").is_file()

    from data_prep.cache import list_cache, load_cache
    from reward.demo import demo_inputs

    (key,) = list_cache(work / "demo" / "cache")
    cases = demo_inputs(load_cache(work / "demo" / "cache", key))
    (work / "inputs.jsonl").write_text("".join(json.dumps(inp, ensure_ascii=False) + "\n" for _, inp in cases))
    system = (REPO / "recipes" / "prompts" / "judge.txt").read_text(encoding="utf-8").split("=== user ===")[0]
    system = system.replace("=== system ===", "").strip()
    reply = chat_completion(json.dumps({"answer": 5, "relevance": 4, "coverage": 3}))
    with ScriptedOpenAIServer(
        handler=lambda path, body, n: reply if path.endswith("/chat/completions") else None
    ) as srv:
        _run([str(env_python), "-m", "reward", "score", "--inputs", "inputs.jsonl", "--cache-dir", "demo/cache",
              "--judge", "http", "--judge-url", srv.url, "--judge-model", "judge-model", "--retries", "0",
              "--out", "scored.jsonl"], cwd=work)  # fmt: skip
        chats = [body for path, body in srv.requests if path.endswith("/chat/completions")]
    assert chats, "the http judge sent no request"
    assert all(
        body["messages"][0]["role"] == "system" and body["messages"][0]["content"].strip() == system for body in chats
    )  # fmt: skip  (the installed judge prompt, read through importlib.resources)
    scored = [json.loads(line) for line in (work / "scored.jsonl").read_text().splitlines()]
    assert len(scored) == len(cases)
    by_case = dict(zip((name for name, _ in cases), scored, strict=True))
    good = by_case["good answer, right quotes"]
    assert good["format_ok"] and good["answer"] == 5 and good["citations"]
    assert by_case["unparseable (no JSON object)"]["overall"] == 0.0
