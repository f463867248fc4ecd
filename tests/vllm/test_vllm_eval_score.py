"""``eval score``'s two-call CiteVQA judge (CiteVQA's own prompts, from the vendored release) against real vLLM."""

from __future__ import annotations

import json

from data_prep.crops import crop_pngs
from eval.citevqa import CiteVQAJudge
from reward.judge import JudgeRequest, JudgeSettings
from tests.eval.test_eval_score import _score, cache, citevqa_dir, files  # noqa: F401  (fixtures)
from tests.vllm.conftest import JUDGE_MODEL


def test_answer_call_has_no_image_and_relevance_call_has_the_crops(judge_server, cache, citevqa_dir):  # noqa: F811
    class _C:
        def __init__(self, b):
            self.block_id, self.page, self.bbox = b.block_id, b.page, b.bbox

    crops = crop_pngs(cache, [_C(b) for b in cache.blocks[:3]], max_crops=6)
    assert len(crops) == 3
    j = CiteVQAJudge(judge_server.url, JUDGE_MODEL, citevqa_dir=citevqa_dir,
                     **JudgeSettings(outage_s=None, retries=0).client_kwargs())  # fmt: skip
    tokens = []
    for n in (0, 3):
        (s,) = j.score_batch([JudgeRequest("When did the bridge open?", "1932", "1932", crops[:n])])
        assert s.answer is not None and s.relevance is not None  # constrained: both replies parse
        tokens.append((j.answer_call.stats.prompt_tokens, j.relevance_call.stats.prompt_tokens))
    (qa0, rel0), (qa3, rel3) = tokens
    assert qa0 == qa3  # the answer-accuracy call never carries an image
    assert rel3 > rel0  # the relevance call carries the crops
    for call in (j.answer_call, j.relevance_call):
        body = call.body(JudgeRequest("q", "g", "a", ()))
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
        assert "<" + call.tag_name + ">[0-5]" in body["structured_outputs"]["regex"]


def test_eval_score_with_citevqa_prompts_parses_every_reply(judge_server, files, tmp_path, cache, citevqa_dir):  # noqa: F811
    g, p = files
    out = tmp_path / "out"
    rc = _score(g, p, out, "--cache-dir", str(cache.path.parent), "--judge-url", judge_server.url, "--judge-model",
                JUDGE_MODEL, "--citevqa-dir", str(citevqa_dir), "--no-report")  # fmt: skip
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["judge_protocol"] == "citevqa"
    assert m["judge_failures"] == {"failed": 0, "judged": 3}
    stats = json.loads((out / "analyses.json").read_text())["judge_stats"]
    assert stats["unparseable"] == 0 and stats["ok"] == stats["sent"] == 6  # two calls for each of 3 questions
