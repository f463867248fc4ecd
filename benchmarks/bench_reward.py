"""Reward benchmarks (``make bench``). Figures only, each against a baseline measured in the same run.

1. Per-response cost of everything but the judge (parse, embed quotes, assign, crop) on a generated 400-block
   document (the paper's median is 388 blocks), from the pipeline's own phase timers over a 160-response batch
   (32 questions x 5), against the 0.2 s a judge answer takes; and quote embedding batched over the whole batch
   (what the pipeline does) against one encoder call per response.
2. A 160-response batch through the whole reward against the judge-only floor (the same 160 judge requests made
   beforehand and sent alone) at 8 and 32 in flight, against a scripted server in its own process answering each
   judge request in 0.2 s; the quotes embedded by MiniLM on this CPU or by that server (20 ms a quote). The floor
   and the batch run in turn :data:`REPEATS` times; medians.
3. Whole-document candidates (the paper's rule, the default) against the page window (``candidates: window``,
   the earlier rule) on the same 400-block document, each question with a 3-page window: the cost of resolving
   every quote against all 400 blocks instead of the window's 60, per resolver.
4. The crop cache's hit rate on a 32 x 5 batch (the recipe's group size), and the crop phase's cost per response.
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reportlab.pdfgen import canvas

from benchmarks.report import print_table
from data_prep.cache import build_cache
from data_prep.crops import CropCache, crop_pngs, shared_crop_cache
from data_prep.encoders import get_encoder
from data_prep.groundtruth import GroundTruth, pack_ground_truth, unpack_ground_truth
from data_prep.parsers import get_parser
from reward.config import RewardConfig
from reward.judge import JudgeRequest
from reward.judge_http import HttpJudge
from reward.pipeline import RewardScorer
from reward.resolve import Citation
from tests.support.openai_server import ScriptedOpenAIServer

PAGES, PER_PAGE = 20, 20
QUESTIONS, GROUP = 32, 5
QUOTES_PER_RESPONSE = 3
JUDGE_DELAY_S = 0.2
REPEATS = 3
"""Runs of the judge-only floor and of the batch, in turn, behind each median of the batch benchmark."""

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


JUDGE_SERVER = """
import sys
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion
judge_s, embed_s = float(sys.argv[1]), float(sys.argv[2])
content = '{"answer": 4, "relevance": 3, "coverage": 3}'
def handler(path, body, n):
    if path.endswith("/chat/completions"):
        return Reply(json=chat_completion(content), delay=judge_s)
    if path.endswith("/embeddings") and embed_s:
        reply = srv.default_reply(path, body)
        reply.delay = embed_s * len(reply.json["data"])  # per text: a batched request is no faster per text
        return reply
    return None
