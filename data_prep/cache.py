"""The per-document cache: ``CACHE/<doc_key>/{manifest.json, blocks.jsonl, embeddings.npy}``.

* ``doc_key`` is derived from the PDF's sha256, the parser name and version, and the encoder fingerprint, so it
  changes whenever any of them changes.
* A build writes into a temporary directory next to the target and renames it into place (atomic on POSIX);
  an exclusive lock per ``doc_key`` keeps two processes from building the same document at once.
* ``manifest.json`` is written last and records the number of blocks, the sha256 of ``blocks.jsonl`` and the
  shape of ``embeddings.npy``; :func:`load_cache` checks all three, so a truncated or mismatched cache is
  reported (:class:`CacheError`) and never silently used. ``build_cache`` rebuilds such an entry.
* ``embeddings.npy`` is float16, row ``i`` = block ``i``, L2-normalised, memory-mapped on load.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data_prep.document import Document, sha256_file
from data_prep.encoders import l2_normalize
from data_prep.types import Block, InputError, clip_bbox

CACHE_FORMAT = 1
"""Bumped when the on-disk layout changes; part of the key."""

BBOX_TOLERANCE = 2.0
"""Points a parser's bbox may exceed the page before it is an error (parsers round outward)."""


class CacheError(InputError):
    """A cache entry is missing, truncated or does not match its manifest."""


_MANIFEST_KEYS = ("format", "doc_key", "pdf_sha256", "pdf_path", "n_pages", "page_sizes", "parser", "encoder")
_MANIFEST_KEYS += ("n_blocks", "blocks_sha256", "created")


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
        return doc


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_writable(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache_dir, prefix=".probe-"):
            pass
    except OSError as e:
        raise InputError(f"cache dir {cache_dir} is not writable ({e.strerror or e})") from None


