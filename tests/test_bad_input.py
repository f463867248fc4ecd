"""Bad input to ``python -m data_prep blocks``: one clear line on stderr naming the input, exit status 2, no
traceback, and nothing half-written in the cache. Each case runs the real CLI in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reportlab.pdfgen import canvas

from data_prep.cache import list_cache
from tests.conftest import REPO, fixture_path

PREFIX = "python -m data_prep blocks: error: "


def run_blocks(*args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "data_prep", "blocks", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def assert_one_line_error(res: subprocess.CompletedProcess, names: Path | str, *phrases: str) -> str:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith(PREFIX) and str(names) in line
    for phrase in phrases:
        assert phrase in line, line
    return line


def assert_nothing_half_written(cache_dir: Path, keep: list[str] | None = None) -> None:
    """No entry (other than ``keep``), and no temp, trash or probe files in the cache dir."""
    if not cache_dir.is_dir():
        return
    assert list_cache(cache_dir) == sorted(keep or [])
    stray = [p.name for p in cache_dir.iterdir() if p.name.startswith(".") and p.name != ".locks"]
    assert stray == []
    assert [p.name for p in cache_dir.iterdir() if not p.name.startswith(".")] == sorted(keep or [])


def write_encrypted_pdf(path: Path) -> Path:
    c = canvas.Canvas(str(path), encrypt="secret")
    c.drawString(72, 720, "Confidential figures")
    c.showPage()
    c.save()
    return path


def write_zero_page_pdf(path: Path) -> Path:
    """A well-formed PDF whose page tree is empty (``/Count 0``), with a correct xref table."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def write_one_page_pdf(path: Path, size: tuple[float, float]) -> Path:
    c = canvas.Canvas(str(path), pagesize=size, invariant=1)
    c.drawString(20, size[1] / 2, "A small page.")
    c.showPage()
    c.save()
    return path