srv = ScriptedOpenAIServer(handler=handler, embed_dim=8)
srv.serve_until_signal("{url}")
"""
EMBED_DELAY_S = 0.02
"""Seconds the scripted embedding server takes per quote (a GPU embedder's answer to one short text); a request
carrying several texts (``texts_per_request``) takes this per text, so batching saves only the per-request cost."""


@contextlib.contextmanager
def judge_process(delay_s: float, embed_delay_s: float = 0.0):
    """A scripted judge answering every chat request after ``delay_s`` (and embedding requests, 8-d, after
    ``embed_delay_s``), in a process of its own (as the real servers are: their JSON parsing does not take the
    client's CPU or GIL); yields its ``/v1`` URL."""
    proc = subprocess.Popen([sys.executable, "-c", JUDGE_SERVER, str(delay_s), str(embed_delay_s)],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), f"judge server did not start: {url!r}"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def judge_requests(cached, inputs: list[dict], max_crops: int = 6, dpi: float = 150.0) -> list[JudgeRequest]:
    """The judge requests of ``inputs`` made ready beforehand (verbatim quotes: each cites the block of that text),
    as the reward sends them: the judge-only floor's batch."""
    by_text = {b.text.strip(): i for i, b in enumerate(cached.blocks)}
    out = []
    with cached.open_pdf() as doc:
        for inp in inputs:
            gt = unpack_ground_truth(inp["ground_truth"])
            resp = json.loads(inp["response"])
            cites = [Citation(cached.blocks[j].page, cached.blocks[j].bbox, j, 1.0, q)
                     for q in resp["quotes"] for j in [by_text[q]]]  # fmt: skip
            crops = crop_pngs(cached, cites, max_crops, dpi, doc=doc, cache=CropCache())
            texts = tuple(cached.blocks[c.block_id].text for c in cites[:max_crops])
            out.append(JudgeRequest(gt.question, gt.answer, resp["answer"], crops, texts))
    return out


@pytest.fixture(scope="module")
def doc400_http(doc400, tmp_path_factory):
    """The 400-block document cached by an embedding server (the cluster's set-up: quotes are embedded by it too,
    ``embed_url``); yields ``(cached, sentences, url)`` with the server answering each text in
    :data:`EMBED_DELAY_S` and each judge request in :data:`JUDGE_DELAY_S`."""
    from data_prep.encoders import get_encoder

    cached, sentences, _ = doc400
    with judge_process(JUDGE_DELAY_S, EMBED_DELAY_S) as url:
        enc = get_encoder("qwen3-vl-embedding", transport="http", url=url, dim=8, block_content="text")
        http_cached = build_cache(cached.pdf_path, get_parser("pdftext"), enc, tmp_path_factory.mktemp("http-cache"))
        yield http_cached, sentences, url


@pytest.mark.parametrize("embedder", ["minilm", "http"])
def test_batch_of_160_against_the_judge_only_floor(embedder, request):
    """The whole reward on a 160-response batch against the same 160 judge requests sent ready-made (the judge-only
    floor), at 8 and 32 in flight, with a judge answering in 0.2 s from a process of its own; the quotes embedded
    by MiniLM on this CPU, or by an embedding server (the cluster's set-up) answering each in 20 ms. The floor and
    the batch run in turn :data:`REPEATS` times; the figures are medians (the ratio: of each run's pair)."""
    if embedder == "minilm":
        cached, sentences, encoder = request.getfixturevalue("doc400")
        encoder.embed_texts(["warm-up"])
        server = judge_process(JUDGE_DELAY_S)
    else:
        cached, sentences, url = request.getfixturevalue("doc400_http")
        server = contextlib.nullcontext(url)
    inputs = batch_inputs(cached, sentences)
    n = len(inputs)
    requests = judge_requests(cached, inputs)
    rows, record = [], []
    with server as url:
        for concurrency in (8, 32):
            judge = HttpJudge(url, "judge-model", concurrency=concurrency, outage_s=None)
            judge.score_batch(requests[:GROUP])  # warm
            config = RewardConfig(cache_dir=str(cached.path.parent), judge_url=url, concurrency=concurrency,
                                  embed_url=url if embedder == "http" else None)  # fmt: skip
            scorer = RewardScorer(config)
            scorer.score(inputs[:GROUP])  # warm: document loaded, encoder created
            runs = []
            for _ in range(REPEATS):  # the floor and the batch in turn: a load that comes and goes hits both
                t0, c0 = time.perf_counter(), time.process_time()
                judge.score_batch(requests)
                judge_only, judge_cpu = time.perf_counter() - t0, time.process_time() - c0
                assert judge.stats.ok == n, judge.stats.to_dict()
                shared_crop_cache().clear()  # every crop of the batch rendered in the batch
                t0, c0 = time.perf_counter(), time.process_time()
                out = scorer.score(inputs)
                batch, batch_cpu = time.perf_counter() - t0, time.process_time() - c0
                assert all(b.unscorable == 0 for b, _ in out)
                runs.append((judge_only, batch, batch / judge_only, judge_cpu, batch_cpu))
            judge_only, batch, ratio, judge_cpu, batch_cpu = (
                statistics.median(col) for col in zip(*runs, strict=True)
            )
            ideal = n * JUDGE_DELAY_S / concurrency
            crops = getattr(scorer, "crop_stats", None)
            hit = f"{crops.hit_rate:.0%}" if crops is not None else "-"
            rows.append([concurrency, f"{ideal:.2f}", f"{judge_only:.2f}", f"{batch:.2f}",
                         f"{ratio:.2f}x", f"{batch / ideal:.2f}x",
                         f"{1000 * judge_cpu / n:.1f}", f"{1000 * batch_cpu / n:.1f}", hit])  # fmt: skip
            record.append({"concurrency": concurrency, "ideal_s": ideal, "judge_only_s": judge_only, "batch_s": batch,
                           "ratios": [round(r[2], 3) for r in runs], "seconds": dict(scorer.last.seconds)})  # fmt: skip
    print_table(
        f"{n} responses ({QUESTIONS} x {GROUP}, {QUOTES_PER_RESPONSE} quotes each, quotes embedded by "
        f"{'MiniLM on this CPU' if embedder == 'minilm' else f'a server, {EMBED_DELAY_S} s a quote'}) against the "
        f"judge-only floor (the same {n} requests made beforehand), judge answering in {JUDGE_DELAY_S} s in its own "
        "process",
        ["in flight", "ideal s", "judge-only s", "batch s", "batch/judge-only (median)", "batch/ideal",
         "judge-only CPU ms/resp", "batch CPU ms/resp", "crop cache hits"],
        rows,
    )  # fmt: skip
    per_run = ", ".join(f"{r['concurrency']}: {r['ratios']}" for r in record)
    print(f"(medians of {REPEATS} runs, the floor and the batch in turn; batch/judge-only per run at "
          f"{per_run}; ideal: {n} x {JUDGE_DELAY_S} s / in "
          f"flight; phases of the last batch: { {k: round(v, 2) for k, v in record[-1]['seconds'].items()} })")  # fmt: skip


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


def group_inputs(cached, sentences, group: int, pool: int = 5) -> list[dict]:
    """32 questions x ``group`` responses where a question's responses quote 3 of the same ``pool`` blocks (the
    evidence of its answer), as a GRPO group's responses mostly do."""
    rng = random.Random(13)
    out = []
    for q in range(QUESTIONS):
        gt = pack_ground_truth(GroundTruth(f"q{q}", cached.key, f"What did entry {q} reach?", "a number", None))
        evidence = sentences[q * 12 : q * 12 + pool]
        for r in range(group):
            resp = json.dumps({"answer": f"answer {q}-{r}", "quotes": rng.sample(evidence, QUOTES_PER_RESPONSE)})
            out.append({"response": resp, "response_length": len(resp), "ground_truth": gt})
    return out


def test_crop_cache_hit_rate_at_the_recipe_group_size(doc400):
    """Crops rendered once per distinct block: the cache's hit rate in a batch with the recipe's group size, when a
    group quotes the same few blocks and when every quote is a block drawn at random from all 400 (no sharing but
    by chance), and what the crop phase then costs per response."""
    import yaml

    cached, sentences, encoder = doc400
    recipe = yaml.safe_load((Path(__file__).resolve().parents[1] / "recipes" / "qwen3vl_8b_grpo.yaml").read_text())
    group = int(recipe["worker"]["rollout"]["n"])
    encoder.embed_texts(["warm-up"])
    rows = []
    with ScriptedOpenAIServer() as srv:  # answers at once
        config = RewardConfig(cache_dir=str(cached.path.parent), judge_url=srv.url, judge="http")
        scorer = RewardScorer(config)
        for label, inputs in (("group quotes 3 of 5 shared blocks", group_inputs(cached, sentences, group)),
                              ("random blocks of the 400", batch_inputs(cached, sentences))):  # fmt: skip
            scorer.score(inputs[:group])  # warm
            shared_crop_cache().clear()
            scorer.score(inputs)
            st, n = scorer.crop_stats, len(inputs)
            rows.append([label, n, st.hits + st.misses, st.misses, f"{st.hit_rate:.0%}",
                         f"{1000 * scorer.last.seconds['crop'] / n:.2f}"])  # fmt: skip
    print_table(
        f"crop cache, {QUESTIONS} questions x {group} responses (the recipe's rollout n), {QUOTES_PER_RESPONSE} "
        "quotes each, cache cleared before the batch",
        ["batch", "responses", "crops shown", "rendered", "hit rate", "crop ms/response"],
        rows,
    )
