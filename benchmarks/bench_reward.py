"""Reward benchmarks (``make bench``). Figures only, each against a baseline measured in the same run.

1. Per-response cost of everything but the judge (parse, embed quotes, assign, crop) on a generated 400-block
   document (the paper's median is 388 blocks), from the pipeline's own phase timers over a 160-response batch
   (32 questions x 5), against the 0.2 s a judge answer takes; and quote embedding batched over the whole batch
   (what the pipeline does) against one encoder call per response.
2. A 160-response batch through the whole reward against a local OpenAI-compatible server that answers each judge
   request in 0.2 s: concurrent (the default 32 in flight) against a one-request-at-a-time loop (concurrency 1).
3. Whole-document candidates (the paper's rule, the default) against the page window (``candidates: window``,
   the earlier rule) on the same 400-block document, each question with a 3-page window: the cost of resolving
   every quote against all 400 blocks instead of the window's 60, per resolver.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

from benchmarks.report import print_table
from data_prep.cache import build_cache
from data_prep.encoders import get_encoder
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.parsers import get_parser
from reward.config import RewardConfig
from reward.pipeline import RewardScorer
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion

PAGES, PER_PAGE = 20, 20
QUESTIONS, GROUP = 32, 5
QUOTES_PER_RESPONSE = 3
JUDGE_DELAY_S = 0.2

WORDS = (
    "panel inverter yield site station output crew season month record capacity efficiency voltage current "
    "module string roof angle shade cleaning dust rain humidity summer winter report table figure survey sensor "
    "meter logger cable fuse grid tariff contract budget audit schedule warranty supplier batch sample"
).split()


def _sentence(rng: random.Random, i: int) -> str:
    return f"Entry {i}: the " + " ".join(rng.choice(WORDS) for _ in range(11)) + f" reached {rng.randint(10, 999)}."


def write_400_block_pdf(path: Path) -> list[str]:
    """20 pages x 20 one-line paragraphs with clear gaps; returns the sentences in order."""
    rng = random.Random(7)
    c = canvas.Canvas(str(path), pagesize=(595, 842), invariant=1)
    sentences = []
    for _ in range(PAGES):
        c.setFont("Helvetica", 10)
        for k in range(PER_PAGE):
            s = _sentence(rng, len(sentences))
            sentences.append(s)
            c.drawString(60, 842 - 70 - k * 36, s)
        c.showPage()
    c.save()
    return sentences


@pytest.fixture(scope="module")
def doc400(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench-reward")
    sentences = write_400_block_pdf(tmp / "doc400.pdf")
    encoder = get_encoder("minilm")
    cached = build_cache(tmp / "doc400.pdf", get_parser("pdftext"), encoder, tmp / "cache")
    return cached, sentences, encoder


WINDOW_PAGES = 3
"""Pages of each question's window in the whole-document vs window comparison."""


def batch_inputs(cached, sentences, windows: bool = False) -> list[dict]:
    """32 questions x 5 distinct responses, 3 verbatim quotes each (from the question's window when ``windows``)."""
    rng = random.Random(11)
    out = []
    for q in range(QUESTIONS):
        first = 1 + q % (PAGES - WINDOW_PAGES + 1)
        pages = (first, first + WINDOW_PAGES - 1) if windows else None
        gt = pack_ground_truth(GroundTruth(f"q{q}", cached.key, f"What did entry {q} reach?", "a number", pages))
        pool = sentences[(first - 1) * PER_PAGE : (first - 1 + WINDOW_PAGES) * PER_PAGE] if windows else sentences
        for r in range(GROUP):
            quotes = rng.sample(pool, QUOTES_PER_RESPONSE)
            resp = json.dumps({"answer": f"answer {q}-{r}", "quotes": quotes})
            out.append({"response": resp, "response_length": len(resp), "ground_truth": gt})
    return out


def _judge_server():
    return ScriptedOpenAIServer(
        handler=lambda path, body, n: Reply(
            json=chat_completion('{"answer": 4, "relevance": 3, "coverage": 3}'), delay=JUDGE_DELAY_S
        )
    )


