"""Crops of cited blocks: the PNG images a judge is shown, rendered from the cached document's PDF.

A crop is rendered and encoded once per distinct (document, page, box, dpi) per process: :class:`CropCache` keeps
the PNG bytes, least recently used dropped past a bound in bytes (:data:`CROP_CACHE_BYTES`), and every caller of
:func:`crop_pngs` (each response of a group, each judge form) gets the very same ``bytes`` object, so identical crops
are byte-identical request parts (a judge server's own multimodal cache can hit on them). The document is named by
its cache key, which is derived from the PDF's content: a crop cached under it is what that PDF renders.

The encoding is PNG, lossless, so the pixels the judge decodes are the rendered ones, written here
(:func:`encode_png`): every row unfiltered (PNG filter type 0) and the rows deflated at level 1 by ISA-L
(:mod:`isal`, the ``isal`` package) where it is installed, by zlib otherwise. On the fixtures' text-block crops at
150 dpi ISA-L takes about a quarter of zlib's CPU for a stream some 5% larger, and zlib's unfiltered level 1 about
half the CPU of Pillow's PNG at the same level (:data:`PNG_OPTIONS`, which picks a filter per row by trying all
five): a text crop is mostly runs of one background value, which deflate finds unfiltered; stored (level 0) would
be six times larger, which the base64 and JSON of the request and the server's reading more than pay back
(``benchmarks/bench_vllm_judge.py`` prints the figures). A crop whose every pixel is grey (red = green = blue: most
text blocks) is written as an 8-bit greyscale PNG: the same pixels once the server converts the image to RGB (vLLM
and the Qwen processors do; so does :func:`decoded_rgb`), a third of the samples to compress.

A judge request carries each crop as a base64 ``data:`` URL (:func:`png_data_url`), made once per crop and kept
beside the crop cache, so a cached crop costs a judge request neither its encoding nor its base64.
"""

from __future__ import annotations

import base64
import io
import struct
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from PIL import Image

from core.errors import InputError

try:  # ISA-L's deflate: a quarter of zlib's CPU at level 1 (module docstring); zlib where it is not installed
    from isal import isal_zlib as _deflate_module
except ImportError:  # pragma: no cover - the main install has it (pyproject.toml)
    _deflate_module = zlib

MAX_CROPS = 6
"""Cited blocks shown per response by default (the first distinct ones, in citation order; CiteVQA shows at most
six)."""
CROP_DPI = 150.0
"""Resolution of the crops by default, dots per inch (CiteVQA's 150)."""
PNG_OPTIONS: dict = {"format": "PNG", "compress_level": 1}
"""Pillow's PNG at zlib level 1: how an image other than 8-bit RGB or greyscale is encoded (and how every crop was
before :func:`encode_png` wrote its own; the benchmark compares the two)."""
PNG_ZLIB_LEVEL = 1
"""Deflate level of the PNG :func:`encode_png` writes (ISA-L's or zlib's, :data:`DEFLATE`)."""
DEFLATE = "isal" if _deflate_module is not zlib else "zlib"
"""Whose deflate :func:`encode_png` uses: ``"isal"`` (the ``isal`` package) or ``"zlib"``."""
DATA_URL_CACHE_BYTES = 64 * 1024 * 1024
"""Bound of the process's cache of crops' base64 ``data:`` URLs (:func:`png_data_url`), bytes of the URLs and of the
PNG bytes they are kept by: some two thousand crops, those of the last GRPO steps."""
CROP_CACHE_BYTES = 256 * 1024 * 1024
"""Bound of the process's crop cache, bytes of PNG (a 150-dpi text block is some 25 KiB: about ten thousand
crops, every crop of several GRPO steps)."""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _deflate(data, level: int = PNG_ZLIB_LEVEL) -> bytes:
    """A zlib stream of ``data`` (any contiguous buffer) at ``level``, by :data:`DEFLATE`'s library."""
    return _deflate_module.compress(data, level)


