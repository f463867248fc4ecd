"""``--help`` of the launch scripts prints the block between their ``# --- help ---`` markers, whatever its length."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import REPO

SCRIPTS = ["launch/grpo_8b.sh", "launch/eval_8b.sh", "launch/prep_array.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_the_marked_header_without_comment_marks(script):
    text = (REPO / script).read_text()
    head, rest = text.split("# --- help ---\n", 1)
    block, _ = rest.split("# --- end help ---\n", 1)
    expected = "".join(re.sub(r"^# ?", "", line) + "\n" for line in block.splitlines())
    assert "#SBATCH" in head and "set -uo pipefail" not in block
    out = subprocess.run(["bash", script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout == expected
    assert "QUOTECITE_" in out.stdout and "--- help" not in out.stdout and "#SBATCH" not in out.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_follows_the_markers_when_the_header_moves(script, tmp_path):
    text = (REPO / script).read_text()
    moved = tmp_path / "moved.sh"
    moved.write_text(text.replace("#SBATCH --nodes=1\n", "#SBATCH --nodes=1\n#SBATCH --comment=an-extra-line\n"))
    out = subprocess.run(["bash", str(moved), "-h"], capture_output=True, text=True, timeout=60)
    original = subprocess.run(["bash", script, "-h"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == original.stdout
