"""``python -m data_prep blocks``: JSON lines, reuse, flags, and the qwen3-vl-embedding HTTP path end to end."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from reportlab.pdfgen import canvas

from core.cli import main
from data_prep.__main__ import COMMANDS
from data_prep.cache import load_cache, make_doc_key
from data_prep.document import sha256_file
from data_prep.encoders import get_encoder
from data_prep.parsers import get_parser
from tests.conftest import REPO
from tests.support.openai_server import ScriptedOpenAIServer

PROG = "python -m data_prep"


def blocks(capsys, *args) -> tuple[int, list[dict], list[str]]:
    """Run the command in this process: (exit status, stdout JSON records, stderr lines)."""
    rc = main(PROG, "", COMMANDS, ["blocks", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err.strip().splitlines()


@pytest.fixture(scope="module")
def small_pdf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("clipdf") / "memo.pdf"
    c = canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    c.setFont("Helvetica", 11)
    c.drawString(30, 260, "Memo on the budget")
    c.drawString(30, 220, "Travel costs rose by 8% in the second quarter.")
    c.showPage()
    c.save()
    return path


def test_one_json_line_per_document_with_key_counts_and_path(capsys, sample_pdf, small_pdf, tmp_path):
    cache = tmp_path / "cache"
    rc, records, err = blocks(capsys, sample_pdf, small_pdf, "--parser", "pdftext", "--cache-dir", cache)
    assert rc == 0
    assert [r["pdf"] for r in records] == [str(sample_pdf), str(small_pdf)]
    parser, encoder = get_parser("pdftext"), get_encoder("minilm")
    for rec, n_pages in zip(records, (4, 1), strict=True):
        assert set(rec) == {"pdf", "doc_key", "n_pages", "n_blocks", "cache_path", "types"}
        pdf = Path(rec["pdf"])
        assert rec["doc_key"] == make_doc_key(sha256_file(pdf), "pdftext", parser.version(), encoder.fingerprint())
        assert rec["n_pages"] == n_pages
        assert rec["cache_path"] == str(cache / rec["doc_key"])
        entry = load_cache(cache, rec["doc_key"])
        assert rec["n_blocks"] == len(entry.blocks) > 0
        assert rec["types"] == dict(collections.Counter(b.type for b in entry.blocks))
        assert entry.embeddings.shape == (rec["n_blocks"], 384)
    total = sum(r["n_blocks"] for r in records)
    assert err[-1].startswith(f"2 document(s), 5 pages, {total} blocks (pdftext + minilm) in ")
    assert err[-1].endswith(f"-> {cache}")


def test_second_run_reuses_the_entry_and_force_rebuilds_it(capsys, small_pdf, tmp_path):
    cache = tmp_path / "cache"
    args = (small_pdf, "--parser", "pdftext", "--encoder", "none", "--cache-dir", cache)
    _, (first,), _ = blocks(capsys, *args)
    inode = os.stat(first["cache_path"]).st_ino
    _, (again,), _ = blocks(capsys, *args)
    assert again == first and os.stat(again["cache_path"]).st_ino == inode
    _, (forced,), _ = blocks(capsys, *args, "--force")
    assert forced == first and os.stat(forced["cache_path"]).st_ino != inode
    assert load_cache(cache, first["doc_key"]).embeddings is None


@pytest.mark.parametrize(
    "extra, message",
    [
        (  # a parser output file describes one PDF
            ["--parser-output", "x.json"],
            "--parser-output x.json belongs to one PDF; got 2 PDFs",
        ),
        (  # the server URL means nothing to minilm
            ["--embed-url", "http://127.0.0.1:1/v1"],
            "--embed-url only applies to --encoder qwen3-vl-embedding (got --encoder minilm)",
        ),
        (  # typo in the encoder name
            ["--encoder", "minlm"],
            "unknown encoder 'minlm'; did you mean 'minilm'? (known: colqwen2, minilm, qwen3-vl-embedding, none)",
        ),
    ],
)
def test_flag_misuse_is_one_line_with_exit_2(capsys, sample_pdf, small_pdf, tmp_path, extra, message):
    rc, records, err = blocks(capsys, sample_pdf, small_pdf, "--parser", "pdftext", "--cache-dir", tmp_path, *extra)
    assert rc == 2 and records == []
    assert err == [f"{PROG} blocks: error: {message}"]
    assert list(tmp_path.iterdir()) == []


def test_unknown_parser_suggests_the_close_name(capsys, small_pdf, tmp_path):
    rc, _, err = blocks(capsys, small_pdf, "--parser", "pdftxt", "--cache-dir", tmp_path)
    assert rc == 2 and err == [
        f"{PROG} blocks: error: unknown parser 'pdftxt'; did you mean 'pdftext'? (known: docling, mineru, pdftext)"
    ]


def test_qwen3vl_over_http_fills_the_cache_with_unit_vectors(capsys, small_pdf, tmp_path):
    cache = tmp_path / "cache"
    with ScriptedOpenAIServer(model="embed-model", embed_dim=8) as srv:
        rc, (rec,), _ = blocks(
            capsys,
            small_pdf,
            "--parser",
            "pdftext",
            "--encoder",
            "qwen3-vl-embedding",
            "--embed-url",
            srv.url,
            "--embed-model",
            "embed-model",
            "--cache-dir",
            cache,
        )
        bodies = [b for path, b in srv.requests if path == "/v1/embeddings"]
    assert rc == 0
    entry = load_cache(cache, rec["doc_key"])
    assert entry.manifest["encoder"]["name"] == "qwen3-vl-embedding" and entry.manifest["encoder"]["dim"] == 8
    assert entry.embeddings.shape == (rec["n_blocks"], 8)
    np.testing.assert_allclose(np.linalg.norm(entry.embeddings.astype(np.float32), axis=1), 1.0, atol=2e-3)
    # One probe for the width (it goes into the cache key), then one request per block, each carrying a crop.
    assert len(bodies) == rec["n_blocks"] + 1
    assert all(b["messages"][1]["content"][0]["type"] == "image_url" for b in bodies[1:])


def test_unreachable_embedding_server_is_one_line_naming_it(capsys, small_pdf, tmp_path, monkeypatch):
    import data_prep.encoders.qwen3vl as qwen3vl

    monkeypatch.setattr(qwen3vl.time, "sleep", lambda s: None)  # skip the retry back-off
    with ScriptedOpenAIServer() as srv:
        url = srv.url  # closed when the block ends: nothing listens there any more
    cache = tmp_path / "cache"
    args = ("--encoder", "qwen3-vl-embedding", "--embed-url", url, "--cache-dir", cache)
    rc, records, err = blocks(capsys, small_pdf, "--parser", "pdftext", *args)
    assert rc == 2 and records == [] and len(err) == 1
    assert err[0].startswith(f"{PROG} blocks: error: {small_pdf}: {url}/embeddings: dimension probe failed")
    assert not cache.exists() or [p.name for p in cache.iterdir() if p.name != ".locks"] == []


def test_real_entry_point_prints_json_on_stdout_and_the_summary_on_stderr(sample_pdf, tmp_path):
    cmd = [sys.executable, "-m", "data_prep", "blocks", str(sample_pdf), "--parser", "pdftext"]
    cmd += ["--encoder", "none", "--cache-dir", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    (rec,) = [json.loads(line) for line in res.stdout.splitlines()]
    assert rec["n_pages"] == 4 and Path(rec["cache_path"]).is_dir()
    assert "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith("1 document(s), 4 pages, ")


# ---------------------------------------------------------------------------------------------- damaged entries
@pytest.mark.parametrize("damage", ["zero_bytes", "all_nan", "rows_reversed"])
def test_rerun_without_force_repairs_a_damaged_entry(capsys, small_pdf, tmp_path, damage):
    cache = tmp_path / "cache"
    rc, (rec,), _ = blocks(capsys, small_pdf, "--parser", "pdftext", "--cache-dir", cache)
    assert rc == 0
    emb_path = cache / rec["doc_key"] / "embeddings.npy"
    good = np.load(emb_path)
    if damage == "zero_bytes":
        emb_path.write_bytes(b"")
    elif damage == "all_nan":
        np.save(emb_path, np.full_like(good, np.nan))
    else:
        np.save(emb_path, good[::-1].copy())
    rc, (again,), err = blocks(capsys, small_pdf, "--parser", "pdftext", "--cache-dir", cache)
    assert rc == 0 and again["doc_key"] == rec["doc_key"], err
    np.testing.assert_array_equal(load_cache(cache, rec["doc_key"]).embeddings, good)


def test_full_disk_is_one_error_line(capsys, small_pdf, tmp_path, monkeypatch):
    import errno

    import data_prep.cache as cache_mod

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(cache_mod, "_write_file", full)
    rc, records, err = blocks(capsys, small_pdf, "--parser", "pdftext", "--cache-dir", tmp_path / "cache")
    assert rc == 2 and records == []
    assert [line for line in err if "error:" in line] == [
        f"{PROG} blocks: error: {tmp_path / 'cache'}: cannot write the cache entry of {small_pdf}: "
        "no space left on the device; nothing was changed in the cache"
    ]
    assert not any("Traceback" in line for line in err)


def test_two_thousand_blank_pages_print_a_few_warning_lines(capsys, tmp_path):
    pdf = tmp_path / "blank.pdf"
    c = canvas.Canvas(str(pdf), pagesize=(200, 200), invariant=1)
    for _ in range(2000):
        c.showPage()
    c.save()
    rc, (rec,), err = blocks(capsys, pdf, "--parser", "pdftext", "--encoder", "none", "--cache-dir", tmp_path / "c")
    assert rc == 0 and rec["n_pages"] == 2000 and rec["types"] == {"figure": 2000}
    warnings_ = [line for line in err if line.startswith("warning:")]
    assert 1 <= len(warnings_) <= 5, warnings_
    assert warnings_[0] == f"warning: {pdf}: page 1 has no text layer (scanned?); it becomes one figure block"
    assert warnings_[-1].startswith("warning: ... and 1997 more like this (last: ") and "page 2000" in warnings_[-1]


def test_warning_summary_counts_each_kind_separately():
    import io

    from data_prep.cmd_blocks import WarningSummary

    out = io.StringIO()
    s = WarningSummary(show=2, file=out)
    for p in range(1, 6):
        s.warn(f"a.pdf: page {p} has no text layer")
    s.warn("a.pdf: something else")
    s.flush()
    s.warn("b.pdf: page 1 has no text layer")  # a new document starts a new count
    s.flush()
    assert out.getvalue().splitlines() == [
        "warning: a.pdf: page 1 has no text layer",
        "warning: a.pdf: page 2 has no text layer",
        "warning: a.pdf: something else",
        "warning: ... and 3 more like this (last: a.pdf: page 5 has no text layer)",
        "warning: b.pdf: page 1 has no text layer",
    ]


def test_text_that_renders_blank_is_warned_about(capsys, tmp_path):
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont

    if "STSong-Light" not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    pdf = tmp_path / "hidden.pdf"
    c = canvas.Canvas(str(pdf), pagesize=(400, 300), invariant=1)
    c.setFont("Helvetica", 11)
    c.drawString(30, 260, "A visible line of ordinary text")
    t = c.beginText(30, 200)
    t.setTextRenderMode(3)  # invisible: in the text layer, never drawn (with a font the PDF does not embed)
    t.setFont("STSong-Light", 11)
    t.textLine("Words that no page image will ever show")
    c.drawText(t)
    c.showPage()
    c.save()
    rc, (rec,), err = blocks(capsys, pdf, "--parser", "pdftext", "--encoder", "none", "--cache-dir", tmp_path / "c")
    assert rc == 0 and rec["n_blocks"] == 2
    assert [line for line in err if line.startswith("warning:")] == [
        f"warning: {pdf}: page 1: 1 of 2 text blocks render blank (font not embedded: STSong-Light; no stand-in on "
        "this machine?): page images and crops show no text there"
    ]


def test_sample_renders_no_blank_text_warning(capsys, sample_pdf, tmp_path):
    rc, _, err = blocks(capsys, sample_pdf, "--parser", "pdftext", "--encoder", "none", "--cache-dir", tmp_path)
    assert rc == 0 and not [line for line in err if line.startswith("warning:")]
