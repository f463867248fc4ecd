"""The per-document cache: round trip, keys, reuse, corruption detection and rebuild, concurrent and crashed builds.

Real parts throughout: PDFs generated here with reportlab, the real ``pdftext`` parser and the real ``minilm``
encoder. Two small parsers defined here cover what the real ones cannot be made to do on demand: convert a given
output file (``JsonBlocksParser``) and be slow enough for two processes to overlap (``SlowParser``).
"""

from __future__ import annotations

import errno
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from reportlab.pdfgen import canvas

from core.errors import InputError
from data_prep.cache import CacheError, build_cache, list_cache, load_cache, make_doc_key
from data_prep.document import Document
from data_prep.encoders import get_encoder
from data_prep.parsers import get_parser
from data_prep.types import Block


def write_pdf(path: Path, lines_per_page: list[list[str]]) -> Path:
    c = canvas.Canvas(str(path), pagesize=(400, 300), invariant=1)
    for lines in lines_per_page:
        c.setFont("Helvetica", 11)
        for i, line in enumerate(lines):
            c.drawString(30, 260 - 40 * i, line)
        c.showPage()
    c.save()
    return path


PAGES = [
    ["Quarterly report", "Revenue grew by 12% in 2023.", "Net income fell by 3%."],
    ["Outlook", "We expect growth to continue next year."],
]


class JsonBlocksParser:
    """Converts an output file holding a JSON list of block records (the shape of ``Block.to_json``)."""

    name = "jsonblocks"

    def __init__(self, version: str = "1") -> None:
        self._version = version

    def version(self) -> str:
        return self._version

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        return [Block.from_json(d) for d in json.loads(Path(output).read_text())]


class SlowParser:
    """One block per page after a pause; appends a line to ``log`` per parse, so a test can count parses."""

    name = "slow"

    def __init__(self, log: str, delay: float = 0.0, until: list[str] = ()) -> None:
        self.log, self.delay, self.until = log, delay, list(until)

    def version(self) -> str:
        return "1"

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(self.delay)
        deadline = time.monotonic() + 60
        while not all(os.path.exists(p) for p in self.until) and time.monotonic() < deadline:
            time.sleep(0.02)  # a parse that ends only once every file in ``until`` exists (a condition, no clock)
        return [Block(i, i + 1, (10, 10, 100, 40), "text", f"page {i + 1}") for i in range(doc.n_pages)]


class FailingEncoder:
    """An encoder that dies in the middle of a build."""

    name = "failing"
    dim = 4

    def fingerprint(self) -> str:
        return "failing:4"

    def embed_blocks(self, doc, blocks):
        raise RuntimeError("GPU fell off the bus")


@pytest.fixture(scope="module")
def pdf(tmp_path_factory) -> Path:
    return write_pdf(tmp_path_factory.mktemp("cachepdf") / "report.pdf", PAGES)


@pytest.fixture(scope="module")
def minilm():
    return get_encoder("minilm")


@pytest.fixture(scope="module")
def pdftext():
    return get_parser("pdftext")


def leftovers(cache_dir: Path) -> list[str]:
    """Temp or trash dirs left in a cache dir (there must never be any after a build returns or fails)."""
    return sorted(p.name for p in cache_dir.iterdir() if p.name.startswith((".tmp-", ".trash-")))


