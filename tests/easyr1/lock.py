"""slurm/trainer.lock: read it, resolve launch/setup.py's trainer install set with pip, compare, regenerate.

    python tests/easyr1/lock.py --write    # re-resolve the top-level set against PyPI and rewrite the lock

The top-level set is what the trainer needs: vLLM and torch at the lock's versions, EasyR1 b44b311's
requirements.txt (from the vendored archive; flash-attn is installed by the set-up on its own), omegaconf < 2.4, and
the project's runtime deps (launch/setup.py's PROJECT_DEPS). Runs with the main .venv (packaging) or any python with pip.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "slurm" / "trainer.lock"
EASYR1_TARBALL = REPO.parent / "shared" / "vendor" / "EasyR1-b44b311.tar.gz"
PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)\s*$")
# Not in EasyR1's pinned set: compiled against the lock's torch by the set-up (--no-build-isolation) after the lock.
INSTALLED_SEPARATELY = {"flash-attn"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path = LOCK) -> dict[str, str]:
    pins = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN_RE.match(line)
        if not m:
            raise ValueError(f"{path}:{n}: not a `name==version` pin: {line!r}")
        pins[norm(m.group(1))] = m.group(2)
    return pins


def launch_setup():
    """launch/setup.py, the set-up (this file also runs by its path: the repository goes on sys.path)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from launch import setup

    return setup


def trainer_pip_args() -> list[str]:
    """The arguments of the trainer's one resolving ``pip install``, as ``python -m launch.setup setup`` runs it."""
    return ["-r", str(launch_setup().software(REPO).lock)]


def project_deps() -> list[str]:
    return list(launch_setup().PROJECT_DEPS)


def easyr1_requirements() -> list[str]:
    with tarfile.open(EASYR1_TARBALL) as tf:
        text = tf.extractfile("EasyR1-b44b311/requirements.txt").read().decode()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def pypi_env() -> dict[str, str]:
    """pip as the cluster runs it: PyPI only, none of this machine's pip configuration (wheel stores, caps)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def resolve(args: list[str], timeout: float = 420) -> dict[str, str]:
    """{name: version} that `pip install ARGS` would install into an empty venv (no download of any wheel)."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-"]
    r = subprocess.run(cmd + args, capture_output=True, text=True, timeout=timeout, env=pypi_env(), cwd=REPO)
    if r.returncode != 0:
        raise RuntimeError(f"pip could not resolve {' '.join(args)}:\n{r.stderr[-3000:]}")
    report = json.loads(r.stdout)
    return {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}


def drift(resolved: dict[str, str], lock: dict[str, str]) -> list[str]:
    """What differs between a resolution and the lock, one line each (empty: no drift)."""
    out = []
    for name, v in sorted(resolved.items()):
        if name not in lock:
            out.append(f"{name}=={v} would be installed but is not pinned in slurm/trainer.lock")
        elif lock[name] != v:
            out.append(f"{name}: {v} would be installed, slurm/trainer.lock pins {lock[name]}")
    out += [f"{name}=={lock[name]} is pinned but would not be installed" for name in sorted(set(lock) - set(resolved))]
    return out


def top_level(lock: dict[str, str]) -> list[str]:
    reqs = [r for r in easyr1_requirements() if norm(re.split(r"[<>=!\[ ]", r)[0]) not in INSTALLED_SEPARATELY]
    return [f"vllm=={lock['vllm']}", f"torch=={lock['torch']}", "omegaconf<2.4", *reqs, *project_deps()]


def write_lock() -> None:
    lock = read_lock()
    resolved = resolve(top_level(lock))
    text = LOCK.read_text()
    header = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    body = "".join(f"{n}=={v}\n" for n, v in sorted(resolved.items()))
    tmp = LOCK.with_suffix(".tmp")
    tmp.write_text(header + body)
    tmp.replace(LOCK)
    print(f"{LOCK}: {len(resolved)} pins")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    write_lock()
