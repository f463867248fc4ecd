"""CiteVQA's reference scorer as a cross-check of ``eval score``.

The vendored release (``../shared/vendor/CiteVQA-039f6a3.tar.gz``) is unpacked and ITS OWN ``eval/run.py`` is
imported. Its box metrics run unchanged; its judge functions run unchanged too (prompt files, request text, reply
regex, the 1/20 scaling) except for ``call_openai``, which needs the ``openai`` SDK this project does not install:
it is replaced by a plain HTTP POST of the same messages to the same scripted OpenAI-API server that judges our
run, so both scorers get the same verdicts. On a set of coordinate-interface questions (exact hits, partial
overlaps, wrong pages, reversed boxes, a page the document lacks, a box covering two elements, repeated boxes, no
citation) every per-question value agrees: recall@0.5, precision, Ans, Rel, F1 where it defines one, and SAA fed
the 0-5 scores. The differences are the listed ones of ``docs/evaluation.md`` ("Versus CiteVQA's reference scorer"),
each shown below by a case where the two disagree.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys

import httpx
import pytest

from core.cli import main as cli_main
from data_prep.cache import build_cache
from data_prep.types import Block
from eval.__main__ import COMMANDS
from eval.schemas import write_jsonl
from tests.support.citevqa_vendor import unpack_citevqa
from tests.support.openai_server import ScriptedOpenAIServer, chat_completion

# The document: the project's generated 4-page sample PDF. Boxes below are CiteVQA's 0-1000 page coordinates.
ELEMENT_A = [100, 100, 500, 200]
ELEMENT_B = [100, 300, 900, 400]
TOP = [100, 100, 900, 180]
BELOW = [100, 170, 900, 250]


def tag(page: int, box) -> str:
    x1, y1, x2, y2 = box
    return f'<bbox page="{page}" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" />'


# (name, necessary elements [(page, box)], model response, answer-judge score, relevance-judge score)
CASES = [
    ("exact", [(1, ELEMENT_A)], f"Opened in 1932. {tag(1, ELEMENT_A)}", 5, 4),
    ("half", [(1, ELEMENT_A), (2, ELEMENT_B)], f"Two facts. {tag(1, [120, 110, 520, 210])} {tag(3, ELEMENT_B)}", 4,
     2),
    ("no_tag", [(2, ELEMENT_B)], "I could not find it on page 2.", 4, 5),
    ("reversed", [(1, ELEMENT_A)], f"Reversed. {tag(1, [500, 200, 100, 100])}", 5, 3),
    ("missing_page", [(1, ELEMENT_A)], f"Also page 9. {tag(1, ELEMENT_A)} {tag(9, ELEMENT_A)}", 4, 4),
    ("covers_two", [(3, TOP), (3, BELOW)], f"Both rows. {tag(3, [100, 100, 900, 250])}", 3, 5),
    ("wrong_page", [(1, ELEMENT_A)], f"Wrong page. {tag(2, ELEMENT_A)}", 2, 1),
    ("below_half", [(1, ELEMENT_A)], f"Loose. {tag(1, [100, 100, 500, 320])}", 5, 5),
    ("repeated", [(2, ELEMENT_B)], f"Twice. {tag(2, ELEMENT_B)} {tag(2, ELEMENT_B)}", 4, 4),
]  # fmt: skip
VERDICTS = {f"QUESTION-{name}": (qa, rel) for name, _, _, qa, rel in CASES}


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def citevqa_dir(tmp_path_factory):
    return unpack_citevqa(tmp_path_factory.mktemp("citevqa"))


@pytest.fixture(scope="module")
def ref(citevqa_dir):
    """CiteVQA's eval/run.py, imported from the unpacked release; only its SDK call is replaced (docstring)."""
    spec = importlib.util.spec_from_file_location("citevqa_reference_eval", citevqa_dir / "eval" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)

    def call_openai(model, question, images, api_key, base_url, system_instruction, timeout=120):
        # The messages its openai-SDK call builds (eval/run.py, call_openai), sent as one HTTP request.
        content = [
            {"type": "image_url", "image_url": {"url": f"data:image/{fmt};base64,{b64}"}} for b64, fmt in images
        ]
        content.append({"type": "text", "text": question})
        messages = [{"role": "system", "content": system_instruction}, {"role": "user", "content": content}]
        r = httpx.post(base_url.rstrip("/") + "/chat/completions", json={"model": model, "messages": messages},
                       timeout=timeout)  # fmt: skip
        return r.json()["choices"][0]["message"]["content"]

    mod.call_openai = call_openai
    yield mod
    sys.modules.pop(spec.name, None)


class Fixed:
    name = "fixed"

    def __init__(self, blocks):
        self.blocks = blocks

    def version(self):
        return "crosscheck-1"

    def parse(self, doc, output=None):
        return self.blocks


@pytest.fixture(scope="module")
def cache(tmp_path_factory, sample_pdf):
    blocks = [Block(0, 1, (60.0, 80.0, 530.0, 120.0), "text", "The harbour bridge opened in 1932.")]
    return build_cache(sample_pdf, Fixed(blocks), None, tmp_path_factory.mktemp("cache"))


def judge_handler(path, body, n):
    """The same verdicts for both scorers: found by the question in the request, the call by its reply tag."""
    if path != "/v1/chat/completions":
        return None
    text = json.dumps(body["messages"])
    q = next(k for k in VERDICTS if f"{k} " in text or f"{k}?" in text)
    qa, rel = VERDICTS[q]
    if "<qa_acc>" in body["messages"][0]["content"]:
        return chat_completion(f"Compared with the standard answer.\n```<qa_acc>{qa}</qa_acc>```")
    return chat_completion(f"Looked at the evidence.\n```<relevance_score>{rel}</relevance_score>```")


def to_points(page_sizes, page, box):
    w, h = page_sizes[page - 1]
    return [page, box[0] / 1000 * w, box[1] / 1000 * h, box[2] / 1000 * w, box[3] / 1000 * h]


@pytest.fixture(scope="module")
def scored(tmp_path_factory, cache, citevqa_dir, ref):
    """Both scorers on the same gold and predictions: ``(ours per question, theirs per question, server requests)``."""
    tmp = tmp_path_factory.mktemp("crosscheck")
    gold, raw, items = [], [], []
    for i, (name, elements, response, _, _) in enumerate(CASES):
        q = f"QUESTION-{name} what does the document say?"
        nec = [to_points(cache.page_sizes, p, b) for p, b in elements]
        gold.append({"index": i, "doc_key": cache.key, "question": q, "answer": f"gold answer {i}", "language": "en",
                     "qtype": "Factual Retrieval", "gt_necessary": nec, "gt_all": nec})  # fmt: skip
        raw.append({"index": i, "interface": "coordinate", "response": response, "answer": "", "citations": []})
        # CiteVQA's item: the gold answer with its evidence tags (what its scorer reads), the raw response.
        answer_bboxes = f"gold answer {i} " + " ".join(tag(p, b) for p, b in elements)
        items.append({"index": i, "Question": q, "answer_bboxes": answer_bboxes, "model_predict": response})
    write_jsonl(tmp / "gold.jsonl", gold)
    write_jsonl(tmp / "raw.jsonl", raw)
    cache_dir = str(cache.path.parent)
    with ScriptedOpenAIServer(handler=judge_handler) as srv:
        assert (
            cli_main(
                "eval",
                "",
                COMMANDS,
                [
                    "resolve",
                    "--pred",
                    str(tmp / "raw.jsonl"),
                    "--gold",
                    str(tmp / "gold.jsonl"),
                    "--cache-dir",
                    cache_dir,
                    "--out",
                    str(tmp / "pred.jsonl"),
                ],
            )
            == 0
        )
        assert cli_main("eval", "", COMMANDS, ["score", "--gold", str(tmp / "gold.jsonl"), "--pred",
                        str(tmp / "pred.jsonl"), "--cache-dir", cache_dir, "--judge-url", srv.url, "--judge-model",
                        "judge-model", "--citevqa-dir", str(citevqa_dir), "--no-report", "--out",
                        str(tmp / "ours")]) == 0  # fmt: skip
        ours = [json.loads(x) for x in (tmp / "ours" / "per_question.jsonl").read_text().splitlines()]
        theirs = []
        for it in items:
            it = dict(it)
            for metric in ("recall", "page_recall", "precision", "f1"):
                it[f"{metric}_score"] = getattr(ref, f"eval_{metric}_single")(it, "openai", "judge-model", "k",
                                                                              srv.url, 30)[0]  # fmt: skip
            it["rel_score"] = ref.eval_rel_single(it, "openai", "judge-model", "k", srv.url, 30)[0]
            it["qa_acc_score"] = ref.eval_qa_acc_single(it, "openai", "judge-model", "k", srv.url, 30)[0]
            it["saa_score"] = ref.compute_saa(it)[0]
            theirs.append(it)
        requests = [b for p, b in srv.requests if p == "/v1/chat/completions"]
    return ours, theirs, requests


# ---------------------------------------------------------------------------------------------- agreement
def test_every_metric_agrees_question_by_question_except_the_listed_differences(scored, ref):
    ours, theirs, _ = scored
    assert len(ours) == len(theirs) == len(CASES)
    for o, t, (name, *_rest) in zip(ours, theirs, CASES, strict=True):
        assert o["recall"]["0.5"] == pytest.approx(t["recall_score"]), name
        assert (o["precision"] is None) == (t["precision_score"] is None), name
        if o["precision"] is not None:
            assert o["precision"] == pytest.approx(t["precision_score"]), name
        # F1: equal wherever its scorer defines one; where it returns None (P + R = 0, no citation) ours is 0.
        if t["f1_score"] is None:
            assert o["f1"] == 0.0, name
        else:
            assert o["f1"] == pytest.approx(t["f1_score"]), name
        # Judge: the same verdicts parsed by both (its values carry its 1/20 factor).
        assert o["judge"]["answer"] == pytest.approx(t["qa_acc_score"] * 20), name
        assert o["judge"]["relevance"] == pytest.approx(t["rel_score"] * 20), name
        # SAA: its own compute_saa, fed the 0-5 scores it parses before its 1/20 rescaling.
        fixed = {**t, "qa_acc_score": t["qa_acc_score"] * 20, "rel_score": t["rel_score"] * 20}
        assert o["saa"] == ref.compute_saa(fixed)[0], name
    # The set exercises what it should: hits and misses, a precision above 1, an undefined precision, both SAA values.
    assert {o["recall"]["0.5"] for o in ours} == {0.0, 0.5, 1.0}
    by = {name: o for o, (name, *_rest) in zip(ours, CASES, strict=True)}
    assert by["below_half"]["recall"]["0.5"] == 0.0 and by["below_half"]["recall"]["0.3"] == 1.0
    assert max(o["precision"] or 0 for o in ours) == 2.0 and any(o["precision"] is None for o in ours)
    assert {o["saa"] for o in ours} == {0.0, 1.0}
    assert by["reversed"]["recall"]["0.5"] == 0.0 and by["reversed"]["precision"] == 0.0  # raw output, as its scorer
    assert by["missing_page"]["precision"] == 0.5  # the page-9 tag counts in the denominator, as in its scorer


def test_both_judges_send_citevqas_prompt_files(scored, citevqa_dir):
    _, _, requests = scored
    qa_sys = (citevqa_dir / "prompts" / "eval_qa_acc_system.txt").read_text(encoding="utf-8")
    rel_sys = (citevqa_dir / "prompts" / "eval_rel_system.txt").read_text(encoding="utf-8")
    ours = [b for b in requests if b["messages"][0]["content"] in (qa_sys, rel_sys)]
    theirs = [b for b in requests if b not in ours]
    assert len(ours) == len(theirs) == 2 * len(CASES)  # two calls per question in both
    # Its scorer puts the prompt and the filled template in the system turn; ours sends the template as the user
    # turn (paper J.3: "the system prompt is followed by the user-message template"). Same text either way.
    assert all(b["messages"][0]["content"].startswith((qa_sys, rel_sys)) for b in theirs)


# ---------------------------------------------------------------------------------------------- listed differences
def test_difference_saa_scaling_its_saa_is_zero_even_when_the_answer_and_evidence_pass(scored):
    ours, theirs, _ = scored
    exact = 0  # Ans 5, Rel 4, recall 1
    assert ours[exact]["saa"] == 1.0
    assert theirs[exact]["saa_score"] == 0.0  # 5/20 >= 4 is false
    assert all(t["saa_score"] == 0.0 for t in theirs)


def test_difference_relevance_judge_its_relevance_call_sees_no_crop(scored, citevqa_dir):
    _, _, requests = scored
    rel_sys = (citevqa_dir / "prompts" / "eval_rel_system.txt").read_text(encoding="utf-8")

    def n_images(b):
        return sum(1 for p in b["messages"][1]["content"] if p.get("type") == "image_url")

    ours = [b for b in requests if b["messages"][0]["content"] == rel_sys]
    theirs = [b for b in requests if b["messages"][0]["content"].startswith(rel_sys + "\n")]
    exact = next(b for b in ours if "QUESTION-exact" in json.dumps(b))
    assert n_images(exact) == 1  # the cited region's crop (paper Appendix A)
    assert sum(n_images(b) for b in theirs) == 0  # its item has no "openai_images"


def test_difference_f1_its_f1_is_undefined_where_ours_is_zero_so_its_mean_is_higher(scored):
    ours, theirs, _ = scored
    no_tag = 2
    assert theirs[no_tag]["f1_score"] is None and ours[no_tag]["f1"] == 0.0
    defined = [t["f1_score"] for t in theirs if t["f1_score"] is not None]
    assert sum(defined) / len(defined) > sum(o["f1"] for o in ours) / len(ours)


def test_difference_page_recall_its_function_returns_nothing_and_with_its_regex_bug_patched_matches_ours(
    scored, ref, monkeypatch
):
    ours, theirs, _ = scored
    assert all(t["page_recall_score"] is None for t in theirs)  # it splits on "<bbox" before matching "<bbox ..."
    # What it means to compute (distinct gold pages cited / distinct gold pages) is our default same-page recall.
    monkeypatch.setattr(ref, "BBOX_RE_SINGLE", re.compile(ref.BBOX_RE_SINGLE.pattern.replace(r"<bbox\s+", r"\s+", 1)))
    for o, t in zip(ours, theirs, strict=True):
        assert o["recall"]["page"] == pytest.approx(ref.eval_page_recall_single(t, None, None, None, None, 0)[0])
    half = 1  # gold on pages 1 and 2, cited pages 1 and 3
    assert ours[half]["recall"]["page"] == 0.5


def _one(ref, gold_tags, response):
    item = {"answer_bboxes": gold_tags, "model_predict": response}
    return ref.eval_recall_single(item, "openai", "m", "k", "", 1)[0]


def test_difference_iou_tie_an_iou_of_exactly_one_half_matches_ours_not_its(ref):
    from eval.metrics import score_boxes
    from eval.schemas import Cited, Element, Gold

    gold_box, pred_box = [0, 0, 100, 100], [0, 0, 100, 50]  # IoU = 5000 / 10000 = 0.5
    assert _one(ref, tag(1, gold_box), tag(1, pred_box)) == 0.0  # its union has + 1e-6
    e = Element(1, tuple(float(v) for v in gold_box))
    s = score_boxes(Gold(0, "d", "q", "a", "en", "", (e,), (e,)), [Cited(1, tuple(float(v) for v in pred_box))])
    assert s.recall["0.5"] == 1.0


def test_difference_tag_format_ours_reads_tags_its_regex_does_not(ref):
    from eval.coordinate import parse_coordinate_response

    for response in ('<bbox page="1" 100 100 500 200 />', "<bbox page=1 x1=100 y1=100 x2=500 y2=200 />"):
        assert _one(ref, tag(1, ELEMENT_A), response) == 0.0  # no box read: "No prediction bbox"
        (box,) = parse_coordinate_response(response).boxes
        assert (box.page, box.box) == (1, (100.0, 100.0, 500.0, 200.0))


def test_difference_precision_target_ours_counts_optional_elements_its_reads_one_list(ref):
    from eval.metrics import score_boxes
    from eval.schemas import Cited, Element, Gold

    # Gold: necessary A, optional B. Its scorer has one list (the answer's tags): with only the necessary element
    # tagged, a citation of B is a miss; ours scores precision against gt_all (paper Appendix H).
    item = {"answer_bboxes": tag(1, ELEMENT_A), "model_predict": tag(1, ELEMENT_B)}
    assert ref.eval_precision_single(item, "openai", "m", "k", "", 1)[0] == 0.0
    a, b = (Element(1, tuple(float(v) for v in x)) for x in (ELEMENT_A, ELEMENT_B))
    s = score_boxes(Gold(0, "d", "q", "a", "en", "", (a,), (a, b)), [Cited(1, tuple(float(v) for v in ELEMENT_B))])
    assert s.precision == 1.0 and s.recall["0.5"] == 0.0


def test_difference_judge_reply_parsing_one_verdict_and_range(ref, monkeypatch):
    from eval.citevqa import _QA_TAG, parse_tag_score

    reply = "Not <qa_acc>1</qa_acc> but finally\n```<qa_acc>4</qa_acc>```"
    monkeypatch.setattr(ref, "call_openai", lambda *a, **k: reply)
    item = {"Question": "q", "answer_bboxes": "a", "model_predict": "b"}
    assert ref.eval_qa_acc_single(item, "openai", "m", "k", "", 1)[0] * 20 == 1  # its regex: the first tag
    assert parse_tag_score(reply, _QA_TAG) is None  # ours: two verdicts that disagree are no verdict (counted)
    assert parse_tag_score("fine\n```<qa_acc>4</qa_acc>``` <qa_acc>4</qa_acc>", _QA_TAG) == 4  # one, repeated
    monkeypatch.setattr(ref, "call_openai", lambda *a, **k: "<qa_acc>80</qa_acc>")
    assert ref.eval_qa_acc_single(item, "openai", "m", "k", "", 1)[0] == 4.0  # any integer, then / 20
    assert parse_tag_score("<qa_acc>80</qa_acc>", _QA_TAG) is None  # out of 0..5: unparsed, left out and counted
