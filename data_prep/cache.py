"""The per-document cache: ``CACHE/<doc_key>/{manifest.json, blocks.jsonl, embeddings.npy}``.

* ``doc_key`` is derived from the PDF's sha256, the parser name and version, and the encoder fingerprint, so it
  changes whenever any of them changes.
* A build writes into a temporary directory next to the target and renames it into place (atomic on POSIX);
  an exclusive lock per ``doc_key`` keeps two processes from building the same document at once.
* ``manifest.json`` is written last and records the number of blocks, the sha256 of ``blocks.jsonl`` and of
  ``embeddings.npy``, the shape of the embeddings, the page count and sizes, and a sha256 of its own content fields
  (``content_sha256``). :func:`load_cache` checks them all, and that the embeddings are finite and every block lies
  on a page the document has, so a truncated, edited, reordered or mismatched cache is reported
  (:class:`CacheError`) and never silently used. ``build_cache`` (without ``force``) rebuilds such an entry.
* ``embeddings.npy`` is float16, row ``i`` = block ``i``, L2-normalised, memory-mapped on load.
* A valid entry is read without writing anything, so a read-only cache serves its entries. A build that fails
  (bad input, a full disk) leaves no entry, temp dir or lock file behind; a full disk is one line
  (:class:`~core.io.OutputError`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import geometry
from core.errors import InputError
from core.geometry import clip_bbox
from core.io import WRITE_ERRNOS, OutputError, check_regular, decode_text, loads_record, read_bytes, read_json
from data_prep.document import Document, sha256_file
from data_prep.encoders import l2_normalize
from data_prep.types import Block
from data_prep.validate import field_float, field_int, field_str

CACHE_FORMAT = 1
"""Bumped when the on-disk layout changes; part of the key."""

BBOX_TOLERANCE = geometry.BBOX_TOLERANCE
"""Points a parser's bbox may exceed the page before it is an error (see :mod:`core.geometry`)."""


class CacheError(InputError):
    """A cache entry is missing, truncated or does not match its manifest."""


_MANIFEST_KEYS = ("format", "doc_key", "pdf_sha256", "pdf_path", "n_pages", "page_sizes", "parser", "encoder")
_MANIFEST_KEYS += ("n_blocks", "blocks_sha256", "created", "content_sha256")

_CONTENT_KEYS = ("format", "doc_key", "pdf_sha256", "n_pages", "page_sizes", "text_fingerprint", "parser", "encoder")
_CONTENT_KEYS += ("n_blocks", "blocks_sha256", "embeddings_sha256")
"""Manifest fields covered by ``content_sha256``: everything that describes the entry's content (not ``pdf_path``
or ``created``, which say where and when)."""


def manifest_content_sha256(manifest: dict) -> str:
    """sha256 of the manifest's content fields (:data:`_CONTENT_KEYS`), canonical JSON."""
    content = {k: manifest.get(k) for k in _CONTENT_KEYS}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def make_doc_key(pdf_sha256: str, parser_name: str, parser_version: str, encoder_fingerprint: str | None) -> str:
    """``<first 16 hex of the PDF sha256>-<12 hex of the settings hash>``; readable and collision-safe."""
    settings = json.dumps([CACHE_FORMAT, parser_name, parser_version, encoder_fingerprint or "none"])
    return f"{pdf_sha256[:16]}-{hashlib.sha256(settings.encode()).hexdigest()[:12]}"


