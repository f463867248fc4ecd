"""Fixtures of the launch tests."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.slurm import jobs_named


@pytest.fixture
def cleanup_jobs():
    """Runs (anything with a ``name``) or job names a test appends here have their Slurm jobs cancelled after the
    test, passing or not."""
    runs: list = []
    yield runs
    for run in runs:
        ids = jobs_named(run if isinstance(run, str) else run.name)
        if ids:
            subprocess.run(["scancel", *ids], check=False)