# ---------------------------------------------------------------------------------------------- round trip
def test_round_trip_keeps_blocks_and_memory_maps_float16_unit_embeddings(pdf, pdftext, minilm, tmp_path):
    built = build_cache(pdf, pdftext, minilm, tmp_path)
    with Document.open(pdf) as doc:
        blocks = pdftext.parse(doc)
        expected = minilm.embed_blocks(doc, blocks)
    loaded = load_cache(tmp_path, built.key)
    assert loaded.blocks == built.blocks
    assert [b.text for b in loaded.blocks] == [b.text for b in blocks]
    assert [b.block_id for b in loaded.blocks] == list(range(len(blocks)))
    assert isinstance(loaded.embeddings, np.memmap) and loaded.embeddings.dtype == np.float16
    assert not loaded.embeddings.flags.writeable
    assert loaded.embeddings.shape == (len(blocks), 384)
    np.testing.assert_allclose(loaded.embeddings.astype(np.float32), expected, atol=2e-3)
    np.testing.assert_allclose(np.linalg.norm(loaded.embeddings.astype(np.float32), axis=1), 1.0, atol=2e-3)
    full = load_cache(tmp_path, built.key, mmap=False).embeddings
    assert not isinstance(full, np.memmap)
    np.testing.assert_array_equal(full, loaded.embeddings)

    m = loaded.manifest
    assert m["doc_key"] == built.key and loaded.path == tmp_path / built.key
    assert loaded.n_pages == 2 and loaded.page_sizes == [(400.0, 300.0), (400.0, 300.0)]
    assert m["pdf_path"] == str(pdf.resolve()) and len(m["pdf_sha256"]) == 64
    assert m["parser"] == {"name": "pdftext", "version": pdftext.version()}
    assert m["encoder"] == {"name": "minilm", "dim": 384, "fingerprint": minilm.fingerprint()}
    assert m["n_blocks"] == len(blocks)
    assert list_cache(tmp_path) == [built.key]
    assert leftovers(tmp_path) == []


def test_blocks_only_entry_has_no_embeddings(pdf, pdftext, tmp_path):
    entry = build_cache(pdf, pdftext, None, tmp_path)
    assert entry.embeddings is None and entry.manifest["encoder"] is None
    assert not (entry.path / "embeddings.npy").exists()
    assert load_cache(tmp_path, entry.key).blocks == entry.blocks


def test_document_without_blocks_stores_an_empty_matrix(pdf, minilm, tmp_path):
    class Empty:
        name = "empty"

        def version(self):
            return "1"

        def parse(self, doc, output=None):
            return []

    entry = build_cache(pdf, Empty(), minilm, tmp_path)
    assert entry.blocks == [] and load_cache(tmp_path, entry.key).embeddings.shape == (0, 384)


# ---------------------------------------------------------------------------------------------- keys
SHA = "ab" * 32
BASE = (SHA, "pdftext", "pdftext-1", "minilm:384")


@pytest.mark.parametrize(
    "args",
    [
        ("cd" * 32, "pdftext", "pdftext-1", "minilm:384"),  # other PDF bytes
        (SHA, "mineru", "pdftext-1", "minilm:384"),  # other parser
        (SHA, "pdftext", "pdftext-2", "minilm:384"),  # other parser version
        (SHA, "pdftext", "pdftext-1", "qwen3-vl-embedding:2048"),  # other encoder
        (SHA, "pdftext", "pdftext-1", None),  # no encoder
    ],
)
def test_doc_key_changes_with_each_input(args):
    assert make_doc_key(*args) != make_doc_key(*BASE)
    assert make_doc_key(*BASE) == make_doc_key(*BASE)
    assert make_doc_key(*BASE).startswith(SHA[:16] + "-")


def test_doc_key_follows_the_pdf_bytes_and_the_converted_output_file(pdf, tmp_path):
    other = write_pdf(tmp_path / "other.pdf", [PAGES[0] + ["One more line."], PAGES[1]])
    parser = JsonBlocksParser()
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    out1.write_text(json.dumps([Block(0, 1, (10, 10, 90, 30), "title", "Quarterly report").to_json()]))
    out2.write_text(json.dumps([Block(0, 1, (10, 10, 90, 30), "text", "Quarterly report").to_json()]))
    cache = tmp_path / "cache"
    k1 = build_cache(pdf, parser, None, cache, parser_output=out1).key
    k2 = build_cache(pdf, parser, None, cache, parser_output=out2).key
    k3 = build_cache(other, parser, None, cache, parser_output=out1).key
    k4 = build_cache(pdf, JsonBlocksParser("2"), None, cache, parser_output=out1).key
    assert len({k1, k2, k3, k4}) == 4
    assert load_cache(cache, k2).blocks[0].type == "text"
    assert load_cache(cache, k1).manifest["parser"]["version"].startswith("1+output:")


