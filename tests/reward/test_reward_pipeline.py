"""The whole reward on the project's sample PDF: plugin contract, failure policy, judge requests, CLI, demo."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import socket
import threading
import time
import types

import numpy as np
import pytest

from core.errors import InputError, QuoteciteError
from data_prep.cache import CacheError
from data_prep.crops import crop_pngs
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.sample import SAMPLE_FACTS
from reward.config import RewardConfig
from reward.pipeline import RewardScorer
from reward.quote_reward import REWARD_NAME, REWARD_TYPE, compute_score
from reward.resolve import resolve_quotes
from reward.scoring import BREAKDOWN_KEYS
from reward.servers import ServerOutageError
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion, held_port

EN = SAMPLE_FACTS.fact("en_sentence").text
ROW = SAMPLE_FACTS.fact("table_row").text
ROTATED = SAMPLE_FACTS.fact("rotated_sentence").text
QA = SAMPLE_FACTS.qa[0]  # Which test site had the highest annual yield? -> Shenzhen


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    cache_dir = tmp_path_factory.mktemp("reward-cache")
    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), cache_dir)


def gt(cache, qid="q1", pages=None, question=QA.question, answer=QA.answer) -> str:
    return pack_ground_truth(GroundTruth(qid, cache.key, question, answer, pages))


def inp(response, ground_truth) -> dict:
    text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    return {"response": text, "response_length": len(text), "ground_truth": ground_truth}


def block_of(cache, text: str) -> int:
    return next(b.block_id for b in cache.blocks if text in b.text)


def answer_in(body: dict) -> str:
    text = body["messages"][1]["content"][0]["text"]
    return re.search(r"<model_answer>\n(.*?)\n</model_answer>", text, re.DOTALL).group(1)


# --------------------------------------------------------------------------------------------- plugin contract
def test_plugin_constants():
    assert (REWARD_NAME, REWARD_TYPE) == ("quote_reward", "batch")


def test_plugin_loads_by_file_path_as_easyr1_does(cache):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "reward" / "quote_reward.py"
    spec = importlib.util.spec_from_file_location("custom_reward_fn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (d,) = module.compute_score([inp("prose", gt(cache))], cache_dir=str(cache.path.parent), judge="lexical")
    assert (module.REWARD_TYPE, d["overall"], d["format_ok"]) == ("batch", 0.0, 0.0)


def test_compute_score_returns_one_numeric_dict_per_input(cache):
    g = gt(cache)
    inputs = [
        inp({"answer": "Shenzhen", "quotes": [EN, ROW]}, g),  # grounded and right
        inp({"answer": "Beijing", "quotes": [EN, ROW]}, g),  # wrong answer, right quotes
        inp("Shenzhen, see page 2.", g),  # no JSON object
        inp({"answer": "Shenzhen"}, g),  # no quotes
    ]
    out = compute_score(inputs, cache_dir=str(cache.path.parent), judge="lexical")
    assert len(out) == 4
    assert all(list(d) == list(BREAKDOWN_KEYS) and all(type(v) is float for v in d.values()) for d in out)
    good, wrong, prose, no_quotes = out
    assert (good["answer"], good["coverage"], good["format_ok"], good["n_quotes"], good["n_citations"]) == (
        5.0, 5.0, 1.0, 2.0, 2.0)  # fmt: skip
    assert good["overall"] == pytest.approx(good["answer"] / 5 * (good["relevance"] + good["coverage"]) / 10)
    assert good["overall"] >= 0.8 and 0.3 < good["mean_similarity"] <= 1.0
    assert (wrong["overall"], wrong["answer"], wrong["coverage"]) == (0.0, 0.0, 5.0)  # gated
    for d in (prose, no_quotes):
        assert (d["overall"], d["format_ok"], d["n_citations"], d["unscorable"]) == (0.0, 0.0, 0.0, 0.0)


def test_verbatim_quotes_cite_their_blocks(cache):
    (res,) = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical")).score(
        [inp({"answer": "Shenzhen", "quotes": [EN, ROW]}, gt(cache))]
    )
    _, cits = res
    assert [c.block_id for c in cits] == [block_of(cache, EN), block_of(cache, "Shenzhen | 150")]
    assert [c.page for c in cits] == [1, 2]


def test_quotes_resolve_over_the_whole_document_by_default_and_the_window_is_an_option(cache):
    # The paper resolves against the whole document; the evidence pages only place the rendered window.
    fig = SAMPLE_FACTS.fact("figure_sentence")  # on page 3
    assert fig.page == 3
    g = gt(cache, pages=(1, 2))
    paper = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    ((_, (doc_cit,)),) = paper.score([inp({"answer": "July", "quotes": [fig.text]}, g)])
    assert (doc_cit.page, doc_cit.block_id) == (3, block_of(cache, fig.text)) and doc_cit.similarity > 0.9
    window = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", candidates="window"))
    ((_, (win_cit,)),) = window.score([inp({"answer": "July", "quotes": [fig.text]}, g)])
    assert win_cit.page == 2 and win_cit.similarity < 0.7  # the earlier rule: the best block of pages 1-2
    assert (win_cit.page, win_cit.block_id, round(win_cit.similarity, 2)) == tuple(
        (c.page, c.block_id, round(c.similarity, 2)) for c in resolve_quotes([fig.text], cache, pages=(1, 2))
    )[0]
    ((_, cits),) = window.score([inp({"answer": "x", "quotes": [EN]}, gt(cache, pages=(4, 4)))])
    assert [c.page for c in cits] == [4]  # window: the page-1 sentence was outside what the policy saw
    with pytest.raises(InputError, match="exceeds document"):
        paper.score([inp({"answer": "x", "quotes": [EN]}, gt(cache, pages=(3, 9)))])


def test_repeated_quotes_give_two_citations_and_the_old_rule_gives_one(cache):
    cfg = {"cache_dir": str(cache.path.parent), "judge": "lexical"}
    ((b, cits),) = RewardScorer(RewardConfig(**cfg)).score([inp({"answer": "x", "quotes": [EN, EN]}, gt(cache))])
    assert b.n_quotes == 2 and len(cits) == 2 and cits[0].block_id != cits[1].block_id  # Hungarian: distinct blocks
    old = RewardScorer(RewardConfig(**cfg, dedupe_quotes=True, max_quotes=8))
    ((b, cits),) = old.score([inp({"answer": "x", "quotes": [EN, EN]}, gt(cache))])
    assert b.n_quotes == 1 and len(cits) == 1


def test_quote_bound_is_counted_and_logged_not_silent(cache, caplog):
    quotes = [f"Quote number {i} about the panels." for i in range(10)]
    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    ((b, cits),) = scorer.score([inp({"answer": "x", "quotes": quotes}, gt(cache))])
    assert b.n_quotes == 10 and len(cits) == 10 and scorer.last.quotes_over_bound == 0  # no cap at 8
    small = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", max_quotes=8))
    with caplog.at_level("WARNING", logger="reward"):
        ((b, cits),) = small.score([inp({"answer": "x", "quotes": quotes}, gt(cache))])
    assert b.n_quotes == 8 and len(cits) == 8  # the earlier cap: quotes 9 and 10 lost, but now counted and logged
    assert (small.last.responses_over_bound, small.last.quotes_over_bound) == (1, 2)
    assert small.last.counters()["quotes_over_bound"] == 2
    assert any("more than max_quotes=8" in r.getMessage() for r in caplog.records)


def test_abstained_citations_leave_no_evidence_to_score(cache):
    out = compute_score(
        [inp({"answer": "Shenzhen", "quotes": [EN]}, gt(cache))],
        cache_dir=str(cache.path.parent), judge="lexical", abstain_threshold=1.01,
    )  # fmt: skip
    assert (out[0]["n_quotes"], out[0]["n_citations"], out[0]["relevance"], out[0]["coverage"]) == (1, 0, 0, 0)
    assert out[0]["overall"] == 0.0 and out[0]["answer"] == 5.0
    # a judge's reply stays with the scores zeroed for want of evidence: the samples show what the judge wrote
    text = 'No evidence shown.\n{"answer": 5, "relevance": 4, "coverage": 3}'
    seen = []
    with ScriptedOpenAIServer(handler=lambda path, body, n: Reply(json=chat_completion(text))) as srv:
        scorer = RewardScorer(http_config(cache, srv.url, abstain_threshold=1.01))
        scorer.sampler = types.SimpleNamespace(add_call=lambda items, out, record, tracked: seen.extend(items))
        ((b, cits),) = scorer.score([inp({"answer": "Shenzhen", "quotes": [EN]}, gt(cache))])
    assert (b.answer, b.relevance, b.coverage, cits) == (5.0, 0.0, 0.0, [])
    assert [(it.scores.relevance, it.scores.coverage, it.scores.reply) for it in seen] == [(0, 0, text)]


@pytest.mark.parametrize("resolver", ["lexical", "bm25", "bm25_lucene", "fused"])
def test_text_resolvers_run_in_the_pipeline(cache, resolver):
    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", resolver=resolver))
    ((b, cits),) = scorer.score([inp({"answer": "Every 14 days", "quotes": [ROTATED]}, gt(cache, "q4"))])
    assert [c.block_id for c in cits] == [block_of(cache, ROTATED)]


# --------------------------------------------------------------------------------------------- with an HTTP judge
def http_config(cache, url, **kw) -> RewardConfig:
    return RewardConfig(cache_dir=str(cache.path.parent), judge="http", judge_url=url, judge_model="judge-model",
                        retries=1, backoff_s=0.01, timeout_s=2.0, **kw)  # fmt: skip


def test_judge_request_carries_crops_and_never_the_quotes(cache):
    quotes = [EN, ROW, ROTATED]
    with ScriptedOpenAIServer() as srv:
        scorer = RewardScorer(http_config(cache, srv.url, max_crops=2))
        ((b, cits),) = scorer.score([inp({"answer": "It was Shenzhen.", "quotes": quotes}, gt(cache))])
        (path, body), *rest = srv.requests
    assert not rest and (b.answer, b.relevance, b.coverage) == (4.0, 4.0, 4.0)
    images = [p["image_url"]["url"] for p in body["messages"][1]["content"] if p["type"] == "image_url"]
    assert len(images) == 2 and len(cits) == 3  # at most max_crops crops
    pngs = [base64.b64decode(u.removeprefix("data:image/png;base64,")) for u in images]
    assert all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    assert pngs == list(crop_pngs(cache, cits, max_crops=2))  # the first two cited blocks, in order
    dumped = json.dumps(body, ensure_ascii=False)
    assert not any(q in dumped for q in quotes)
    assert "It was Shenzhen." in dumped and QA.question in dumped and json.dumps(QA.answer)[1:-1] in dumped


def _crop_judge(content_for):
    """A judge server answering each chat request with ``content_for(n_crops)``."""

    def handler(path, body, n):
        if not path.endswith("/chat/completions"):
            return None
        parts = body["messages"][1]["content"]
        n_crops = sum(p["type"] == "image_url" for p in parts)
        return Reply(json=chat_completion(content_for(n_crops)))

    return ScriptedOpenAIServer(handler=handler)


PADDING = [SAMPLE_FACTS.fact(k).text for k in ("rotated_sentence", "list_item", "figure_sentence")]
"""Three sample sentences that say nothing about which site had the highest yield."""


def test_precision_form_pays_a_tight_citation_more_than_the_same_plus_three_irrelevant(cache):
    tight = {"answer": "Shenzhen", "quotes": [EN]}
    padded = {"answer": "Shenzhen", "quotes": [EN, *PADDING[:3]]}
    assert len(padded["quotes"]) == 4
    g = gt(cache)

    def reply(n_crops):  # the judge: full marks overall, only the first crop relevant
        return json.dumps({"answer": 5, "relevance": 5, "coverage": 5, "crop_relevance": [1] + [0] * (n_crops - 1)})

    with _crop_judge(reply) as srv:
        out = {}
        for form in ("gated", "precision"):
            scorer = RewardScorer(http_config(cache, srv.url, reward_form=form))
            (t, _), (p, _) = scorer.score([inp(tight, g), inp(padded, g)])
            out[form] = (t.overall, p.overall)
            assert scorer.last.judge_no_crop_relevance == 0
    assert out["gated"] == (1.0, 1.0)  # the paper's form pays the padding in full when r and c stay high
    assert out["precision"] == (1.0, pytest.approx(1 - 0.5 * 3 / 4))  # tight beats padded
    assert out["precision"][0] > out["precision"][1]


def test_precision_form_with_an_older_judge_reply_charges_only_repeats(cache):
    g = gt(cache)
    with _crop_judge(lambda n: '{"answer": 5, "relevance": 5, "coverage": 5}') as srv:
        scorer = RewardScorer(http_config(cache, srv.url, reward_form="precision"))
        (a, _), (b, _) = scorer.score(
            [inp({"answer": "Shenzhen", "quotes": [EN, ROW]}, g), inp({"answer": "Shenzhen", "quotes": [EN, EN]}, g)]
        )
    assert a.overall == 1.0 and b.overall == pytest.approx(1 - 0.5 / 2)  # the repeated quote is charged
    assert scorer.last.judge_no_crop_relevance == 2


def test_unparseable_responses_make_no_judge_call(cache):
    g = gt(cache)
    with ScriptedOpenAIServer() as srv:
        out = compute_score(
            [inp("no json", g), inp({"answer": "x", "quotes": []}, g), inp({"answer": "y", "quotes": [EN]}, g)],
            **http_config(cache, srv.url).to_dict(),
        )
        assert srv.count("/v1/chat/completions") == 1
    assert [d["format_ok"] for d in out] == [0.0, 0.0, 1.0]


def test_unscorable_response_gets_its_group_mean_and_a_dead_group_gets_zero(cache):
    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None  # /health answers: the failures below are single bad calls, not an outage
        a = answer_in(body)
        if a.startswith("FAIL"):
            return Reply(status=500)
        scores = {"A5": (5, 5, 5), "A3": (5, 3, 3), "A0": (0, 5, 5)}[a]
        return chat_completion(json.dumps(dict(zip(("answer", "relevance", "coverage"), scores, strict=True))))

    g1, g2 = gt(cache, "q1"), gt(cache, "q2")

    def resp(answer):
        return {"answer": answer, "quotes": [EN]}

    inputs = [inp(resp("A5"), g1), inp(resp("A3"), g1), inp(resp("FAIL"), g1), inp("prose", g1), inp(resp("A0"), g1)]
    inputs += [inp(resp(f"FAIL{i}"), g2) for i in range(3)]
    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url))
        out = [b for b, _ in scorer.score(inputs)]
    group1 = [b.overall for b in out[:5]]
    known_mean = (1.0 + 0.6 + 0.0 + 0.0) / 4  # judged ones and the unparseable 0
    assert group1 == pytest.approx([1.0, 0.6, known_mean, 0.0, 0.0])
    assert sum(group1) / 5 == pytest.approx(known_mean)  # the group baseline is unchanged: zero advantage
    assert (out[2].unscorable, out[2].answer, out[2].format_ok) == (1.0, 2.5, 1.0)  # parts are group means too
    assert [(b.overall, b.unscorable) for b in out[5:]] == [(0.0, 1.0)] * 3
    s = scorer.last
    assert (s.unscorable, dict(s.unscorable_reasons), s.groups, s.groups_all_unscorable) == (4, {"judge": 4}, 2, 1)
    # each FAIL: 1 + retries=1 attempts, then sent once more as /health answers (it may have failed before it did)
    assert (dict(s.judge.failures), s.judge.retries, dict(s.reject_reasons)) == ({"http_5xx": 4}, 8, {"no_object": 1})


def test_judge_that_stays_down_ends_the_call_with_one_outage_error_after_its_budget(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    with held_port() as port:  # nothing listens, and no one else takes the port while the test runs
        dead = f"http://127.0.0.1:{port}/v1"
        g = gt(cache)
        t0 = time.monotonic()
        with pytest.raises(ServerOutageError) as e:
            compute_score(
                [inp({"answer": "a", "quotes": [EN]}, g), inp("prose", g)],
                **http_config(cache, dead, judge_outage_s=1.5).to_dict(),
            )
        assert time.monotonic() - t0 >= 1.5  # it waited its budget (a budget ignored: a hang, pytest-timeout's)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"judge at {dead}/chat/completions is down: no answer for ")
        assert "judge_outage_s=1.5" in msg and isinstance(e.value, QuoteciteError)  # the CLIs print it as one line
        assert not isinstance(e.value, InputError)  # an outage is not bad input
        marker = json.loads((tmp_path / "seg" / "server_outage.json").read_text())  # what the launch reads
        assert (marker["what"], marker["url"], marker["budget_s"]) == ("judge", f"{dead}/chat/completions", 1.5)
        assert marker["waited_s"] >= 1.5


@pytest.mark.parametrize("how", ["http_503", "refused"])
def test_a_judge_down_for_a_while_pauses_the_call_and_then_gives_real_scores(cache, how):
    g = gt(cache)
    batch = [inp({"answer": QA.answer, "quotes": [EN]}, g), inp({"answer": "Beijing", "quotes": [EN]}, g)]
    up_at = time.monotonic() + 2.0
    servers: list[ScriptedOpenAIServer] = []
    if how == "http_503":  # vLLM restarting: /health and the API answer 503 until it is back

        def handler(path, body, n):
            return Reply(status=503) if time.monotonic() < up_at else None

        servers.append(ScriptedOpenAIServer(handler=handler).start())
        port = servers[0]._httpd.server_address[1]
    else:  # the port is held and refuses connections until the server listens on it
        late = ScriptedOpenAIServer(refuse_until_start=True)
        servers.append(late)
        port = late._httpd.server_address[1]
        threading.Timer(2.0, late.start).start()
    try:
        scorer = RewardScorer(http_config(cache, f"http://127.0.0.1:{port}/v1", judge_outage_s=30))
        out = [b for b, _ in scorer.score(batch)]
    finally:
        time.sleep(max(0.0, up_at + 0.2 - time.monotonic()))
        for srv in servers:
            srv.stop()
    assert time.monotonic() >= up_at
    assert [b.unscorable for b in out] == [0.0, 0.0]  # real scores, not group means
    assert [b.answer for b in out] == [4.0, 4.0]  # the server's scripted score
    js = scorer.last.judge
    assert js.outages >= 1 and js.outage_wait_s > 0 and js.ok == 2 and not js.failures
    assert scorer.last.counters()["judge_outages"] == js.outages  # reaches the per-step counters


def test_an_embedder_down_for_a_while_pauses_the_call_and_then_embeds(sample_pdf, tmp_path):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    state = {"down_until": 0.0}

    def handler(path, body, n):
        return Reply(status=503) if time.monotonic() < state["down_until"] else None

    with ScriptedOpenAIServer(handler=handler, embed_dim=8) as srv:
        enc = get_encoder("qwen3-vl-embedding", transport="http", url=srv.url, dim=8, block_content="text",
                          max_retries=0)  # fmt: skip
        cached = build_cache(sample_pdf, get_parser("pdftext"), enc, tmp_path)
        config = RewardConfig(cache_dir=str(tmp_path), judge="lexical", embed_url=srv.url, judge_outage_s=30)
        scorer = RewardScorer(config)
        # down for longer than the encoder's own retries (1 + 2 + 4 s of backoff): only the outage wait saves the call
        state["down_until"] = time.monotonic() + 9.0
        out = scorer.score([inp({"answer": "a", "quotes": [EN, ROW]}, gt(cached))] * 2)
    assert all(len(cits) == 2 and b.unscorable == 0.0 for b, cits in out)
    assert scorer.last.embed_outages >= 1 and scorer.last.embed_outage_wait_s > 0


def test_single_bad_judge_calls_while_the_server_is_up_stay_unscorable_without_waiting(cache):
    g = gt(cache)
    batch = [inp({"answer": f"a{i}", "quotes": [EN]}, g) for i in range(3)]

    def handler(path, body, n):
        return Reply(status=500) if path == "/v1/chat/completions" and answer_in(body) == "a1" else None

    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url, judge_outage_s=600))
        out = [b for b, _ in scorer.score(batch)]
    assert [b.unscorable for b in out] == [0.0, 1.0, 0.0]
    js = scorer.last.judge  # no outage wait: /health answers and the others got scores
    assert (js.outages, js.outage_wait_s, dict(js.failures)) == (0, 0.0, {"http_5xx": 1})
    sent = [answer_in(body) for path, body in srv.requests if path == "/v1/chat/completions"]
    assert sorted(sent) == ["a0", "a1", "a1", "a1", "a1", "a2"]  # a1: two rounds of 1 + retries=1 attempts


def test_requests_that_failed_before_the_judge_came_back_mid_batch_are_sent_again_and_scored(cache):
    """A batch straddling a judge restart: the requests that failed while it was down (all their attempts 503) and
    those sent once it was back (scored) end in one batch whose /health answers. They are sent once more and get
    real scores, never the group mean of a judge that was merely late."""
    g = gt(cache)
    batch = [inp({"answer": f"a{i}", "quotes": [EN]}, g) for i in range(3)]
    tries = {"a1": 0}

    def handler(path, body, n):
        if path == "/v1/chat/completions" and answer_in(body) == "a1":
            tries["a1"] += 1
            if tries["a1"] <= 2:  # both attempts (1 + retries=1) of the first round: the server was still down
                return Reply(status=503)
        return None

    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url, judge_outage_s=600))
        out = [b for b, _ in scorer.score(batch)]
    assert [(b.unscorable, b.answer) for b in out] == [(0.0, 4.0)] * 3
    js = scorer.last.judge
    assert (tries["a1"], js.ok, js.outages, dict(js.failures)) == (3, 3, 0, {})


def test_an_embedder_call_that_failed_before_the_server_came_back_is_made_again(sample_pdf, tmp_path, monkeypatch):
    """The embedder's half of the rule: its call failed (503; the encoder's own retries off) but /health answers by
    the time the reward looks, so the call is made once more and the quotes are embedded; a second failure with the
    server up is a bad call (unscorable, two calls, no wait)."""
    import reward.pipeline as pipeline
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    def without_retries(*args, **kwargs):
        enc = make_quote_encoder(*args, **kwargs)
        enc.backend.settings = dataclasses.replace(enc.backend.settings, max_retries=0)
        return enc

    make_quote_encoder = pipeline.make_quote_encoder
    monkeypatch.setattr(pipeline, "make_quote_encoder", without_retries)

    state = {"fail": 0, "calls": 0}

    def handler(path, body, n):
        if path == "/v1/embeddings" and state["fail"]:
            state["calls"] += 1
            state["fail"] -= 1
            return Reply(status=503)
        return None

    with ScriptedOpenAIServer(handler=handler, embed_dim=8) as srv:
        enc = get_encoder("qwen3-vl-embedding", transport="http", url=srv.url, dim=8, block_content="text",
                          max_retries=0)  # fmt: skip
        cached = build_cache(sample_pdf, get_parser("pdftext"), enc, tmp_path)
        config = RewardConfig(cache_dir=str(tmp_path), judge="lexical", embed_url=srv.url, judge_outage_s=600)
        batch = [inp({"answer": "a", "quotes": [EN, ROW]}, gt(cached))]
        state["fail"] = 1
        scorer = RewardScorer(config)
        ((b, cits),) = scorer.score(batch)
        assert (len(cits), b.unscorable, state["calls"], scorer.last.embed_outages) == (2, 0.0, 1, 0)
        state["fail"], state["calls"] = 2, 0
        scorer = RewardScorer(config)
        ((b, cits),) = scorer.score(batch)
    assert (b.unscorable, state["calls"]) == (1.0, 2)
    assert (scorer.last.embed_outages, scorer.last.embed_outage_wait_s) == (0, 0.0)  # no wait: the server is up


def test_an_encoder_answer_that_is_no_array_is_a_failed_call_not_a_crash(cache):
    class RaggedEncoder:  # a plug-in encoder whose rows differ in length
        name, dim = "minilm", 384

        def embed_texts(self, texts):
            return [[0.1] * 384, [0.2] * 3][: len(texts)] + [[0.3]] * max(0, len(texts) - 2)

        def fingerprint(self):
            return cache.manifest["encoder"]["fingerprint"]

    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    scorer._encoders[("minilm", cache.manifest["encoder"]["fingerprint"])] = RaggedEncoder()
    ((b, _),) = scorer.score([inp({"answer": "Shenzhen", "quotes": [EN, ROW]}, gt(cache))])
    assert (b.overall, b.unscorable, dict(scorer.last.unscorable_reasons)) == (0.0, 1.0, {"embed": 1})


def test_a_document_whose_encoder_cannot_be_had_is_asked_for_once_a_round(cache, monkeypatch):
    calls = []

    def encoder_for(cached):
        calls.append(cached.key)
        raise ConnectionError("embedding server down")

    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    monkeypatch.setattr(scorer, "encoder_for", encoder_for)
    g = gt(cache)
    out = scorer.score([inp({"answer": a, "quotes": [EN]}, g) for a in ("Shenzhen", "Beijing", "Tokyo")])
    assert [b.unscorable for b, _ in out] == [1.0, 1.0, 1.0] and dict(scorer.last.unscorable_reasons) == {"embed": 3}
    assert calls == [cache.key]  # no HTTP embedder: no wait and no second call


def test_embedding_outage_makes_responses_unscorable(cache):
    class DownEncoder:
        name, dim = "minilm", 384

        def embed_texts(self, texts):
            raise ConnectionError("embedding server down")

        def fingerprint(self):
            return cache.manifest["encoder"]["fingerprint"]

    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    scorer._encoders[("minilm", cache.manifest["encoder"]["fingerprint"])] = DownEncoder()
    g = gt(cache)
    out = [b for b, _ in scorer.score([inp({"answer": "Shenzhen", "quotes": [EN]}, g), inp("prose", g)])]
    assert [(b.overall, b.unscorable) for b in out] == [(0.0, 1.0), (0.0, 0.0)]
    assert dict(scorer.last.unscorable_reasons) == {"embed": 1}


def test_unreachable_quote_encoder_server_makes_responses_unscorable_not_a_crash(cache, monkeypatch):
    import reward.pipeline as pipeline

    def unreachable(*args, **kwargs):
        raise ConnectionError("embedder at http://127.0.0.1:9/v1 refused the connection")

    monkeypatch.setattr(pipeline, "make_quote_encoder", unreachable)
    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="lexical"))
    g = gt(cache)
    out = [b for b, _ in scorer.score([inp({"answer": "Shenzhen", "quotes": [EN]}, g), inp("prose", g)])]
    assert [(b.overall, b.unscorable) for b in out] == [(0.0, 1.0), (0.0, 0.0)]
    assert dict(scorer.last.unscorable_reasons) == {"embed": 1}


# --------------------------------------------------------------------------------------------- misconfiguration
def test_misconfiguration_raises_on_the_first_call(cache, tmp_path, monkeypatch):
    good = [inp({"answer": "a", "quotes": [EN]}, gt(cache))]
    cases = [
        ({"cache_dir": str(tmp_path / "nope"), "judge": "lexical"}, good, InputError, "not a directory"),
        ({"judge": "lexical"}, good, InputError, "cache_dir is required"),
        ({"cache_dir": str(cache.path.parent), "judge": "lexical", "max_crop": 3}, good, InputError, "max_crops"),
        ({"cache_dir": str(cache.path.parent), "judge": "gpt"}, good, InputError, "unknown judge 'gpt'"),
        ({"cache_dir": str(cache.path.parent), "judge": "lexical"}, [{"response": "x"}], InputError, "input 0"),
        ({"cache_dir": str(cache.path.parent), "judge": "lexical"}, [inp("x", "{}")], InputError, "missing field"),
        ({"cache_dir": str(tmp_path), "judge": "lexical"}, good, CacheError, "no cache entry"),
        ({"cache_dir": str(cache.path.parent), "judge": "lexical", "encoder": "qwen3-vl-embedding"}, good,
         InputError, "embedded with 'minilm'"),  # a quote encoder other than the cache's
    ]  # fmt: skip
    for kwargs, inputs, error, fragment in cases:
        with pytest.raises(error, match=re.escape(fragment)):
            compute_score(inputs, **kwargs)
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    with pytest.raises(InputError, match="QUOTECITE_JUDGE_URL"):
        compute_score(good, cache_dir=str(cache.path.parent))  # the default judge is http and needs a URL


def test_crops_have_the_block_size_at_the_requested_dpi(cache):
    (cit,) = resolve_quotes([EN], cache)
    (png_bytes,) = crop_pngs(cache, [cit, cit], max_crops=6, dpi=72)  # the same block twice: one crop
    import io

    from PIL import Image

    w, h = Image.open(io.BytesIO(png_bytes)).size
    x0, y0, x1, y1 = cit.bbox
    assert abs(w - (x1 - x0)) <= 2 and abs(h - (y1 - y0)) <= 2  # 72 dpi: one pixel per point


# --------------------------------------------------------------------------------------------- CLI and demo
def test_cli_scores_a_jsonl_file(cache, tmp_path, capsys):
    from core.cli import main
    from reward.__main__ import COMMANDS

    g = gt(cache)
    rows = [inp({"answer": "Shenzhen", "quotes": [EN]}, g), inp("prose", g)]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    argv = ["score", "--inputs", str(src), "--cache-dir", str(cache.path.parent), "--judge", "lexical",
            "--out", str(out)]  # fmt: skip
    assert main("python -m reward", "", COMMANDS, argv) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [sorted(d) for d in lines] == [sorted([*BREAKDOWN_KEYS, "citations"])] * 2
    (c,) = lines[0]["citations"]
    assert (c["page"], c["block_id"], c["quote"], len(c["bbox"])) == (1, block_of(cache, EN), EN, 4)
    assert lines[1]["citations"] == [] and lines[1]["format_ok"] == 0.0
    assert "scored 2 responses" in capsys.readouterr().err

    src.write_text('{"response": "x"}\n')
    assert main("python -m reward", "", COMMANDS, argv) == 2
    assert "in.jsonl:1" in capsys.readouterr().err


def test_cli_batches_never_split_a_group():
    from reward.cmd_score import batches

    qids = ["a"] * 3 + ["b"] * 3 + ["c"] * 2
    assert batches(list(range(8)), qids, size=4) == [(0, 6), (6, 8)]
    assert batches(list(range(8)), qids, size=3) == [(0, 3), (3, 6), (6, 8)]


def test_reward_demo_scores_the_sample_cases(cache, tmp_path):
    from reward.demo import run_reward_demo

    results = run_reward_demo(cache, tmp_path)
    by_case = {r["case"]: r for r in results}
    good = by_case["good answer, right quotes"]
    assert len(results) == 5 and good["overall"] >= 0.8
    assert by_case["wrong answer, right quotes"]["overall"] == 0.0
    hallucinated = by_case["right answer, hallucinated quote"]
    assert hallucinated["overall"] < good["overall"] and hallucinated["mean_similarity"] < good["mean_similarity"]
    unparseable = by_case["unparseable (no JSON object)"]
    assert (unparseable["overall"], unparseable["format_ok"], unparseable["citations"]) == (0.0, 0.0, [])
    written = [json.loads(line) for line in (tmp_path / "reward_demo.jsonl").read_text().splitlines()]
    assert written == results


def test_http_encoder_cache_gets_its_quotes_embedded_by_the_same_settings(sample_pdf, tmp_path):
    """The cluster path on a CPU: blocks embedded by an embedding server, quotes by the same encoder settings
    rebuilt from the cache's fingerprint and pointed at ``embed_url``; each distinct quote embedded once, the
    batch's text-only items several to a request (``texts_per_request``)."""
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.encoders.qwen3vl import DEFAULT_QUERY_INSTRUCTION
    from data_prep.parsers import get_parser

    with ScriptedOpenAIServer(embed_dim=8) as srv:
        enc = get_encoder("qwen3-vl-embedding", transport="http", url=srv.url, dim=8, block_content="text")
        cached = build_cache(sample_pdf, get_parser("pdftext"), enc, tmp_path)
        n_blocks = srv.count("/v1/embeddings")
        g = gt(cached)
        config = RewardConfig(cache_dir=str(tmp_path), judge="lexical", embed_url=srv.url)
        out = RewardScorer(config).score([inp({"answer": "a", "quotes": [EN, ROW]}, g)] * 3)
        quote_requests = srv.requests[n_blocks:]
    per_request = enc.settings.texts_per_request
    assert n_blocks == -(-len(cached.blocks) // per_request)  # text blocks: several to a request
    assert all(len(cits) == 2 and b.unscorable == 0.0 for b, cits in out)
    (quotes,) = [b["messages"] for _, b in quote_requests]  # the batch's 2 distinct quotes, once, in one request
    assert len(quotes) == 2 and [conv[1]["content"][0]["text"] for conv in quotes] == [EN, ROW]
    system = quotes[0][0]["content"]
    assert DEFAULT_QUERY_INSTRUCTION.rstrip(".") in json.dumps(system)


def test_batch_counters_are_appended_to_the_launch_metrics_dir(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    g = gt(cache)
    batch = [inp("no json", g), inp({"answer": QA.answer, "quotes": [EN]}, g)]
    compute_score(batch, cache_dir=str(cache.path.parent), judge="lexical")
    compute_score(batch, cache_dir=str(cache.path.parent), judge="lexical")
    lines = [json.loads(x) for x in (tmp_path / "seg" / "reward_counters.jsonl").read_text().splitlines()]
    assert len(lines) == 2  # one line per batch, appended
    for line in lines:
        assert (line["responses"], line["format_ok"], line["reject_reasons_no_object"], line["unscorable"]) == (
            2,
            1,
            1,
            0,
        )
        assert all(isinstance(v, int | float) for v in line.values())  # flat numbers: the launch sums them


# --------------------------------------------------------------------------------------------- EasyR1's contract
def test_plugin_loads_and_runs_from_a_checkout_that_is_not_installed(cache, tmp_path):
    """EasyR1's loader, step by step (verl/workers/reward/function.py at b44b311): spec_from_file_location under
    the name ``custom_reward_fn``, registered in sys.modules, kwargs bound with functools.partial, the batch passed
    positionally, every value reduced with np.mean. Run in a fresh interpreter without site-packages' .pth files
    (so the editable install of this repo is invisible) from another working directory."""
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    plugin = Path(__file__).resolve().parents[2] / "reward" / "quote_reward.py"
    batch = [inp({"answer": QA.answer, "quotes": [EN, ROW]}, gt(cache)), inp("prose", gt(cache))]
    script = f"""
import importlib.util, json, sys
from functools import partial
import numpy as np
try:
    import reward
    sys.exit("the repo is importable without the plugin's fallback; the test proves nothing")
except ImportError:
    pass
spec = importlib.util.spec_from_file_location("custom_reward_fn", {str(plugin)!r})
module = importlib.util.module_from_spec(spec)
sys.modules["custom_reward_fn"] = module
spec.loader.exec_module(module)
fn = partial(getattr(module, "compute_score"), **{{"cache_dir": {str(cache.path.parent)!r}, "judge": "lexical",
                                                   "resolver": "lexical"}})
scores = fn(json.loads(sys.stdin.read()))
metrics = {{}}
for s in scores:
    for k, v in s.items():
        metrics.setdefault(k, []).append(v)
reduced = {{k: float(np.mean(v)) for k, v in metrics.items()}}
print(json.dumps([module.REWARD_NAME, module.REWARD_TYPE, scores, reduced]))
"""
    proc = subprocess.run(
        [sys.executable, "-S", "-c", script],
        input=json.dumps(batch),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    name, kind, scores, reduced = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (name, kind, len(scores)) == ("quote_reward", "batch", 2)
    assert [(s["format_ok"], s["n_citations"]) for s in scores] == [(1.0, 2.0), (0.0, 0.0)]
    assert scores[0]["overall"] > 0 and scores[1]["overall"] == 0.0
    assert reduced["overall"] == pytest.approx(scores[0]["overall"] / 2)
    assert sorted(reduced) == sorted(BREAKDOWN_KEYS)


def test_groups_are_found_by_qid_wherever_their_responses_sit(cache):
    """EasyR1 reorders a batch to balance sequence lengths before computing rewards (ray_trainer._balance_batch),
    so a prompt's n responses need not be consecutive: the unscorable fill must follow the qid, not the position."""

    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None  # /health answers: the failures below are single bad calls, not an outage
        a = answer_in(body)
        if a.startswith("FAIL"):
            return Reply(status=500)
        return chat_completion(json.dumps({"answer": int(a[1]), "relevance": 5, "coverage": 5}))

    def resp(answer):
        return {"answer": answer, "quotes": [EN]}

    g1, g2 = gt(cache, "q1"), gt(cache, "q2")
    grouped = [
        inp(resp("A5"), g1), inp(resp("A3"), g1), inp(resp("FAIL1"), g1),
        inp(resp("A1"), g2), inp(resp("A0"), g2), inp(resp("FAIL2"), g2),
    ]  # fmt: skip
    interleaved = [grouped[i] for i in (3, 0, 5, 1, 4, 2)]
    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url))
        a = [b.overall for b, _ in scorer.score(grouped)]
        b = [b.overall for b, _ in scorer.score(interleaved)]
    assert a == pytest.approx([1.0, 0.6, 0.8, 0.2, 0.0, 0.1])  # FAIL1: mean(1, .6); FAIL2: mean(.2, 0)
    assert b == pytest.approx([a[i] for i in (3, 0, 5, 1, 4, 2)])


def test_cli_scores_a_group_together_even_when_its_lines_are_apart(cache, tmp_path):
    from core.cli import main
    from reward.__main__ import COMMANDS

    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None
        a = answer_in(body)
        return Reply(status=500) if a == "FAIL" else chat_completion(
            json.dumps({"answer": int(a[1]), "relevance": 5, "coverage": 5}))  # fmt: skip

    g1, g2 = gt(cache, "q1"), gt(cache, "q2")
    rows = [inp({"answer": a, "quotes": [EN]}, g) for a, g in (("A5", g1), ("A0", g2), ("FAIL", g1), ("A1", g2))]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with ScriptedOpenAIServer(handler=handler) as srv:
        argv = ["score", "--inputs", str(src), "--cache-dir", str(cache.path.parent), "--judge-url", srv.url,
                "--judge-model", "judge-model", "--retries", "0", "--out", str(out)]  # fmt: skip
        assert main("python -m reward", "", COMMANDS, argv) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    # Input order kept; the failed q1 line gets q1's mean (1.0), not a mix with q2's.
    assert [(d["overall"], d["unscorable"]) for d in lines] == [(1.0, 0.0), (0.0, 0.0), (1.0, 1.0), (0.2, 0.0)]


def test_cli_group_order_brings_each_qid_together():
    from reward.cmd_score import group_order

    assert group_order(["a", "b", "a", "c", "b", "a"]) == [0, 2, 5, 1, 4, 3]
    assert group_order([]) == []


# --------------------------------------------------------------------------------------------- judge misconfiguration
VLLM_404 = {"object": "error", "message": "The model `judge-modle` does not exist.", "type": "NotFoundError",
            "code": 404}  # fmt: skip

MISCONFIGURED_JUDGES = [
    # (reply to every chat request, a fragment the error must contain)
    (Reply(status=404, json=VLLM_404), "does not exist"),  # wrong judge_model: vLLM's 404
    (Reply(status=400, json={"message": "unknown field"}), "HTTP 400"),  # a body the server refuses
    (Reply(text="<html>login</html>"), "bad_response"),  # a URL that is not an OpenAI chat API
]


@pytest.mark.parametrize(("reply", "fragment"), MISCONFIGURED_JUDGES)
def test_a_judge_that_rejects_its_whole_first_batch_is_misconfiguration(cache, reply, fragment):
    g = gt(cache)
    batch = [inp({"answer": f"a{i}", "quotes": [EN]}, g) for i in range(3)] + [inp("prose", g)]
    with ScriptedOpenAIServer(handler=lambda path, body, n: reply) as srv:
        with pytest.raises(InputError, match="rejected all 3 requests") as e:
            compute_score(batch, **http_config(cache, srv.url).to_dict())
    assert fragment in str(e.value) and srv.url in str(e.value)


def test_whole_batch_outages_raise_after_the_budget_and_later_rejections_are_unscorable(cache):
    g = gt(cache)
    batch = [inp({"answer": f"a{i}", "quotes": [EN]}, g) for i in range(3)]
    state = {"reply": Reply(status=503)}
    with ScriptedOpenAIServer(handler=lambda path, body, n: state["reply"] if path != "/health" else None) as srv:
        scorer = RewardScorer(dataclasses.replace(http_config(cache, srv.url), timeout_s=0.5, judge_outage_s=0.5))
        for reply in (Reply(status=503), Reply(status=429), Reply(hang=True)):  # every call failing: an outage
            state["reply"] = reply
            with pytest.raises(ServerOutageError, match="is down"):
                scorer.score(batch)
        state["reply"] = None  # the default server: scores
        assert [b.unscorable for b, _ in scorer.score(batch)] == [0.0] * 3
        state["reply"] = Reply(status=404, json=VLLM_404)  # the judge answered before: bad responses, counted
        assert [b.unscorable for b, _ in scorer.score(batch)] == [1.0] * 3
    assert dict(scorer.last.judge.failures) == {"http_4xx": 3}


# --------------------------------------------------------------------------------------------- the keep key
def test_keep_is_the_group_mean_where_rewards_differ_and_minus_one_where_they_cannot_teach(cache):
    from reward.scoring import KEEP_DROP

    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None
        a = answer_in(body)
        if a.startswith("FAIL"):
            return Reply(status=500)
        return chat_completion(json.dumps({"answer": int(a[1]), "relevance": 5, "coverage": 5}))

    def resp(answer):
        return {"answer": answer, "quotes": [EN]}

    groups = {
        "varied": ["A5", "A0", "A5", "FAIL1"],  # rewards 1, 0, 1 (+ one unscorable): mean 2/3, it teaches
        "same": ["A4", "A4", "A4", "A4"],  # all 0.8: every advantage would be 0 (DAPO drops it)
        "same_but_one_failed": ["A4", "FAIL2", "A4", "A4"],  # the known ones equal: the filled one changes nothing
        "all_zero": ["A0", "A0", "A0", "A0"],
        "dead": ["FAIL3", "FAIL4", "FAIL5", "FAIL6"],  # nothing scorable: dropped, never trained as zeros
    }
    batch = [inp(resp(a), gt(cache, qid)) for qid, answers in groups.items() for a in answers]
    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url, judge_outage_s=600))
        out = [b for b, _ in scorer.score(batch)]
    keep = {qid: {round(b.keep, 9) for b in out[4 * i : 4 * i + 4]} for i, qid in enumerate(groups)}
    assert keep["varied"] == {round(2 / 3, 9)}
    assert keep["same"] == keep["same_but_one_failed"] == keep["all_zero"] == keep["dead"] == {KEEP_DROP}
    assert [b.overall for b in out[4:8]] == pytest.approx([0.8] * 4)  # the reward itself is untouched
    s = scorer.last
    assert (s.groups, s.groups_zero_variance, s.groups_all_unscorable) == (5, 3, 1)
    # EasyR1's filter (mean of filter_key per uid, kept strictly inside the band) keeps exactly the varied group
    low, high = 0.01, 0.99
    kept = [
        qid for i, qid in enumerate(groups) if low < float(np.mean([b.keep for b in out[4 * i : 4 * i + 4]])) < high
    ]
    assert kept == ["varied"]


