"""Cost of the attention interface (``eval infer --interface attention``, MultAttnAttrib; ``eval/attention.py``):
one prefill of a prompt of N page images plus question and answer, in three arms measured in the same run on the
same model and the same inputs. Figures only, no timed assertions.

* **plain**: the model's own ``sdpa`` prefill, nothing recorded (the baseline);
* **recorder**: :class:`eval.attention.AttentionRecorder` over ``sdpa``, what the interface runs: it keeps, per
  text layer, the query tokens' attention rows averaged over the queries, ``layers x heads x keys`` floats;
* **eager + output_attentions**: the obvious way to read attention from transformers, every layer's full
  ``heads x keys x keys`` matrix returned. Run only where that stays under ``EAGER_LIMIT_GB``; above, the table
  gives its size as computed from the shapes.

Reported per arm: prefill seconds (median of ``REPEATS`` after one warm-up), the ratio to plain, the attention data
it keeps, and on a CUDA device the peak memory above the weights (``torch.cuda.max_memory_allocated``).

Models (random weights: the cost depends on the shapes only, so no checkpoint is needed):
* default, CPU: a small Qwen3-VL (4 text layers of 8 heads, hidden 256) at 1, 2 and 4 pages;
* ``QUOTECITE_BENCH_ATTENTION=8b`` on a CUDA device: Qwen3-VL-8B-Instruct's shapes (``QWEN3_VL_8B``, 8.77B
  parameters, bfloat16) at 4 and 30 pages. This is the measured replacement for the estimates in
  ``eval/gpu_attention.md``. Run it directly on the GPU machine as
  ``python -m benchmarks.bench_attention --shapes 8b --pages 4 30 --json OUT/attention_cost.json``.

Pages are synthetic page images at ``eval infer``'s per-page budget (1e6 pixels, about 970 tokens after Qwen3-VL's
2x2 merge).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.report import print_table
from tests.support.tiny_qwen3vl import QWEN3_VL_8B, TINY_TEXT, TINY_VISION, config, write_tokenizer

pytest.importorskip("transformers")

PAGE_PIXELS = 1_000_000
REPEATS = 3
EAGER_LIMIT_GB = {"cpu": 2.0, "cuda": 40.0}
SMALL = {  # the tests' tiny model, widened: 4 text layers x 8 heads, hidden 256
    "text": {
        **TINY_TEXT,
        **dict(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=8, head_dim=32),
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 4, 4]},
    },
    "vision": {**TINY_VISION, **dict(hidden_size=64, intermediate_size=128, out_hidden_size=256)},
}
QUESTION, ANSWER = "how much did revenue grow in 2023", "revenue grew by 12 %"


def page_image(i: int, pixels: int = PAGE_PIXELS):
    """A white US-letter page at ``pixels`` (sides multiples of 32) with dark text-like bars, different per page."""
    from PIL import Image, ImageDraw

    w = int((pixels * 612 / 792) ** 0.5) // 32 * 32
    h = pixels // w // 32 * 32
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    rng = np.random.default_rng(i)
    for y in range(40, h - 40, 28):
        draw.rectangle([40, y, 40 + int(rng.integers(w // 4, w - 80)), y + 12], fill="black")
    return img


def build(shapes: str, device: str, folder: Path):
    """An :class:`eval.attention.AttentionModel` around a randomly initialised Qwen3-VL of ``shapes``."""
    import torch
    from transformers import AutoTokenizer, Qwen3VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from eval.attention import AttentionModel

    vocab = write_tokenizer(folder)
    dims = QWEN3_VL_8B if shapes == "8b" else SMALL
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLModel._from_config(config(vocab, **dims), dtype=dtype, attn_implementation="sdpa")
    tok = AutoTokenizer.from_pretrained(folder)
    ip = Qwen2VLImageProcessorPil.from_pretrained(folder, max_pixels=PAGE_PIXELS * 2)
    return AttentionModel.from_parts(model, tok, ip, inner="sdpa", name=f"random Qwen3-VL ({shapes} shapes)")


def _timed(fn, device: str) -> tuple[float, float, object]:
    """Median seconds over ``REPEATS`` runs after a warm-up, the peak memory above the start (GiB; 0 on the CPU) and
    the last result."""
    import torch

    fn()
    times, peak, out = [], 0.0, None
    for _ in range(REPEATS):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
        t0 = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
            peak = max(peak, (torch.cuda.max_memory_allocated() - start) / 2**30)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), peak, out


def measure(am, pages: int, device: str) -> dict:
    """The three arms on one prompt of ``pages`` page images."""
    import torch

    model = am.model
    layout, batch = am.inputs([page_image(i) for i in range(pages)], list(range(1, pages + 1)), QUESTION, ANSWER)
    n_keys = len(layout.input_ids)
    cfg = model.config.text_config
    layers, heads = cfg.num_hidden_layers, cfg.num_attention_heads
    bytes_per = torch.finfo(model.dtype).bits // 8
    row = {"pages": pages, "keys": n_keys, "queries": len(layout.query), "layers": layers, "heads": heads}

    def plain():
        with torch.inference_mode():
            return model(**batch, use_cache=False).last_hidden_state.shape

    model.set_attn_implementation("sdpa")
    row["plain_s"], row["plain_peak_gib"], _ = _timed(plain, device)
    am.recorder.install(model)
    row["recorder_s"], row["recorder_peak_gib"], rows = _timed(lambda: am.record(layout, batch), device)
    assert rows.shape == (layers, heads, n_keys)
    row["recorder_kept_bytes"] = int(rows.nbytes)
    full = layers * heads * n_keys * n_keys * bytes_per
    row["eager_kept_bytes"] = full
    if full / 2**30 <= EAGER_LIMIT_GB[device]:
        model.set_attn_implementation("eager")

        def eager():
            with torch.inference_mode():
                out = model(**batch, use_cache=False, output_attentions=True)
            return sum(a.numel() * a.element_size() for a in out.attentions)

        row["eager_s"], row["eager_peak_gib"], kept = _timed(eager, device)
        assert kept == full
    am.recorder.install(model)
    return row


def run(shapes: str, pages: list[int]) -> list[dict]:
    import torch

    device = "cuda" if shapes == "8b" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--shapes 8b needs a CUDA device")
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        am = build(shapes, device, Path(folder))
        t_build = time.perf_counter() - t0
        rows = [measure(am, n, device) for n in pages]
    params = sum(p.numel() for p in am.model.parameters())
    for r in rows:
        r.update(shapes=shapes, device=device, params=params, build_s=round(t_build, 1))
        if device == "cuda":
            r["gpu"] = torch.cuda.get_device_name()
            r["weights_gib"] = round(params * 2 / 2**30, 2)
    report(rows)
    return rows


def _gb(n: float) -> str:
    return f"{n / 2**30:.3f} GiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def report(rows: list[dict]) -> None:
    first = rows[0]
    title = (
        f"attention interface, one prefill: random Qwen3-VL ({first['shapes']} shapes, {first['params'] / 1e6:,.0f}M "
        f"parameters without the LM head, {first['layers']} layers x {first['heads']} heads) on {first['device']}"
    )
    gpu = first["device"] == "cuda"
    header = ["pages", "keys", "arm", "seconds", "vs plain", "attention kept"] + (["peak above start"] if gpu else [])
    table = []
    for r in rows:
        for arm in ("plain", "recorder", "eager"):
            kept = {"plain": "-", "recorder": _gb(r["recorder_kept_bytes"]), "eager": _gb(r["eager_kept_bytes"])}[arm]
            if f"{arm}_s" not in r:
                table.append([r["pages"], r["keys"], "eager + output_attentions", "not run", "-", kept + " (computed)"]
                             + (["-"] if gpu else []))  # fmt: skip
                continue
            name = {"plain": "plain sdpa", "recorder": "recorder (sdpa)", "eager": "eager + output_attentions"}[arm]
            s = r[f"{arm}_s"]
            table.append([r["pages"], r["keys"], name, f"{s:.3f}", f"{s / r['plain_s']:.2f}x", kept]
                         + ([f"{r[f'{arm}_peak_gib']:.2f} GiB"] if gpu else []))  # fmt: skip
    print_table(title, header, [[str(x) for x in row] for row in table])


def test_attention_interface_cost():
    shapes = os.environ.get("QUOTECITE_BENCH_ATTENTION", "small")
    if shapes == "8b":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("QUOTECITE_BENCH_ATTENTION=8b needs a CUDA device")
        rows = run("8b", [4, 30])
    else:
        rows = run("small", [1, 2, 4])
    assert all(r["recorder_kept_bytes"] < r["eager_kept_bytes"] for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", choices=("small", "8b"), default="small")
    ap.add_argument("--pages", type=int, nargs="+", default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    rows = run(args.shapes, args.pages or ([4, 30] if args.shapes == "8b" else [1, 2, 4]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
