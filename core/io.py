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
  :class:`~core.errors.InputError` naming the file and line.
* Command-line value types that refuse NaN, infinities and out-of-range numbers live in :mod:`data_prep.validate`.
* :func:`loads_record`: the one JSON parser of records: integers of more than :data:`MAX_INT_DIGITS` digits,
  numbers that overflow to infinity and ``NaN``/``Infinity`` are refused (:class:`InputError` naming where), so no
  later ``int()``/``float()``/``math.isfinite`` meets a number Python cannot convert.
* :func:`open_regular` / :func:`read_bytes` / :func:`read_text` / :func:`read_json`: the one file reader; anything
  but a regular file (a FIFO, a device, a folder) is refused before it is opened (a FIFO is never waited on), and
  bytes that are not UTF-8 are one clear error.
* :func:`refuse_special_output`: an output path that exists and is not a regular file (``/dev/null``, a FIFO) is
  refused, never replaced; :func:`refuse_output_inside` refuses an output inside a folder it must not write into
  (a cache, a run folder).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import functools
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from core.errors import InputError

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


@functools.cache
def _umask() -> int:
    """This process's umask, read once (by setting it and setting it back: the only way the OS offers; once, so no
    file another thread creates meanwhile sees the momentary value)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_mode(path: Path, folder: bool = False) -> None:
    """Give a file or folder made by ``tempfile`` (always 0600/0700) the mode a plain ``open``/``mkdir`` would have
    given it under this process's umask, so on a shared cluster a run's results are as readable as the user's
    umask says (a group's members read them), not private to the user whatever the umask."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


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
    refuse_special_output(path)
    refuse_cache_entry(path.parent, path)
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
        _open_mode(tmp)
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
    """Write ``text`` as UTF-8; a lone surrogate (from data decoded with ``surrogateescape`` or a JSON ``\\ud800``)
    is written as U+FFFD instead of failing the whole output."""
    return atomic_write_bytes(path, text.encode("utf-8", errors="replace"))


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
    refuse_special_output(out, flag)
    for inp in inputs:
        if inp is not None and out.exists() and _same(out, Path(inp)):
            raise OutputError(
                f"{out}: {flag} is the input {inp}; writing it would replace the input with the results: "
                "give another output file"
            )


def refuse_special_output(out: str | Path, flag: str = "--out") -> None:
    """Raise :class:`OutputError` when ``out`` exists and is not a regular file or a folder (a character device
    such as ``/dev/null`` or ``/dev/full``, a FIFO, a socket): an atomic write would replace it with a file."""
    out = Path(out)
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise OutputError(
            f"{out}: {flag} is {_kind(mode)}, not a regular file; it is never replaced: give a file name"
        )


def is_cache_entry(folder: str | Path) -> bool:
    """Whether ``folder`` is an entry of a block cache (it holds ``manifest.json`` and ``blocks.jsonl``)."""
    folder = Path(folder)
    return (folder / "manifest.json").is_file() and (folder / "blocks.jsonl").is_file()


def refuse_cache_entry(folder: str | Path, out: str | Path, flag: str = "--out") -> None:
    """Raise :class:`OutputError` when ``folder`` (where ``out`` would be written) is a block-cache entry: an
    output there would replace or sit among the cache's own files, whatever ``--cache-dir`` the command was
    given. The cache writes its entries itself, never through this module's writers."""
    if is_cache_entry(folder):
        raise OutputError(f"{out}: {flag} is inside the cache entry {folder}; writing it would damage the cache: "
                          "give a path outside the cache folder")  # fmt: skip


def refuse_output_inside(
    out: str | Path, folders: Iterable[str | Path | None], what: str, flag: str = "--out"
) -> None:
    """Raise :class:`OutputError` when ``out`` is, or lies inside, one of ``folders`` (``what`` names them: "the
    cache folder --cache-dir", "the run folder"); writing there would replace a file the command must not touch."""
    out_real = Path(os.path.realpath(out))
    for folder in folders:
        if folder is None:
            continue
        f = Path(os.path.realpath(folder))
        if out_real == f or f in out_real.parents:
            raise OutputError(f"{out}: {flag} is inside {what} {folder}; writing it would replace its files: "
                              "give a path outside it")  # fmt: skip


RUN_OWNED = ("segments", "checkpoints", "logs", "samples")
"""Folders of a run (or metrics) folder that its jobs write: a page is never written into them."""


def refuse_page_output(out: str | Path, run_dir: str | Path, flag: str = "--out") -> None:
    """The one rule for a page a command renders from a run (the curves, the samples browser): ``out`` is a new or
    existing ``.html`` file, not a device, FIFO or folder, and not inside the folders the run's jobs write
    (:data:`RUN_OWNED`): so it can never replace the run log, a segment file, a batch, a crop, a checkpoint or a
    recipe. Raises :class:`OutputError` naming ``flag`` and what to give instead."""
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{out}: {flag} is a directory; give a file name ending in .html")
    refuse_special_output(out, flag)
    if out.suffix.lower() not in (".html", ".htm"):
        raise OutputError(f"{out}: {flag} must be an .html file: this command writes a page and never replaces "
                          "another kind of file (a file of the run folder, a recipe)")  # fmt: skip
    run = Path(run_dir)
    refuse_output_inside(out, [run / d for d in RUN_OWNED], "the folder its run writes", flag)


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
    refuse_cache_entry(path, path, flag)
    refuse_cache_entry(path.parent, path, flag)
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
        _open_mode(tmp, folder=True)
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


# ---------------------------------------------------------------------------------------------- file reading
MAX_INT_DIGITS = 300
"""A JSON integer of more digits than this is refused: 309 digits already overflow a float (``math.isfinite``
raises ``OverflowError``) and 4,300 exceed Python's ``int()`` limit. No field of this project needs more."""
MAX_JSON_DEPTH = 200
"""JSON nested deeper than this is refused (Python's parser would raise ``RecursionError`` near 1,000)."""
MAX_YAML_DEPTH = 64
"""YAML nested deeper than this is refused."""
MAX_YAML_NODES = 100_000
"""A YAML document that expands (aliases included) to more nodes than this is refused: an alias bomb."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str | Path, what: str = "") -> Path:
    """``path`` if it is a regular file (links followed); otherwise :class:`InputError` (missing, a folder, a FIFO,
    a device). ``what`` names the input in the message ("--gold")."""
    path = Path(path)
    label = f"{path}" + (f" ({what})" if what else "")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{label}: is {_kind(mode)}, not a regular file")
    return path


def open_regular(path: str | Path, what: str = ""):
    """Open a regular file for binary reading. A FIFO is opened with ``O_NONBLOCK`` and checked on the open
    descriptor too (no wait for a writer that never comes, and no race between the check and the open)."""
    path = check_regular(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{path}: is {_kind(mode)}, not a regular file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: str | Path, what: str = "") -> bytes:
    """The bytes of a regular file (:func:`open_regular`)."""
    with open_regular(path, what) as f:
        try:
            return f.read()
        except OSError as e:
            raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


def decode_text(data: bytes, where: str) -> str:
    """UTF-8 bytes (a byte-order mark allowed) as text; other bytes are one :class:`InputError` naming ``where``
    and the line."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(
            f"{where}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); is this a text file?"
        ) from None


