"""Whether the Slurm tests can run here: the one check every Slurm test module uses."""

from __future__ import annotations

import os
import shutil
import subprocess


def slurm_reason() -> str:
    """Why the Slurm tests cannot run here ("" when they can)."""
    if not os.environ.get("QUOTECITE_SLURM"):
        return "QUOTECITE_SLURM is not set (.ci/run sets it after starting Slurm with .ci/slurm_up.sh)"
    if not shutil.which("sinfo"):
        return "no sinfo on PATH (Slurm is not installed; run .ci/slurm_up.sh)"
    try:
        r = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 10 s"
    if r.returncode != 0 or not r.stdout.strip():
        return f"sinfo does not answer: {r.stderr.strip() or 'no partition'}"
    return ""
