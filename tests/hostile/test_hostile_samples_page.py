"""Hostile input to the samples browser (``python -m launch.samples_page``, ``eval.samples_page``) and its writer
(``reward.samples``): the page is a security boundary. A batch file names its crops and carries texts and numbers
from a run; the page shows them, so a batch file that names a file outside its samples folder, a crop whose bytes
are not its hash, or markup in any field must neither leak a file into the page nor inject an element into it, and
a batch file that is not what it claims is one clear error, never a traceback or a hang.

Each case goes through the suite's harness (``harness.py``) and is counted in its summary; the chromium test renders
every hostile batch at once and looks for any injected element in the live DOM."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.hostile import harness
from tests.hostile.harness import Case, clean_error

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- qc-secret-7f3a"
MARKUP = [
    '<img src=x onerror="document.body.dataset.pwned=1">',
    "<script>document.body.dataset.pwned=1</script>",
    '"><svg onload="document.body.dataset.pwned=1">',
    "</script><b id=pwned>x</b>",
    "<!--<script>",
    "' onmouseover='document.body.dataset.pwned=1",
    '<iframe src="javascript:document.body.dataset.pwned=1"></iframe>',
    "&lt;b id=pwned&gt;",
    "<a href='javascript:document.body.dataset.pwned=1'>x</a>",
    "\u2028<style>*{display:none}</style>\u2029",
]


def png(i: int = 0) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (30, 20), (i * 50 % 255, 90, 160)).save(b, "PNG")
    return b.getvalue()


def response(**over) -> dict:
    r = {"qid": "q1", "answer": "Shenzhen", "quotes": ["q"], "advantage": 0.5, "reward": {"overall": 0.8},
         "scores": {"answer": 4, "relevance": 4, "coverage": 3, "crop_relevance": [1]}, "reply": "ok",
         "citations": [{"page": 1, "bbox": [1.0, 2.0, 30.0, 40.0], "similarity": 0.9, "text": "t", "crop": 0}],
         "crops": [], "unscorable": False}  # fmt: skip
    r.update(over)
    return r


def batch(responses=None, **group_over) -> dict:
    g = {"qid": "q1", "attempt": 1, "question": "Which?", "gold": "Shenzhen", "keep": 0.5, "trained": True,
         "responses": responses if responses is not None else [response(), response(advantage=-0.5)]}  # fmt: skip
    g.update(group_over)
    return {"step": 1, "time": 0.0, "groups": [g]}


def make_run(ctx, rec, raw: bytes | None = None, crops: dict[str, bytes] | None = None) -> Path:
    """A metrics folder ``tmp/run`` with one batch file (``rec`` as JSON, or ``raw`` bytes) and ``crops``
    (name -> bytes) under ``samples/``, plus a private file outside it."""
    run = ctx.tmp / "run"
    (run / "samples" / "crops").mkdir(parents=True)
    ctx.write("private/id_ed25519", SECRET)
    for name, data in (crops or {}).items():
        (run / "samples" / name).write_bytes(data)
    data = raw if raw is not None else json.dumps(rec).encode()
    (run / "samples" / "batch_000001.json").write_bytes(data)
    ctx.vars["run"] = str(run)
    return run


def write_page(ctx):
    from eval.samples_page import write_samples_page

    return write_samples_page(ctx.vars["run"], embed=ctx.vars.get("embed", False))


def page_is_safe(expect_crops: int | None = None):
    """The page holds no private bytes and no markup from the batch outside its escaped data, and shows
    ``expect_crops`` crops (when given)."""

    def check(ctx, res):
        page = Path(res.value).read_text()
        secret_b64 = __import__("base64").b64encode(SECRET.encode()).decode()[:24]
        assert SECRET not in page and secret_b64 not in page, "a private file reached the page"
        data = re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S)
        assert data, "the data element is gone (closed early by batch text?)"
        assert "<" not in data.group(1) and ">" not in data.group(1), "raw markup inside the data element"
        rendered = json.loads(data.group(1))
        srcs = [c for step in rendered for g in step["groups"] for r in g["responses"] for c in r["crops"] if c]
        assert all(s.startswith("samples/crops/") or s.startswith("data:image/png;base64,") for s in srcs), srcs
        if expect_crops is not None:
            assert len(srcs) == expect_crops, srcs

    return check


def _crop_name(data: bytes) -> str:
    return f"crops/{hashlib.sha256(data).hexdigest()}.png"


def _link_out(ctx):
    good = png(1)
    name = _crop_name(good)
    run = make_run(ctx, batch([response(crops=[name]), response(crops=[name], advantage=-1)]))
    os.symlink(ctx.tmp / "private" / "id_ed25519", run / "samples" / name)


def _named_dir(ctx):
    good = png(2)
    name = _crop_name(good)
    run = make_run(ctx, batch([response(crops=[name]), response(advantage=-1)]))
    (run / "samples" / name).mkdir()


def _fifo_crop(ctx):
    name = _crop_name(b"x")
    run = make_run(ctx, batch([response(crops=[name]), response(advantage=-1)]))
    os.mkfifo(run / "samples" / name)


def cases() -> list[Case]:
    out: list[Case] = []
    good = png(0)
    ok_name = _crop_name(good)
    # --- crops named outside the samples folder, or not by their hash: never read, never linked
    for label, name in [("absolute", "{tmp}/private/id_ed25519"), ("dotdot", "../../private/id_ed25519"),
                        ("dotdot-crops", "crops/../../../private/id_ed25519"), ("etc", "/etc/hostname"),
                        ("proc", "/proc/self/environ"), ("dev-zero", "/dev/zero"), ("url", "https://x.test/a.png"),
                        ("js-url", "javascript:alert(1)"), ("data-url", "data:text/html,<b>x</b>"),
                        ("quote", 'crops/a".png onerror="x'), ("upper-hash", ok_name.upper()),
                        ("short-hash", "crops/abc.png"), ("no-ext", ok_name[:-4]), ("backslash", "crops\\..\\x.png"),
                        ("empty", ""), ("null-byte", "crops/\x00.png"), ("number", 7), ("list", ["crops/a.png"]),
                        ("object", {"path": "/etc/hostname"}), ("none", None),
                        ("missing-file", "crops/" + "a" * 64 + ".png"), ("trailing-slash", ok_name + "/"),
                        ("percent-dots", "crops/%2e%2e/%2e%2e/x.png"), ("unicode-dots", "crops/\u2024\u2024/x.png"),
                        ("windows", "C:\\Windows\\win.ini"), ("long", "crops/" + "a" * 5000 + ".png")]:  # fmt: skip
        for embed in (False, True):

            def setup(ctx, name=name, embed=embed):
                n = name.format(tmp=ctx.tmp) if isinstance(name, str) else name
                make_run(ctx, batch([response(crops=[n, ok_name]), response(crops=[ok_name], advantage=-1)]),
                         crops={ok_name: good})  # fmt: skip
                ctx.vars["embed"] = embed

            out.append(Case(f"crop-{label}-{'embed' if embed else 'link'}", write_page,
                            harness.value(page_is_safe(expect_crops=2), "the two real crops, nothing else"),
                            setup))  # fmt: skip
    # --- a crop named by a hash its bytes do not have, a link, a folder, a FIFO: not shown (no hang)
    for label, setup in [
        ("wrong-bytes", lambda ctx: make_run(ctx, batch([response(crops=[ok_name]), response(advantage=-1)]),
                                             crops={ok_name: SECRET.encode()})),
        ("link-out", _link_out),
        ("folder", _named_dir),
        ("fifo", _fifo_crop),
    ]:  # fmt: skip
        for embed in (False, True):

            def s2(ctx, setup=setup, embed=embed):
                setup(ctx)
                ctx.vars["embed"] = embed

            out.append(Case(f"crop-{label}-{'embed' if embed else 'link'}", write_page,
                            harness.value(page_is_safe(expect_crops=0), "no crop shown"), s2))  # fmt: skip
    # --- markup in every text and number field: escaped, the page still renders
    fields = {
        "answer": lambda m: batch([response(answer=m), response(advantage=-1)]),
        "reply": lambda m: batch([response(reply=m), response(advantage=-1)]),
        "question": lambda m: batch(question=m),
        "gold": lambda m: batch(gold=m),
        "qid": lambda m: batch(qid=m),
        "citation-text": lambda m: batch([response(citations=[{"page": 1, "bbox": [0, 0, 1, 1], "similarity": 0.1,
                                                               "text": m, "crop": None}]), response(advantage=-1)]),
        "citation-page": lambda m: batch([response(citations=[{"page": m, "bbox": [0, 0, 1, 1], "similarity": 0.1,
                                                               "text": "t", "crop": None}]), response(advantage=-1)]),
        "citation-bbox": lambda m: batch([response(citations=[{"page": 1, "bbox": [m, 0, 1, 1], "similarity": 0.1,
                                                               "text": "t", "crop": None}]), response(advantage=-1)]),
        "citation-sim": lambda m: batch([response(citations=[{"page": 1, "bbox": [0, 0, 1, 1], "similarity": m,
                                                              "text": "t", "crop": m}]), response(advantage=-1)]),
        "score": lambda m: batch([response(scores={"answer": m, "relevance": 1, "coverage": 1}),
                                  response(advantage=-1)]),
        "crop-flags": lambda m: batch([response(scores={"answer": 1, "relevance": 1, "coverage": 1,
                                                        "crop_relevance": [m]}), response(advantage=-1)]),
        "keep": lambda m: batch(keep=m),
        "attempt": lambda m: batch(attempt=m),
        "advantage": lambda m: batch([response(advantage=m), response(advantage=-1)]),
        "overall": lambda m: batch([response(reward={"overall": m}), response(advantage=-1)]),
    }  # fmt: skip
    for field_name, make in fields.items():
        for i, m in enumerate(MARKUP):
            out.append(Case(f"markup-{field_name}-{i}", write_page,
                            harness.value(page_is_safe(), "escaped data, page rendered"),
                            lambda ctx, make=make, m=m: make_run(ctx, make(m))))  # fmt: skip
    # --- numbers that are not numbers: the page renders with '?' (never a script error or a traceback)
    for label, v in [("nan-text", "NaN"), ("inf-text", "Infinity"), ("bool", True), ("list", [1]),
                     ("obj", {"a": 1}), ("null", None), ("huge", 1e308), ("neg", -5), ("str-num", "0.5")]:  # fmt: skip
        for field_name in ("keep", "advantage", "overall", "citation-sim", "citation-page", "score", "attempt"):
            out.append(Case(f"number-{field_name}-{label}", write_page,
                            harness.value(page_is_safe(), "page rendered"),
                            lambda ctx, f=field_name, v=v: make_run(ctx, fields[f](v))))  # fmt: skip
    # --- shapes that are not a batch: one clear error naming the file
    for label, raw in [("array", b"[1, 2]"), ("string", b'"batch"'), ("torn", b'{"step": 1, "groups": [{"qid"'),
                       ("not-utf8", b"\xff\xfe{}"), ("empty", b""), ("nan", b'{"step": NaN, "groups": []}'),
                       ("step-text", b'{"step": "1", "groups": []}'), ("step-zero", b'{"step": 0, "groups": []}'),
                       ("step-neg", b'{"step": -3, "groups": []}'), ("step-frac", b'{"step": 1.5, "groups": []}'),
                       ("step-bool", b'{"step": true, "groups": []}'), ("groups-obj", b'{"step": 1, "groups": {}}'),
                       ("no-groups", b'{"step": 1}'), ("deep", b"[" * 5000 + b"]" * 5000),
                       ("big-int", b'{"step": 1' + b"0" * 400 + b', "groups": []}')]:  # fmt: skip
        out.append(Case(f"batch-{label}", write_page, clean_error("batch_000001.json"),
                        lambda ctx, raw=raw: make_run(ctx, None, raw=raw)))  # fmt: skip
    # --- groups and responses of the wrong type inside a valid batch: rendered, nothing shown for them
    for label, rec in [("group-str", {"step": 1, "groups": ["x"]}), ("group-null", {"step": 1, "groups": [None]}),
                       ("responses-str", batch(responses="x")), ("response-str", batch(responses=["x", 1])),
                       ("citations-obj", batch([response(citations={"a": 1}), response(advantage=-1)])),
                       ("crops-str", batch([response(crops="crops/x.png"), response(advantage=-1)])),
                       ("scores-str", batch([response(scores="5"), response(advantage=-1)]))]:  # fmt: skip
        out.append(Case(f"shape-{label}", write_page, harness.value(page_is_safe(), "page rendered"),
                        lambda ctx, rec=rec: make_run(ctx, rec)))  # fmt: skip
    # --- a batch file that is a FIFO or a folder: one clear error, no hang
    out.append(Case("batch-fifo", write_page, clean_error("batch_000002.json", "FIFO"), _batch_fifo))
    out.append(Case("batch-folder", write_page, clean_error("batch_000002.json", "folder"), _batch_folder))
    return out


def _batch_fifo(ctx):
    run = make_run(ctx, batch())
    p = run / "samples" / "batch_000002.json"
    os.mkfifo(p)


def _batch_folder(ctx):
    run = make_run(ctx, batch())
    (run / "samples" / "batch_000002.json").mkdir()  # a folder named like a batch: said, not skipped


CASES = cases()


@pytest.mark.parametrize("case", CASES, ids=harness.ids(CASES))
def test_hostile_samples_page(case, tmp_path):
    harness.check_case(case, tmp_path, None, "samples_page")


def test_the_writer_replaces_a_crop_whose_bytes_are_not_its_hash(tmp_path):
    from reward.samples import SampleWriter

    w = SampleWriter(tmp_path, groups=1)
    data = png(3)
    name = _crop_name(data)
    (tmp_path / "samples" / "crops").mkdir(parents=True)
    (tmp_path / "samples" / name).write_bytes(b"stale or tampered bytes")
    w.write(1, [response(crops=[data], keep=0.5), response(crops=[data], keep=0.5, reward={"overall": 0.1})])
    assert (tmp_path / "samples" / name).read_bytes() == data


def test_the_size_bound_removes_the_oldest_step_by_number_not_by_name(tmp_path):
    from reward.samples import SampleWriter, step_files

    w = SampleWriter(tmp_path, groups=1, max_mb=10.0)
    for step in (999_999, 1_000_000):  # by name, batch_1000000.json sorts before batch_999999.json
        w.write(step, [response(keep=0.5), response(keep=0.5, reward={"overall": 0.1})])
    w.max_bytes = 1  # now over the bound: one step must go, the older one
    assert w.thin() == [999_999]
    assert [s for s, _ in step_files(tmp_path / "samples")] == [1_000_000]


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_hostile_batches_inject_no_element_in_chromium(tmp_path):
    # Every markup string in every field at once, rendered by a real browser: the live DOM holds no element the
    # batch wrote and no handler ran (the body carries no data-pwned attribute).
    from eval.samples_page import write_samples_page

    run = tmp_path / "run"
    (run / "samples").mkdir(parents=True)
    responses = []
    for m in MARKUP:
        responses.append(response(answer=m, reply=m, qid="q1", advantage=0.1,
                                  citations=[{"page": m, "bbox": [m, 0, 1, 1], "similarity": m, "text": m, "crop": 0}],
                                  crops=[m, "../../etc/hostname"]))  # fmt: skip
    rec = {"step": 1, "groups": [{"qid": m, "question": m, "gold": m, "keep": m, "attempt": m, "trained": True,
                                  "responses": responses} for m in MARKUP]}  # fmt: skip
    (run / "samples" / "batch_000001.json").write_text(json.dumps(rec))
    page = write_samples_page(run)
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--dump-dom", f"file://{page}"], capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    assert 'id="counts"' in dom and f'data-cards="{len(MARKUP) * len(MARKUP)}"' in dom, dom[:2000]
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert "pwned" not in body
    tags = _Tags()
    tags.feed(dom[dom.index('<div id="view"') :])
    # the view is made of the page's own elements only: divs, spans, bold qids (and crop images of the samples
    # folder, of which this batch names none)
    assert {t for t, _ in tags.seen} <= {"div", "span", "b", "p", "script", "body", "html"}, tags.seen
    assert not [a for _, a in tags.seen if any(k.startswith("on") or v == "pwned" for k, v in a)]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.seen.append((tag, attrs))


@pytest.mark.parametrize(
    "target",
    ["run_log.jsonl", "segments/100-0/metrics.jsonl", "segments/100-0/samples/batch_000001.json",
     "samples/crops/a.png", "checkpoints/checkpoint_tracker.json", "../recipe.yaml", "samples/page.html",
     "segments/100-0/page.html", "logs/steps-1.jsonl", "fifo.html", "folder.html", "/dev/null"],
)  # fmt: skip
@pytest.mark.parametrize("program", ["samples_page", "runlog plot"])
def test_a_page_never_overwrites_a_file_of_its_run(tmp_path, target, program):
    # The page commands' --out may name a new or existing .html page outside the folders the run's jobs write;
    # anything else (the run log, a segment file, a batch, a crop, a checkpoint tracker, the recipe, a device, a
    # FIFO, a folder) is refused with one line, and the file is left as it was.
    run = tmp_path / "run"
    for rel in ("run_log.jsonl", "segments/100-0/metrics.jsonl", "segments/100-0/samples/batch_000001.json",
                "samples/crops/a.png", "checkpoints/checkpoint_tracker.json", "../recipe.yaml",
                "samples/page.html", "segments/100-0/page.html", "logs/steps-1.jsonl"):  # fmt: skip
        p = run / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"original {rel}\n")
    (run / "samples" / "batch_000001.json").write_text(json.dumps(batch()))
    os.mkfifo(run / "fifo.html")
    (run / "folder.html").mkdir()
    out = target if target.startswith("/") else str(run / target)
    before = None if not os.path.isfile(out) else Path(out).read_bytes()
    cmd = ["launch.samples_page"] if program == "samples_page" else ["launch.runlog", "plot"]
    r = subprocess.run([sys.executable, "-m", *cmd, str(run), "--out", out], capture_output=True,
                       text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert r.returncode != 0, r.stdout
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "error:" in ln]
    assert len(lines) == 1 and "--out" in lines[0] and "Traceback" not in r.stderr, r.stdout + r.stderr
    if before is not None:
        assert Path(out).read_bytes() == before
