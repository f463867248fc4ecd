"""File input and output shared by every stage.

* Atomic writes: write to a temporary file in the target's folder, fsync, then ``os.replace`` it over the target,
  so a reader sees the old file or the new one, never half of one. An output file that exists is replaced this
  way (a re-run overwrites its own earlier output), but never when it is one of the command's inputs
  (:func:`refuse_output_over_inputs`, compared with ``os.path.samefile``, so links and ``./`` spellings count).
  A full disk, a read-only folder or a directory where a file should go raise :class:`OutputError` naming the
  target, and the old file is kept.
* Output folders written as one unit (:func:`atomic_dir`): built beside the target and swapped in, so a reused
  folder keeps no stale file and a killed run leaves the previous complete set.
* :func:`read_jsonl`: the one JSONL reader; bad bytes, bad JSON or a non-object line raise
  :class:`~data_prep.types.InputError` naming the file and line.
* Command-line value types that refuse NaN, infinities and out-of-range numbers (:func:`finite_float`,
  :func:`int_in_range`).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from data_prep.types import InputError

WRITE_ERRNOS: frozenset[int] = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.EFBIG,
     errno.ENAMETOOLONG, errno.EEXIST, errno.EIO}
)  # fmt: skip
"""``OSError`` numbers that come from where a file is written (a full disk, a read-only or unwritable folder, a
directory in the way), not from a bug: reported as one line (:class:`OutputError`)."""


class OutputError(InputError):
    """An output cannot be written where the user asked (full disk, read-only folder, a directory in the way,
    the output is one of the inputs). The message names the output."""


def write_failure(path: str | Path, e: OSError) -> OutputError:
    """The :class:`OutputError` for an ``OSError`` met while writing ``path``."""
    why = e.strerror or str(e)
    if e.errno == errno.ENOSPC:
        why = "no space left on the device (the previous file, if any, is kept)"
    return OutputError(f"{path}: cannot write: {why}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for a library to write (PIL, pyarrow, reportlab); on success it is
    fsynced and renamed over ``path``, on error removed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_path(d / "x.txt") as tmp:
    ...     _ = tmp.write_text("hi")
    >>> (d / "x.txt").read_text(), sorted(p.name for p in d.iterdir())
    ('hi', ['x.txt'])
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name for this output")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        if e.errno in WRITE_ERRNOS:
            raise write_failure(path, e) from None
        raise
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in WRITE_ERRNOS:
            raise write_failure(path, e) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 1) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    return atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------- inputs vs outputs
def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def refuse_output_over_inputs(out: str | Path, inputs: Iterable[str | Path | None], flag: str = "--out") -> None:
    """Raise :class:`OutputError` when the output file ``out`` is one of ``inputs`` (the same file, however it is
    spelled: ``os.path.samefile``), or is a directory. Writing it would replace an input with the results."""
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{out}: {flag} is a directory; give a file name for this output")
    for inp in inputs:
        if inp is not None and out.exists() and _same(out, Path(inp)):
            raise OutputError(
                f"{out}: {flag} is the input {inp}; writing it would replace the input with the results: "
                "give another output file"
            )


def refuse_output_dir_over_inputs(out: str | Path, inputs: Iterable[str | Path | None], flag: str = "--out") -> None:
    """Raise :class:`OutputError` when the output folder ``out`` is a file, or is or holds one of ``inputs``."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: {flag} is an existing file; this output is a folder: give a folder name")
    if not out.is_dir():
        return
    real = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        p = Path(inp).resolve()
        if p == real or real in p.parents:
            raise OutputError(
                f"{out}: {flag} holds the input {inp}; writing the folder would replace it: give another folder"
            )


@contextlib.contextmanager
def atomic_dir(path: str | Path, owned: Iterable[str] = (), flag: str = "--out") -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path`` to build an output folder in; on success it replaces
    ``path`` as a whole (no stale file of an earlier run survives, and a reader or a killed run never sees new
    files beside old ones), on error it is removed and ``path`` is left as it was.

    ``owned``: the file and folder names this command writes. An existing ``path`` holding anything else is refused
    (:class:`OutputError`), so a folder of the user's own files is never swapped away. The swap is two renames;
    a crash between them leaves the previous folder as ``.NAME.old-*`` beside it."""
    path = Path(path)
    owned = set(owned)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: {flag} is an existing file; this output is a folder: give a folder name")
    if path.is_dir():
        foreign = sorted(p.name for p in path.iterdir() if p.name not in owned)
        if foreign:
            raise OutputError(
                f"{path}: {flag} folder holds files this command did not write ({', '.join(foreign[:3])}"
                f"{', ...' if len(foreign) > 3 else ''}); it replaces the whole folder: give a new or its own folder"
            )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    except OSError as e:
        if e.errno in WRITE_ERRNOS:
            raise write_failure(path, e) from None
        raise
    old: Path | None = None
    try:
        try:
            yield tmp
        except OutputError as e:  # name the output the user gave, not the temporary folder
            raise OutputError(str(e).replace(str(tmp), str(path))) from None
        except OSError as e:
            if e.errno in WRITE_ERRNOS:
                raise write_failure(path, e) from None
            raise
        if path.is_dir():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / "prev")
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "prev").is_dir() and not path.exists():
            os.replace(old / "prev", path)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- JSONL reading
def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSONL file (a UTF-8 byte-order mark is
    allowed). A missing file, a folder, bytes that are not UTF-8, a line that is not JSON or not an object raise
    :class:`~data_prep.types.InputError` naming the file and line."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file")
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    with f:
        for lineno, raw in enumerate(f, 1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(
                    f"{path}:{lineno}: not UTF-8 text (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise InputError(f"{path}:{lineno}: JSON nested too deeply") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


# ---------------------------------------------------------------------------------------------- option types
def finite_float(text: str) -> float:
    """argparse type: a finite number (``nan``, ``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def int_in_range(lo: int, hi: int):
    """argparse type: an integer in ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer from {lo} to {hi}, got {value}")
        return value

    parse.__name__ = f"integer {lo}..{hi}"
    return parse