def lexical_group(cache, qid: str, answers: list[str]) -> list[dict]:
    return [inp({"answer": a, "quotes": [EN]}, gt(cache, qid)) for a in answers]


def test_training_batch_records_replay_the_filter_across_attempts(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    config = RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", batch_groups=2, keep_band=[0.01, 0.99])
    scorer = RewardScorer(config)
    right, wrong = QA.answer, "Beijing"
    # validation (one response per question) is never a training batch
    scorer.score(lexical_group(cache, "v1", [right]) + lexical_group(cache, "v2", [wrong]))
    assert scorer.last_batch is None
    # attempt 1: one group that teaches, one that cannot (all wrong): EasyR1 needs another attempt
    first = lexical_group(cache, "a", [right, wrong, wrong]) + lexical_group(cache, "b", [wrong] * 3)
    out1 = [b for b, _ in scorer.score(first)]
    assert scorer.last_batch is None
    # attempt 2: two more that teach; EasyR1 keeps the first 2 kept groups in order: a and c (d is surplus)
    second = lexical_group(cache, "c", [wrong, right, right]) + lexical_group(cache, "d", [right, wrong, wrong])
    out2 = [b for b, _ in scorer.score(second)]
    rec = scorer.last_batch
    assert rec["qids"] == ["a", "c"] and rec["calls"] == 2 and rec["responses"] == 6
    assert (rec["groups_seen"], rec["groups_trained"]) == (4, 2)
    assert rec["dropped"] == {"zero_variance": 1, "all_unscorable": 0, "out_of_band": 0, "surplus": 1}
    trained = out1[:3] + out2[:3]
    assert rec["reward"]["overall"] == pytest.approx(np.mean([b.overall for b in trained]))
    assert rec["reward"]["format_ok"] == 1.0 and rec["counters"]["responses"] == 12  # both attempts' counters
    lines = [json.loads(x) for x in (tmp_path / "seg" / "reward_batches.jsonl").read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["batch"] == 1 and lines[0]["qids"] == ["a", "c"]
    # without online filtering (no band) every group of a call trains, one call per step
    scorer = RewardScorer(dataclasses.replace(config, keep_band=None))
    scorer.score(first)
    assert scorer.last_batch["qids"] == ["a", "b"] and scorer.last_batch["batch"] == 1
    assert not (tmp_path / "seg" / "no_group_kept.json").exists()  # every attempt above kept a group


def test_an_attempt_that_keeps_no_group_is_reported_for_the_launch(cache, tmp_path, monkeypatch):
    # EasyR1 raises "No sample is kept after filtering" at such an attempt; the reward says why first, so the launch
    # can end the run with one line instead of requeueing into the same batch
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    config = RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", batch_groups=2, keep_band=[0.01, 0.99])
    scorer = RewardScorer(config)
    right, wrong = QA.answer, "Beijing"
    scorer.score(lexical_group(cache, "a", [right, wrong, wrong]) + lexical_group(cache, "b", [wrong] * 3))
    assert not (tmp_path / "seg" / "no_group_kept.json").exists()
    scorer.score(lexical_group(cache, "c", [wrong] * 3) + lexical_group(cache, "d", [right] * 3))
    rec = json.loads((tmp_path / "seg" / "no_group_kept.json").read_text())
    assert (rec["batch"], rec["attempt"], rec["groups"]) == (1, 2, 2)
    assert rec["dropped"] == {"zero_variance": 2, "all_unscorable": 0, "out_of_band": 0}


def test_cli_waits_judge_outage_s_for_a_dead_judge_then_stops_with_one_line(cache, tmp_path, capsys):
    from core.cli import main
    from reward.__main__ import COMMANDS

    with socket.socket() as sock:  # held for the test: bound, never listening, so no one else takes the port
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
        src.write_text(json.dumps(inp({"answer": "a", "quotes": [EN]}, gt(cache))) + "\n")
        argv = ["score", "--inputs", str(src), "--cache-dir", str(cache.path.parent), "--judge-url", dead,
                "--judge-model", "judge-model", "--retries", "0", "--judge-outage-s", "1", "--out", str(out)]  # fmt: skip
        t0 = time.monotonic()
        assert main("python -m reward", "", COMMANDS, argv) == 2
    assert time.monotonic() - t0 >= 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"python -m reward score: error: judge at {dead}/chat/completions is down"
    )
    assert not out.exists()