def encode_png(img, deflate=None) -> bytes:
    """A rendered crop (a PIL image) as the PNG bytes a judge is sent: greyscale when every pixel is grey, rows
    unfiltered, deflated at :data:`PNG_ZLIB_LEVEL` (module docstring), so :func:`decoded_rgb` of the bytes is always
    ``img``'s RGB pixels. An image neither RGB nor greyscale is written by Pillow (:data:`PNG_OPTIONS`).
    ``deflate``: the zlib-stream function of the rows (default: :data:`DEFLATE`'s at :data:`PNG_ZLIB_LEVEL`).

    >>> img = Image.new("RGB", (3, 2), (200, 30, 30))
    >>> png = encode_png(img)
    >>> Image.open(io.BytesIO(png)).mode, decoded_rgb(png).tobytes() == img.tobytes()
    ('RGB', True)
    """
    if img.mode not in ("RGB", "L") or not (img.width and img.height):
        buf = io.BytesIO()
        img.save(buf, **PNG_OPTIONS)
        return buf.getvalue()
    w, h = img.size
    # One plane per band (Pillow copies a band in one pass; its packed RGB bytes take some five times as long).
    planes = [band.tobytes() for band in img.split()]
    grey = len(planes) == 1 or planes[0] == planes[1] == planes[2]  # every pixel grey: one sample a pixel
    samples = 1 if grey else 3
    rows = np.empty((h, 1 + w * samples), np.uint8)
    rows[:, 0] = 0  # filter type 0 (none) on every row
    if grey:
        rows[:, 1:] = np.frombuffer(planes[0], np.uint8).reshape(h, w)
    else:
        pixels = rows[:, 1:].reshape(h, w, 3)
        for i, plane in enumerate(planes):
            pixels[..., i] = np.frombuffer(plane, np.uint8).reshape(h, w)
    header = struct.pack(">IIBBBBB", w, h, 8, 0 if grey else 2, 0, 0, 0)  # 8-bit greyscale or RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", (deflate or _deflate)(rows))
        + _chunk(b"IEND", b"")
    )


class DataURL(str):
    """A ``data:`` URL of base64 bytes (:func:`png_data_url`): ASCII in which JSON escapes nothing, so a request
    body can carry it without scanning it again (:func:`reward.judge_http.encode_body`)."""

    __slots__ = ()


class _DataURLCache:
    """Base64 ``data:`` URLs by PNG bytes, least recently used dropped once the URLs and their keys pass
    ``max_bytes``. Thread-safe."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        self._items: OrderedDict[bytes, DataURL] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, png: bytes) -> DataURL:
        with self._lock:
            url = self._items.get(png)
            if url is not None:
                self._items.move_to_end(png)
                return url
        url = DataURL("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
        if len(png) + len(url) > self.max_bytes:
            return url
        with self._lock:
            held = self._items.get(png)
            if held is not None:
                return held
            self._items[png] = url
            self.bytes += len(png) + len(url)
            while self.bytes > self.max_bytes:
                key, old = self._items.popitem(last=False)
                self.bytes -= len(key) + len(old)
        return url


_DATA_URLS = _DataURLCache(DATA_URL_CACHE_BYTES)


def png_data_url(png: bytes) -> DataURL:
    """The base64 ``data:image/png`` URL of ``png`` as a judge request carries it, made once per distinct crop
    (kept, least recently used dropped, up to :data:`DATA_URL_CACHE_BYTES`); a :class:`DataURL`.

    >>> png_data_url(b"PNG")
    'data:image/png;base64,UE5H'
    """
    return _DATA_URLS.get(bytes(png))


def decoded_rgb(png: bytes):
    """The RGB image a judge server makes of crop bytes (it converts every image to RGB, as vLLM does).

    >>> img = Image.new("RGB", (3, 2), (40, 40, 40))
    >>> png = encode_png(img)
    >>> Image.open(io.BytesIO(png)).mode, decoded_rgb(png).tobytes() == img.tobytes()
    ('L', True)
    """
    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB")


@dataclass
class CropStats:
    """Lookups of a :class:`CropCache` (a hit: a crop neither rendered nor encoded again)."""

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def add(self, other: CropStats) -> None:
        self.hits += other.hits
        self.misses += other.misses


class CropCache:
    """PNG bytes of crops by ``(doc_key, page, box, dpi)``, least recently used dropped once their bytes pass
    ``max_bytes`` (a crop larger than the bound alone is returned but never kept). Thread-safe.

    >>> cache = CropCache(max_bytes=10)
    >>> a, b = crop_key("doc", 1, (0, 0, 9, 9), 150), crop_key("doc", 2, (0, 0, 9, 9), 150)
    >>> cache.put(a, b"12345678"), cache.put(b, b"1234")  # 12 bytes: the older one goes
    (b'12345678', b'1234')
    >>> cache.get(a), cache.get(b), cache.bytes
    (None, b'1234', 4)
    """

    def __init__(self, max_bytes: int = CROP_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise InputError(f"crop cache: max_bytes must be >= 0 (got {max_bytes})")
        self.max_bytes = int(max_bytes)
        self.bytes = 0
        """Bytes of PNG held now."""
        self.stats = CropStats()
        """Lookups over the cache's life (:meth:`crop_pngs` counts them)."""
        self._items: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple) -> bytes | None:
        with self._lock:
            png = self._items.get(key)
            if png is not None:
                self._items.move_to_end(key)
            return png

    def count(self, hit: bool) -> None:
        """Count one lookup in :attr:`stats`."""
        with self._lock:
            if hit:
                self.stats.hits += 1
            else:
                self.stats.misses += 1

    def put(self, key: tuple, png: bytes) -> bytes:
        """Keep ``png`` under ``key``; returns the bytes now held for it (the first ones when two threads rendered
        the same crop, so both use one object)."""
        with self._lock:
            held = self._items.get(key)
            if held is not None:
                self._items.move_to_end(key)
                return held
            if len(png) > self.max_bytes:
                return png
            self._items[key] = png
            self.bytes += len(png)
            while self.bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self.bytes -= len(old)
            return png

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0