def test_per_response_cost_without_the_judge(doc400):
    cached, sentences, encoder = doc400
    inputs = batch_inputs(cached, sentences)
    n = len(inputs)
    encoder.embed_texts(["warm-up"])
    with ScriptedOpenAIServer() as srv:  # answers at once: the judge phase is not what is measured here
        scorer = RewardScorer(RewardConfig(cache_dir=str(cached.path.parent), judge_url=srv.url, judge="http"))
        scorer.score(inputs[:GROUP])  # warm: document loaded, encoder created
        scorer.score(inputs)
    sec = scorer.last.seconds
    phases = ["parse", "load", "embed", "resolve", "crop"]
    non_judge = sum(sec[p] for p in phases)
    rows = [[p, f"{1000 * sec[p] / n:.2f}", f"{sec[p] / non_judge:.0%}"] for p in phases]
    rows.append(["all but judge", f"{1000 * non_judge / n:.2f}", "100%"])
    print_table(
        f"reward cost per response, {len(cached.blocks)}-block document, batch of {n} "
        f"({QUOTES_PER_RESPONSE} quotes each, crops at 150 dpi)",
        ["phase", "ms/response", "share"],
        rows,
    )
    print(
        f"all but the judge = {non_judge / n / JUDGE_DELAY_S:.1%} of one {JUDGE_DELAY_S:.1f} s judge answer per "
        f"response ({non_judge:.2f} s for the batch)"
    )

    # Quote embedding: one call for the batch (the pipeline) vs one call per response.
    per_response = [json.loads(i["response"])["quotes"] for i in inputs]
    t0 = time.perf_counter()
    for quotes in per_response:
        encoder.embed_texts(quotes)
    t_each = time.perf_counter() - t0
    t0 = time.perf_counter()
    encoder.embed_texts(list(dict.fromkeys(q for quotes in per_response for q in quotes)))
    t_batched = time.perf_counter() - t0
    print(
        f"quote embedding (MiniLM, CPU): batched {1000 * t_batched / n:.2f} ms/response vs one call per response "
        f"{1000 * t_each / n:.2f} ms/response: {t_each / t_batched:.1f}x"
    )
    assert len(cached.blocks) >= 380 and scorer.last.format_ok == n


def test_batch_of_160_against_a_0_2s_judge_concurrent_vs_serial(doc400):
    cached, sentences, encoder = doc400
    inputs = batch_inputs(cached, sentences)
    encoder.embed_texts(["warm-up"])
    results = {}
    with _judge_server() as srv:
        for label, concurrency in (("concurrent (32)", 32), ("serial (1)", 1)):
            config = RewardConfig(cache_dir=str(cached.path.parent), judge_url=srv.url, concurrency=concurrency)
            scorer = RewardScorer(config)
            scorer.score(inputs[:GROUP])  # warm
            t0 = time.perf_counter()
            out = scorer.score(inputs)
            results[label] = (time.perf_counter() - t0, scorer.last.seconds["judge"], out)
    serial, serial_judge = results["serial (1)"][:2]
    rows = [
        [label, f"{wall:.2f}", f"{serial / wall:.1f}x", f"{judge:.2f}", f"{serial_judge / judge:.1f}x"]
        for label, (wall, judge, _) in results.items()
    ]
    print_table(
        f"{len(inputs)} responses ({QUESTIONS} x {GROUP}) against a judge answering in {JUDGE_DELAY_S} s",
        ["judge requests", "batch s", "batch speed-up", "judge phase s", "judge speed-up"],
        rows,
    )
    print(f"(serial judge floor: {len(inputs)} x {JUDGE_DELAY_S} s = {len(inputs) * JUDGE_DELAY_S:.0f} s)")
    assert all(b.unscorable == 0 for b, _ in results["concurrent (32)"][2])


def test_whole_document_vs_window_candidates(doc400):
    cached, sentences, encoder = doc400
    inputs = batch_inputs(cached, sentences, windows=True)
    n = len(inputs)
    encoder.embed_texts(["warm-up"])
    rows = []
    with ScriptedOpenAIServer() as srv:
        for resolver in ("embedding", "bm25", "fused"):
            resolve_s = {}
            for candidates in ("window", "document"):
                config = RewardConfig(cache_dir=str(cached.path.parent), judge_url=srv.url, judge="http",
                                      resolver=resolver, candidates=candidates)  # fmt: skip
                scorer = RewardScorer(config)
                scorer.score(inputs[:GROUP])  # warm: document loaded, BM25 index built
                runs = []
                for _ in range(3):
                    scorer.score(inputs)
                    runs.append(scorer.last.seconds["resolve"])
                    assert scorer.last.format_ok == n
                resolve_s[candidates] = sorted(runs)[1]  # median of 3
            w, d = resolve_s["window"], resolve_s["document"]
            rows.append([
                resolver, f"{1000 * w / n:.2f}", f"{1000 * d / n:.2f}", f"{d / w:.1f}x",
                f"{(d - w) / n / JUDGE_DELAY_S:+.1%}",
            ])  # fmt: skip
    window_blocks = WINDOW_PAGES * PER_PAGE
    print_table(
        f"resolving against the whole document (the paper, the default) vs a {WINDOW_PAGES}-page window "
        f"({len(cached.blocks)} vs {window_blocks} candidate blocks), batch of {n}, {QUOTES_PER_RESPONSE} quotes each",
        ["resolver", "window ms/response", "document ms/response", "ratio", f"extra / {JUDGE_DELAY_S:.1f} s judge"],
        rows,
    )
    print("(the resolve phase only: quote embedding, crops and the judge cost the same either way)")
