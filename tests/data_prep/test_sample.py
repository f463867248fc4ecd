"""The generated sample PDF: deterministic, 4 pages, one rotated, and every listed fact in its page's text layer."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from data_prep.document import Document, normalize_text
from data_prep.sample import CJK_FONT, ROTATED_PAGE, SAMPLE_FACTS, SAMPLE_N_PAGES, write_sample_pdf
from data_prep.types import BLOCK_TYPES


@pytest.fixture(scope="module")
def doc(sample_pdf):
    with Document.open(sample_pdf) as d:
        yield d


def test_sample_bytes_are_identical_on_every_write(tmp_path, sample_pdf):
    again = write_sample_pdf(tmp_path / "again.pdf")
    assert hashlib.sha256(again.read_bytes()).hexdigest() == hashlib.sha256(sample_pdf.read_bytes()).hexdigest()
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write leaves no temp file behind


def test_sample_has_four_pages_and_only_the_appendix_is_rotated(doc):
    assert doc.n_pages == SAMPLE_N_PAGES == 4
    assert [doc.page_rotation(p) for p in range(1, 5)] == [0, 0, 0, 90]
    assert ROTATED_PAGE == 4
    # A4 portrait, and the rotated page is displayed landscape (display sizes are in points).
    for p in (1, 2, 3):
        assert doc.page_sizes[p - 1] == pytest.approx((595.276, 841.89), abs=0.01)
    assert doc.page_sizes[3] == pytest.approx((841.89, 595.276), abs=0.01)


@pytest.mark.parametrize("fact", SAMPLE_FACTS.facts, ids=[f.key for f in SAMPLE_FACTS.facts])
def test_every_fact_is_in_the_text_layer_of_its_own_page_only(doc, fact):
    assert fact.type in BLOCK_TYPES

    # A table row is stored as cells joined by " | "; the text layer has the cells separated by spaces. Whitespace
    # is dropped because the text layer breaks wrapped lines (a Chinese sentence has no space to break at).
    def squash(text: str) -> str:
        return re.sub(r"\s+", "", normalize_text(text))

    needle = squash(fact.text.replace(" | ", " "))
    pages_with = [p for p in range(1, doc.n_pages + 1) if needle in squash(doc.page_text(p))]
    assert pages_with == [fact.page]


def test_qa_evidence_names_existing_facts_and_contains_the_answer_words(doc):
    assert len(SAMPLE_FACTS.qa) >= 3
    for qa in SAMPLE_FACTS.qa:
        evidence = " ".join(f.text for f in SAMPLE_FACTS.evidence(qa))
        # Each answer's key token appears verbatim in its evidence ("Every 14 days" -> "14").
        key = {"Shenzhen": "Shenzhen", "214.5 MWh": "214.5", "July": "July", "Every 14 days": "14"}[qa.answer]
        assert key in evidence


def test_unknown_fact_key_names_the_known_ones():
    with pytest.raises(KeyError, match="en_sentence"):
        SAMPLE_FACTS.fact("nope")


def test_chinese_text_extracts_without_spaced_out_latin(doc):
    text = doc.page_text(1)
    # The failure mode of PyMuPDF's china-s font is "T a b l e"; the embedded TrueType font keeps words and CJK intact.
    assert SAMPLE_FACTS.fact("zh_sentence").text[:10] in text
    assert "2. 研究背景" in text
    assert "样例报告 2024" in text


def test_chinese_font_is_embedded_and_latin_text_renders_ink(sample_pdf, doc):
    raw = sample_pdf.read_bytes()
    # reportlab embeds a subset of the TrueType font: /BaseFont /AAAAAA+WenQuanYiMicroHei... with a FontFile2 stream.
    assert re.search(rb"/BaseFont /[A-Z]{6}\+" + CJK_FONT.encode(), raw)
    assert b"/FontFile2" in raw
    assert b"STSong" not in raw and b"china-s" not in raw.lower()
    # The English title line renders dark pixels where the text layer says it is.
    title = next(line for line in doc.text_lines(1) if line.text == SAMPLE_FACTS.title)
    crop = np.asarray(doc.crop(1, title.bbox, dpi=100).convert("L"))
    assert (crop < 128).mean() > 0.1


@pytest.mark.parametrize("page", [1, 2, 3])
def test_chinese_glyphs_render_on_every_machine(doc, page):
    """The CJK font is embedded, so the Chinese lines are drawn whether or not the machine has a CJK system font
    (no skip: a blank crop here is a failure)."""
    lines = [li for li in doc.text_lines(page) if sum(ord(ch) > 0x2E80 for ch in li.text) >= 8]
    assert lines
    for line in lines:
        ink = (np.asarray(doc.crop(page, line.bbox, dpi=100).convert("L")) < 128).mean()
        assert ink > 0.03, (page, line.text)


def test_missing_font_package_is_a_clear_error(monkeypatch, tmp_path):
    import data_prep.sample as sample

    monkeypatch.setattr(sample, "CJK_FONT_PACKAGE", "no_such_font_package_here")
    with pytest.raises(RuntimeError, match="no_such_font_package_here"):
        sample.cjk_font_file()
