"""What every Slurm test module shares: whether Slurm can run here, waiting for a condition, finding a run's jobs."""

from __future__ import annotations

import os
import re
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


_URL_PORT = re.compile(r"^(https?://[^/:\s]+:)\d+(/.*)?$")


def normalise_steps(steps, job_id: str):
    """A job's step records (``launch.executor.Step.record``) with what differs between two jobs of one shape
    replaced by structure, never by substring: the job id only where the launch puts it (a segment ``JOBID-N`` as a
    whole path component or value, the Ray temp folder ``qcray-JOBID``, the job ``scontrol requeue`` names) and a
    server's port only in a URL (the commands themselves hold ``{port}``). Every other string is kept as it is, so
    a job id that also occurs in a run name, a step count or a time is left alone.

    >>> normalise_steps([{"argv": ["scontrol", "requeue", "33"], "a": ["trainer.max_steps=33", "qc-test-33fd"],
    ...                   "env": {"SEG": "33-0", "RAY_TMPDIR": "/tmp/qcray-33", "U": "http://n1:8001/v1"},
    ...                   "log": "/r/qc-test-33fd/segments/33-2/trainer.log"}], "33")
    [{'argv': ['scontrol', 'requeue', 'JOBID'], 'a': ['trainer.max_steps=33', 'qc-test-33fd'], 'env': {'SEG': 'JOBID-N', 'RAY_TMPDIR': '/tmp/qcray-JOBID', 'U': 'http://n1:{port}/v1'}, 'log': '/r/qc-test-33fd/segments/JOBID-N/trainer.log'}]
    """
    segment = re.compile(rf"^{re.escape(job_id)}-(\d+|N)$")

    def word(text: str) -> str:
        m = _URL_PORT.match(text)
        if m:
            return m.group(1) + "{port}" + (m.group(2) or "")
        parts = text.split("/")
        for i, part in enumerate(parts):
            if segment.match(part) or part == "JOBID-N":
                parts[i] = "JOBID-N"
            elif part == f"qcray-{job_id}":
                parts[i] = "qcray-JOBID"
        return "/".join(parts)

    def walk(x):
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            if x[:2] == ["scontrol", "requeue"] and x[2:] == [job_id]:
                return ["scontrol", "requeue", "JOBID"]
            return [walk(v) for v in x]
        return word(x) if isinstance(x, str) else x

    return walk(steps)
