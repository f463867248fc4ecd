"""``--help`` of the launch scripts prints the block between their ``# --- help ---`` markers, whatever its length."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from launch.settings import SETTINGS, render_help
from tests.conftest import REPO

SCRIPTS = ["launch/eval_8b.sh", "launch/prep_array.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_the_marked_header_without_comment_marks(script):
    text = (REPO / script).read_text()
    head, rest = text.split("# --- help ---\n", 1)
    block, _ = rest.split("# --- end help ---\n", 1)
    expected = "".join(re.sub(r"^# ?", "", line) + "\n" for line in block.splitlines())
    assert "#SBATCH" in head and "set -uo pipefail" not in block
    out = subprocess.run(["bash", script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""
    # the block, then the settings this array reads, from their one definition (launch/settings.py)
    reader = "eval" if "eval" in script else "prep"
    assert out.stdout == expected + "\n" + render_help(readers={reader})
    assert "--- help" not in out.stdout and "#SBATCH" not in out.stdout
    for s in SETTINGS:
        assert (s.name in out.stdout) == (reader in s.reader_set and s.group != "test"), s.name


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_follows_the_markers_when_the_header_moves(script, tmp_path):
    text = (REPO / script).read_text()
    moved = tmp_path / "moved.sh"
    moved.write_text(text.replace("#SBATCH --nodes=1\n", "#SBATCH --nodes=1\n#SBATCH --comment=an-extra-line\n"))
    # a copy outside the repository (as sbatch's spool copy) finds it through QUOTECITE_REPO
    out = subprocess.run(["bash", str(moved), "-h"], env={**os.environ, "QUOTECITE_REPO": str(REPO)},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    original = subprocess.run(["bash", script, "-h"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == original.stdout


def test_the_training_script_is_its_header_and_one_program():
    text = (REPO / "launch/grpo_8b.sh").read_text()
    assert len(text.splitlines()) < 60
    assert text.rstrip().endswith('exec "$QC_PY" -m launch.job "$@"')


def test_training_help_lists_every_launch_setting():
    from launch.settings import SETTINGS

    out = subprocess.run(["bash", "launch/grpo_8b.sh", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""
    for s in SETTINGS:
        if "launch" in s.readers:
            assert s.name in out.stdout, s.name
    assert "--dry-run" in out.stdout and "--settings" in out.stdout


def test_the_memory_request_is_the_estimate_it_comes_from():
    from launch.budget import plan_from_recipe

    header = (REPO / "launch/grpo_8b.sh").read_text()
    (mem,) = re.findall(r"^#SBATCH --mem=(\S+)$", header, re.M)
    # with the validation batch the job passes (launch.budget.plan_val_batch: the recipe's -1 bounded to 32)
    plan = plan_from_recipe(REPO / "recipes/qwen3vl_8b_grpo.yaml", ["data.val_batch_size=32"], n_gpus_per_node=2)
    assert mem == plan.estimate.sbatch_mem
    assert "python -m launch.budget memory --recipe recipes/qwen3vl_8b_grpo.yaml" in header


def test_every_launch_script_finds_the_repository_with_the_same_block():
    def block(script: str) -> str:
        text = (REPO / script).read_text()
        return text.split("# --- repository:", 1)[1].split("# --- end repository ---", 1)[0]

    blocks = {s: block(s) for s in ("launch/grpo_8b.sh", "launch/eval_8b.sh", "launch/prep_array.sh")}
    assert len(set(blocks.values())) == 1, blocks


def test_the_training_script_finds_the_repository_from_a_spool_copy(tmp_path):
    spool = tmp_path / "slurm_script"
    spool.write_text((REPO / "launch/grpo_8b.sh").read_text())
    out = subprocess.run(["bash", str(spool), "--help"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin",
                         "SLURM_SUBMIT_DIR": str(REPO), "QUOTECITE_PYTHON": sys.executable},
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and "QUOTECITE_RUN_DIR" in out.stdout, out.stderr
    lost = subprocess.run(["bash", str(spool), "--help"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert lost.returncode == 1 and "cannot find the repository" in lost.stderr


def test_every_gpu_job_script_asks_slurm_for_its_host_memory():
    # Without --mem a job gets the partition's default (often a few GB per CPU, or the whole node): the eval job
    # runs two vLLM engines and both servers, the training job the trainer and both servers.
    for script in ("launch/grpo_8b.sh", "launch/eval_8b.sh"):
        header = [ln for ln in (REPO / script).read_text().splitlines() if ln.startswith("#SBATCH")]
        assert any(ln.startswith("#SBATCH --mem=") for ln in header), script