def read_text(path: str | Path, what: str = "") -> str:
    """A regular file's UTF-8 text (:func:`read_bytes`, :func:`decode_text`)."""
    return decode_text(read_bytes(path, what), str(path))


def _parse_int(where: str):
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise InputError(f"{where}: an integer of {len(digits.lstrip('-'))} digits (more than {MAX_INT_DIGITS})")
        return int(digits)

    return parse


def _parse_float(where: str):
    def parse(text: str) -> float:
        if len(text) > MAX_INT_DIGITS + 40:
            raise InputError(f"{where}: a number of {len(text)} characters (more than {MAX_INT_DIGITS + 40})")
        value = float(text)
        if not math.isfinite(value):
            raise InputError(f"{where}: the number {text[:40]} is too large (not a finite number)")
        return value

    return parse


def _parse_constant(where: str):
    def parse(name: str):
        raise InputError(f"{where}: {name} is not a finite number (NaN and infinities are refused)")

    return parse


def _depth_ok(text: str, limit: int) -> bool:
    """Whether ``text``'s brackets nest at most ``limit`` deep (cheap upper bound: strings are not skipped, so
    brackets inside strings count; only texts over the limit are scanned exactly)."""
    if text.count("[") + text.count("{") <= limit:
        return True
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


class NotJSONError(InputError):
    """:func:`loads_record`'s error for text that is no JSON at all (as opposed to JSON it refuses: a number past its
    bounds, NaN, nesting too deep); a caller that also takes plain text tells the two apart by this type."""


