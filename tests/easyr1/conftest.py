"""The `easyr1` tier: EasyR1 b44b311's own code (package `verl`) drives the recipe, the launch's overrides, the
builder's parquet and the reward plugin. EasyR1 lives in its own venv (.venv-easyr1, `make easyr1`), so the tests
here run driver scripts (tests/easyr1/drive_*.py) with that venv's python and assert on what they report. The
stand-ins: the import-only `vllm` package in tests/easyr1/vllm_standin (see its ``__init__``), and for
``RayPPOTrainer.fit`` (test_easyr1_fit.py) the CPU worker in tests/easyr1/cpu_worker.py in ``FSDPWorker``'s place
(its docstring lists what differs)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EASYR1_PY = REPO / ".venv-easyr1" / "bin" / "python"
EASYR1_READY = REPO / ".venv-easyr1" / ".installed"  # written last by `make easyr1`
STANDIN = Path(__file__).resolve().parent / "vllm_standin"


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.easyr1)


def easyr1_env(**extra: str) -> dict[str, str]:
    """The driver's environment: the project and the vllm stand-in on the path, nothing from a real cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTECITE_", "SLURM_", "WANDB_", "RAY_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(REPO)])
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.update(extra)
    return env


def run_driver(
    script: str, *args: str, timeout: float = 300, env: dict | None = None, check: bool = True, cwd: Path | None = None
):
    """Run tests/easyr1/<script> in .venv-easyr1; its last stdout line is a JSON report."""
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311 + slurm/trainer.lock)")
    r = subprocess.run(
        [str(EASYR1_PY), str(Path(__file__).resolve().parent / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or easyr1_env(),
        cwd=cwd or REPO,
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"{script} {' '.join(args)} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
        )
    report = None
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if lines:
        report = json.loads(lines[-1])
    return r, report


@pytest.fixture(scope="session")
def easyr1_python() -> Path:
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311 + slurm/trainer.lock)")
    return EASYR1_PY