def test_missing_parser_output_file_is_an_input_error(pdf, tmp_path):
    with pytest.raises(InputError, match="parser output file not found"):
        build_cache(pdf, JsonBlocksParser(), None, tmp_path / "cache", parser_output=tmp_path / "nope.json")
    assert list_cache(tmp_path / "cache") == []


# ---------------------------------------------------------------------------------------------- reuse and rebuild
def test_valid_entry_is_reused_and_force_rebuilds(pdf, tmp_path):
    log = tmp_path / "parses.log"
    parser = SlowParser(str(log))
    first = build_cache(pdf, parser, None, tmp_path / "c")
    inode = os.stat(first.path).st_ino
    again = build_cache(pdf, parser, None, tmp_path / "c")
    assert again.key == first.key and again.manifest["created"] == first.manifest["created"]
    assert os.stat(again.path).st_ino == inode
    assert len(log.read_text().splitlines()) == 1
    build_cache(pdf, parser, None, tmp_path / "c", force=True)
    assert len(log.read_text().splitlines()) == 2
    assert leftovers(tmp_path / "c") == []


def _truncate_embeddings(path: Path) -> None:
    data = (path / "embeddings.npy").read_bytes()
    (path / "embeddings.npy").write_bytes(data[: len(data) - 100])


def _edit_blocks(path: Path) -> None:
    text = (path / "blocks.jsonl").read_text()
    (path / "blocks.jsonl").write_text(text.replace("Revenue", "Revenues"))


def _truncate_blocks(path: Path) -> None:
    lines = (path / "blocks.jsonl").read_text().splitlines(keepends=True)
    (path / "blocks.jsonl").write_text("".join(lines[:-1]))


