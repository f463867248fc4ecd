"""The samples browser (launch/samples_page.py), rendered in headless chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from core.errors import InputError
from launch.samples_page import collect_steps, write_samples_page
from reward.samples import SampleWriter

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def fake(qid, overall, keep, crops=(), unscorable=False, relevance=3):
    cite = dict(page=1, bbox=[0, 0, 10, 10], similarity=0.5, quote="q", text="t", crop=0 if crops else None)
    scores = {"answer": 3, "relevance": relevance, "coverage": 3, "crop_relevance": None}
    rec = {"qid": qid, "question": "Q?", "gold": "G", "answer": f"ans {overall}", "quotes": ["q"], "citations": [cite]}
    rec |= {"crops": list(crops), "scores": scores, "reply": None, "reward": {"overall": overall}}
    return rec | {"keep": keep, "unscorable": unscorable}


def png(i):
    import io

    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (40, 20), (i * 40 % 255, 100, 200)).save(b, "PNG")
    return b.getvalue()


@pytest.fixture
def run_dir(tmp_path):
    from launch.segments import new_segment

    run = tmp_path / "run"
    run.mkdir()
    # segment 1 samples batches 1..3 (steps 1..3); it dies after the step-1 checkpoint and is requeued
    s1 = new_segment(run, "100", 0)
    w = SampleWriter(run / "segments" / s1.name, groups=2, keep_band=[0.01, 0.99])
    for n in (1, 2, 3):
        unscorable = [fake("b", 0.0, -1.0, unscorable=True) for _ in range(2)]
        w.write(n, [fake("a", 1.0, 0.5, [png(n)]), fake("a", 0.0, 0.5, [png(n + 10)], relevance=0), *unscorable])
    s2 = new_segment(run, "100", 1)  # resumes from step 1: redoes steps 2, 3 (its batches 1, 2)
    w = SampleWriter(run / "segments" / s2.name, groups=2, keep_band=[0.01, 0.99])
    for n in (1, 2):
        w.write(n, [fake("c", 1.0, 0.5, [png(n + 20)]), fake("c", 0.5, 0.5), fake("c", 0.0, 0.5)])
    return run


def test_requeued_steps_merge_without_gaps_or_duplicates(run_dir):
    steps = collect_steps(run_dir)
    assert [s for s, _, _ in steps] == [1, 2, 3]
    assert [rec["groups"][0]["qid"] for s, _, rec in steps if s > 1] == ["c", "c"]  # the requeued segment's
    (run_dir / "empty").mkdir()
    with pytest.raises(InputError, match="no samples"):
        write_samples_page(run_dir / "empty")
    with pytest.raises(InputError, match="not a folder"):
        write_samples_page(run_dir / "missing")


def dump_dom(url):
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120).stdout


def counts(page, query=""):
    dom = dump_dom(f"file://{page}{query}")
    m = re.search(r'id="counts" data-cards="(\d+)" data-imgs="(\d+)" data-steps="(\d+)"', dom)
    assert m, dom[:500]
    return tuple(int(x) for x in m.groups())


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_page_in_headless_chromium_shows_every_sample_and_filters_work(run_dir, tmp_path):
    page = write_samples_page(run_dir)
    # the page works from a copied run folder (crops are relative to it)
    copy = tmp_path / "copied"
    shutil.copytree(run_dir, copy, symlinks=True)
    page = copy / page.name
    step1 = json.loads(next((run_dir / "segments").glob("100-0/samples/batch_000001.json")).read_text())
    n_cards = sum(len(g["responses"]) for g in step1["groups"])
    n_imgs = sum(len(r["crops"]) for g in step1["groups"] for r in g["responses"])
    assert counts(page) == (n_cards, n_imgs, 3) == (4, 2, 3)
    assert counts(page, "?filters=pos")[:2] == (1, 1)
    assert counts(page, "?filters=dropped")[:2] == (2, 0)
    assert counts(page, "?filters=unscorable")[:2] == (2, 0)
    assert counts(page, "?filters=irrelevant")[:2] == (1, 1)
    assert counts(page, "?step=1")[:2] == (3, 1)
    shot = tmp_path / "shot.png"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,800", f"--screenshot={shot}"]
    subprocess.run([*argv, f"file://{page}"], capture_output=True, timeout=120)
    assert shot.stat().st_size > 1000
    # with embedded crops the page stands alone
    alone = write_samples_page(run_dir, tmp_path / "alone.html", embed=True)
    assert "data:image/png;base64," in alone.read_text() and counts(alone)[:2] == (4, 2)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_a_question_generated_again_shows_as_its_own_group_with_its_attempt(tmp_path):
    """EasyR1's filter may generate a question again in a later attempt of the batch: two groups, the second tagged."""
    w = SampleWriter(tmp_path, groups=4, keep_band=[0.01, 0.99])
    w.write(1, [{**fake("a", v, 0.5), "attempt": k} for k in (1, 2) for v in (1.0, 0.0)])
    page = write_samples_page(tmp_path)
    dom = dump_dom(f"file://{page}")
    assert counts(page)[:2] == (4, 0)
    assert dom.count('<div class="grp"><b>a</b>') == 2 and dom.count(">attempt 2<") == 1 and ">attempt 1<" not in dom