@dataclass
class CachedDoc:
    """A loaded cache entry. ``embeddings`` is a read-only float16 memmap (or array), or None without encoder."""

    key: str
    path: Path
    manifest: dict
    blocks: list[Block]
    embeddings: np.ndarray | None

    @property
    def n_pages(self) -> int:
        return int(self.manifest["n_pages"])

    @property
    def page_sizes(self) -> list[tuple[float, float]]:
        """Per page ``(width, height)`` in points (display orientation); index = page - 1."""
        return [(float(w), float(h)) for w, h in self.manifest["page_sizes"]]

    @property
    def pdf_path(self) -> Path:
        return Path(self.manifest["pdf_path"])

    def block_ids_on_pages(self, pages: tuple[int, int] | list[int] | None) -> np.ndarray:
        """Ids of blocks whose page lies in the inclusive 1-based range ``(first, last)``; all when None."""
        if pages is None:
            return np.arange(len(self.blocks))
        first, last = int(pages[0]), int(pages[1])
        return np.array([b.block_id for b in self.blocks if first <= b.page <= last], dtype=np.int64)

    def open_pdf(self) -> Document:
        """Open the cached document's PDF, checking that its bytes are still the ones that were parsed."""
        doc = Document.open(self.pdf_path)
        if doc.sha256 != self.manifest["pdf_sha256"]:
            doc.close()
            raise CacheError(f"{self.pdf_path}: the PDF changed since cache {self.key} was built; rebuild the cache")
        if doc.n_pages != self.n_pages or [(round(w, 3), round(h, 3)) for w, h in doc.page_sizes] != self.page_sizes:
            doc.close()
            raise CacheError(
                f"{self.path / 'manifest.json'}: says {self.n_pages} pages but {self.pdf_path} has {doc.n_pages} "
                "(or other page sizes); the manifest was edited: rebuild the cache"
            )
        return doc


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_writable(cache_dir: Path) -> None:
    if cache_dir.exists() and not cache_dir.is_dir():
        raise InputError(f"cache dir {cache_dir} is not writable: it is a file, not a folder")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-"):
            pass
    except OSError as e:
        raise InputError(f"cache dir {cache_dir} is not writable ({e.strerror or e})") from None


