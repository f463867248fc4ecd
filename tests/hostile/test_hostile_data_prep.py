"""Hostile inputs and faults for ``python -m data_prep blocks`` (harness: harness.py), and a damaged cache as
``reward score`` and ``eval resolve`` meet it.

What a careless or unlucky user does: wrong files where a PDF goes, broken PDFs, odd pages, parser outputs of
another PDF or with NaN / infinite / off-page boxes, deeply nested or non-UTF-8 JSON, flag misuse, a cache folder
that is a file, read-only, or on a full disk, and cache entries damaged in every way we know (zero-byte, NaN or
reordered embeddings, edited manifests). Every case says what it expects: one clear error line, or success with a
check of what was written. A damaged entry must be rebuilt by ``data_prep blocks`` (without ``--force``) and refused
by the commands that only read the cache."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from reportlab.pdfgen import canvas

from tests.hostile.harness import Case, Ctx, check_case, clean_error, ids, run_cli, success

W, H = 600.0, 800.0
NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------------- building blocks
def blocks_cmd(*extra: str, encoder: str = "none") -> list[str]:
    return ["data_prep", "blocks", "{pdf}", "--parser", "pdftext", "--encoder", encoder, "--cache-dir",
            "{cache}", *extra]  # fmt: skip


def convert_cmd(parser: str) -> list[str]:
    return ["data_prep", "blocks", "{pdf}", "--parser", parser, "--parser-output", "{out}", "--encoder", "none",
            "--cache-dir", "{cache}"]  # fmt: skip


def write_pdf(path: Path, pages: list[tuple[float, float, list[str]]], rotate: int = 0) -> Path:
    c = canvas.Canvas(str(path), invariant=1)
    for w, h, lines in pages:
        c.setPageSize((w, h))
        if rotate:
            c.setPageRotation(rotate)
        c.setFont("Helvetica", 11)
        for i, line in enumerate(lines):
            c.drawString(20, h - 30 - 16 * i, line)
        c.showPage()
    c.save()
    return path


def page_pdf(c: Ctx) -> Path:
    return write_pdf(c.tmp / "page.pdf", [(W, H, ["Hello world from page one"])])


def with_pdf(make):
    """Set-up: ``{pdf}`` is what ``make(ctx)`` returns (a path), ``{cache}`` the case's own cache folder."""

    def setup(c: Ctx) -> None:
        c.vars.update(pdf=make(c), cache=c.tmp / "cache")

    return setup


def sample(c: Ctx) -> Path:
    return c.env.sample_pdf


def raw(name: str, data: bytes):
    return lambda c: c.write(name, data)