def loads_record(text: str, where: str) -> Any:
    """Parse one JSON value of a record (a JSONL line, a JSON file, a judge reply) with bounded numbers: integers
    of more than :data:`MAX_INT_DIGITS` digits, floats that overflow, ``NaN`` and ``Infinity`` raise
    :class:`InputError` naming ``where`` (``file:line``); so does bad JSON and nesting deeper than
    :data:`MAX_JSON_DEPTH`.

    >>> loads_record('{"page": 3, "x": 1.5}', "f:1")
    {'page': 3, 'x': 1.5}
    >>> loads_record('{"page": NaN}', "f:1")
    Traceback (most recent call last):
    ...
    core.errors.InputError: f:1: NaN is not a finite number (NaN and infinities are refused)
    """
    if not _depth_ok(text, MAX_JSON_DEPTH):
        raise InputError(f"{where}: JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(
            text, parse_int=_parse_int(where), parse_float=_parse_float(where), parse_constant=_parse_constant(where)
        )
    except json.JSONDecodeError as e:
        raise NotJSONError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise InputError(f"{where}: JSON nested too deeply") from None


def read_json(path: str | Path, what: str = "") -> Any:
    """A regular file's JSON value through :func:`loads_record` (one clear error for every kind of damage)."""
    return loads_record(read_text(path, what), str(path))


def read_json_object(path: str | Path, what: str = "") -> dict:
    """A regular file's JSON object (:func:`read_json`); anything else (an array, a number, a string) is one
    :class:`InputError` naming the file."""
    value = read_json(path, what)
    if not isinstance(value, dict):
        raise InputError(f"{path}{f' ({what})' if what else ''}: expected a JSON object, got {type(value).__name__}")
    return value


def safe_yaml(text: str, where: str, max_depth: int = MAX_YAML_DEPTH, max_nodes: int = MAX_YAML_NODES) -> Any:
    """The one YAML loader: ``yaml.safe_load`` of ``text`` that refuses (:class:`~core.errors.InputError` naming ``where``)
    YAML that does not parse, nesting deeper than ``max_depth`` and a document that expands (each use of an alias
    counted) to more than ``max_nodes`` nodes: an alias bomb is refused before it is built.

    >>> safe_yaml("a: &x [1, 2]\\nb: *x", "r.yaml")
    {'a': [1, 2], 'b': [1, 2]}
    """
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply") from None
    if node is None:
        return None
    # count nodes as they would be expanded; memoise per node the expanded size
    sizes: dict[int, int] = {}
    stack = [(node, 1, False)]
    while stack:
        n, depth, done = stack.pop()
        if depth > max_depth:
            raise InputError(f"{where}: YAML nested more than {max_depth} deep")
        if id(n) in sizes and not done:
            continue
        children = []
        if isinstance(n, yaml.SequenceNode):
            children = list(n.value)
        elif isinstance(n, yaml.MappingNode):
            children = [c for kv in n.value for c in kv]
        if not done and children:
            stack.append((n, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        if total > max_nodes:
            raise InputError(f"{where}: YAML expands to more than {max_nodes} nodes (an alias bomb?)")
        sizes[id(n)] = total
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{where}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def load_yaml_text(text: str, where: str) -> Any:
    """:func:`safe_yaml` with this module's bounds (nesting deeper than :data:`MAX_YAML_DEPTH`, documents expanding,
    aliases counted each time they are used, to more than :data:`MAX_YAML_NODES` nodes are refused)."""
    return safe_yaml(text, where, max_depth=MAX_YAML_DEPTH, max_nodes=MAX_YAML_NODES)


def read_yaml(path: str | Path, what: str = "") -> Any:
    """A regular file's YAML (:func:`read_text`, :func:`load_yaml_text`)."""
    return load_yaml_text(read_text(path, what), str(path))


def safe_component(name: object, what: str = "a name") -> str:
    """``name`` (from data: a ``doc_no``, a key) as one path component: refused (:class:`InputError`) when empty,
    ``.``/``..``, holding a path separator or a NUL, or longer than 200 characters.

    >>> safe_component("4001"), safe_component("a b-1.pdf")
    ('4001', 'a b-1.pdf')
    """
    s = str(name)
    if (not s or s in (".", "..") or "/" in s or "\\" in s or "\0" in s or len(s) > 200
            or any(ord(c) < 32 for c in s)):  # fmt: skip
        raise InputError(f"{what} {s[:80]!r} is not a safe file name (empty, '..', a separator or control character)")
    return s


# ---------------------------------------------------------------------------------------------- JSONL reading
def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line of a JSONL file (a UTF-8 byte-order mark is
    allowed). A missing file, a folder, bytes that are not UTF-8, a line that is not JSON or not an object raise
    :class:`~core.errors.InputError` naming the file and line."""
    path = Path(path)
    f = open_regular(path)
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
            obj = loads_record(line, f"{path}:{lineno}")
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj
