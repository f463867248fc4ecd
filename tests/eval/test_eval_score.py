"""``eval score``: the output files, the parser ceiling, the judge path against the scripted server."""

from __future__ import annotations

import json

import pytest

from core.cli import main as cli_main
from data_prep.cache import build_cache
from data_prep.types import Block
from eval.__main__ import COMMANDS
from eval.schemas import write_jsonl
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion

BOXES = [
    (1, (60.0, 80.0, 530.0, 120.0), "The harbour bridge was opened to traffic in 1932."),
    (1, (60.0, 140.0, 530.0, 180.0), "Steel for the arch came from Middlesbrough."),
    (2, (60.0, 80.0, 530.0, 120.0), "Toll revenue reached 120 million dollars in 2019."),
]


class FixedParser:
    name = "fixed"

    def __init__(self, blocks):
        self.blocks = blocks

    def version(self):
        return "score-test-1"

    def parse(self, doc, output=None):
        return self.blocks


@pytest.fixture(scope="module")
def cache(tmp_path_factory, sample_pdf):
    blocks = [Block(i, p, b, "text", t) for i, (p, b, t) in enumerate(BOXES)]
    return build_cache(sample_pdf, FixedParser(blocks), None, tmp_path_factory.mktemp("cache"))


def _gold(doc_key):
    return [
        {"index": 0, "doc_key": doc_key, "question": "QUESTION-ZERO when did the bridge open?", "answer": "1932",
         "language": "en", "qtype": "Factual Retrieval", "gt_necessary": [[1, *BOXES[0][1]]],
         "gt_all": [[1, *BOXES[0][1]], [1, *BOXES[1][1]]], "gt_types": ["text"]},
        {"index": 1, "doc_key": doc_key, "question": "QUESTION-ONE what were the tolls?", "answer": "120 million",
         "language": "zh", "qtype": "Quantitative Reasoning", "gt_necessary": [[2, *BOXES[2][1]]],
         "gt_all": [[2, *BOXES[2][1]]], "gt_types": ["table"]},
        {"index": 2, "doc_key": doc_key, "question": "QUESTION-TWO where did the steel come from?",
         "answer": "Middlesbrough", "language": "en", "qtype": "Factual Retrieval",
         "gt_necessary": [[1, *BOXES[1][1]]], "gt_all": [[1, *BOXES[1][1]]]},
    ]  # fmt: skip


def _preds():
    c0 = {"page": 1, "bbox": list(BOXES[0][1]), "block_id": 0, "similarity": 0.9, "quote": "opened to traffic"}
    c1 = {"page": 1, "bbox": list(BOXES[1][1]), "block_id": 1, "similarity": 0.4, "quote": "Steel for the arch"}
    return [
        {"index": 0, "interface": "language", "response": "{}", "answer": "1932", "citations": [c0, c1],
         "candidates": [[0, 1], [1, 0]]},
        {"index": 1, "interface": "language", "response": "no json", "answer": "", "citations": []},
        {"index": 2, "interface": "language", "response": "{}", "answer": "Middlesbrough", "citations": [c1],
         "candidates": [[1]]},
    ]  # fmt: skip


@pytest.fixture
def files(tmp_path, cache):
    g, p = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    write_jsonl(g, _gold(cache.key))
    write_jsonl(p, _preds())
    return g, p


def _score(g, p, out, *extra):
    return cli_main("eval", "", COMMANDS, ["score", "--gold", str(g), "--pred", str(p), "--out", str(out), *extra])


def test_score_writes_metrics_with_the_documented_keys_and_every_output_file(files, tmp_path, capsys):
    g, p = files
    out = tmp_path / "out"
    assert _score(g, p, out, "--no-report") == 0
    m = json.loads((out / "metrics.json").read_text())
    assert set(m) == {"n", "recall", "precision", "f1", "format_rate", "citations_per_response", "counts", "scoring"}
    assert m["scoring"] == {"page_recall": "pages", "reversed_boxes": "no_match"}  # the paper's readings
    assert _score(g, p, tmp_path / "old", "--no-report", "--page-recall", "elements", "--reversed-boxes",
                  "normalize") == 0  # fmt: skip
    old = json.loads((tmp_path / "old" / "metrics.json").read_text())
    assert old["scoring"] == {"page_recall": "elements", "reversed_boxes": "normalize"}
    assert set(m["recall"]) == {"page", "0.1", "0.3", "0.5", "0.7"}
    assert m["n"] == 3
    assert m["recall"]["0.5"] == pytest.approx(2 / 3)  # q0 and q2 found, q1 cited nothing
    assert m["precision"] == pytest.approx((2 / 2 + 1 / 1) / 2)  # q0: both citations hit gt_all (1 optional)
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["format_rate"] == pytest.approx(2 / 3)
    assert m["citations_per_response"] == pytest.approx(1.0)
    rows = [json.loads(x) for x in (out / "per_question.jsonl").read_text().splitlines()]
    assert [r["recall"]["0.5"] for r in rows] == [1.0, 0.0, 1.0]
    assert rows[0]["citations"][1]["hit"] is False and rows[0]["citations"][1]["hit_any"] is True
    tables = (out / "tables.md").read_text()
    assert "| pred | 66.7 | 100.0 | 66.7 |" in tables  # Rec.5, Prec, F1 in percentages
    assert "By language" in tables and "| zh | 1 | 0.0 |" in tables
    assert (out / "recall_vs_iou.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "report.html").exists()
    assert "scored 3 questions" in capsys.readouterr().out


def test_score_with_the_cache_adds_parser_ceiling_residuals_and_a_report_with_pages(files, tmp_path, cache):
    g, p = files
    out = tmp_path / "out"
    assert _score(g, p, out, "--cache-dir", str(cache.path.parent)) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["parser_ceiling"] == {"page": 1.0, "0.1": 1.0, "0.3": 1.0, "0.5": 1.0, "0.7": 1.0}
    a = json.loads((out / "analyses.json").read_text())
    assert a["residuals"]["iou"]["counts"] == {"recovered": 2, "rank_limited": 0, "not_retrieved": 1,
                                               "parser_unreachable": 0}  # fmt: skip
    assert a["by_element_type"] == {
        "table": {"n_elements": 1, "recall": 0.0},
        "text": {"n_elements": 1, "recall": 1.0},
    }
    html = (out / "report.html").read_text()
    assert html.count("class='q'") == 3
    assert "report_files/q0_p1.jpg" in html and "report_files/q1_p2.jpg" in html
    assert (out / "report_files" / "q0_p1.jpg").read_bytes()[:2] == b"\xff\xd8"
    assert "opened to traffic" in html and "0.900" in html


def test_rubric_judge_metrics_through_the_scripted_server(files, tmp_path, cache):
    # --judge-protocol rubric: the reward's one three-score call (the earlier default of eval score).
    g, p = files

    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None
        text = json.dumps(body["messages"])
        if "QUESTION-ZERO" in text:
            return chat_completion('{"answer": 5, "relevance": 2, "coverage": 3}')
        if "QUESTION-ONE" in text:
            return chat_completion('{"answer": 4, "relevance": 1, "coverage": 0}')
        return chat_completion("I would rather not grade this one.")  # unparseable: left out and counted

    out = tmp_path / "out"
    with ScriptedOpenAIServer(handler=handler) as srv:
        rc = _score(g, p, out, "--cache-dir", str(cache.path.parent), "--judge-url", srv.url, "--judge-model",
                    "judge-model", "--no-report", "--judge-protocol", "rubric")  # fmt: skip
        requests = [b for path, b in srv.requests if path == "/v1/chat/completions"]
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["judge_protocol"] == "rubric" and len(requests) == 3  # one call per question
    assert m["judge_failures"] == {"failed": 1, "judged": 2}
    assert m["ans"] == pytest.approx((5 + 4) / 2 / 5)
    assert m["rel"] == pytest.approx((2 + 1) / 2 / 5)
    # q0: Ans 5, Rel 2 but recall 1 >= 0.6 -> SAA; q1: Ans 4, Rel 1, recall 0 -> hallucination.
    assert m["saa"] == 0.5 and m["ah"] == 0.5
    assert m["saa_strict"] == 0.0 and m["ah_strict"] == 1.0
    assert m["recall"]["0.5"] == pytest.approx(2 / 3)  # the unjudged question still counts for box metrics
    # The judge saw one crop per distinct cited block and never the quotes.
    by_q = {("ZERO" if "QUESTION-ZERO" in json.dumps(b) else "ONE" if "QUESTION-ONE" in json.dumps(b) else "TWO"): b
            for b in requests}  # fmt: skip
    images = {
        k: sum(1 for part in b["messages"][1]["content"] if part["type"] == "image_url") for k, b in by_q.items()
    }
    assert images == {"ZERO": 2, "ONE": 0, "TWO": 1}
    assert "opened to traffic" not in json.dumps(requests)
    rows = [json.loads(x) for x in (out / "per_question.jsonl").read_text().splitlines()]
    assert [r["saa"] for r in rows] == [1.0, 0.0, None]
    assert rows[2]["judge"] is None
    # Appendix F split: q0 (Ans 5, recall 1) and q1 (Ans 4, recall 0) are correct; q2's judge output did not parse.
    split = json.loads((out / "analyses.json").read_text())["by_answer_correctness"]
    assert list(split) == ["correct", "unjudged"]
    assert (split["correct"]["n"], split["correct"]["recall@0.5"], split["correct"]["ah"]) == (2, 0.5, 0.5)
    assert (split["unjudged"]["n"], split["unjudged"]["recall@0.5"]) == (1, 1.0)


@pytest.fixture(scope="module")
def citevqa_dir(tmp_path_factory):
    from tests.support.citevqa_vendor import unpack_citevqa

    return unpack_citevqa(tmp_path_factory.mktemp("citevqa"))


QA_REPLIES = {"ZERO": "Matches the year.\n```<qa_acc>5</qa_acc>```", "ONE": "No answer.\n```<qa_acc>0</qa_acc>```",
              "TWO": "Correct place.\n```<qa_acc>4</qa_acc>```"}  # fmt: skip
REL_REPLIES = {"ZERO": "The crop states the date.\n```<relevance_score>4</relevance_score>```",
               "ONE": "No crop.\n```<relevance_score>0</relevance_score>```",
               "TWO": "I cannot grade this."}  # fmt: skip


def _which(body) -> str:
    text = json.dumps(body["messages"][1])
    return next(k for k in ("ZERO", "ONE", "TWO") if f"QUESTION-{k}" in text)


def test_citevqa_two_call_judge_is_the_default(files, tmp_path, cache, citevqa_dir):
    # Answer accuracy without crops (eval_qa_acc_*), relevance with crops (eval_rel_*).
    g, p = files

    def handler(path, body, n):
        if path != "/v1/chat/completions":
            return None
        replies = QA_REPLIES if "<qa_acc>" in body["messages"][0]["content"] else REL_REPLIES
        return chat_completion(replies[_which(body)])

    out = tmp_path / "out"
    with ScriptedOpenAIServer(handler=handler) as srv:
        rc = _score(g, p, out, "--cache-dir", str(cache.path.parent), "--judge-url", srv.url, "--judge-model",
                    "judge-model", "--citevqa-dir", str(citevqa_dir))  # fmt: skip
        requests = [b for path, b in srv.requests if path == "/v1/chat/completions"]
    assert rc == 0
    prompts = citevqa_dir / "prompts"
    qa_sys, rel_sys = (
        (prompts / n).read_text(encoding="utf-8") for n in ("eval_qa_acc_system.txt", "eval_rel_system.txt")
    )
    qa_calls = {_which(b): b for b in requests if b["messages"][0]["content"] == qa_sys}
    rel_calls = {_which(b): b for b in requests if b["messages"][0]["content"] == rel_sys}
    assert len(requests) == 6 and set(qa_calls) == set(rel_calls) == {"ZERO", "ONE", "TWO"}

    def images(b):
        return sum(1 for part in b["messages"][1]["content"] if part["type"] == "image_url")

    assert {k: images(b) for k, b in qa_calls.items()} == {"ZERO": 0, "ONE": 0, "TWO": 0}  # never an image
    assert {k: images(b) for k, b in rel_calls.items()} == {"ZERO": 2, "ONE": 0, "TWO": 1}  # the cited crops
    user = (prompts / "eval_qa_acc_user.txt").read_text(encoding="utf-8")
    assert qa_calls["ZERO"]["messages"][1]["content"][0]["text"] == user.format(
        question="QUESTION-ZERO when did the bridge open?", standard_answer="1932", model_answer_no_bbox="1932"
    )
    user = (prompts / "eval_rel_user.txt").read_text(encoding="utf-8")
    assert rel_calls["TWO"]["messages"][1]["content"][0]["text"] == user.format(
        question="QUESTION-TWO where did the steel come from?", standard_answer="Middlesbrough",
        answer_with_images="Middlesbrough",
    )  # fmt: skip
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 1024 for b in requests)
    assert "opened to traffic" not in json.dumps(requests)  # the quotes are never sent
    m = json.loads((out / "metrics.json").read_text())
    assert m["judge_protocol"] == "citevqa" and m["judge_prompts"] == str(prompts)
    # q2's relevance reply has no tag: q2 leaves the judge metrics (paper Appendix B) and is counted.
    assert m["judge_failures"] == {"failed": 1, "judged": 2}
    assert m["ans"] == pytest.approx((5 + 0) / 2 / 5) and m["rel"] == pytest.approx((4 + 0) / 2 / 5)
    assert m["saa"] == 0.5 and m["ah"] == 0.0 and m["saa_strict"] == 0.5
    rows = [json.loads(x) for x in (out / "per_question.jsonl").read_text().splitlines()]
    assert rows[0]["judge"] == {"answer": 5, "relevance": 4, "coverage": None}
    assert rows[2]["judge"] is None
    html = (out / "report.html").read_text()
    assert "judge Ans 5 Rel 4; SAA 1.0" in html and "Cov None" not in html  # no coverage score in this protocol


def test_citevqa_judge_needs_a_checkout(files, tmp_path, cache, monkeypatch, capsys):
    g, p = files
    monkeypatch.delenv("QUOTECITE_CITEVQA_DIR", raising=False)
    rc = _score(g, p, tmp_path / "out", "--cache-dir", str(cache.path.parent), "--judge-url", "http://127.0.0.1:9/v1",
                "--judge-model", "m")  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--citevqa-dir" in err and "--judge-protocol rubric" not in err
    assert "QUOTECITE_CITEVQA_DIR" in err
    rc = _score(g, p, tmp_path / "out", "--cache-dir", str(cache.path.parent), "--judge-url", "http://127.0.0.1:9/v1",
                "--judge-model", "m", "--judge-prompt", str(g))  # fmt: skip
    assert rc == 2 and "--judge-protocol rubric" in capsys.readouterr().err


def test_lexical_judge_runs_offline(files, tmp_path, cache):
    g, p = files
    out = tmp_path / "out"
    assert _score(g, p, out, "--cache-dir", str(cache.path.parent), "--judge", "lexical", "--no-report") == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["judge_failures"] == {"failed": 0, "judged": 3}
    assert m["ans"] == pytest.approx((5 + 0 + 5) / 3 / 5)  # q1's empty answer shares no gold token


BAD_RUNS = [
    (["--judge", "lexical"], "a judge needs --cache-dir"),  # crops need the PDFs
    (["--judge-url", "http://127.0.0.1:9/v1"], "--judge-url needs --judge-model"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_RUNS)
def test_bad_judge_options_fail_fast_with_one_line(files, tmp_path, capsys, extra, message):
    g, p = files
    assert _score(g, p, tmp_path / "out", *extra) == 2
    assert message in capsys.readouterr().err


def test_prediction_for_an_unknown_question_is_an_error(files, tmp_path, capsys):
    g, p = files
    write_jsonl(p, [*_preds(), {"index": 42, "response": "", "citations": []}])
    assert _score(g, p, tmp_path / "out") == 2
    assert "prediction index 42 is not in the gold file" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- judge misconfiguration
NO_SUCH_MODEL = {"error": {"message": "The model `wrong-judge` does not exist.", "type": "NotFoundError", "code": 404}}


def test_a_judge_that_rejects_its_whole_first_batch_stops_the_run_with_the_servers_message(files, tmp_path, cache,
                                                                                           capsys, citevqa_dir):  # fmt: skip
    g, p = files
    with ScriptedOpenAIServer(handler=lambda path, body, n: Reply(status=404, json=NO_SUCH_MODEL)) as srv:
        rc = _score(g, p, tmp_path / "out", "--cache-dir", str(cache.path.parent), "--judge-url", srv.url,
                    "--judge-model", "wrong-judge", "--no-report", "--citevqa-dir", str(citevqa_dir))  # fmt: skip
        sent = len(srv.requests)
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1  # one line, no traceback
    assert "rejected all 6 requests of its first scored batch" in err  # CiteVQA's judge: two calls per question
    assert "The model `wrong-judge` does not exist." in err and "'wrong-judge'" in err
    assert sent == 6  # 4xx is not retried
    assert not (tmp_path / "out" / "metrics.json").exists()


def _http_judge(url, retries=0):
    from reward.judge import get_judge

    return get_judge("http", base_url=url, model="judge-model", retries=retries, backoff_s=0.01)


def _score_fn(g, cache, judge):
    from data_prep.cache import DocCache
    from eval.cmd_score import _join, score
    from eval.schemas import read_gold, read_predictions

    golds = read_gold(g)
    return score(golds, _join(golds, read_predictions(g.parent / "pred.jsonl"), "pred"),
                 docs=DocCache(cache.path.parent), judge=judge)  # fmt: skip


JUDGE_RUNS = [
    # (reply to the n-th judge request (None: a valid score), batch size, judge_failures, or the error that stops it)
    (lambda n: Reply(status=503), 64, {"failed": 3, "judged": 0}),  # an outage: counted, never stops the run
    (lambda n: None if n == 0 else Reply(status=404, json=NO_SUCH_MODEL), 64, {"failed": 2, "judged": 1}),  # one ok
    (lambda n: None if n == 0 else Reply(status=400, json=NO_SUCH_MODEL), 1, {"failed": 2, "judged": 1}),  # answered
    (lambda n: Reply(status=400, json=NO_SUCH_MODEL) if n == 0 else None, 1,  # first batch all rejected
     r"rejected all 1 requests of its first scored batch \(http_4xx: .*HTTP 400: .*does not exist"),
    (lambda n: Reply(status=429) if n == 0 else None, 1, {"failed": 1, "judged": 2}),  # 429 is overload, not setup
    (lambda n: Reply(json={"no": "choices"}), 64,  # not an OpenAI chat server
     r"rejected all 3 requests of its first scored batch \(bad_response: .*\{\"no\": \"choices\"\}\)"),
]  # fmt: skip


@pytest.mark.parametrize(("reply", "batch", "failures"), JUDGE_RUNS)
def test_only_a_judge_that_never_answered_and_rejects_a_whole_batch_stops_scoring(files, cache, monkeypatch, reply,
                                                                                  batch, failures):  # fmt: skip
    import eval.cmd_score as cmd_score
    from core.errors import InputError

    g, _ = files
    monkeypatch.setattr(cmd_score, "JUDGE_BATCH", batch)
    with ScriptedOpenAIServer(handler=lambda path, body, n: reply(n)) as srv:
        judge = _http_judge(srv.url)
        if isinstance(failures, str):
            with pytest.raises(InputError, match=failures):
                _score_fn(g, cache, judge)
        else:
            assert _score_fn(g, cache, judge).metrics["judge_failures"] == failures