def truncated_sample(c: Ctx) -> Path:
    data = c.env.sample_pdf.read_bytes()
    return c.write("half.pdf", data[: len(data) // 2])


def encrypted_pdf(c: Ctx) -> Path:
    path = c.tmp / "locked.pdf"
    cv = canvas.Canvas(str(path), encrypt="secret")
    cv.drawString(50, 700, "secret text")
    cv.showPage()
    cv.save()
    return path


def zero_page_pdf(c: Ctx) -> Path:
    body = (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
            b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\n"
            b"trailer << /Root 1 0 R >>\n%%EOF\n")  # fmt: skip
    return c.write("empty.pdf", body)


def blank_pages(n: int):
    return lambda c: write_pdf(c.tmp / "blank.pdf", [(300, 300, [])] * n)


def fifo(c: Ctx) -> Path:
    path = c.tmp / "pipe.pdf"
    os.mkfifo(path)
    return path


def symlink_to_sample(c: Ctx) -> Path:
    link = c.tmp / "link.pdf"
    link.symlink_to(c.env.sample_pdf)
    return link


def broken_symlink(c: Ctx) -> Path:
    link = c.tmp / "dangling.pdf"
    link.symlink_to(c.tmp / "gone.pdf")
    return link


def image_only_pdf(c: Ctx) -> Path:
    from PIL import Image

    img = c.tmp / "photo.png"
    Image.new("RGB", (64, 48), (200, 30, 30)).save(img)
    path = c.tmp / "photo.pdf"
    cv = canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    cv.drawImage(str(img), 50, 50, 200, 150)
    cv.showPage()
    cv.save()
    return path


def invisible_cjk_text_pdf(c: Ctx) -> Path:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont

    if "STSong-Light" not in pdfmetrics.getRegisteredFontNames():
        pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    path = c.tmp / "hidden.pdf"
    cv = canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    cv.setFont("Helvetica", 11)
    cv.drawString(30, 260, "A visible line of ordinary text")
    t = cv.beginText(30, 200)
    t.setTextRenderMode(3)
    t.setFont("STSong-Light", 11)
    t.textLine("Words that no page image will ever show")
    cv.drawText(t)
    cv.showPage()
    cv.save()
    return path


def odd_text_pdf(text: str):
    return lambda c: write_pdf(c.tmp / "odd.pdf", [(W, H, [text])])


# ---------------------------------------------------------------------------------------------- checks of a success
def out_records(res) -> list[dict]:
    return [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]


def entry_ok(n_docs: int = 1, types: dict | None = None, min_blocks: int = 1, n_pages: int | None = None,
             warnings_at_most: int | None = None, warning_has: str | None = None):  # fmt: skip
    """Success check: ``n_docs`` JSON records, each entry loads and passes every check of the cache."""

    def check(c: Ctx, res) -> None:
        from data_prep.cache import load_cache

        recs = out_records(res)
        assert len(recs) == n_docs, f"{len(recs)} records for {n_docs} documents"
        for r in recs:
            entry = load_cache(c.vars["cache"], r["doc_key"])  # raises on any damage
            assert len(entry.blocks) >= min_blocks, f"{len(entry.blocks)} blocks"
            if entry.embeddings is not None:
                assert np.isfinite(entry.embeddings).all()
            if types is not None:
                assert r["types"] == types, r["types"]
            if n_pages is not None:
                assert r["n_pages"] == n_pages
        warns = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
        if warnings_at_most is not None:
            assert len(warns) <= warnings_at_most, f"{len(warns)} warning lines"
        if warning_has is not None:
            assert any(warning_has in w for w in warns), f"no warning with {warning_has!r}: {warns}"

    return check


# ---------------------------------------------------------------------------------------------- parser outputs
def mineru_middle(bbox, pages: int = 1, size=(W, H)) -> dict:
    span = {"type": "text", "content": "Hello world", "bbox": bbox}
    block = {"type": "text", "bbox": bbox, "index": 0, "lines": [{"bbox": bbox, "spans": [span]}]}
    return {"pdf_info": [{"page_idx": i, "page_size": list(size), "para_blocks": [block] if i == 0 else [],
                          "discarded_blocks": []} for i in range(pages)]}  # fmt: skip


def mineru_v4(bbox) -> dict:
    return {"schema": "docvortex.middle", "schema_version": "2.0", "is_full_document": True,
            "metadata": {"producer": {"name": "mineru", "version": "4.0.12"}},
            "pages": [{"page_idx": 0, "blocks": [{"type": "text", "index": 0, "bbox": bbox,
                                                  "content": [{"type": "text", "content": "Hello world"}]}]}]}  # fmt: skip


def content_list(bbox) -> list:
    return [{"type": "text", "text": "Hello world", "page_idx": 0, "bbox": bbox}]


def docling_doc(bbox=(100, 90, 300, 110), pages: int = 1, prov_extra: dict | None = None, **item_extra) -> dict:
    x0, y0, x1, y1 = bbox
    prov = {"page_no": 1, "bbox": {"l": x0, "t": H - y0, "r": x1, "b": H - y1, "coord_origin": "BOTTOMLEFT"},
            "charspan": [0, 11], **(prov_extra or {})}  # fmt: skip
    item = {"self_ref": "#/texts/0", "label": "text", "text": "Hello world", "prov": [prov], **item_extra}
    return {"pages": {str(n): {"size": {"width": W, "height": H}, "page_no": n} for n in range(1, pages + 1)},
            "body": {"children": [{"$ref": "#/texts/0"}]}, "texts": [item]}  # fmt: skip


def parser_output(data, name: str = "out.json"):
    """Set-up: the one-page PDF and a parser output file (a JSON value, or raw bytes/str)."""

    def setup(c: Ctx) -> None:
        if isinstance(data, bytes | str):
            out = c.write(name, data)
        else:
            out = c.write(name, json.dumps(data))  # NaN / Infinity as Python's json writes them
        c.vars.update(pdf=page_pdf(c), out=out, cache=c.tmp / "cache")

    return setup


DEEP = "[" * 100_000 + "]" * 100_000


# ---------------------------------------------------------------------------------------------- a damaged cache
def built_cache(encoder: str = "minilm"):
    """Set-up helper: a private cache with the sample built by the pdftext parser (MiniLM unless told)."""

    def setup(c: Ctx) -> Path:
        if encoder == "minilm":
            cache = c.env.copy_cache(c.tmp / "cache")
        else:
            cache = c.tmp / "cache"
            res = run_cli(["data_prep", "blocks", c.env.sample_pdf, "--parser", "pdftext", "--encoder", encoder,
                           "--cache-dir", cache])  # fmt: skip
            assert res.rc == 0, res.stderr
        c.vars.update(pdf=c.env.sample_pdf, cache=cache)
        return cache

    return setup


def _entry(c: Ctx) -> Path:
    return c.vars["cache"] / c.env.doc_key


def _nan(e: Path) -> None:
    arr = np.load(e / "embeddings.npy")
    np.save(e / "embeddings.npy", np.full_like(arr, np.nan))


def _reversed(e: Path) -> None:
    arr = np.load(e / "embeddings.npy")
    np.save(e / "embeddings.npy", arr[::-1].copy())


def _one_row_inf(e: Path) -> None:
    arr = np.load(e / "embeddings.npy")
    arr[3, 7] = np.inf
    np.save(e / "embeddings.npy", arr)


def _zeros(e: Path) -> None:
    arr = np.load(e / "embeddings.npy")
    np.save(e / "embeddings.npy", np.zeros_like(arr))


def _manifest(**changes):
    def damage(e: Path) -> None:
        m = json.loads((e / "manifest.json").read_text())
        m.update(changes)
        (e / "manifest.json").write_text(json.dumps(m))

    return damage


def _manifest_pages_plus_one(e: Path) -> None:
    m = json.loads((e / "manifest.json").read_text())
    m["n_pages"] += 1
    m["page_sizes"].append(m["page_sizes"][-1])
    (e / "manifest.json").write_text(json.dumps(m))


def _manifest_del(key: str):
    def damage(e: Path) -> None:
        m = json.loads((e / "manifest.json").read_text())
        del m[key]
        (e / "manifest.json").write_text(json.dumps(m))

    return damage


DAMAGES = {
    "emb-zero-bytes": lambda e: (e / "embeddings.npy").write_bytes(b""),
    "emb-all-nan": _nan,
    "emb-rows-reversed": _reversed,
    "emb-one-inf": _one_row_inf,
    "emb-all-zero": _zeros,
    "emb-truncated": lambda e: (e / "embeddings.npy").write_bytes((e / "embeddings.npy").read_bytes()[:-64]),
    "emb-missing": lambda e: (e / "embeddings.npy").unlink(),
    "manifest-n-pages-edited": _manifest(n_pages=99),
    "manifest-pages-plus-one": _manifest_pages_plus_one,
    "manifest-n-blocks-edited": _manifest(n_blocks=1),
    "manifest-no-emb-sha": _manifest_del("embeddings_sha256"),
    "manifest-garbled": lambda e: (e / "manifest.json").write_text('{"doc_key": '),
    "blocks-truncated": lambda e: (e / "blocks.jsonl").write_text(
        "".join((e / "blocks.jsonl").read_text().splitlines(keepends=True)[:-1])
    ),
    "blocks-not-utf8": lambda e: (e / "blocks.jsonl").write_bytes(b"\xff\xfe" + (e / "blocks.jsonl").read_bytes()),
}


def damaged(name: str):
    def setup(c: Ctx) -> None:
        built_cache()(c)
        c.vars["good"] = np.load(_entry(c) / "embeddings.npy").copy()
        DAMAGES[name](_entry(c))

    return setup


def rebuilt_like_new(c: Ctx, res) -> None:
    """A rerun without --force replaced the damaged entry by a good one: same blocks, the original vectors."""
    from data_prep.cache import load_cache

    (rec,) = out_records(res)
    assert rec["doc_key"] == c.env.doc_key
    entry = load_cache(c.vars["cache"], rec["doc_key"])
    np.testing.assert_array_equal(np.asarray(entry.embeddings), c.vars["good"])
    assert entry.n_pages == c.env.n_pages


# ---------------------------------------------------------------------------------------------- faults as callables
@contextlib.contextmanager
def refused_writes(root: Path, err: int):
    """Every create/mkdir/rename under ``root`` fails with ``err`` (a read-only mount, a full disk) while inside."""
    real_open, real_mkdir, real_rename = os.open, os.mkdir, os.rename
    root_s = str(root)

    def inside(p) -> bool:
        return os.path.abspath(os.fspath(p)).startswith(root_s)

    def g_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **k)

    def g_mkdir(path, *a, **k):
        if inside(path):
            raise OSError(err, os.strerror(err), str(path))
        return real_mkdir(path, *a, **k)

    def g_rename(src, dst, *a, **k):
        if inside(dst):
            raise OSError(err, os.strerror(err), str(dst))
        return real_rename(src, dst, *a, **k)

    with mock.patch.object(os, "open", g_open), mock.patch.object(os, "mkdir", g_mkdir):
        with mock.patch.object(os, "rename", g_rename):
            yield


def cli_under(fault, argv: list[str]):
    """A command line run inside the context ``fault(ctx)``; its outcome is passed on as is (a traceback stays a
    crash, an error line stays an error line)."""

    def command(c: Ctx):
        from core.errors import InputError

        with fault(c):
            res = run_cli([a.format(tmp=c.tmp, **c.vars) if isinstance(a, str) else a for a in argv])
        if res.exc is not None:
            raise res.exc
        if res.rc != 0:
            lines = res.error_lines
            raise InputError(lines[0].split("error: ", 1)[1] if len(lines) == 1 else res.stderr)
        return res

    return command


def _full_disk_after(n_bytes: int):
    def fault(c: Ctx):
        import data_prep.cache as cache_mod

        real = cache_mod._write_file
        written = [0]

        def write(path, data):
            room = max(0, n_bytes - written[0])
            if len(data) > room:
                real(path, data[:room])
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            written[0] += len(data)
            real(path, data)

        return mock.patch.object(cache_mod, "_write_file", write)

    return fault


def keep_entry(c: Ctx) -> None:
    """Set-up: a built cache whose entry must survive the case unchanged."""
    built_cache()(c)
    c.protect(_entry(c))


def stale_leftovers(c: Ctx) -> None:
    cache = built_cache()(c)
    (cache / f".tmp-{c.env.doc_key}-99999-deadbeef").mkdir()
    (cache / f".tmp-{c.env.doc_key}-99999-deadbeef" / "blocks.jsonl").write_text("half")
    (cache / ".locks").mkdir(exist_ok=True)
    (cache / ".locks" / f"{c.env.doc_key}.lock").write_text("")
    shutil.rmtree(cache / c.env.doc_key)


def no_leftovers(c: Ctx, res) -> None:
    entry_ok(min_blocks=5)(c, res)
    cache = c.vars["cache"]
    left = [p.name for p in cache.iterdir() if p.name.startswith((".tmp-", ".trash-"))]
    assert left == [], left
    assert not list(cache.glob(".locks/*")), "a lock file was left"


# ---------------------------------------------------------------------------------------------- the cases
SAMPLE = with_pdf(sample)
CASES = [
    # ---- what is passed as the PDF
    Case("ok-sample", blocks_cmd(encoder="minilm"), success(entry_ok(n_pages=4, min_blocks=20)), SAMPLE),
    Case("pdf-missing", blocks_cmd(), clean_error("no such file"), with_pdf(lambda c: c.tmp / "nope.pdf")),
    Case("pdf-is-a-directory", blocks_cmd(), clean_error("not a regular file"), with_pdf(lambda c: c.tmp)),
    Case("pdf-zero-bytes", blocks_cmd(), clean_error("not a PDF"), with_pdf(raw("z.pdf", b""))),
    Case("pdf-is-text", blocks_cmd(), clean_error("not a PDF"), with_pdf(raw("t.pdf", b"hello, I am a memo\n"))),
    Case(
        "pdf-is-png", blocks_cmd(), clean_error("not a PDF"), with_pdf(raw("p.pdf", b"\x89PNG\r\n\x1a\n" + b"\0" * 64))
    ),
    Case(
        "pdf-header-only", blocks_cmd(), clean_error("cannot be read as a PDF"), with_pdf(raw("h.pdf", b"%PDF-1.7\n"))
    ),
    Case(
        "pdf-garbage-after-header",
        blocks_cmd(),
        clean_error("cannot be read as a PDF"),
        with_pdf(raw("g.pdf", b"%PDF-1.4\n" + os.urandom(4096))),
    ),  # fmt: skip
    Case("pdf-truncated-half", blocks_cmd(), clean_error("cannot be read as a PDF"), with_pdf(truncated_sample)),
    Case("pdf-encrypted", blocks_cmd(), clean_error("encrypted"), with_pdf(encrypted_pdf)),
    Case("pdf-zero-pages", blocks_cmd(), clean_error("zero pages"), with_pdf(zero_page_pdf)),
    Case("pdf-fifo", blocks_cmd(), clean_error("not a regular file"), with_pdf(fifo)),
    Case("pdf-dev-null", blocks_cmd(), clean_error("not a regular file"), with_pdf(lambda c: Path("/dev/null"))),
    Case("pdf-broken-symlink", blocks_cmd(), clean_error("no such file"), with_pdf(broken_symlink)),
    Case("pdf-symlink", blocks_cmd(), success(entry_ok(n_pages=4)), with_pdf(symlink_to_sample)),
    Case(
        "pdf-junk-before-header",
        blocks_cmd(),
        success(entry_ok()),
        with_pdf(lambda c: c.write("j.pdf", b"JUNK" * 10 + c.env.sample_pdf.read_bytes())),
    ),  # fmt: skip
    Case(
        "pdf-name-with-spaces-and-cjk",
        blocks_cmd(),
        success(entry_ok()),
        with_pdf(lambda c: c.write("年度 报告 (final).pdf", c.env.sample_pdf.read_bytes())),
    ),  # fmt: skip
    Case(
        "pdf-given-twice",
        [
            "data_prep",
            "blocks",
            "{pdf}",
            "{pdf}",
            "--parser",
            "pdftext",
            "--encoder",
            "none",
            "--cache-dir",
            "{cache}",
        ],
        success(entry_ok(n_docs=2)),
        SAMPLE,
    ),  # fmt: skip
    Case(
        "pdf-good-then-missing",
        [
            "data_prep",
            "blocks",
            "{pdf}",
            "{tmp}/nope.pdf",
            "--parser",
            "pdftext",
            "--encoder",
            "none",
            "--cache-dir",
            "{cache}",
        ],
        clean_error("nope.pdf", "no such file"),
        SAMPLE,
    ),  # fmt: skip
    # ---- odd but valid PDFs
    Case(
        "pages-2000-blank",
        blocks_cmd(),
        success(entry_ok(types={"figure": 2000}, n_pages=2000, warnings_at_most=4, warning_has="1997 more")),
        with_pdf(blank_pages(2000)),
    ),  # fmt: skip
    Case(
        "page-blank-one",
        blocks_cmd(),
        success(entry_ok(types={"figure": 1}, warning_has="no text layer")),
        with_pdf(blank_pages(1)),
    ),  # fmt: skip
    Case(
        "page-200000pt",
        blocks_cmd(encoder="minilm"),
        success(entry_ok()),
        with_pdf(lambda c: write_pdf(c.tmp / "poster.pdf", [(200_000, 200_000, ["A poster line"])])),
    ),
    Case(
        "page-1pt",
        blocks_cmd(),
        success(entry_ok(min_blocks=0)),
        with_pdf(lambda c: write_pdf(c.tmp / "dot.pdf", [(1, 1, ["x"])])),
    ),
    Case(
        "pages-of-mixed-sizes",
        blocks_cmd(),
        success(entry_ok(n_pages=3)),
        with_pdf(
            lambda c: write_pdf(
                c.tmp / "mix.pdf", [(300, 200, ["small page"]), (2000, 1000, ["wide"]), (200, 3000, ["tall page"])]
            )
        ),
    ),  # fmt: skip
    *[
        Case(
            f"pages-rotated-{r}",
            blocks_cmd(),
            success(entry_ok(n_pages=2)),
            with_pdf(lambda c, r=r: write_pdf(c.tmp / "rot.pdf", [(W, H, ["Rotated text line"])] * 2, rotate=r)),
        )
        for r in (90, 180, 270)
    ],  # fmt: skip
    Case(
        "image-only-page",
        blocks_cmd(encoder="minilm"),
        success(entry_ok(types={"figure": 1})),
        with_pdf(image_only_pdf),
    ),  # fmt: skip
    Case(
        "text-that-renders-blank",
        blocks_cmd(),
        success(entry_ok(warning_has="render blank")),
        with_pdf(invisible_cjk_text_pdf),
    ),  # fmt: skip
    Case(
        "text-control-characters",
        blocks_cmd(encoder="minilm"),
        success(entry_ok()),
        with_pdf(odd_text_pdf("tab\there bell\x07 escape\x1b end")),
    ),  # fmt: skip
    Case(
        "text-one-very-long-line",
        blocks_cmd(encoder="minilm"),
        success(entry_ok()),
        with_pdf(lambda c: write_pdf(c.tmp / "long.pdf", [(20_000, 200, ["word " * 3000])])),
    ),
    Case(
        "text-1000-lines",
        blocks_cmd(encoder="minilm"),
        success(entry_ok(min_blocks=1)),
        with_pdf(lambda c: write_pdf(c.tmp / "many.pdf", [(W, 20_000, [f"line {i}" for i in range(1000)])])),
    ),
    # ---- flags
    Case(
        "parser-unknown",
        ["data_prep", "blocks", "{pdf}", "--parser", "pdftxt", "--cache-dir", "{cache}"],
        clean_error("pdftext"),
        SAMPLE,
    ),  # fmt: skip
    Case("encoder-unknown", blocks_cmd(encoder="minilmm"), clean_error("unknown encoder", "minilm"), SAMPLE),
    Case(
        "embed-url-with-minilm",
        blocks_cmd("--embed-url", "http://127.0.0.1:9/v1", encoder="minilm"),
        clean_error("only applies to --encoder qwen3-vl-embedding"),
        SAMPLE,
    ),  # fmt: skip
    Case("no-cache-dir", ["data_prep", "blocks", "{pdf}", "--parser", "pdftext"], clean_error("--cache-dir"), SAMPLE),
    Case(
        "no-pdf", ["data_prep", "blocks", "--parser", "pdftext", "--cache-dir", "{cache}"], clean_error("PDF"), SAMPLE
    ),  # fmt: skip
    Case("unknown-flag", blocks_cmd("--fast"), clean_error("unrecognized arguments"), SAMPLE),
    Case(
        "parser-output-for-two-pdfs",
        [
            "data_prep",
            "blocks",
            "{pdf}",
            "{pdf}",
            "--parser",
            "mineru",
            "--parser-output",
            "{out}",
            "--cache-dir",
            "{cache}",
        ],
        clean_error("belongs to one PDF"),
        parser_output(mineru_middle([100, 90, 300, 110])),
    ),  # fmt: skip
    Case(
        "parser-output-missing",
        convert_cmd("mineru"),
        clean_error("parser output file not found"),
        lambda c: (parser_output({})(c), c.vars.update(out=c.tmp / "none.json")),
    ),  # fmt: skip
    Case(
        "parser-output-with-pdftext",
        convert_cmd("pdftext"),
        clean_error("reads the PDF itself"),
        parser_output(mineru_middle([100, 90, 300, 110])),
    ),  # fmt: skip
    # ---- MinerU outputs
    Case("mineru-ok", convert_cmd("mineru"), success(entry_ok()), parser_output(mineru_middle([100, 90, 300, 110]))),
    Case(
        "mineru-nan",
        convert_cmd("mineru"),
        clean_error("page 1", "not a finite number"),
        parser_output(mineru_middle([100, 90, NAN, 110])),
    ),  # fmt: skip
    Case(
        "mineru-inf",
        convert_cmd("mineru"),
        clean_error("page 1", "not a finite number"),
        parser_output(mineru_middle([100, 90, INF, 110])),
    ),  # fmt: skip
    Case(
        "mineru-minus-inf",
        convert_cmd("mineru"),
        clean_error("not a finite number"),
        parser_output(mineru_middle([-INF, 90, 300, 110])),
    ),  # fmt: skip
    Case(
        "mineru-negative",
        convert_cmd("mineru"),
        clean_error("runs off the page"),
        parser_output(mineru_middle([-80, 90, 300, 110])),
    ),  # fmt: skip
    Case(
        "mineru-past-edge",
        convert_cmd("mineru"),
        clean_error("runs off the page"),
        parser_output(mineru_middle([100, 90, 900, 110])),
    ),  # fmt: skip
    Case(
        "mineru-small-overshoot",
        convert_cmd("mineru"),
        success(entry_ok()),
        parser_output(mineru_middle([100, 90, 602, 110])),
    ),  # fmt: skip
    Case(
        "mineru-no-area",
        convert_cmd("mineru"),
        success(entry_ok(min_blocks=0, types={})),
        parser_output(mineru_middle([100, 90, 100, 110])),
    ),  # fmt: skip
    Case(
        "mineru-bbox-string", convert_cmd("mineru"), clean_error("malformed"), parser_output(mineru_middle("abcd"))
    ),  # fmt: skip
    Case(
        "mineru-other-pdf-pages",
        convert_cmd("mineru"),
        clean_error("has 3 pages but"),
        parser_output(mineru_middle([100, 90, 300, 110], pages=3)),
    ),  # fmt: skip
    Case(
        "mineru-other-pdf-size",
        convert_cmd("mineru"),
        clean_error("page 1 is 612x792 pt"),
        parser_output(mineru_middle([100, 90, 300, 110], size=(612, 792))),
    ),  # fmt: skip
    Case(
        "mineru-page-idx-out-of-range",
        convert_cmd("mineru"),
        clean_error("page_idx 4 out of range"),
        parser_output({"pdf_info": [{"page_idx": 4, "para_blocks": []}]}),
    ),  # fmt: skip
    Case("mineru-not-json", convert_cmd("mineru"), clean_error("not a JSON file"), parser_output("{not json")),
    Case("mineru-empty-file", convert_cmd("mineru"), clean_error("not a JSON file"), parser_output("")),
    Case(
        "mineru-not-utf8", convert_cmd("mineru"), clean_error("not a JSON file"), parser_output(b'{"a": "\xff\xfe"}')
    ),
    Case("mineru-deeply-nested", convert_cmd("mineru"), clean_error("nested too deeply"), parser_output(DEEP)),
    Case("mineru-unknown-schema", convert_cmd("mineru"), clean_error("unknown schema"), parser_output({"x": 1})),
    Case(
        "mineru-model-json",
        convert_cmd("mineru"),
        clean_error("model.json"),
        parser_output([{"layout_dets": [], "page_info": {"page_no": 0}}]),
    ),  # fmt: skip
    Case(
        "mineru-content-list-v0",
        convert_cmd("mineru"),
        clean_error("no boxes"),
        parser_output([{"type": "text", "text": "x", "page_idx": 0}]),
    ),  # fmt: skip
    Case(
        "mineru-content-list-nan",
        convert_cmd("mineru"),
        clean_error("not a finite number"),
        parser_output(content_list([100, NAN, 300, 110])),
    ),  # fmt: skip
    Case(
        "mineru-content-list-ok",
        convert_cmd("mineru"),
        success(entry_ok()),
        parser_output(content_list([100, 100, 500, 140])),
    ),  # fmt: skip
    Case(
        "mineru-v4-inf",
        convert_cmd("mineru"),
        clean_error("not a finite number"),
        parser_output(mineru_v4([0.1, 0.1, INF, 0.2])),
    ),
    Case(
        "mineru-v4-points",
        convert_cmd("mineru"),
        clean_error("not normalised"),
        parser_output(mineru_v4([10, 20, 300, 400])),
    ),  # fmt: skip
    Case("mineru-v4-ok", convert_cmd("mineru"), success(entry_ok()), parser_output(mineru_v4([0.1, 0.1, 0.5, 0.2]))),
    # ---- Docling outputs
    Case("docling-ok", convert_cmd("docling"), success(entry_ok()), parser_output(docling_doc())),
    Case(
        "docling-nan",
        convert_cmd("docling"),
        clean_error("page 1", "not a finite number"),
        parser_output(docling_doc((100, 90, NAN, 110))),
    ),  # fmt: skip
    Case(
        "docling-inf",
        convert_cmd("docling"),
        clean_error("page 1", "not a finite number"),
        parser_output(docling_doc((100, 90, INF, 110))),
    ),  # fmt: skip
    Case(
        "docling-all-nan",
        convert_cmd("docling"),
        clean_error("not a finite number"),
        parser_output(docling_doc((NAN, NAN, NAN, NAN))),
    ),  # fmt: skip
    Case(
        "docling-negative",
        convert_cmd("docling"),
        clean_error("runs off the page"),
        parser_output(docling_doc((-80, 90, 300, 110))),
    ),  # fmt: skip
    Case(
        "docling-past-edge",
        convert_cmd("docling"),
        clean_error("runs off the page"),
        parser_output(docling_doc((100, 90, 900, 110))),
    ),  # fmt: skip
    Case(
        "docling-small-overshoot",
        convert_cmd("docling"),
        success(entry_ok()),
        parser_output(docling_doc((100, 90, 602, 110))),
    ),  # fmt: skip
    Case(
        "docling-no-area",
        convert_cmd("docling"),
        success(entry_ok(min_blocks=0, types={})),
        parser_output(docling_doc((100, 90, 100, 110))),
    ),  # fmt: skip
    Case(
        "docling-other-pdf-pages",
        convert_cmd("docling"),
        clean_error("describes 2 pages"),
        parser_output(docling_doc(pages=2)),
    ),  # fmt: skip
    Case(
        "docling-prov-on-missing-page",
        convert_cmd("docling"),
        clean_error("does not describe"),
        parser_output(docling_doc(prov_extra={"page_no": 9})),
    ),  # fmt: skip
    Case(
        "docling-prov-without-page",
        convert_cmd("docling"),
        clean_error("without page_no"),
        parser_output(docling_doc(prov_extra={"page_no": None})),
    ),  # fmt: skip
    Case(
        "docling-bbox-lacks-keys",
        convert_cmd("docling"),
        clean_error("lacks l/t/r/b"),
        parser_output(docling_doc(prov_extra={"bbox": {"l": 1}})),
    ),  # fmt: skip
    Case(
        "docling-bbox-string",
        convert_cmd("docling"),
        clean_error("lacks l/t/r/b"),
        parser_output(docling_doc(prov_extra={"bbox": {"l": "a", "t": 1, "r": 2, "b": 0}})),
    ),  # fmt: skip
    Case(
        "docling-coord-origin-unknown",
        convert_cmd("docling"),
        clean_error("unknown coord_origin"),
        parser_output(docling_doc(prov_extra={"bbox": {"l": 1, "t": 9, "r": 2, "b": 0, "coord_origin": "MIDDLE"}})),
    ),
    Case(
        "docling-prov-not-a-list",
        convert_cmd("docling"),
        clean_error("malformed DoclingDocument"),
        parser_output(docling_doc(prov=7)),
    ),  # fmt: skip
    Case(
        "docling-dangling-ref",
        convert_cmd("docling"),
        clean_error("points at nothing"),
        parser_output({**docling_doc(), "body": {"children": [{"$ref": "#/texts/5"}]}}),
    ),  # fmt: skip
    Case(
        "docling-page-without-size",
        convert_cmd("docling"),
        clean_error("has no size"),
        parser_output({**docling_doc(), "pages": {"1": {"page_no": 1}}}),
    ),  # fmt: skip
    Case("docling-not-json", convert_cmd("docling"), clean_error("not readable as JSON"), parser_output("{nope")),
    Case(
        "docling-not-utf8",
        convert_cmd("docling"),
        clean_error("not readable as JSON"),
        parser_output(b'{"pages": "\xff"}'),
    ),  # fmt: skip
    Case("docling-array", convert_cmd("docling"), clean_error("not a DoclingDocument"), parser_output([1, 2])),
    Case("docling-deeply-nested", convert_cmd("docling"), clean_error("nested too deeply"), parser_output(DEEP)),
    # ---- the cache folder
    Case(
        "cache-dir-is-a-file",
        blocks_cmd(),
        clean_error("not writable", "a file, not a folder"),
        lambda c: (SAMPLE(c), c.vars.update(cache=c.write("afile", "x"))),
    ),  # fmt: skip
    Case(
        "cache-dir-under-a-file",
        blocks_cmd(),
        clean_error("not writable"),
        lambda c: (SAMPLE(c), c.write("afile", "x"), c.vars.update(cache=c.tmp / "afile" / "cache")),
    ),
    Case(
        "cache-dir-in-proc",
        blocks_cmd(),
        clean_error("not writable"),
        lambda c: (SAMPLE(c), c.vars.update(cache=Path("/proc/quotecite-cache"))),
    ),  # fmt: skip
    Case(
        "cache-read-only-valid-entry",
        cli_under(lambda c: refused_writes(c.vars["cache"], errno.EROFS), blocks_cmd(encoder="minilm")),
        success(lambda c, res: entry_ok()(c, res.value)),
        keep_entry,
    ),  # fmt: skip
    Case(
        "cache-read-only-no-entry",
        cli_under(lambda c: refused_writes(c.vars["cache"], errno.EROFS), blocks_cmd()),
        clean_error("not writable"),
        lambda c: (SAMPLE(c), c.vars["cache"].mkdir()),
    ),  # fmt: skip
    Case(
        "cache-disk-full-at-once",
        cli_under(_full_disk_after(0), blocks_cmd(encoder="minilm")),
        clean_error("no space left"),
        SAMPLE,
    ),  # fmt: skip
    Case(
        "cache-disk-full-mid-entry",
        cli_under(_full_disk_after(5000), blocks_cmd(encoder="minilm")),
        clean_error("no space left"),
        SAMPLE,
    ),  # fmt: skip
    Case(
        "cache-disk-full-force-keeps-old",
        cli_under(_full_disk_after(5000), blocks_cmd("--force", encoder="minilm")),
        clean_error("no space left", "nothing was changed"),
        keep_entry,
    ),  # fmt: skip
    Case(
        "cache-locks-is-a-file",
        blocks_cmd(),
        clean_error("lock folder is a file"),
        lambda c: (SAMPLE(c), c.vars["cache"].mkdir(), (c.vars["cache"] / ".locks").write_text("x")),
    ),
    Case("cache-stale-temp-and-lock", blocks_cmd(encoder="minilm"), success(no_leftovers), stale_leftovers),
    Case(
        "cache-foreign-file-kept",
        blocks_cmd(encoder="minilm"),
        success(entry_ok()),
        lambda c: (built_cache()(c), c.protect(c.write("cache/notes.txt", "mine"))),
    ),  # fmt: skip
    Case("cache-valid-entry-reused", blocks_cmd(encoder="minilm"), success(entry_ok()), keep_entry),
    Case("cache-force-rebuilds", blocks_cmd("--force", encoder="minilm"), success(entry_ok()), built_cache()),
    # ---- a damaged entry: data_prep blocks (no --force) rebuilds it
    *[
        Case(f"rebuild-{name}", blocks_cmd(encoder="minilm"), success(rebuilt_like_new), damaged(name))
        for name in DAMAGES
    ],  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_data_prep_blocks(case, hostile_env, tmp_path):
    check_case(case, tmp_path, hostile_env, "data_prep blocks")


# ---------------------------------------------------------------------------------------------- readers of the cache
READ_DAMAGES = ["emb-zero-bytes", "emb-all-nan", "emb-rows-reversed", "emb-one-inf", "manifest-n-pages-edited",
                "manifest-pages-plus-one", "manifest-no-emb-sha"]  # fmt: skip
READERS = {
    "reward score": ["reward", "score", "--inputs", "{inputs}", "--cache-dir", "{cache}", "--out", "{tmp}/out.jsonl",
                     "--judge", "lexical"],
    "eval resolve": ["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out",
                     "{tmp}/pred.jsonl"],
}  # fmt: skip


def damaged_for_reader(name: str):
    def setup(c: Ctx) -> None:
        damaged(name)(c)
        c.vars.update(inputs=c.env.inputs, raw=c.env.raw, gold=c.env.gold)

    return setup


READER_CASES = [
    Case(
        f"{reader.replace(' ', '-')}-{name}",
        argv,
        clean_error("rebuild", what="refuse the damaged entry"),
        damaged_for_reader(name),
    )  # fmt: skip
    for reader, argv in READERS.items()
    for name in READ_DAMAGES
]


@pytest.mark.parametrize("case", READER_CASES, ids=ids(READER_CASES))
def test_readers_refuse_a_damaged_entry(case, hostile_env, tmp_path):
    check_case(case, tmp_path, hostile_env, "cache readers")
