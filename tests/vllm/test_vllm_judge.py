"""The reward's judge and ``eval score``'s two-call CiteVQA judge against a real vLLM (CPU build) serving a random
Qwen3-VL with Qwen3.5's thinking chat template, started with the launch's own command line (conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from data_prep.crops import crop_pngs
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.sample import SAMPLE_FACTS
from reward.config import RewardConfig
from reward.judge import JudgeRequest, JudgeSettings
from reward.judge_http import HttpJudge
from reward.pipeline import RewardScorer
from reward.quote_reward import compute_score
from tests.vllm.conftest import JUDGE_MODEL, REPO

QA = SAMPLE_FACTS.qa[0]
QUOTES = [f.text for f in SAMPLE_FACTS.facts[:6]]


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("cache"))


def inp(cache, answer: str, quotes: list[str], qid: str = "q1") -> dict:
    gt = pack_ground_truth(GroundTruth(qid, cache.key, QA.question, QA.answer, None))
    text = json.dumps({"answer": answer, "quotes": quotes}, ensure_ascii=False)
    return {"response": text, "response_length": len(text), "ground_truth": gt}


def judge(server, **settings) -> HttpJudge:
    s = JudgeSettings(outage_s=None, retries=0, **settings)
    return HttpJudge(server.url, JUDGE_MODEL, **s.client_kwargs())


def test_server_runs_the_launch_command_line(judge_server):
    argv = judge_server.argv
    assert argv[argv.index("--served-model-name") + 1] == JUDGE_MODEL
    assert argv[argv.index("--limit-mm-per-prompt") + 1] == '{"image": 8}'
    # no server-side reply-format flag: the judge's requests carry their own constraint, so every test of this tier
    # scores against a server started the plain way, as a user who serves the judge by hand starts it
    assert not [a for a in argv if a.startswith("--structured-outputs") or a.startswith("--guided-decoding")]
    models = httpx.get(judge_server.url + "/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [JUDGE_MODEL]


def _render(server, thinking: bool) -> str:
    """The judge's prompt as vLLM renders it (its /tokenize then /detokenize) for one chat with ``thinking``."""
    base = server.url.removesuffix("/v1")
    body = {
        "model": JUDGE_MODEL,
        "messages": [{"role": "user", "content": "grade"}],
        "add_generation_prompt": True,
        "chat_template_kwargs": {"enable_thinking": thinking},
    }
    tokens = httpx.post(base + "/tokenize", json=body, timeout=30).json()["tokens"]
    return httpx.post(base + "/detokenize", json={"model": JUDGE_MODEL, "tokens": tokens}, timeout=30).json()["prompt"]


def test_the_thinking_setting_reaches_the_chat_template(judge_server):
    on, off = _render(judge_server, True), _render(judge_server, False)
    assert on.endswith("<|im_start|>assistant\n<think>\n")  # the reply would start inside the reasoning
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # an empty reasoning: the answer comes next
    j = judge(judge_server)
    body = j.body(JudgeRequest("q", "g", "a", ()))
    assert body["chat_template_kwargs"] == {"enable_thinking": False}  # the default: off, in every request
    assert judge(judge_server, thinking=True).body(JudgeRequest("q", "g", "a", ()))["chat_template_kwargs"] == {
        "enable_thinking": True
    }


def test_crops_reach_the_model_as_images(judge_server, cache):
    """The prompt token count vLLM reports grows with every crop: the images are in the model's input."""
    doc = cache.open_pdf()
    try:
        blocks = [b for b in cache.blocks if b.text.strip()][:6]

        class _C:  # a citation as crop_pngs reads it
            def __init__(self, b):
                self.block_id, self.page, self.bbox = b.block_id, b.page, b.bbox

        crops = crop_pngs(cache, [_C(b) for b in blocks], max_crops=6, doc=doc)
    finally:
        doc.close()
    assert len(crops) == 6
    j = judge(judge_server)
    tokens = []
    for n in (0, 1, 3, 6):
        (scores,) = j.score_batch([JudgeRequest(QA.question, QA.answer, "Shenzhen", crops[:n])])
        assert scores is not None and len(scores.crop_relevance) == n  # the schema holds one flag per crop
        tokens.append(j.stats.prompt_tokens)
    assert tokens == sorted(tokens) and len(set(tokens)) == 4, tokens


def test_constrained_judge_parses_all_of_100_replies(judge_server):
    j = judge(judge_server, concurrency=8)
    requests = [JudgeRequest(f"question {i}?", "gold", f"answer {i}", ()) for i in range(100)]
    out = j.score_batch(requests)
    assert j.stats.sent == 100 and j.stats.ok == 100 and j.stats.to_dict()["unparseable"] == 0
    assert all(s is not None and all(0 <= v <= 5 for v in (s.answer, s.relevance, s.coverage)) for s in out)


def test_unconstrained_random_judge_is_unscorable_never_zero(judge_server, cache):
    """The random weights answer garbage without the constraint: each response is unscorable (the group mean of
    the scorable ones, here none, so the group gets no advantage), never a 0 from a failed call, never a crash."""
    cfg = RewardConfig(cache_dir=str(cache.path.parent), judge="http", judge_url=judge_server.url,
                       judge_model=JUDGE_MODEL, judge_structured=False, judge_outage_s=0, retries=0)  # fmt: skip
    scorer = RewardScorer(cfg)
    inputs = [inp(cache, "Shenzhen", QUOTES[:2], qid="g"), inp(cache, "Beijing", QUOTES[2:4], qid="g")]
    try:
        out = scorer.score(inputs)
    except Exception as e:  # the judge-misconfiguration guard: a judge that never scored and whose replies are all
        assert "unparseable" not in str(e)  # unparseable is *not* misconfigured (only 4xx / bad_response are)
        raise
    failures = scorer.last.judge.failures  # garbage until max_tokens (truncated) or a reply without a score
    assert failures.get("unparseable", 0) + failures.get("truncated", 0) == 2 and scorer.last.judge.ok == 0
    assert [b.unscorable for b, _ in out] == [1.0, 1.0]


def test_reward_score_command_and_plugin_through_vllm(judge_server, cache, tmp_path):
    inputs = [inp(cache, "Shenzhen", QUOTES[: k + 1], qid=f"q{k}") for k in range(4)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in inputs))
    out = tmp_path / "scored.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "reward", "score", "--inputs", str(path), "--cache-dir", str(cache.path.parent),
         "--judge", "http", "--judge-url", judge_server.url, "--judge-model", JUDGE_MODEL, "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all(row["unscorable"] == 0.0 and row["format_ok"] == 1.0 for row in rows)
    assert [len(row["citations"]) for row in rows] == [1, 2, 3, 4]
    # the EasyR1 plugin path: compute_score as EasyR1 calls it, with the recipe's judge settings
    got = compute_score(inputs, cache_dir=str(cache.path.parent), judge="http", judge_url=judge_server.url,
                        judge_model=JUDGE_MODEL, judge_thinking=False, judge_structured=True)  # fmt: skip
    assert len(got) == 4 and all(d["unscorable"] == 0.0 and 0.0 <= d["overall"] <= 1.0 for d in got)