_SHARED = CropCache()


def shared_crop_cache() -> CropCache:
    """The process's crop cache (every :func:`crop_pngs` call uses it unless given another)."""
    return _SHARED


def crop_key(doc_key: str, page: int, bbox, dpi: float) -> tuple:
    """What identifies a crop: the document's cache key, the 1-based page, the box in PDF points, the dpi."""
    return (str(doc_key), int(page), tuple(float(v) for v in bbox), float(dpi))


def crop_pngs(
    cached,
    citations,
    max_crops: int = MAX_CROPS,
    dpi: float = CROP_DPI,
    doc=None,
    cache: CropCache | None = None,
    stats: CropStats | None = None,
) -> tuple[bytes, ...]:
    """PNG bytes of the first ``max_crops`` distinct cited blocks (citation order), rendered from the cached
    document's PDF at ``dpi``. A block with an empty box is skipped.

    ``doc``: an already open :class:`~data_prep.document.Document` of that PDF, or a callable returning one (opened
    only when a crop is not cached; saves re-opening and re-hashing it per response). ``cache``: where crops are
    kept (default: :func:`shared_crop_cache`). ``stats``: also counts this call's hits and misses there."""
    seen: set[int] = set()
    chosen = []
    for c in citations:
        if c.block_id not in seen and len(chosen) < max_crops:
            seen.add(c.block_id)
            chosen.append(c)
    if not chosen:
        return ()
    cache = cache if cache is not None else _SHARED
    own = None
    try:
        out = []
        for c in chosen:
            key = crop_key(cached.key, c.page, c.bbox, dpi)
            png = cache.get(key)
            if png is not None:
                cache.count(hit=True)
                if stats is not None:
                    stats.hits += 1
                out.append(png)
                continue
            if doc is None:
                doc = own = cached.open_pdf()
            elif callable(doc):
                doc = doc()
            try:
                img = doc.crop(c.page, c.bbox, dpi=dpi)
            except InputError:
                continue  # zero-area box: nothing for the judge to see
            cache.count(hit=False)
            if stats is not None:
                stats.misses += 1
            out.append(cache.put(key, encode_png(img)))
        return tuple(out)
    finally:
        if own is not None:
            own.close()
