"""The judged batch as a pipeline: judge requests leave while later responses are still being embedded, and the
judge's counters, the failure policy and every reward are those of one batch judged at the end."""

from __future__ import annotations

import json
import threading

import pytest

from data_prep.encoders.minilm import MiniLMEncoder
from reward import pipeline
from reward.judge_http import HttpJudge
from reward.pipeline import WAVES, RewardScorer, _JudgeStream
from tests.reward.test_reward_pipeline import EN, ROW, answer_in, gt, http_config, inp
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("overlap"))


N = WAVES[0] + 4
"""Responses of a batch: a first wave and part of a second."""


def _batch(cache) -> list[dict]:
    """Two groups; each response quotes a text of its own (so the second wave has quotes to embed), some fail at
    the judge, two are the same request (sent once), one is unparseable."""
    out = []
    for i in range(N):
        answer = "FAIL" if i in (2, 9) else f"A{i % 6}"
        quote = EN if i in (4, 5) else f"{EN if i % 2 else ROW} ({i})"
        out.append(inp({"answer": answer, "quotes": [quote]}, gt(cache, f"q{i % 2}")))
    out[5] = dict(out[4])  # the same request twice in group q0
    out[7] = inp("no json here", gt(cache, "q1"))
    return out


def _handler(path, body, n):
    if not path.endswith("/chat/completions"):
        return None  # /health answers: failures are single bad calls
    a = answer_in(body)
    if a == "FAIL":
        return Reply(status=500)
    return chat_completion(json.dumps({"answer": int(a[1]), "relevance": 3, "coverage": 2}))


class _OneCallJudge(HttpJudge):
    """The HTTP judge given the whole batch in one score_batch call (the reference the stream must equal)."""

    def score_batch(self, requests):
        return HttpJudge.score_batch(self, requests)


def test_requests_leave_while_later_responses_are_still_being_embedded(cache, monkeypatch):
    sent = threading.Event()
    seen = []
    embed = MiniLMEncoder.embed_texts

    def handler(path, body, n):
        if path.endswith("/chat/completions"):
            sent.set()
        return None

    def embed_texts(self, texts):
        seen.append(len(texts))
        if len(seen) > 1:  # a later wave: it waits for a judge request to have reached the server
            seen[-1] = sent.wait(60)
        return embed(self, texts)

    batch = [inp({"answer": f"a{i}", "quotes": [f"{EN} ({i})"]}, gt(cache)) for i in range(N)]
    with ScriptedOpenAIServer(handler=handler) as srv:
        scorer = RewardScorer(http_config(cache, srv.url))
        monkeypatch.setattr(MiniLMEncoder, "embed_texts", embed_texts)
        out = scorer.score(batch)
    assert len(seen) == 2 and seen[1] is True  # the second wave's quotes were embedded after a request was sent
    assert scorer.last.judge.ok == N and not any(b.unscorable for b, _ in out)


def test_the_stream_counts_and_scores_as_one_batch_call(cache):
    batch = _batch(cache)
    with ScriptedOpenAIServer(handler=_handler) as srv:
        config = http_config(cache, srv.url)
        streamed = RewardScorer(config)
        one_call = RewardScorer(config)
        one_call.judge = _OneCallJudge(srv.url, "judge-model", **config.judge_settings().client_kwargs())
        assert _JudgeStream.streams(streamed.judge) and not _JudgeStream.streams(one_call.judge)
        a = streamed.score(batch)
        n_calls = srv.count("/v1/chat/completions")
        b = one_call.score(batch)
    assert [r.to_dict() | {"judge_s": 0} for r, _ in a] == [r.to_dict() | {"judge_s": 0} for r, _ in b]
    assert [c for _, c in a] == [c for _, c in b]
    js_a, js_b = streamed.last.judge.to_dict(), one_call.last.judge.to_dict()
    js_a.pop("wall_s"), js_b.pop("wall_s")
    assert js_a == js_b
    assert (js_a["requests"], js_a["deduplicated"], js_a["failures"]) == (
        N - 1,
        2,
        {"http_5xx": 2},
    )  # 4 and 5, 0 and 6 are alike
    assert n_calls == js_a["sent"] + 2 + 2 * 2  # each distinct request once, the two failing ones retried once,
    # then sent once more (1 + retries=1 attempts each) because /health answers: they may have failed before it did
    for s in (streamed.last, one_call.last):
        s.seconds.clear()
        s.judge.wall_s = 0
    assert streamed.last.to_dict() == one_call.last.to_dict()  # unscorable, group and reject counters alike
    assert streamed.judge.total.ok == streamed.judge.stats.ok  # the judge's life totals are kept too


def test_a_batch_that_raises_mid_stream_leaves_no_judge_thread(cache, monkeypatch):
    calls = []
    resolve = pipeline.resolve_quotes

    def failing_resolve(*args, **kwargs):
        calls.append(1)
        if len(calls) > WAVES[0]:  # in the second wave, after the first wave's requests left
            raise RuntimeError("a bug in the resolver")
        return resolve(*args, **kwargs)

    batch = [inp({"answer": f"a{i}", "quotes": [EN]}, gt(cache)) for i in range(N)]
    slow = Reply(json=chat_completion('{"answer": 4, "relevance": 4, "coverage": 4}'), delay=0.2)
    with ScriptedOpenAIServer(handler=lambda path, body, n: slow if "chat" in path else None) as srv:
        scorer = RewardScorer(http_config(cache, srv.url))
        monkeypatch.setattr(pipeline, "resolve_quotes", failing_resolve)
        with pytest.raises(RuntimeError, match="a bug in the resolver"):
            scorer.score(batch)
        assert not [t for t in threading.enumerate() if t.name == "reward-judge"]
        monkeypatch.setattr(pipeline, "resolve_quotes", resolve)
        assert not any(b.unscorable for b, _ in scorer.score(batch))  # the scorer still works
