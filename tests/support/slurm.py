"""What every Slurm test module shares: whether Slurm can run here, waiting for a condition, finding a run's jobs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time


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


def wait_for(pred, timeout: float, what: str, poll: float = 0.1):
    """``pred()``'s first true value, polling every ``poll`` seconds; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def jobs_named(name: str) -> list[str]:
    """Ids of the Slurm jobs named ``name``, oldest first (no accounting here: ``scontrol show job``)."""
    r = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, check=True)
    ids = []
    for line in r.stdout.splitlines():
        f = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        if f.get("JobName") == name:
            ids.append(f["JobId"])
    return sorted(ids, key=int)