def _manifest_of_other_key(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m["doc_key"] = "0000000000000000-000000000000"
    (path / "manifest.json").write_text(json.dumps(m))


def _manifest_without_blocks_hash(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    del m["blocks_sha256"]
    (path / "manifest.json").write_text(json.dumps(m))


def _manifest_garbled(path: Path) -> None:
    (path / "manifest.json").write_text('{"doc_key": ')


def _manifest_wrong_dim(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m["encoder"]["dim"] = 768
    (path / "manifest.json").write_text(json.dumps(m))


def _embeddings_deleted(path: Path) -> None:
    (path / "embeddings.npy").unlink()


def _embeddings_float32(path: Path) -> None:
    arr = np.load(path / "embeddings.npy")
    np.save(path / "embeddings.npy", arr.astype(np.float32))


@pytest.mark.parametrize(
    "damage, file, message",
    [
        (_truncate_embeddings, "embeddings.npy", "unreadable or truncated"),  # a write cut short
        (_embeddings_deleted, "embeddings.npy", "unreadable or truncated"),  # file lost
        (_embeddings_float32, "embeddings.npy", "expected ({n}, 384) float16"),  # rewritten by another tool
        (_edit_blocks, "blocks.jsonl", "does not match the manifest"),  # hand edit
        (_truncate_blocks, "blocks.jsonl", "does not match the manifest"),  # a write cut short
        (_manifest_of_other_key, "manifest.json", "manifest is for '0000000000000000-000000000000'"),  # copied dir
        (_manifest_without_blocks_hash, "manifest.json", "manifest lacks blocks_sha256"),  # older or foreign manifest
        (_manifest_garbled, "manifest.json", "unreadable manifest"),  # half-written JSON
        (
            _manifest_wrong_dim,
            "embeddings.npy",
            "shape ({n}, 384) float16, expected ({n}, 768)",
        ),  # manifest and matrix disagree
    ],
)
def test_damaged_entry_is_reported_on_load_and_rebuilt(pdf, pdftext, minilm, tmp_path, damage, file, message):
    entry = build_cache(pdf, pdftext, minilm, tmp_path)
    message = message.format(n=len(entry.blocks))
    before = np.array(entry.embeddings)  # a copy: the damage rewrites the memory-mapped file in place
    damage(entry.path)
    with pytest.raises(CacheError) as err:
        load_cache(tmp_path, entry.key)
    msg = str(err.value)
    assert msg.startswith(str(entry.path / file)) and message in msg and "\n" not in msg
    rebuilt = build_cache(pdf, pdftext, minilm, tmp_path)
    assert rebuilt.key == entry.key and rebuilt.blocks == entry.blocks
    np.testing.assert_array_equal(load_cache(tmp_path, entry.key).embeddings, before)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("file", "message"), [("blocks.jsonl", "FIFO"), ("embeddings.npy", "FIFO"),
                                               ("manifest.json", "FIFO")])  # fmt: skip
def test_a_fifo_in_place_of_a_cache_file_is_an_error_never_a_wait(pdf, pdftext, minilm, tmp_path, file, message):
    # Opening a FIFO for reading blocks until a writer comes, so a reader that does not check first hangs forever;
    # the load runs in a child with a deadline, so a regression fails here instead of hanging the suite.
    entry = build_cache(pdf, pdftext, minilm, tmp_path / "c")
    (entry.path / file).unlink()
    os.mkfifo(entry.path / file)
    code = (f"from data_prep.cache import load_cache\ntry:\n    load_cache({str(tmp_path / 'c')!r}, {entry.key!r})\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.stdout.startswith("CacheError") and message in r.stdout and file in r.stdout, r.stdout + r.stderr


def test_missing_entry_names_the_key(tmp_path):
    with pytest.raises(CacheError, match="no cache entry for doc_key 'abc'"):
        load_cache(tmp_path, "abc")


# ---------------------------------------------------------------------------------------------- failures
def test_encoder_crash_mid_build_leaves_no_entry_and_no_temp_dir(pdf, pdftext, tmp_path):
    with pytest.raises(RuntimeError, match="GPU fell off the bus"):
        build_cache(pdf, pdftext, FailingEncoder(), tmp_path)
    assert list_cache(tmp_path) == [] and leftovers(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []


def test_temp_dir_of_a_killed_build_is_removed_by_the_next_build(pdf, tmp_path):
    parser = SlowParser(str(tmp_path / "log"))
    key = build_cache(pdf, parser, None, tmp_path / "c").key
    stale = tmp_path / "c" / f".tmp-{key}-99999-deadbeef"
    stale.mkdir()
    (stale / "blocks.jsonl").write_text("half")
    build_cache(pdf, parser, None, tmp_path / "c", force=True)
    assert leftovers(tmp_path / "c") == []


@pytest.mark.parametrize(
    "make_dir",
    [
        lambda tmp: tmp / "a-file" / "cache",  # parent is a regular file
        lambda tmp: Path("/proc/quotecite-cache"),  # a read-only filesystem
    ],
)
def test_unwritable_cache_dir_is_an_input_error(pdf, tmp_path, make_dir):
    (tmp_path / "a-file").write_text("not a directory")
    cache_dir = make_dir(tmp_path)
    with pytest.raises(InputError, match=f"cache dir {cache_dir} is not writable"):
        build_cache(pdf, SlowParser(str(tmp_path / "log")), None, cache_dir)
    assert not (tmp_path / "log").exists()  # failed before any parsing


# ---------------------------------------------------------------------------------------------- concurrency
def _build_in_child(pdf: str, cache_dir: str, log: str, out: str, ready, go, started: list[str], i: int) -> None:
    ready.set()
    go.wait(30)
    t0 = time.time()
    Path(started[i]).touch()  # this process is about to build: the parse (in either process) waits for both
    entry = build_cache(pdf, SlowParser(log, until=started), None, cache_dir)
    Path(out).write_text(json.dumps({"key": entry.key, "created": entry.manifest["created"], "t": [t0, time.time()]}))


def test_two_processes_building_the_same_document_share_one_valid_entry(pdf, tmp_path):
    cache_dir, log = tmp_path / "cache", tmp_path / "parses.log"
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    procs = []
    started = [str(tmp_path / f"started{i}") for i in range(2)]
    for i in range(2):
        ready = ctx.Event()
        args = (str(pdf), str(cache_dir), str(log), str(tmp_path / f"out{i}.json"), ready, go, started, i)
        procs.append((ctx.Process(target=_build_in_child, args=args), ready))
    for proc, _ in procs:
        proc.start()
    for _, ready in procs:
        assert ready.wait(60)
    go.set()  # both processes are imported and start building at the same moment
    for proc, _ in procs:
        proc.join(60)
        assert proc.exitcode == 0
    r1, r2 = (json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2))
    assert max(r1["t"][0], r2["t"][0]) < min(r1["t"][1], r2["t"][1])  # they overlapped: the parse waited for both
    assert r1["key"] == r2["key"] and r1["created"] == r2["created"]  # one waited and reused the other's entry
    assert len(log.read_text().splitlines()) == 1
    assert list_cache(cache_dir) == [r1["key"]]
    assert len(load_cache(cache_dir, r1["key"]).blocks) == 2
    assert leftovers(cache_dir) == []


# ---------------------------------------------------------------------------------------------- silent damage
def _set_manifest(path: Path, **changes) -> None:
    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    (path / "manifest.json").write_text(json.dumps(m))


def _rehash_manifest(path: Path, **changes) -> None:
    """Edit the manifest *and* recompute its content checksum, as a careful forger would."""
    from data_prep.cache import manifest_content_sha256

    m = json.loads((path / "manifest.json").read_text())
    m.update(changes)
    m["content_sha256"] = manifest_content_sha256(m)
    (path / "manifest.json").write_text(json.dumps(m))


def _embeddings_all_nan(path: Path) -> None:
    arr = np.load(path / "embeddings.npy")
    np.save(path / "embeddings.npy", np.full_like(arr, np.nan))


def _embeddings_nan_and_manifest_rehashed(path: Path) -> None:
    from data_prep.document import sha256_file

    _embeddings_all_nan(path)
    _rehash_manifest(path, embeddings_sha256=sha256_file(path / "embeddings.npy"))


def _embeddings_rows_reversed(path: Path) -> None:
    arr = np.load(path / "embeddings.npy")
    np.save(path / "embeddings.npy", arr[::-1].copy())


def _embeddings_zero_bytes(path: Path) -> None:
    (path / "embeddings.npy").write_bytes(b"")


def _manifest_without_embeddings_hash(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    del m["embeddings_sha256"]
    (path / "manifest.json").write_text(json.dumps(m))


def _manifest_page_count_edited(path: Path) -> None:
    _set_manifest(path, n_pages=3)


def _manifest_page_count_and_sizes_edited(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    _set_manifest(path, n_pages=3, page_sizes=m["page_sizes"] + [[400.0, 300.0]])


def _manifest_page_count_cut_and_rehashed(path: Path) -> None:
    m = json.loads((path / "manifest.json").read_text())
    _rehash_manifest(path, n_pages=1, page_sizes=m["page_sizes"][:1])


def _manifest_page_size_edited(path: Path) -> None:
    _set_manifest(path, page_sizes=[[400.0, 300.0], [800.0, 300.0]])


@pytest.mark.parametrize(
    "damage, file, message",
    [
        (_embeddings_all_nan, "embeddings.npy", "does not match the manifest"),  # every quote would land on block 0
        (_embeddings_nan_and_manifest_rehashed, "embeddings.npy", "rows hold NaN or infinite values"),
        (_embeddings_rows_reversed, "embeddings.npy", "does not match the manifest"),  # citations on wrong blocks
        (_embeddings_zero_bytes, "embeddings.npy", "unreadable or truncated (empty file)"),  # was an EOFError
        (_manifest_without_embeddings_hash, "manifest.json", "manifest lacks embeddings_sha256"),  # older entry
        (_manifest_page_count_edited, "manifest.json", "n_pages is 3 but it lists 2 page sizes"),
        (_manifest_page_count_and_sizes_edited, "manifest.json", "does not match its content_sha256"),
        (_manifest_page_count_cut_and_rehashed, "manifest.json", "n_pages is 1 but blocks.jsonl has blocks on page 2"),
        (_manifest_page_size_edited, "manifest.json", "does not match its content_sha256"),
    ],
)
def test_silently_damaged_entry_is_refused_on_load_and_replaced_by_a_rebuild(
    pdf, pdftext, minilm, tmp_path, damage, file, message
):
    entry = build_cache(pdf, pdftext, minilm, tmp_path)
    before = np.array(entry.embeddings)
    damage(entry.path)
    with pytest.raises(CacheError) as err:
        load_cache(tmp_path, entry.key)
    msg = str(err.value)
    assert msg.startswith(str(entry.path / file)) and message in msg and "\n" not in msg
    rebuilt = build_cache(pdf, pdftext, minilm, tmp_path)  # no force: the failed check makes it rebuild
    assert rebuilt.key == entry.key and rebuilt.blocks == entry.blocks
    np.testing.assert_array_equal(load_cache(tmp_path, entry.key).embeddings, before)
    assert load_cache(tmp_path, entry.key).n_pages == 2
    assert leftovers(tmp_path) == []


def test_page_count_edited_consistently_is_caught_against_the_pdf(pdf, pdftext, tmp_path):
    entry = build_cache(pdf, pdftext, None, tmp_path)
    m = entry.manifest
    _rehash_manifest(entry.path, n_pages=3, page_sizes=m["page_sizes"] + [[400.0, 300.0]])
    cached = load_cache(tmp_path, entry.key)  # self-consistent now; the PDF itself says otherwise
    with pytest.raises(CacheError, match=r"says 3 pages but .*report\.pdf has 2"):
        cached.open_pdf()


def test_manifest_records_checksums_of_both_files(pdf, pdftext, minilm, tmp_path):
    from data_prep.cache import manifest_content_sha256
    from data_prep.document import sha256_file

    entry = build_cache(pdf, pdftext, minilm, tmp_path)
    m = entry.manifest
    assert m["embeddings_sha256"] == sha256_file(entry.path / "embeddings.npy")
    assert m["blocks_sha256"] == sha256_file(entry.path / "blocks.jsonl")
    assert m["content_sha256"] == manifest_content_sha256(m)
    assert build_cache(pdf, pdftext, None, tmp_path / "b").manifest["embeddings_sha256"] is None


# ---------------------------------------------------------------------------------------------- read-only, locks, ENOSPC
def _refuse_writes_under(monkeypatch, root: Path, err: int = errno.EROFS) -> None:
    """Every create/write/mkdir/rename under ``root`` fails with ``err``, as on a read-only mount (tests run as
    root, for whom chmod does not stop writes)."""
    real_open, real_mkdir, real_rename = os.open, os.mkdir, os.rename
    root = str(root)

    def inside(p) -> bool:
        return str(os.path.abspath(os.fspath(p))).startswith(root)

    def guarded_open(path, flags, *a, **k):
        if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(err, os.strerror(err), str(path))
        return real_open(path, flags, *a, **k)

    def guarded_mkdir(path, *a, **k):
        if inside(path):
            raise OSError(err, os.strerror(err), str(path))
        return real_mkdir(path, *a, **k)

    def guarded_rename(src, dst, *a, **k):
        if inside(dst):
            raise OSError(err, os.strerror(err), str(dst))
        return real_rename(src, dst, *a, **k)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)
    monkeypatch.setattr(os, "rename", guarded_rename)


def test_read_only_cache_serves_its_valid_entry(pdf, pdftext, minilm, tmp_path, monkeypatch):
    entry = build_cache(pdf, pdftext, minilm, tmp_path / "cache")
    _refuse_writes_under(monkeypatch, tmp_path / "cache")
    again = build_cache(pdf, pdftext, minilm, tmp_path / "cache")
    assert again.key == entry.key and again.manifest["created"] == entry.manifest["created"]
    # A missing entry in a read-only cache is still a clear error.
    with pytest.raises(InputError, match="is not writable"):
        build_cache(pdf, pdftext, None, tmp_path / "cache")


def test_read_only_cache_dir_by_permissions_serves_its_valid_entry(pdf, pdftext, tmp_path):
    """Also as root (which ignores the mode bits): a file stands where the lock folder goes, so taking the build
    lock fails for anyone, and the folder's mtime shows any file created or removed in it (the write probe too)."""
    cache = tmp_path / "cache"
    entry = build_cache(pdf, pdftext, None, cache)
    shutil.rmtree(cache / ".locks", ignore_errors=True)
    (cache / ".locks").write_text("not a folder")
    before = os.stat(cache).st_mtime_ns
    os.chmod(cache, 0o555)
    try:
        assert build_cache(pdf, pdftext, None, cache).key == entry.key
    finally:
        os.chmod(cache, 0o755)
    assert os.stat(cache).st_mtime_ns == before, "serving a valid entry wrote to the cache folder"


def test_no_lock_file_is_left_after_a_build_or_a_failed_one(pdf, pdftext, tmp_path):
    build_cache(pdf, pdftext, None, tmp_path)
    with pytest.raises(RuntimeError, match="GPU fell off the bus"):
        build_cache(pdf, pdftext, FailingEncoder(), tmp_path)
    with pytest.raises(InputError):
        build_cache(pdf, JsonBlocksParser(), None, tmp_path, parser_output=tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"block_id": 0, "page": 9, "bbox": [1, 1, 5, 5], "type": "text", "text": "x"}]))
    with pytest.raises(InputError, match="on page 9"):
        build_cache(pdf, JsonBlocksParser(), None, tmp_path, parser_output=bad)
    assert not (tmp_path / ".locks").exists() or list((tmp_path / ".locks").iterdir()) == []
    assert leftovers(tmp_path) == []


def _enospc_after(monkeypatch, n_bytes: int) -> None:
    """Writes of cache files fail with ENOSPC once ``n_bytes`` of them have gone out (a disk filling up)."""
    import data_prep.cache as cache_mod

    real = cache_mod._write_file
    written = [0]

    def full_disk(path: Path, data: bytes) -> None:
        room = max(0, n_bytes - written[0])
        if len(data) > room:
            real(path, data[:room])  # what fitted is on disk, like a real short write
            written[0] += room
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        written[0] += len(data)
        real(path, data)

    monkeypatch.setattr(cache_mod, "_write_file", full_disk)


@pytest.mark.parametrize("fails_on", ["blocks.jsonl", "embeddings.npy", "manifest.json"])
def test_full_disk_during_a_build_is_one_line_and_keeps_the_old_entry(
    pdf, pdftext, minilm, tmp_path, monkeypatch, fails_on
):
    from core.io import OutputError

    old = build_cache(pdf, pdftext, minilm, tmp_path)
    sizes = [(old.path / f).stat().st_size for f in ("blocks.jsonl", "embeddings.npy")]
    room = {"blocks.jsonl": 10, "embeddings.npy": sizes[0] + 10, "manifest.json": sum(sizes) + 10}[fails_on]
    _enospc_after(monkeypatch, room)
    with pytest.raises(OutputError) as err:
        build_cache(pdf, pdftext, minilm, tmp_path, force=True)
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path}: cannot write the cache entry of {pdf}: no space left on the device")
    assert "\n" not in msg
    assert load_cache(tmp_path, old.key).manifest["created"] == old.manifest["created"]  # the old entry is intact
    assert leftovers(tmp_path) == [] and not list(tmp_path.glob(".locks/*"))
