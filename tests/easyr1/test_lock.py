"""slurm/trainer.lock: the one pinned trainer environment, for the cluster (launch/setup.py) and .venv-easyr1."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.easyr1 import lock as L
from tests.easyr1.conftest import EASYR1_PY, EASYR1_READY

LOCK = L.read_lock()


def test_lock_holds_the_pins_easyr1_needs_and_the_set_up_reads_its_versions():
    assert Version(LOCK["omegaconf"]) < Version("2.4")
    assert Version("4.54") <= Version(LOCK["transformers"]) < Version("5")
    sw = L.launch_setup().software(L.REPO)
    versions = [sw.vllm_trainer, sw.torch_trainer]
    assert versions == [LOCK["vllm"], LOCK["torch"]] == ["0.11.0", "2.8.0"]
    assert L.trainer_pip_args() == ["-r", str(L.LOCK)]
    assert "verl" not in LOCK  # EasyR1 comes from its git repository (--no-deps); PyPI's `verl` is another project


@pytest.mark.skipif(not L.EASYR1_TARBALL.exists(), reason="../shared/vendor/EasyR1-b44b311.tar.gz is absent")
def test_every_requirement_of_easyr1_and_of_the_project_is_pinned_and_satisfied():
    reqs = [Requirement(r) for r in L.easyr1_requirements() + L.project_deps()]
    unmet = []
    for r in reqs:
        name = L.norm(r.name)
        if name in L.INSTALLED_SEPARATELY:
            continue
        if name not in LOCK:
            unmet.append(f"{r} is not pinned")
        elif not r.specifier.contains(LOCK[name], prereleases=True):
            unmet.append(f"{r} is not met by the pin {LOCK[name]}")
    assert unmet == []
    assert any(
        L.norm(r.name) == "omegaconf" for r in reqs
    )  # EasyR1 asks for omegaconf unpinned: the lock must hold it


def test_drift_names_an_unpinned_package_and_a_moved_pin():
    lock = {"omegaconf": "2.3.1", "ray": "2.60.0"}
    assert L.drift({"omegaconf": "2.3.1", "ray": "2.60.0"}, lock) == []
    assert L.drift({"omegaconf": "2.4.0", "ray": "2.60.0", "antlr4-python3-runtime": "4.13.2"}, lock) == [
        "antlr4-python3-runtime==4.13.2 would be installed but is not pinned in slurm/trainer.lock",
        "omegaconf: 2.4.0 would be installed, slurm/trainer.lock pins 2.3.1",
    ]


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/omegaconf/", timeout=10) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.mark.network
@pytest.mark.timeout(600)
def test_the_trainer_install_set_resolves_to_exactly_the_lock():
    """pip resolves `pip install` of :func:`lock.trainer_pip_args` against PyPI as on the cluster (no GPU needed: only the
    metadata is read); every package it would install is pinned, at the pinned version. A missing pin (for example
    omegaconf, which pip would take at 2.4.0) shows up as a package outside the lock."""
    if not _pypi_reachable():
        pytest.skip("PyPI cannot be reached: the lock's resolution is not checked here")
    resolved = L.resolve(L.trainer_pip_args())
    assert L.drift(resolved, LOCK) == []
    assert resolved["vllm"] == "0.11.0" and Version(resolved["omegaconf"]) < Version("2.4")


def test_read_lock_names_the_line_of_a_bad_pin(tmp_path):
    bad = tmp_path / "trainer.lock"
    bad.write_text("# header\nray==2.60.0\nomegaconf\n")
    with pytest.raises(ValueError, match=r"trainer.lock:3: not a `name==version` pin: 'omegaconf'"):
        L.read_lock(bad)


def test_easyr1_venv_has_the_lock_versions_of_every_package_both_install():
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it")
    code = "import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    installed = {
        L.norm(k): v for k, v in json.loads(subprocess.check_output([str(EASYR1_PY), "-c", code], text=True)).items()
    }
    differ = {n: (v, LOCK[n]) for n, v in installed.items() if n in LOCK and LOCK[n] != v}
    # only the torch build differs: the lock's is the cluster's CUDA 2.8.0; here a torch with a matching torchvision
    assert {n for n in differ if not n.startswith("nvidia-")} <= {"torch", "torchvision", "torchaudio", "triton"}, (
        differ
    )
    shared = set(installed) & set(LOCK)
    assert {"omegaconf", "transformers", "ray", "peft", "accelerate", "datasets", "tensordict"} <= shared
    assert installed["omegaconf"] == LOCK["omegaconf"] and installed["transformers"] == LOCK["transformers"]
    assert "verl" in installed  # EasyR1, from the vendored archive