@contextlib.contextmanager
def _lock(cache_dir: Path, key: str) -> Iterator[None]:
    """Hold the exclusive build lock of ``key``: ``cache_dir/.locks/<key>.lock``, removed again on release (also
    when the build fails), so no empty lock file is left behind. A waiter that wakes up holding a lock file the
    previous holder has since removed tries again on the current one, so two builders never both hold it."""
    lock_dir = cache_dir / ".locks"
    path = lock_dir / f"{key}.lock"
    if lock_dir.exists() and not lock_dir.is_dir():
        raise OutputError(f"{lock_dir}: the cache's lock folder is a file; remove it")
    while True:
        try:
            lock_dir.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            continue  # the folder was removed by a releasing holder between mkdir and open
        except OSError as e:
            if e.errno not in WRITE_ERRNOS:
                raise
            raise OutputError(f"{cache_dir}: cannot create the lock file {path.name}: {_why(e)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            held = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        if st is not None and (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            break
        os.close(fd)  # the previous holder removed this file on release: lock the current one
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            lock_dir.rmdir()  # only when empty: another builder's lock file keeps it
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _remove_stale(cache_dir: Path, key: str) -> None:
    """Remove temp and trash dirs of ``key`` left by a killed build. Only called under the key's lock, and temp
    dirs are only made under it, so none of them belongs to a live build."""
    for pattern in (f".tmp-{key}-*", f".trash-{key}-*"):
        for p in cache_dir.glob(pattern):
            shutil.rmtree(p, ignore_errors=True)


def _entry_matches(manifest: dict, expected: dict) -> bool:
    """Whether an existing entry was built from the same PDF bytes, parser version and encoder (the key holds only
    prefixes of their hashes)."""
    enc = manifest.get("encoder") or {}
    return (
        manifest.get("pdf_sha256") == expected["pdf_sha256"]
        and manifest.get("parser") == expected["parser"]
        and enc.get("fingerprint") == expected["encoder_fingerprint"]
    )


def validate_blocks(blocks: list[Block], page_sizes: list[tuple[float, float]], source: str) -> list[Block]:
    """Check ids, pages and boxes against the document; clip boxes that overshoot by rounding."""
    out = []
    n_pages = len(page_sizes)
    for i, b in enumerate(blocks):
        if b.block_id != i:
            raise InputError(f"{source}: block ids must be 0..N-1 in order (block {i} has id {b.block_id})")
        if not 1 <= b.page <= n_pages:
            raise InputError(f"{source}: block {i} is on page {b.page} but the PDF has {n_pages} pages")
        w, h = page_sizes[b.page - 1]
        # The shared rule (core.geometry); a box left without area keeps its place here (ids are rows).
        bbox = geometry.page_box(b.bbox, b.page, (w, h), source, f"block {i}") or clip_bbox(b.bbox, w, h)
        if b.parent is not None and not 0 <= b.parent < len(blocks):
            raise InputError(f"{source}: block {i} has parent {b.parent}, which is not a block id")
        out.append(Block(b.block_id, b.page, bbox, b.type, b.text, b.parent))
    return out


TEXT_BLOCK_TYPES = frozenset(
    {"title", "text", "list", "table_caption", "table_footnote", "figure_caption", "header", "footer"}
)
"""Block types whose region shows text when the page is rendered."""


def warn_blank_text(doc: Document, blocks: list[Block]) -> list[int]:
    """Warn (one warning per page) when text blocks render blank: on pages whose text uses a font that is neither
    embedded nor standard (:meth:`Document.unembedded_fonts`; only there can a renderer lack the glyphs), each text
    block's region of the rendered page is checked for ink (:meth:`Document.blank_regions`). Page images and crops
    of such blocks, which a model or a judge sees, show no text, though the blocks have it. Returns those pages."""
    by_page: dict[int, list[Block]] = {}
    for b in blocks:
        if b.type in TEXT_BLOCK_TYPES and b.text.strip():
            by_page.setdefault(b.page, []).append(b)
    pages = []
    for page, items in sorted(by_page.items()):
        fonts = doc.unembedded_fonts(page)
        if not fonts:
            continue
        n_blank = sum(doc.blank_regions(page, [b.bbox for b in items]))
        if n_blank:
            pages.append(page)
            warnings.warn(
                f"{doc.path}: page {page}: {n_blank} of {len(items)} text blocks render blank (font not embedded: "
                f"{', '.join(sorted(fonts))}; no stand-in on this machine?): page images and crops show no text there",
                stacklevel=2,
            )
    return pages


def load_cache(cache_dir: str | Path, key: str, mmap: bool = True) -> CachedDoc:
    """Load and verify ``cache_dir/key``. Raises :class:`CacheError` when missing, truncated or inconsistent."""
    path = Path(cache_dir) / key
    manifest_path = path / "manifest.json"
    if manifest_path.exists() and not manifest_path.is_file():
        try:
            check_regular(manifest_path, "cache manifest")
        except InputError as e:
            raise CacheError(f"{manifest_path}: unreadable manifest ({e}); rebuild") from None
    if not manifest_path.is_file():
        raise CacheError(
            f"{path}: no cache entry for doc_key {key!r} (no manifest.json); build it with data_prep blocks"
        )
    try:
        manifest = read_json(manifest_path)
    except InputError as e:  # not JSON, numbers past the record bounds, not a regular file, not UTF-8
        raise CacheError(f"{manifest_path}: unreadable manifest ({e})") from None
    if not isinstance(manifest, dict):
        raise CacheError(f"{manifest_path}: manifest is not a JSON object; rebuild")
    missing = [k for k in _MANIFEST_KEYS if k not in manifest]
    if missing:
        raise CacheError(f"{manifest_path}: manifest lacks {', '.join(missing)}; rebuild")
    if manifest.get("doc_key") != key:
        raise CacheError(f"{manifest_path}: manifest is for {manifest.get('doc_key')!r}, not {key!r}")
    if manifest.get("format") != CACHE_FORMAT:
        raise CacheError(f"{manifest_path}: cache format {manifest.get('format')!r}, expected {CACHE_FORMAT}; rebuild")
    blocks_path = path / "blocks.jsonl"
    try:
        raw = read_bytes(blocks_path, "cache blocks")  # a regular file only: a FIFO here is never waited on
    except (OSError, InputError) as e:
        raise CacheError(f"{blocks_path}: unreadable ({getattr(e, 'strerror', None) or e}); rebuild") from None
    if _sha256_bytes(raw) != manifest.get("blocks_sha256"):
        raise CacheError(f"{blocks_path}: content does not match the manifest (truncated or edited); rebuild")
    blocks = read_block_records(raw, blocks_path)
    if len(blocks) != manifest.get("n_blocks"):
        raise CacheError(f"{blocks_path}: {len(blocks)} blocks, manifest says {manifest.get('n_blocks')}")
    embeddings = None
    if manifest.get("encoder"):
        emb_path = path / "embeddings.npy"
        try:
            check_regular(emb_path, "cache embeddings")  # np.load would wait on a FIFO forever
        except InputError as e:
            raise CacheError(f"{emb_path}: unreadable or truncated ({e}); rebuild") from None
        try:
            embeddings = np.load(emb_path, mmap_mode="r" if mmap else None)
        except (OSError, ValueError, EOFError) as e:
            why = "empty file" if isinstance(e, EOFError) else str(e)
            raise CacheError(f"{emb_path}: unreadable or truncated ({why}); rebuild") from None
        try:
            expected = (len(blocks), int(manifest["encoder"]["dim"]))
        except (KeyError, TypeError, ValueError):
            raise CacheError(f"{manifest_path}: encoder entry has no dim; rebuild") from None
        if embeddings.shape != expected or embeddings.dtype != np.float16:
            raise CacheError(f"{emb_path}: shape {embeddings.shape} {embeddings.dtype}, expected {expected} float16")
        if "embeddings_sha256" not in manifest:
            raise CacheError(f"{manifest_path}: manifest lacks embeddings_sha256 (an older entry); rebuild")
        try:
            emb_sha = sha256_file(emb_path)
        except OSError as e:
            raise CacheError(f"{emb_path}: unreadable ({e.strerror}); rebuild") from None
        if emb_sha != manifest["embeddings_sha256"]:
            raise CacheError(
                f"{emb_path}: content does not match the manifest (rewritten, reordered or damaged); rebuild"
            )
        if not np.isfinite(embeddings).all():
            bad = int((~np.isfinite(embeddings)).any(axis=1).sum())
            raise CacheError(f"{emb_path}: {bad} of {len(blocks)} rows hold NaN or infinite values; rebuild")
    _check_pages(manifest, blocks, manifest_path)
    if manifest.get("content_sha256") != manifest_content_sha256(manifest):
        raise CacheError(f"{manifest_path}: manifest content does not match its content_sha256 (edited); rebuild")
    return CachedDoc(key=key, path=path, manifest=manifest, blocks=blocks, embeddings=embeddings)


def block_from_record(d: dict, where: str) -> Block:
    """One line of ``blocks.jsonl`` (already parsed by :func:`core.io.loads_record`) as a :class:`Block`,
    every field through :mod:`data_prep.validate`: ``block_id``, ``page`` and ``parent`` are integers (a bool, a
    text such as ``"3"``, a fraction or NaN is refused: ``"page": true`` is not page 1), ``bbox`` four finite
    numbers, ``type`` and ``text`` strings. :class:`CacheError` names ``where`` (``FILE:LINE``) and the field.

    >>> block_from_record({"block_id": 0, "page": 1, "bbox": [0, 0, 1, 1], "type": "text", "text": "a"}, "b:1").page
    1
    >>> block_from_record({"block_id": "0", "page": 1, "bbox": [0, 0, 1, 1], "type": "text", "text": ""}, "b:1")
    Traceback (most recent call last):
    ...
    data_prep.cache.CacheError: b:1: field 'block_id' must be an integer, got str '0'; rebuild
    """
    try:
        block_id = field_int(d, "block_id", where, lo=0)
        page = field_int(d, "page", where, lo=1)
        parent = field_int(d, "parent", where, lo=0, default=None)
        bbox = d.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise InputError(f"{where}: field 'bbox' must be [x0, y0, x1, y1], got {str(bbox)[:60]}")
        coords = tuple(field_float({"bbox": v}, "bbox", where) for v in bbox)
        kind, text = field_str(d, "type", where), field_str(d, "text", where)
    except InputError as e:
        raise CacheError(f"{e}; rebuild") from None
    try:
        return Block(block_id=block_id, page=page, bbox=coords, type=kind, text=text, parent=parent)
    except ValueError as e:  # an unknown type, a reversed box
        raise CacheError(f"{where}: {e}; rebuild") from None


def read_block_records(raw: bytes, path: Path) -> list[Block]:
    """The blocks of a ``blocks.jsonl`` whose bytes are ``raw``: each line through the one record parser
    (:func:`core.io.loads_record`: numbers and nesting bounded) and :func:`block_from_record`; ids must be
    ``0..N-1`` in order (they are the rows of ``embeddings.npy``). :class:`CacheError` names ``path:line``."""
    try:
        text = decode_text(raw, str(path))
    except InputError as e:
        raise CacheError(f"{e}; rebuild") from None
    blocks: list[Block] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            d = loads_record(line, where)
        except InputError as e:
            raise CacheError(f"{e}; rebuild") from None
        if not isinstance(d, dict):
            raise CacheError(f"{where}: expected a JSON object (a block record), got {type(d).__name__}; rebuild")
        b = block_from_record(d, where)
        if b.block_id != len(blocks):
            raise CacheError(f"{where}: field 'block_id' is {b.block_id}, expected {len(blocks)} (ids are 0..N-1 "
                             "in order: the rows of embeddings.npy); rebuild")  # fmt: skip
        blocks.append(b)
    for b in blocks:
        if b.parent is not None and b.parent >= len(blocks):
            raise CacheError(f"{path}: block {b.block_id}: field 'parent' = {b.parent} is not a block id; rebuild")
    return blocks


def _check_pages(manifest: dict, blocks: list[Block], manifest_path: Path) -> None:
    """The page count and sizes agree with each other and with the blocks (every block on a page that exists)."""
    n_pages, sizes = manifest.get("n_pages"), manifest.get("page_sizes")
    if not isinstance(n_pages, int) or isinstance(n_pages, bool) or n_pages < 1:
        raise CacheError(f"{manifest_path}: n_pages {n_pages!r} is not a positive page count; rebuild")
    if not isinstance(sizes, list) or len(sizes) != n_pages:
        n_sizes = len(sizes) if isinstance(sizes, list) else "no"
        raise CacheError(f"{manifest_path}: n_pages is {n_pages} but it lists {n_sizes} page sizes (edited); rebuild")
    for i, wh in enumerate(sizes, 1):
        ok = isinstance(wh, list) and len(wh) == 2 and all(isinstance(v, int | float) for v in wh)
        if not ok or not all(math.isfinite(v) and v > 0 for v in wh):
            raise CacheError(f"{manifest_path}: page {i} size {wh!r} is not two positive numbers; rebuild")
    last = max((b.page for b in blocks), default=0)
    if last > n_pages:
        raise CacheError(
            f"{manifest_path}: n_pages is {n_pages} but blocks.jsonl has blocks on page {last} (edited); rebuild"
        )


def build_cache(
    pdf: str | Path,
    parser,
    encoder,
    cache_dir: str | Path,
    parser_output: str | Path | None = None,
    force: bool = False,
) -> CachedDoc:
    """Parse ``pdf`` (or convert ``parser_output``), embed its blocks, and store them atomically.

    Returns the existing entry when a valid one is present (unless ``force``). ``parser`` and ``encoder`` are
    instances from :func:`data_prep.parsers.get_parser` / :func:`data_prep.encoders.get_encoder`; ``encoder``
    may be None (blocks only)."""
    cache_dir = Path(cache_dir)
    pdf = Path(pdf)
    with Document.open(pdf) as doc:
        enc_fp = encoder.fingerprint() if encoder is not None else None
        parser_version = parser.version()
        if parser_output is not None:
            # Converting a given output file: the key must follow that file, not only the parser code.
            parser_output = Path(parser_output)
            if not parser_output.is_file():
                raise InputError(f"{parser_output}: parser output file not found")
            parser_version += f"+output:{sha256_file(parser_output)[:16]}"
        key = make_doc_key(doc.sha256, parser.name, parser_version, enc_fp)
        expected = {
            "pdf_sha256": doc.sha256,
            "parser": {"name": parser.name, "version": parser_version},
            "encoder_fingerprint": enc_fp,
        }
        if not force:
            # A valid entry is served without writing anything (no lock: entries are never changed in place, and
            # one being replaced fails a check and takes the locked path below), so a read-only cache works.
            cached = _valid_entry(cache_dir, key, expected)
            if cached is not None:
                return cached
        _check_writable(cache_dir)
        with _lock(cache_dir, key):
            _remove_stale(cache_dir, key)
            if not force:
                cached = _valid_entry(cache_dir, key, expected)  # built by another process meanwhile
                if cached is not None:
                    return cached
            return _build_locked(doc, pdf, parser, encoder, cache_dir, parser_output, key, parser_version, enc_fp)


def _why(e: OSError) -> str:
    return "no space left on the device" if e.errno == errno.ENOSPC else (e.strerror or str(e))


def _write_error(cache_dir: Path, pdf: Path, e: OSError) -> OutputError:
    return OutputError(
        f"{cache_dir}: cannot write the cache entry of {pdf}: {_why(e)}; nothing was changed in the cache"
    )


def _valid_entry(cache_dir: Path, key: str, expected: dict) -> CachedDoc | None:
    """The entry ``key`` when it is present, passes every check of :func:`load_cache` and was built from the same
    PDF, parser and encoder; None otherwise (to be rebuilt)."""
    if not (cache_dir / key).exists():
        return None
    try:
        cached = load_cache(cache_dir, key)
    except CacheError:
        return None  # damaged or edited: rebuilt by the caller
    return cached if _entry_matches(cached.manifest, expected) else None


def _build_locked(doc, pdf, parser, encoder, cache_dir, parser_output, key, parser_version, enc_fp) -> CachedDoc:
    """Parse, embed and write the entry ``key`` (the caller holds its lock)."""
    target = cache_dir / key
    source = str(parser_output) if parser_output else f"{parser.name} parse of {pdf}"
    blocks = parser.parse(doc, Path(parser_output) if parser_output else None)
    blocks = validate_blocks(blocks, doc.page_sizes, source)
    warn_blank_text(doc, blocks)
    emb = None
    if encoder is not None:
        emb = encoder.embed_blocks(doc, blocks) if blocks else np.zeros((0, encoder.dim), np.float32)
        emb = np.asarray(emb, dtype=np.float32)
        if emb.shape != (len(blocks), encoder.dim):
            raise RuntimeError(f"encoder {encoder.name} returned {emb.shape}, expected {(len(blocks), encoder.dim)}")
        if not np.all(np.isfinite(emb)):
            raise RuntimeError(f"encoder {encoder.name} returned non-finite embeddings for {pdf}")
        emb = l2_normalize(emb)  # rows stay unit-norm whatever the encoder did
    blocks_bytes = "".join(json.dumps(b.to_json(), ensure_ascii=False) + "\n" for b in blocks).encode()
    emb_bytes = None
    if emb is not None:
        buf = io.BytesIO()
        np.save(buf, emb.astype(np.float16))
        emb_bytes = buf.getvalue()
    manifest = {
        "format": CACHE_FORMAT,
        "doc_key": key,
        "pdf_sha256": doc.sha256,
        "pdf_path": str(pdf.resolve()),
        "n_pages": doc.n_pages,
        "page_sizes": [[round(w, 3), round(h, 3)] for w, h in doc.page_sizes],
        "text_fingerprint": doc.text_fingerprint(),
        "parser": {"name": parser.name, "version": parser_version},
        "encoder": None if encoder is None else {"name": encoder.name, "dim": encoder.dim, "fingerprint": enc_fp},
        "n_blocks": len(blocks),
        "blocks_sha256": _sha256_bytes(blocks_bytes),
        "embeddings_sha256": None if emb_bytes is None else _sha256_bytes(emb_bytes),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    manifest["content_sha256"] = manifest_content_sha256(manifest)
    tmp = cache_dir / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir()
        try:
            _write_file(tmp / "blocks.jsonl", blocks_bytes)
            if emb_bytes is not None:
                _write_file(tmp / "embeddings.npy", emb_bytes)
            _write_file(tmp / "manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False).encode())
            _fsync_dir(tmp)
            if target.exists():
                trash = cache_dir / f".trash-{key}-{uuid.uuid4().hex[:8]}"
                os.rename(target, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.rename(tmp, target)
            _fsync_dir(cache_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except OSError as e:
        if e.errno not in WRITE_ERRNOS:
            raise
        raise _write_error(cache_dir, pdf, e) from None
    return load_cache(cache_dir, key)


def list_cache(cache_dir: str | Path) -> list[str]:
    """doc_keys of the complete entries in ``cache_dir``."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return []
    return sorted(
        p.name for p in cache_dir.iterdir() if not p.name.startswith(".") and (p / "manifest.json").is_file()
    )


class DocCache:
    """Maps a gold ``doc_key`` to a cache entry of ``cache_dir`` and keeps loaded entries.

    The one document lookup of every stage (the reward, LAT's reward, ``eval``, the CiteVQA builder).
    ``doc_key`` is tried as (1) a cache key (a folder of ``cache_dir``), (2) the stem of the cached PDF's file
    name (the verified release's ``pdf_stem``), (3) a prefix (>= 8 hex) of the PDF's sha256. ``parser`` /
    ``encoder`` (names) pick one entry when a PDF was cached with several settings. ``max_loaded``: keep at most
    this many entries loaded (least recently used dropped first); None keeps all. A ``doc_key`` with no entry
    raises :class:`CacheError`."""

    def __init__(
        self,
        cache_dir: str | Path,
        parser: str | None = None,
        encoder: str | None = None,
        max_loaded: int | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        if not self.cache_dir.is_dir():
            raise InputError(f"{self.cache_dir}: cache directory not found")
        self.parser = parser
        self.encoder = encoder
        self.max_loaded = max_loaded
        self._manifests: dict[str, dict] | None = None
        self._loaded: OrderedDict[str, CachedDoc] = OrderedDict()
        self._keys: dict[str, str] = {}

    def _all_manifests(self) -> dict[str, dict]:
        if self._manifests is None:
            self._manifests = {}
            for p in sorted(self.cache_dir.iterdir()):
                mf = p / "manifest.json"
                if p.name.startswith(".") or not mf.is_file():
                    continue
                try:
                    m = read_json(mf)
                except InputError:
                    continue  # load_cache reports it if this entry is ever asked for
                if isinstance(m, dict):
                    self._manifests[p.name] = m
        return self._manifests

    def _wanted(self, m: dict) -> bool:
        if self.parser and (m.get("parser") or {}).get("name") != self.parser:
            return False
        return not (self.encoder and (m.get("encoder") or {}).get("name") != self.encoder)

    def key_for(self, doc_key: str) -> str:
        """The cache key of ``doc_key`` (InputError when none or several match)."""
        if doc_key in self._keys:
            return self._keys[doc_key]
        if (self.cache_dir / doc_key / "manifest.json").is_file():
            self._keys[doc_key] = doc_key
            return doc_key
        manifests = self._all_manifests()
        hits = [
            k
            for k, m in manifests.items()
            if self._wanted(m)
            and (
                Path(str(m.get("pdf_path", ""))).stem == doc_key
                or (len(doc_key) >= 8 and str(m.get("pdf_sha256", "")).startswith(doc_key.lower()))
            )
        ]
        if not hits:
            raise CacheError(
                f"{self.cache_dir / doc_key}: no cache entry for doc_key {doc_key!r} (no manifest.json, and no "
                "entry's PDF stem or sha256 prefix matches"
                + (f" with parser={self.parser!r}" if self.parser else "")
                + "); build it with `python -m data_prep blocks`"
            )
        if len(hits) > 1:
            desc = ", ".join(
                f"{k} ({manifests[k]['parser']['name']}/{(manifests[k].get('encoder') or {}).get('name')})"
                for k in hits
            )
            raise InputError(f"doc_key {doc_key!r} matches {len(hits)} cache entries: {desc}; pass --parser/--encoder")
        self._keys[doc_key] = hits[0]
        return hits[0]

    def get(self, doc_key: str) -> CachedDoc:
        key = self.key_for(doc_key)
        cached = self._loaded.get(key)
        if cached is not None:
            self._loaded.move_to_end(key)
            return cached
        cached = self._loaded[key] = load_cache(self.cache_dir, key)
        while self.max_loaded is not None and len(self._loaded) > self.max_loaded:
            self._loaded.popitem(last=False)
        return cached
