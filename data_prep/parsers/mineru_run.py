"""Running MinerU (``mineru-kit`` from its own venv) on one PDF: a subprocess in its own process group, killed on
timeout, with a scratch ``HOME``; :class:`data_prep.parsers.mineru.MinerUParser` converts what it writes."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import read_text


@contextlib.contextmanager
def run_mineru(
    binary: str, pdf: Path, tier: str, timeout_s: float, home: str | None, wanted: Callable[[Any], bool]
) -> Iterator[Path]:
    """Run ``binary parse PDF --tier TIER -f middle_json`` into a temporary folder and yield the output file whose
    content is ``wanted`` (the folder is removed afterwards). Raises :class:`InputError` when MinerU cannot start,
    fails, times out or writes no such file."""
    with tempfile.TemporaryDirectory(prefix="quotecite-mineru-") as tmp:
        out_dir = Path(tmp) / "out"
        home_dir = Path(home) if home else Path(tmp) / "home"
        home_dir.mkdir(parents=True, exist_ok=True)
        cmd = [binary, "parse", str(Path(pdf).resolve()), "--tier", tier, "-f", "middle_json", "-o", str(out_dir)]
        logtext, rc = _run_logged(cmd, dict(os.environ, HOME=str(home_dir)), timeout_s, pdf)
        if rc != 0:
            raise InputError(f"{pdf}: MinerU ({tier}) failed with exit code {rc}: {_tail(logtext)}")
        found = _find_output(out_dir, Path(pdf).stem, wanted)
        if found is None:
            raise InputError(f"{pdf}: MinerU ({tier}) wrote no middle JSON: {_tail(logtext)}")
        yield found


def _tail(text: str, n_lines: int = 4, n_chars: int = 400) -> str:
    """The last lines of a log on one line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tail = " | ".join(lines[-n_lines:]) or "(no output)"
    return tail if len(tail) <= n_chars else "..." + tail[-n_chars:]


def _run_logged(cmd: list[str], env: dict, timeout_s: float, pdf: Path) -> tuple[str, int]:
    """Run ``cmd`` in its own process group with stdout+stderr captured; kill the group on timeout."""
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True, text=True
        )
    except OSError as e:
        raise InputError(f"{pdf}: cannot start MinerU ({cmd[0]}: {e.strerror})") from None
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        raise InputError(f"{pdf}: MinerU timed out after {timeout_s:g} s: {_tail(out or '')}") from None
    return out or "", proc.returncode


def _iter_json(root: Path) -> Iterator[Path]:
    if root.is_dir():
        yield from sorted(root.rglob("*.json"))


def _find_output(out_dir: Path, stem: str, wanted: Callable[[Any], bool]) -> Path | None:
    """The JSON file MinerU wrote under ``out_dir`` whose content is ``wanted`` (the middle JSON; 4.x:
    ``<stem>.json``; 2.x: ``<stem>_middle.json``)."""
    found = []
    for p in _iter_json(out_dir):
        try:
            ok = wanted(json.loads(read_text(p, "MinerU output")))  # a regular file; NaN boxes allowed (see mineru.py)
        except (OSError, ValueError):  # InputError is a ValueError: not this file, look at the next
            continue
        if ok:
            found.append(p)
    if not found:
        return None
    exact = [p for p in found if p.stem in (stem, f"{stem}_middle")]
    return (exact or found)[0]


@functools.lru_cache(maxsize=8)
def installed_version(binary: str) -> str | None:
    """``importlib.metadata.version("mineru")`` as MinerU's own interpreter sees it (cached per binary)."""
    python = _interpreter_of(binary)
    if python is None:
        return None
    try:
        r = subprocess.run(
            [python, "-c", "import importlib.metadata as m; print(m.version('mineru'))"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    ver = r.stdout.strip()
    return ver if r.returncode == 0 and ver else None


def _interpreter_of(binary: str) -> str | None:
    """The Python interpreter of a console script: ``python`` beside it, else its ``#!`` line."""
    sibling = Path(binary).parent / "python"
    if sibling.exists():
        return str(sibling)
    try:
        with open(binary, "rb") as f:
            first = f.readline(512).decode("utf-8", "replace")
    except OSError:
        return None
    if first.startswith("#!"):
        parts = first[2:].split()
        if parts and Path(parts[0]).name.startswith("python") and Path(parts[0]).exists():
            return parts[0]
    return None
