"""Pages with ``/Rotate``: parse, crop and the crop shows the text (docs/METHOD.md, "Known traps", 2).

A page is generated for each rotation with a red sentence drawn upright *as displayed*; pdftext must return its
block in display coordinates, and the 150-dpi crop of that block must be full of red ink and oriented like the
displayed page, while the locations a rotation bug would produce (the unrotated box, the mirrored box) are not.
"""

from __future__ import annotations

import numpy as np
import pytest
from reportlab.lib.pagesizes import A4
from reportlab.pdfgen import canvas as rl_canvas

from core.geometry import clip_bbox
from data_prep.document import Document
from data_prep.parsers.pdftext import PdfTextParser

RED_TEXT = "Red evidence here"  # short: its mirror image must not overlap it
BLACK_TEXT = "A black line of ordinary text lies below the red sentence"


def _rotated_pdf(path, rotation: int) -> None:
    """Page 1 plain; page 2 carries ``/Rotate rotation`` and text drawn upright in the displayed page."""
    pw, ph = A4  # stored (unrotated) MediaBox is portrait for every rotation
    c = rl_canvas.Canvas(str(path), pagesize=A4, invariant=1)
    c.setFont("Helvetica", 12)
    c.drawString(72, 700, "An unrotated first page.")
    c.showPage()
    display = (ph, pw) if rotation in (90, 270) else (pw, ph)
    c.setPageSize(display)  # reportlab's page size is the displayed one; it swaps the MediaBox for 90/270
    c.setPageRotation(rotation)
    # Map display coordinates (X right, Y up) into the unrotated content space.
    if rotation == 90:
        c.translate(pw, 0)
        c.rotate(90)
    elif rotation == 180:
        c.translate(pw, ph)
        c.rotate(180)
    elif rotation == 270:
        c.translate(0, ph)
        c.rotate(-90)
    dw, dh = display
    c.setFillColorRGB(1, 0, 0)
    c.setFont("Helvetica-Bold", 20)
    c.drawString(60, dh - 120, RED_TEXT)  # upper left of the displayed page
    c.setFillColorRGB(0, 0, 0)
    c.setFont("Helvetica", 11)
    c.drawString(60, dh - 200, BLACK_TEXT)
    c.showPage()
    c.save()


def red_share(img) -> float:
    a = np.asarray(img.convert("RGB")).astype(int)
    red = (a[..., 0] > 180) & (a[..., 1] < 90) & (a[..., 2] < 90)
    return float(red.mean())


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_rotated_page_block_crop_shows_the_red_text_upright(tmp_path, rotation):
    pdf = tmp_path / f"rot{rotation}.pdf"
    _rotated_pdf(pdf, rotation)
    with Document.open(pdf) as doc:
        assert doc.page_rotation(2) == rotation
        w, h = doc.page_sizes[1]
        assert (w > h) == (rotation in (90, 270))  # displayed landscape for a quarter turn
        blocks = [b for b in PdfTextParser().parse(doc) if b.page == 2]
        (red,) = [b for b in blocks if b.text == RED_TEXT]
        (black,) = [b for b in blocks if b.text == BLACK_TEXT]

        # Display coordinates: the red line is at the upper left, above the black line, and wide, not tall.
        x0, y0, x1, y1 = red.bbox
        assert x0 == pytest.approx(60, abs=3) and y1 < black.bbox[1] and y0 < h / 4
        assert x1 - x0 > 4 * (y1 - y0)

        crop = doc.crop(2, red.bbox, dpi=150)
        assert crop.width > 4 * crop.height  # oriented like the displayed page
        assert crop.size == pytest.approx(((x1 - x0) * 150 / 72, (y1 - y0) * 150 / 72), abs=2)
        assert red_share(crop) > 0.08

        # The same region cut out of the whole rendered page is the same picture: the crop is not rotated.
        page = doc.render_page(2, dpi=150)
        s = 150 / 72
        region = page.crop((round(x0 * s), round(y0 * s), round(x0 * s) + crop.width, round(y0 * s) + crop.height))
        a, b = np.asarray(region, dtype=float), np.asarray(crop, dtype=float)
        same = np.abs(a - b).mean()  # small: anti-aliasing differs at sub-pixel offsets
        flipped = np.abs(a - b[::-1, ::-1]).mean()  # what a crop upside down would score
        assert same < 0.5 * flipped, (same, flipped)

        # Where a rotation bug would look: the box in unrotated page space, and the box mirrored left-right.
        left, bottom, right, top = doc.from_display(2, red.bbox)
        uh = w if rotation in (90, 270) else h  # height of the unrotated page
        unrotated = clip_bbox((left, uh - top, right, uh - bottom), w, h)
        mirrored = (w - x1, y0, w - x0, y1)
        for wrong in (unrotated, mirrored):
            if rotation == 0 and wrong == unrotated:
                continue  # no rotation: the unrotated box is the right one
            if wrong[2] - wrong[0] < 1 or wrong[3] - wrong[1] < 1:
                continue  # entirely off the displayed page: nothing to crop, so nothing to mistake
            assert red_share(doc.crop(2, wrong, dpi=150)) < 0.01


def test_black_text_crop_has_no_red(tmp_path):
    pdf = tmp_path / "rot90.pdf"
    _rotated_pdf(pdf, 90)
    with Document.open(pdf) as doc:
        (black,) = [b for b in PdfTextParser().parse(doc) if b.text == BLACK_TEXT]
        crop = doc.crop(2, black.bbox, dpi=150)
    assert red_share(crop) == 0.0
    assert (np.asarray(crop.convert("L")) < 100).mean() > 0.05  # but it has black ink
