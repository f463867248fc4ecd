"""``python -m data_prep show``: blocks drawn over the page, coloured by type."""

from __future__ import annotations

import pytest
from PIL import Image

from core.cli import main
from data_prep.__main__ import COMMANDS
from data_prep.cache import build_cache
from data_prep.document import Document
from data_prep.parsers import get_parser
from data_prep.show import TYPE_COLORS, ShowConfig, draw_blocks, render_document_blocks, render_page_blocks
from data_prep.types import BLOCK_TYPES


@pytest.fixture(scope="module")
def cached(sample_pdf, tmp_path_factory):
    return build_cache(sample_pdf, get_parser("pdftext"), None, tmp_path_factory.mktemp("cache"))


def show(*args: str) -> int:
    return main("python -m data_prep", "", COMMANDS, ["show", *args])


def test_every_type_has_its_own_colour():
    assert set(TYPE_COLORS) == set(BLOCK_TYPES)
    assert len(set(TYPE_COLORS.values())) == len(BLOCK_TYPES)


def test_one_page_png_has_the_page_aspect_and_type_colours_on_block_outlines(cached, tmp_path, capsys):
    out = tmp_path / "p2.png"
    assert (
        show(cached.key, "--cache-dir", str(cached.path.parent), "--page", "2", "--dpi", "72", "--out", str(out)) == 0
    )
    assert str(out) in capsys.readouterr().out
    img = Image.open(out).convert("RGB")
    w, h = cached.page_sizes[1]
    # At 72 dpi one point is one pixel (pdfium rounds the bitmap up); the legend strip sits above the page.
    assert abs(img.width - w) <= 1
    legend_h = img.height - img.width * round(h) // round(w)
    assert 0 < legend_h < 60
    for b in cached.blocks:
        if b.page != 2 or b.bbox[3] - b.bbox[1] < 8:
            continue
        x0, y0, x1, y1 = (round(v) for v in b.bbox)
        ymid = (y0 + y1) // 2 + legend_h
        # Both vertical edges of the outline, at mid-height (clear of the id tag), carry the type's colour.
        for x in (x0, x1):
            near = {img.getpixel((xx, ymid)) for xx in range(max(0, x - 1), min(img.width, x + 2))}
            assert TYPE_COLORS[b.type] in near, (b.block_id, b.type, near)


def test_draw_blocks_scales_points_to_pixels(sample_pdf, cached):
    with Document.open(sample_pdf) as doc:
        img = render_page_blocks(doc, cached.blocks, 2, ShowConfig(dpi=144), legend=False)
    w, h = doc.page_sizes[1]
    assert img.size[0] == pytest.approx(w * 2, abs=1) and img.size[1] == pytest.approx(h * 2, abs=1)
    (table,) = [b for b in cached.blocks if b.type == "table"]
    x0, y0, x1, y1 = (v * 2 for v in table.bbox)
    assert img.getpixel((round(x0), round((y0 + y1) / 2))) == TYPE_COLORS["table"]
    # Inside the block the page shows through a light tint (not the outline colour).
    assert img.getpixel((round(x0) + 6, round((y0 + y1) / 2))) != TYPE_COLORS["table"]


def test_draw_blocks_on_a_blank_image_leaves_outside_pixels_untouched(cached):
    blank = Image.new("RGB", (200, 100), (255, 255, 255))
    (fig,) = [b for b in cached.blocks if b.type == "figure"]
    moved = type(fig)(0, 1, (50.0, 20.0, 150.0, 80.0), "figure", "")
    out = draw_blocks(blank, [moved], (200.0, 100.0))
    assert out.getpixel((10, 50)) == (255, 255, 255)
    assert out.getpixel((50, 50)) == TYPE_COLORS["figure"]
    assert out.getpixel((150, 50)) == TYPE_COLORS["figure"]


def test_all_pages_are_laid_side_by_side_under_the_pixel_cap(sample_pdf, cached, tmp_path):
    cfg = ShowConfig(max_total_pixels=400_000)
    with Document.open(sample_pdf) as doc:
        img = render_document_blocks(doc, cached.blocks, cfg)
    assert img.width > 2.5 * img.height  # 4 pages in one row (3 portrait, 1 landscape)
    # Page tiles obey the cap; gaps and the legend strip add a little.
    assert img.width * img.height < 1.5 * cfg.max_total_pixels

    out = tmp_path / "all.png"
    assert show(cached.key[:10], "--cache-dir", str(cached.path.parent), "--out", str(out)) == 0  # a key prefix
    assert Image.open(out).width > 2.5 * Image.open(out).height


def test_unknown_key_and_bad_page_are_one_line_errors(cached, tmp_path, capsys):
    assert show("ffffffff", "--cache-dir", str(cached.path.parent), "--out", str(tmp_path / "x.png")) == 2
    assert "no cache entry 'ffffffff'" in capsys.readouterr().err
    assert (
        show(cached.key, "--cache-dir", str(cached.path.parent), "--page", "9", "--out", str(tmp_path / "x.png")) == 2
    )
    assert "page 9 out of range 1..4" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