# Each case: (id, make(tmp) -> (extra CLI args, the input the message must name), phrases in the message).
CASES = [
    (  # a path that does not exist
        "missing",
        lambda tmp: ([tmp / "missing.pdf"], tmp / "missing.pdf"),
        ["no such file"],
    ),
    (  # a text file with a .pdf name
        "not-a-pdf",
        lambda tmp: ([_write(tmp / "notes.pdf", "meeting notes, not a PDF")], tmp / "notes.pdf"),
        ["not a PDF"],
    ),
    (  # a directory given as a PDF
        "directory",
        lambda tmp: ([tmp], tmp),
        ["not a regular file"],
    ),
    (  # reportlab's standard encryption with a user password
        "encrypted",
        lambda tmp: ([write_encrypted_pdf(tmp / "locked.pdf")], tmp / "locked.pdf"),
        ["encrypted"],
    ),
    (  # a valid PDF with an empty page tree
        "zero-pages",
        lambda tmp: ([write_zero_page_pdf(tmp / "empty.pdf")], tmp / "empty.pdf"),
        ["zero pages"],
    ),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("make, phrases", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_pdf_gives_one_line_and_writes_nothing(tmp_path, make, phrases):
    args, names = make(tmp_path)
    cache = tmp_path / "cache"
    res = run_blocks(*args, "--parser", "pdftext", "--cache-dir", cache)
    assert_one_line_error(res, names, *phrases)
    assert res.stdout == ""
    assert_nothing_half_written(cache)


def test_docling_output_of_another_pdf_is_rejected_by_page_count(sample_pdf, tmp_path):
    other = fixture_path("docling-project_docling", "redp5110_sampled.json")  # 18 pages; the sample has 4
    cache = tmp_path / "cache"
    res = run_blocks(sample_pdf, "--parser", "docling", "--parser-output", other, "--cache-dir", cache)
    line = assert_one_line_error(res, other, "18", "4")
    assert str(sample_pdf) in line
    assert_nothing_half_written(cache)


def test_docling_output_of_another_pdf_is_rejected_by_page_size(tmp_path):
    other = fixture_path("docling-project_docling", "2305.03393v1-pg9.json")  # one 612 x 792 pt page
    pdf = write_one_page_pdf(tmp_path / "small.pdf", (300, 200))
    cache = tmp_path / "cache"
    res = run_blocks(pdf, "--parser", "docling", "--parser-output", other, "--cache-dir", cache)
    assert_one_line_error(res, other, "612", "792", "300", "200")
    assert_nothing_half_written(cache)


def test_mineru_output_of_another_pdf_is_rejected(sample_pdf, tmp_path):
    other = fixture_path("opendatalab_MinerU", "demo1_v0.10.0_b1adde8e", "demo1_middle.json")  # 13 pages
    cache = tmp_path / "cache"
    res = run_blocks(sample_pdf, "--parser", "mineru", "--parser-output", other, "--cache-dir", cache)
    assert_one_line_error(res, other, "13", "4")
    assert_nothing_half_written(cache)


def test_mineru_output_of_another_pdf_is_rejected_by_page_size(tmp_path):
    """Same page count as the output (13), other page size: the sizes are compared, not only the count."""
    other = fixture_path("opendatalab_MinerU", "demo1_v0.10.0_b1adde8e", "demo1_middle.json")  # 13 pages, 544 x 743
    pdf = tmp_path / "thirteen.pdf"
    c = canvas.Canvas(str(pdf), pagesize=(300, 200), invariant=1)
    for i in range(13):
        c.drawString(20, 100, f"Page {i + 1} of a small document.")
        c.showPage()
    c.save()
    cache = tmp_path / "cache"
    res = run_blocks(pdf, "--parser", "mineru", "--parser-output", other, "--cache-dir", cache)
    assert_one_line_error(res, other, "544x743", "300x200", str(pdf))
    assert_nothing_half_written(cache)


@pytest.mark.parametrize("parser", ["mineru", "docling"])
@pytest.mark.parametrize(
    "content",
    ["{not json", ""],  # a broken file, an empty file
    ids=["broken", "empty"],
)
def test_parser_output_that_is_not_json_gives_one_line(sample_pdf, tmp_path, parser, content):
    out = _write(tmp_path / "out.json", content)
    cache = tmp_path / "cache"
    res = run_blocks(sample_pdf, "--parser", parser, "--parser-output", out, "--cache-dir", cache)
    assert_one_line_error(res, out, "JSON")
    assert_nothing_half_written(cache)


@pytest.mark.parametrize(
    "make_dir",
    [
        lambda tmp: tmp / "a-file" / "cache",  # its parent is a regular file (root ignores chmod, this it cannot)
        lambda tmp: Path("/proc/quotecite-cache"),  # on a filesystem where nothing can be created
    ],
    ids=["parent-is-a-file", "read-only-fs"],
)
def test_unwritable_cache_dir_gives_one_line(sample_pdf, tmp_path, make_dir):
    (tmp_path / "a-file").write_text("a regular file")
    cache = make_dir(tmp_path)
    res = run_blocks(sample_pdf, "--parser", "pdftext", "--cache-dir", cache)
    assert_one_line_error(res, cache, "is not writable")
    assert not cache.exists()


def test_bad_pdf_after_a_good_one_keeps_the_good_entry_and_nothing_else(sample_pdf, tmp_path):
    cache = tmp_path / "cache"
    bad = write_encrypted_pdf(tmp_path / "locked.pdf")
    res = run_blocks(sample_pdf, bad, "--parser", "pdftext", "--encoder", "none", "--cache-dir", cache)
    assert_one_line_error(res, bad, "encrypted")
    (record,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert record["pdf"] == str(sample_pdf)
    assert_nothing_half_written(cache, keep=[record["doc_key"]])


# ---------------------------------------------------------------------------------------------- crops of huge pages
def test_crop_of_a_block_on_a_200000_pt_page_is_bounded(tmp_path):
    from data_prep.document import DEFAULT_CROP_DPI, MAX_CROP_PIXELS, Document

    pdf = tmp_path / "poster.pdf"
    c = canvas.Canvas(str(pdf), pagesize=(200_000, 200_000), invariant=1)
    c.setFont("Helvetica", 2000)
    c.drawString(1000, 100_000, "Huge poster text")
    c.showPage()
    c.save()
    with Document.open(pdf) as doc:
        whole = doc.crop(1, (0, 0, 200_000, 200_000))  # 2.9 GB of RGB at 150 dpi without the bound
        assert whole.size[0] * whole.size[1] <= MAX_CROP_PIXELS
        assert whole.size == pytest.approx((2000, 2000), abs=2)  # aspect ratio kept
        # The text block itself: bounded, and the glyphs are in it (the lower dpi still shows them).
        block = doc.crop(1, (1000, 98_000, 19_000, 100_500))
        assert block.size[0] * block.size[1] <= MAX_CROP_PIXELS
        assert np.asarray(block.convert("L")).min() < 100
    # A crop that fits keeps the requested resolution exactly.
    with Document.open(pdf) as doc:
        small = doc.crop(1, (1000, 1000, 1072, 1036))
        assert small.size == pytest.approx((72 * DEFAULT_CROP_DPI / 72, 36 * DEFAULT_CROP_DPI / 72), abs=1)


def test_crop_with_non_finite_box_is_an_input_error(sample_pdf):
    from core.errors import InputError
    from data_prep.document import Document

    with Document.open(sample_pdf) as doc, pytest.raises(InputError, match="not 4 finite numbers"):
        doc.crop(1, (10, 10, float("inf"), 50))
