"""Cache benchmarks (``make bench``): build throughput and load time. Figures only, no timed assertions.

1. Build throughput of ``pdftext`` + ``minilm`` on the 18-page Docling fixture ``redp5110_sampled.pdf``, against a
   blocks-only build (``pdftext``, no encoder) measured in the same run.
2. Load time of a 400-block document (the paper's median is 388), memory-mapped against read fully, in the same
   run, for a 384-d (MiniLM) and a 2048-d (Qwen3-VL-Embedding-2B) matrix. The page cache is warm in both arms.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np
import pytest
from reportlab.pdfgen import canvas

from benchmarks.report import print_table
from data_prep.cache import build_cache, load_cache
from data_prep.document import Document
from data_prep.encoders import get_encoder, l2_normalize
from data_prep.parsers import get_parser
from data_prep.types import Block
from tests.conftest import fixture_path

N_BLOCKS = 400
LOAD_REPEATS = 30


def _timed(fn, repeats: int = 1) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def test_build_throughput_pdftext_minilm_on_the_18_page_fixture(tmp_path):
    pdf = fixture_path("docling-project_docling", "redp5110_sampled.pdf")
    parser, encoder = get_parser("pdftext"), get_encoder("minilm")
    t_load, _ = _timed(lambda: encoder.embed_texts(["warm-up"]))  # model load, outside the timed builds
    with Document.open(pdf) as doc:
        n_pages = doc.n_pages
        # Medians of 3: the first call of each also pays one-off costs (page objects, tokenizer, allocator).
        t_parse, blocks = _timed(lambda: parser.parse(doc), repeats=3)
        t_embed, _ = _timed(lambda: encoder.embed_blocks(doc, blocks), repeats=3)
    t_blocks_only, entry0 = _timed(lambda: build_cache(pdf, parser, None, tmp_path / "a", force=True), repeats=3)
    t_full, entry = _timed(lambda: build_cache(pdf, parser, encoder, tmp_path / "b", force=True), repeats=3)
    n = len(entry.blocks)
    assert n == len(entry0.blocks) == len(blocks) and entry.embeddings.shape == (n, 384)

    def row(name: str, t: float) -> list[str]:
        return [name, f"{t:.2f}", f"{n_pages / t:.1f}", f"{n / t:.1f}", f"{t / t_blocks_only:.2f}x"]

    print_table(
        f"cache build, {pdf.name}: {n_pages} pages, {n} blocks (minilm load {t_load:.1f} s, not counted)",
        ["stage", "seconds", "pages/s", "blocks/s", "vs blocks-only build"],
        [
            row("parse (pdftext)", t_parse),
            row("embed (minilm)", t_embed),
            row("build, blocks only (baseline)", t_blocks_only),
            row("build, pdftext + minilm", t_full),
        ],
    )


class _GridParser:
    """``N_BLOCKS`` text blocks laid out 20 to a page, with distinct texts."""

    name = "grid"

    def version(self) -> str:
        return "1"

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        out = []
        for i in range(N_BLOCKS):
            page, row = i // 20 + 1, i % 20
            text = f"Block {i}: revenue in region {i % 7} grew by {i % 13}% in quarter {i % 4 + 1}."
            out.append(Block(i, page, (40.0, 30.0 + 36 * row, 560.0, 60.0 + 36 * row), "text", text))
        return out


class _RandomUnitEncoder:
    """Seeded random unit vectors of a given width: stands in for an encoder whose cost is not measured here."""

    def __init__(self, dim: int) -> None:
        self.name, self.dim = f"random{dim}", dim

    def fingerprint(self) -> str:
        return f"{self.name}:seed0"

    def embed_blocks(self, doc, blocks):
        return l2_normalize(np.random.default_rng(0).standard_normal((len(blocks), self.dim)))


def _grid_pdf(path: Path) -> Path:
    c = canvas.Canvas(str(path), pagesize=(600, 780), invariant=1)
    for page in range(N_BLOCKS // 20):
        for row in range(20):
            c.drawString(40, 780 - 50 - 36 * row, f"Block {page * 20 + row}")
        c.showPage()
    c.save()
    return path


@pytest.mark.parametrize("dim", [384, 2048])
def test_load_400_blocks_memory_mapped_vs_read_fully(tmp_path, dim):
    pdf = _grid_pdf(tmp_path / "grid.pdf")
    entry = build_cache(pdf, _GridParser(), _RandomUnitEncoder(dim), tmp_path / "cache")
    assert len(entry.blocks) == N_BLOCKS
    query = l2_normalize(np.random.default_rng(1).standard_normal(dim)).astype(np.float16)

    def load(mmap: bool):
        return load_cache(tmp_path / "cache", entry.key, mmap=mmap)

    def load_and_score(mmap: bool):
        e = load(mmap)
        return int(np.argmax(e.embeddings @ query))  # touches every row, as resolving a quote does

    npy = entry.path / "embeddings.npy"
    load(True), load(False)  # warm the page cache for both arms
    t_npy_m, _ = _timed(lambda: np.load(npy, mmap_mode="r"), LOAD_REPEATS)
    t_npy_f, _ = _timed(lambda: np.load(npy), LOAD_REPEATS)
    t_mmap, e_mmap = _timed(lambda: load(True), LOAD_REPEATS)
    t_full, e_full = _timed(lambda: load(False), LOAD_REPEATS)
    t_mmap_s, best_m = _timed(lambda: load_and_score(True), LOAD_REPEATS)
    t_full_s, best_f = _timed(lambda: load_and_score(False), LOAD_REPEATS)
    assert isinstance(e_mmap.embeddings, np.memmap) and not isinstance(e_full.embeddings, np.memmap)
    assert best_m == best_f
    size_kb = npy.stat().st_size / 1024
    print_table(
        f"cache load, {N_BLOCKS} blocks x {dim} float16 ({size_kb:.0f} KiB), median of {LOAD_REPEATS}, warm page cache",
        ["operation", "read fully (ms)", "memory-mapped (ms)", "mmap / full"],
        [
            ["embeddings.npy only", f"{t_npy_f * 1e3:.3f}", f"{t_npy_m * 1e3:.3f}", f"{t_npy_m / t_npy_f:.2f}"],
            ["load_cache", f"{t_full * 1e3:.2f}", f"{t_mmap * 1e3:.2f}", f"{t_mmap / t_full:.2f}"],
            [
                "load_cache + score all rows",
                f"{t_full_s * 1e3:.2f}",
                f"{t_mmap_s * 1e3:.2f}",
                f"{t_mmap_s / t_full_s:.2f}",
            ],
        ],
    )
