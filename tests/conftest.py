"""Shared test fixtures. Real third-party fixtures live in ../shared/fixtures and are read in place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("QUOTECITE_FIXTURES", REPO.parent / "shared" / "fixtures"))


def fixture_path(*parts: str) -> Path:
    """Path of a file under ../shared/fixtures; skips the calling test with a reason when it is absent."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"fixture {p} not present (../shared/fixtures is only in the project's workspace)")
    return p


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"{FIXTURES} not present")
    return FIXTURES


@pytest.fixture(scope="session")
def sample_pdf(tmp_path_factory) -> Path:
    """The project's own generated multi-page bilingual sample PDF (table, captions, figure)."""
    from data_prep.sample import write_sample_pdf

    out = tmp_path_factory.mktemp("sample") / "sample.pdf"
    write_sample_pdf(out)
    return out
