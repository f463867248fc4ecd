"""Judge replicas (reward/servers.py): requests spread over several real OpenAI-API servers on 127.0.0.1, a
replica killed mid-run is skipped (and used again once it answers), the unscorable policy only when none answers."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import InputError
from reward.config import RewardConfig
from reward.judge import JudgeRequest, JudgeScores
from reward.judge_http import HttpJudge
from reward.servers import ServerOutageError, UrlListAction, parse_urls
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion

REPO = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
# A server process answering every chat call after DELAY seconds (so calls are in flight when one is killed).
SERVER = """
import sys
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion
delay = float(sys.argv[2])
def handler(path, body, n):
    if path.endswith("/chat/completions"):
        return Reply(json=chat_completion('{"answer": 3, "relevance": 4, "coverage": 5}'), delay=delay)
    return None
ScriptedOpenAIServer(handler=handler, port=int(sys.argv[1])).serve_until_signal("serving on {url}")
"""


def reqs(n: int, tag: str = "") -> list[JudgeRequest]:
    return [JudgeRequest("Which year?", "1999", f"answer {tag}{i}", (b"png",)) for i in range(n)]


class ServerProcess:
    """A judge server in its own process (killable with SIGKILL like a crashed vLLM)."""

    def __init__(self, port: int = 0, delay: float = 0.2) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port), str(delay)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        line = self.proc.stdout.readline().strip()
        assert line.startswith("serving on "), line
        self.url = line.split()[-1]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def servers():
    started: list[ServerProcess] = []

    def start(port: int = 0, delay: float = 0.2) -> ServerProcess:
        s = ServerProcess(port, delay)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def by_url(judge: HttpJudge) -> dict[str, dict]:
    return {r["url"]: r for r in judge.replicas.stats()}


# --------------------------------------------------------------------------------------------- settings
def test_urls_from_strings_lists_settings_and_flags():
    assert parse_urls(" http://a:1/v1 ,http://b:2/v1/ http://a:1/v1") == ["http://a:1/v1", "http://b:2/v1"]
    cfg = RewardConfig.from_kwargs(cache_dir="x", judge_url=["http://a:1/v1", "http://b:2/v1"])
    assert cfg.judge_url == "http://a:1/v1,http://b:2/v1"
    p = argparse.ArgumentParser()
    p.add_argument("--judge-url", action=UrlListAction)
    args = p.parse_args(["--judge-url", "http://a:1/v1,http://b:2/v1", "--judge-url", "http://c:3/v1"])
    assert args.judge_url == "http://a:1/v1,http://b:2/v1,http://c:3/v1"
    j = HttpJudge(args.judge_url, "m")
    assert len(j.replicas) == 3 and j.url.count("/chat/completions") == 3
    with pytest.raises(InputError, match="must start with http"):
        HttpJudge("http://a:1/v1,b:2/v1", "m")
    with pytest.raises(InputError, match="no base URL"):
        HttpJudge(" , ", "m")


# --------------------------------------------------------------------------------------------- spreading
def test_requests_spread_over_replicas_least_in_flight():
    """Two equal servers share the load; a slow one gets fewer calls than a fast one (fewest in flight)."""

    def slow(path, body, n):
        return Reply(json=chat_completion('{"answer": 1, "relevance": 1, "coverage": 1}'), delay=0.4)

    with ScriptedOpenAIServer() as a, ScriptedOpenAIServer() as b:
        j = HttpJudge(f"{a.url},{b.url}", "judge-model", concurrency=8, retries=0, timeout_s=5)
        out = j.score_batch(reqs(16))
        assert all(s == JudgeScores(4, 4, 4) for s in out)
        assert a.count(CHAT) + b.count(CHAT) == 16
        assert abs(a.count(CHAT) - b.count(CHAT)) <= 2, (a.count(CHAT), b.count(CHAT))

    with ScriptedOpenAIServer() as fast, ScriptedOpenAIServer(handler=slow) as slow_srv:
        j = HttpJudge([fast.url, slow_srv.url], "judge-model", concurrency=4, retries=0, timeout_s=5)
        out = j.score_batch(reqs(40))
        assert None not in out
        assert fast.count(CHAT) + slow_srv.count(CHAT) == 40
        assert fast.count(CHAT) > 3 * slow_srv.count(CHAT), (fast.count(CHAT), slow_srv.count(CHAT))


# --------------------------------------------------------------------------------------------- a replica dies
def test_replica_killed_mid_batch_is_skipped_then_used_again(servers):
    s1, s2, s3 = servers(), servers(), servers()
    # retries=0: the failover to another replica is not a retry; no request may be lost to the dead one.
    j = HttpJudge([s1.url, s2.url, s3.url], "judge-model", concurrency=6, retries=0, timeout_s=10)
    j.replicas.cooldown_s = (0.5, 0.5)
    assert j.score_batch(reqs(6, "warm")) == [JudgeScores(3, 4, 5)] * 6

    import threading

    killer = threading.Timer(0.3, s2.kill)  # while the batch's calls are in flight on every replica
    killer.start()
    out = j.score_batch(reqs(30, "kill"))
    killer.join()
    assert out == [JudgeScores(3, 4, 5)] * 30, j.stats.to_dict()
    st = by_url(j)
    assert st[s2.url]["down"] and st[s2.url]["times_down"] == 1 and st[s2.url]["failed"] >= 1
    assert j.stats.failures == {} and j.stats.ok == 30

    sent_to_dead = st[s2.url]["sent"]
    out = j.score_batch(reqs(12, "after"))  # the dead replica gets no calls (its /health probe fails)
    assert out == [JudgeScores(3, 4, 5)] * 12
    assert by_url(j)[s2.url]["sent"] == sent_to_dead

    s2b = servers(port=s2.port)  # back on the same port
    time.sleep(0.6)  # past the cool-down: the next calls probe its /health and use it again
    out = j.score_batch(reqs(12, "back"))
    assert out == [JudgeScores(3, 4, 5)] * 12
    st = by_url(j)
    assert not st[s2b.url]["down"] and st[s2b.url]["sent"] > sent_to_dead


def test_unscorable_only_when_no_replica_answers(servers):
    s1, s2 = servers(delay=0.0), servers(delay=0.0)
    j = HttpJudge([s1.url, s2.url], "judge-model", retries=0, timeout_s=5)
    s1.kill()
    assert j.score_batch(reqs(4, "one")) == [JudgeScores(3, 4, 5)] * 4  # one answers: all scored
    s2.kill()
    out = j.score_batch(reqs(4, "none"))  # none answers: unscorable (outage_s=None never waits)
    assert out == [None] * 4
    assert j.stats.failures == {"connection": 4}

    j = HttpJudge([s1.url, s2.url], "judge-model", retries=0, timeout_s=5, outage_s=0)
    with pytest.raises(ServerOutageError) as e:
        j.score_batch(reqs(2, "outage"))
    assert s1.url in str(e.value) and s2.url in str(e.value)


def test_outage_wait_ends_when_any_replica_comes_back(servers):
    s1, s2 = servers(delay=0.0), servers(delay=0.0)
    port = s2.port
    j = HttpJudge([s1.url, s2.url], "judge-model", retries=0, timeout_s=5, outage_s=30)
    s1.kill()
    s2.kill()
    import threading

    restart = threading.Timer(1.5, lambda: servers(port=port, delay=0.0))
    restart.start()
    out = j.score_batch(reqs(3, "wait"))  # past outage_s=30 it would raise instead
    restart.join()
    assert out == [JudgeScores(3, 4, 5)] * 3
    assert j.stats.outages >= 1


# --------------------------------------------------------------------------------------------- health by content
@pytest.mark.parametrize(
    "bad",
    [
        Reply(text="<html>gateway</html>"),  # 200, not a chat completion
        Reply(json=chat_completion('{"answer": 9, "relevance": 4, "coverage": 3}')),  # out of range
        Reply(json=chat_completion('{"answer": "five", "relevance": 4, "coverage": 3}')),  # a string score
        Reply(
            json=chat_completion(
                '{"answer": 5, "relevance": 5, "coverage": 5} {"answer": 0, "relevance": 0, "coverage": 0}'
            )
        ),  # two verdicts that disagree
    ],
)
def test_a_replica_answering_garbage_fails_over_like_a_dead_one(bad):
    """A replica that answers 200 with something that is no verdict counts as failing: its calls go to the healthy
    replica, every response is scored, and it is marked down (not left to make its share unscorable)."""
    with ScriptedOpenAIServer(handler=lambda path, body, n: bad if path == CHAT else None) as broken, \
            ScriptedOpenAIServer() as good:  # fmt: skip
        j = HttpJudge([broken.url, good.url], "judge-model", concurrency=4, retries=0, timeout_s=5)
        j.replicas.cooldown_s = (30.0, 30.0)
        out = j.score_batch(reqs(12, "content"))
        assert out == [JudgeScores(4, 4, 4)] * 12
        assert j.stats.ok == 12 and not j.stats.failures
        stats = by_url(j)
        assert stats[broken.url]["down"] and stats[broken.url]["failed"] >= 1
        assert good.count(CHAT) == 12


def test_one_replica_answering_garbage_leaves_its_responses_unscorable():
    bad = Reply(text="<html>gateway</html>")
    with ScriptedOpenAIServer(handler=lambda path, body, n: bad if path == CHAT else None) as broken:
        j = HttpJudge(broken.url, "judge-model", concurrency=4, retries=0, timeout_s=5)
        assert j.score_batch(reqs(3, "one")) == [None] * 3
        assert j.stats.failures == {"bad_response": 3}