@contextlib.contextmanager
def _lock(cache_dir: Path, key: str) -> Iterator[None]:
    lock_dir = cache_dir / ".locks"
    lock_dir.mkdir(exist_ok=True)
    with open(lock_dir / f"{key}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
        x0, y0, x1, y1 = b.bbox
        if x0 < -BBOX_TOLERANCE or y0 < -BBOX_TOLERANCE or x1 > w + BBOX_TOLERANCE or y1 > h + BBOX_TOLERANCE:
            raise InputError(
                f"{source}: block {i} bbox {b.bbox} lies outside page {b.page} ({w:.1f} x {h:.1f} pt); "
                "is the parser output from another PDF?"
            )
        if b.parent is not None and not 0 <= b.parent < len(blocks):
            raise InputError(f"{source}: block {i} has parent {b.parent}, which is not a block id")
        out.append(Block(b.block_id, b.page, clip_bbox(b.bbox, w, h), b.type, b.text, b.parent))
    return out


def load_cache(cache_dir: str | Path, key: str, mmap: bool = True) -> CachedDoc:
    """Load and verify ``cache_dir/key``. Raises :class:`CacheError` when missing, truncated or inconsistent."""
    path = Path(cache_dir) / key
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise CacheError(
            f"{path}: no cache entry for doc_key {key!r} (no manifest.json); build it with data_prep blocks"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, json.JSONDecodeError) as e:
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
        raw = blocks_path.read_bytes()
    except OSError as e:
        raise CacheError(f"{blocks_path}: unreadable ({e.strerror})") from None
    if _sha256_bytes(raw) != manifest.get("blocks_sha256"):
        raise CacheError(f"{blocks_path}: content does not match the manifest (truncated or edited); rebuild")
    try:
        blocks = [Block.from_json(json.loads(line)) for line in raw.decode("utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise CacheError(f"{blocks_path}: not valid block records ({e}); rebuild") from None
    if len(blocks) != manifest.get("n_blocks"):
        raise CacheError(f"{blocks_path}: {len(blocks)} blocks, manifest says {manifest.get('n_blocks')}")
    embeddings = None
    if manifest.get("encoder"):
        emb_path = path / "embeddings.npy"
        try:
            embeddings = np.load(emb_path, mmap_mode="r" if mmap else None)
        except (OSError, ValueError) as e:
            raise CacheError(f"{emb_path}: unreadable or truncated ({e}); rebuild") from None
        try:
            expected = (len(blocks), int(manifest["encoder"]["dim"]))
        except (KeyError, TypeError, ValueError):
            raise CacheError(f"{manifest_path}: encoder entry has no dim; rebuild") from None
        if embeddings.shape != expected or embeddings.dtype != np.float16:
            raise CacheError(f"{emb_path}: shape {embeddings.shape} {embeddings.dtype}, expected {expected} float16")
    return CachedDoc(key=key, path=path, manifest=manifest, blocks=blocks, embeddings=embeddings)


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
        _check_writable(cache_dir)
        enc_fp = encoder.fingerprint() if encoder is not None else None
        parser_version = parser.version()
        if parser_output is not None:
            # Converting a given output file: the key must follow that file, not only the parser code.
            parser_output = Path(parser_output)
            if not parser_output.is_file():
                raise InputError(f"{parser_output}: parser output file not found")
            parser_version += f"+output:{sha256_file(parser_output)[:16]}"
        key = make_doc_key(doc.sha256, parser.name, parser_version, enc_fp)
        with _lock(cache_dir, key):
            _remove_stale(cache_dir, key)
            target = cache_dir / key
            expected = {
                "pdf_sha256": doc.sha256,
                "parser": {"name": parser.name, "version": parser_version},
                "encoder_fingerprint": enc_fp,
            }
            if target.exists() and not force:
                try:
                    cached = load_cache(cache_dir, key)
                except CacheError:
                    cached = None  # corrupt entry: rebuilt below
                if cached is not None and _entry_matches(cached.manifest, expected):
                    return cached
            source = str(parser_output) if parser_output else f"{parser.name} parse of {pdf}"
            blocks = parser.parse(doc, Path(parser_output) if parser_output else None)
            blocks = validate_blocks(blocks, doc.page_sizes, source)
            emb = None
            if encoder is not None:
                emb = encoder.embed_blocks(doc, blocks) if blocks else np.zeros((0, encoder.dim), np.float32)
                emb = np.asarray(emb, dtype=np.float32)
                if emb.shape != (len(blocks), encoder.dim):
                    raise RuntimeError(
                        f"encoder {encoder.name} returned {emb.shape}, expected {(len(blocks), encoder.dim)}"
                    )
                if not np.all(np.isfinite(emb)):
                    raise RuntimeError(f"encoder {encoder.name} returned non-finite embeddings for {pdf}")
                emb = l2_normalize(emb)  # rows stay unit-norm whatever the encoder did
            blocks_bytes = "".join(json.dumps(b.to_json(), ensure_ascii=False) + "\n" for b in blocks).encode()
            manifest = {
                "format": CACHE_FORMAT,
                "doc_key": key,
                "pdf_sha256": doc.sha256,
                "pdf_path": str(pdf.resolve()),
                "n_pages": doc.n_pages,
                "page_sizes": [[round(w, 3), round(h, 3)] for w, h in doc.page_sizes],
                "text_fingerprint": doc.text_fingerprint(),
                "parser": {"name": parser.name, "version": parser_version},
                "encoder": None
                if encoder is None
                else {"name": encoder.name, "dim": encoder.dim, "fingerprint": enc_fp},
                "n_blocks": len(blocks),
                "blocks_sha256": _sha256_bytes(blocks_bytes),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            tmp = cache_dir / f".tmp-{key}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                _write_file(tmp / "blocks.jsonl", blocks_bytes)
                if emb is not None:
                    with open(tmp / "embeddings.npy", "wb") as f:
                        np.save(f, emb.astype(np.float16))
                        f.flush()
                        os.fsync(f.fileno())
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
            return load_cache(cache_dir, key)


def list_cache(cache_dir: str | Path) -> list[str]:
    """doc_keys of the complete entries in ``cache_dir``."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return []
    return sorted(
        p.name for p in cache_dir.iterdir() if not p.name.startswith(".") and (p / "manifest.json").is_file()
    )
