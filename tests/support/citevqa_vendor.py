"""CiteVQA's release for tests: ``../shared/vendor/CiteVQA-039f6a3.tar.gz`` unpacked into a temporary folder.

The project never copies CiteVQA's prompts or code: it reads a user's checkout (``--citevqa-dir``). Tests point that
option at this archive, unpacked in place of a checkout, and skip cleanly when the archive is absent.
"""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENDOR = Path(os.environ.get("QUOTECITE_VENDOR", REPO.parent / "shared" / "vendor"))
CITEVQA_ARCHIVE = VENDOR / "CiteVQA-039f6a3.tar.gz"
"""opendatalab/CiteVQA at 039f6a3be0f29b000a10c0f973931803cbd3e1d4 (MIT), see ../shared/vendor/README.md."""


def unpack_citevqa(dest: Path) -> Path:
    """Unpack the archive under ``dest`` and return the checkout root (the folder holding ``prompts/``); skips the
    calling test when the archive is not there."""
    if not CITEVQA_ARCHIVE.is_file():
        pytest.skip(f"{CITEVQA_ARCHIVE} not present (../shared/vendor is only in the project's workspace)")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(CITEVQA_ARCHIVE) as tar:
        tar.extractall(dest, filter="data")
    roots = [p.parent for p in dest.glob("*/prompts")] + ([dest] if (dest / "prompts").is_dir() else [])
    if len(roots) != 1:
        raise RuntimeError(f"{CITEVQA_ARCHIVE}: expected one folder with prompts/, found {roots}")
    return roots[0]
