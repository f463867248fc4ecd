"""Crops rendered once per (document, page, box, dpi) per process: the cache, its bound, its encoding, and the
reward sending a group's shared crop as byte-identical request parts."""

from __future__ import annotations

import base64
import io
import zlib

import httpx
import pytest
from PIL import Image

from data_prep import crops as crops_module
from data_prep.crops import (
    CropCache,
    CropStats,
    DataURL,
    crop_key,
    crop_pngs,
    decoded_rgb,
    encode_png,
    png_data_url,
    shared_crop_cache,
)
from reward.judge import JudgeRequest
from reward.judge_http import HttpJudge, encode_body
from reward.pipeline import RewardScorer
from reward.resolve import resolve_quotes
from tests.reward.test_reward_pipeline import EN, ROW, gt, http_config, inp
from tests.support.openai_server import ScriptedOpenAIServer


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("crops"))


def _never_opened():
    raise AssertionError("the PDF was opened for a crop that was cached")


def test_a_crop_is_rendered_once_and_every_caller_gets_the_same_bytes(cache):
    (cit,) = resolve_quotes([EN], cache)
    crops, stats = CropCache(), CropStats()
    (first,) = crop_pngs(cache, [cit], dpi=150, cache=crops, stats=stats)
    (again,) = crop_pngs(cache, [cit], dpi=150, cache=crops, stats=stats, doc=_never_opened)
    assert again is first and (stats.hits, stats.misses) == (1, 1) and stats.hit_rate == 0.5
    (other_dpi,) = crop_pngs(cache, [cit], dpi=72, cache=crops, stats=stats)  # another image: rendered
    assert other_dpi != first and stats.misses == 2 and len(crops) == 2
    assert crops.bytes == len(first) + len(other_dpi)


def test_the_encoding_keeps_every_pixel_the_judge_sees(cache):
    cits = resolve_quotes([EN, ROW], cache)
    with cache.open_pdf() as doc:
        for c in cits:
            img = doc.crop(c.page, c.bbox, dpi=150)
            png = encode_png(img)
            back = Image.open(io.BytesIO(png))
            assert png.startswith(b"\x89PNG\r\n\x1a\n") and back.format == "PNG" and back.size == img.size
            assert back.mode == "L"  # black text on white: every pixel grey, sent as greyscale
            assert decoded_rgb(png).tobytes() == img.tobytes()  # what the server converts it to: the rendered pixels
            assert back.convert("RGB").tobytes() == img.tobytes()
            colour = img.copy()
            colour.putpixel((0, 0), (200, 30, 30))  # one pixel not grey: the crop stays RGB
            rgb = encode_png(colour)
            assert Image.open(io.BytesIO(rgb)).mode == "RGB" and decoded_rgb(rgb).tobytes() == colour.tobytes()
            assert len(png) < len(rgb)
    assert encode_png(img) == png  # the same pixels always give the same bytes


def test_the_cache_is_bounded_in_bytes_and_drops_the_least_recently_used():
    crops = CropCache(max_bytes=10)
    a, b, c = (crop_key("doc", p, (0, 0, 1, 1), 150) for p in (1, 2, 3))
    crops.put(a, b"aaaa")
    crops.put(b, b"bbbb")
    assert crops.get(a) == b"aaaa"  # a is now the most recently used
    crops.put(c, b"cccc")  # 12 bytes: b goes
    assert (crops.get(a), crops.get(b), crops.get(c), crops.bytes) == (b"aaaa", None, b"cccc", 8)
    big = crop_key("doc", 4, (0, 0, 1, 1), 150)
    assert crops.put(big, b"x" * 11) == b"x" * 11 and crops.get(big) is None  # larger than the bound: not kept
    assert crops.bytes == 8 and len(crops) == 2
    held = crops.put(a, b"AAAA")  # a crop rendered twice (two threads): the first bytes stay the ones used
    assert held == b"aaaa"
    with pytest.raises(ValueError, match="max_bytes"):
        CropCache(max_bytes=-1)


def test_a_group_citing_one_block_sends_one_crop_rendered_once_as_identical_image_parts(cache):
    shared_crop_cache().clear()
    g = gt(cache)
    batch = [inp({"answer": f"answer {i}", "quotes": [EN]}, g) for i in range(5)]  # five distinct requests
    with ScriptedOpenAIServer() as srv:
        scorer = RewardScorer(http_config(cache, srv.url))
        scorer.score(batch)
        urls = [
            [p["image_url"]["url"] for p in body["messages"][1]["content"] if p["type"] == "image_url"]
            for path, body in srv.requests
            if path.endswith("/chat/completions")
        ]
    assert len(urls) == 5 and all(u == urls[0] for u in urls) and len(urls[0]) == 1
    assert (scorer.crop_stats.misses, scorer.crop_stats.hits) == (1, 4)
    (cit,) = resolve_quotes([EN], cache)
    (png,) = crop_pngs(cache, [cit], dpi=scorer.config.crop_dpi, doc=_never_opened)  # any other caller: cached
    assert base64.b64decode(urls[0][0].removeprefix("data:image/png;base64,")) == png


def _zlib_1(rows) -> bytes:
    return zlib.compress(rows, 1)


@pytest.mark.parametrize("deflate", [None, _zlib_1], ids=["default", "zlib"])
@pytest.mark.parametrize("size", [(1, 1), (7, 3), (358, 37), (200, 301)])
def test_the_png_written_here_is_valid_and_lossless_for_any_pixels(size, deflate):
    """``encode_png`` writes its own PNG (rows unfiltered, deflated at level 1 by ISA-L or zlib): a strict reader
    accepts it (chunk CRCs checked) and decodes the very pixels, noise included, RGB, grey and greyscale input
    alike."""
    import numpy as np

    rng = np.random.default_rng(size[0] * 1000 + size[1])
    w, h = size
    noise = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")
    grey_rgb = Image.fromarray(np.repeat(rng.integers(0, 256, (h, w, 1), dtype=np.uint8), 3, axis=2), "RGB")
    grey_l = grey_rgb.getchannel("R")
    for img, mode in ((noise, "RGB"), (grey_rgb, "L"), (grey_l, "L")):
        png = encode_png(img, deflate)
        Image.open(io.BytesIO(png)).verify()
        back = Image.open(io.BytesIO(png))
        assert back.mode == mode and back.size == size
        assert decoded_rgb(png).tobytes() == img.convert("RGB").tobytes()
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 128))  # not RGB or greyscale: Pillow's encoder, alpha kept
    assert Image.open(io.BytesIO(encode_png(rgba))).tobytes() == rgba.tobytes()


def test_the_main_install_deflates_crops_with_isal_and_zlib_reads_its_streams(cache):
    assert crops_module.DEFLATE == "isal"  # pyproject.toml's isal: a quarter of zlib's CPU (data_prep/crops.py)
    (cit,) = resolve_quotes([EN], cache)
    with cache.open_pdf() as doc:
        img = doc.crop(cit.page, cit.bbox, dpi=150)
    fast, plain = encode_png(img), encode_png(img, _zlib_1)
    assert decoded_rgb(fast).tobytes() == decoded_rgb(plain).tobytes() == img.tobytes()
    idat = fast[fast.index(b"IDAT") + 4 : fast.index(b"IEND") - 8]
    rows = zlib.decompress(idat)  # a standard zlib stream: one filter byte (0: none) and the samples per row
    assert len(rows) == img.height * (1 + img.width) and rows[:: 1 + img.width] == bytes(img.height)


def test_a_crop_s_data_url_is_made_once_and_decodes_to_the_crop():
    png = encode_png(Image.new("RGB", (5, 4), (90, 90, 90)))
    url = png_data_url(png)
    assert isinstance(url, DataURL) and url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.removeprefix("data:image/png;base64,")) == png
    assert png_data_url(png) is url and png_data_url(bytes(bytearray(png))) is url  # equal bytes: the same URL
    small = crops_module._DataURLCache(max_bytes=100)
    a, b = small.get(b"a" * 20), small.get(b"b" * 20)  # 20 bytes and a URL of 50 each: the older one goes
    assert small.bytes == 20 + len(b) == 70 and small.get(b"b" * 20) is b and small.get(b"a" * 20) is not a
    big = small.get(b"c" * 80)  # larger than the bound alone: made, never kept
    assert isinstance(big, DataURL) and small.get(b"c" * 80) is not big and small.bytes == 70


STAND_IN = "\x00quotecite-data-url\x00"


def _judge_body(texts=("q", "gold", "answer")) -> dict:
    pngs = tuple(encode_png(Image.new("RGB", (20 + i, 9), (i, i, i))) for i in range(3))
    return HttpJudge("http://127.0.0.1:9/v1", "judge-model").body(JudgeRequest(*texts, pngs))


@pytest.mark.parametrize(
    "texts",
    [
        ("What is it?", "gold", "answer"),
        ('Quotes " and \\ \u00e9\u4e2d\U0001f600\x01', "gold\n", "answer\t"),  # escapes, non-ASCII, controls
        (STAND_IN, "gold", f'"{STAND_IN}"'),  # text that is, or holds, encode_body's stand-in for a crop
    ],
    ids=["plain", "escapes", "stand-in"],
)
def test_the_request_body_is_byte_for_byte_what_httpx_writes_for_it(texts):
    body = _judge_body(texts)
    assert sum(isinstance(p.get("image_url", {}).get("url"), DataURL) for p in body["messages"][1]["content"]) == 3
    sent = encode_body(body)
    assert sent == httpx.Request("POST", "http://x/", json=body).content
    assert httpx.Request("POST", "http://x/", content=sent).content == sent
