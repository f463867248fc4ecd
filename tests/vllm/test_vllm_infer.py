"""The evaluation path end to end on real vLLM: ``eval infer`` (vLLM in process, ``vllm.LLM``, on the tiny random
policy checkpoint with Qwen3-VL's template) on real page images at the pixel budget, then ``eval resolve`` and
``eval score`` on its predictions.

``eval infer`` runs under ``.venv-vllm``'s Python (the project from the working tree); everything after it under the
project's. vLLM's engine is a child process: ``eval infer`` once hung after its last prediction, idle, because
nothing stopped that engine and the interpreter's exit waited on it forever (:meth:`eval.infer.VLLMGenerator.close`
now stops it). So the run has a deadline; past it the command's stacks are dumped (``faulthandler``, SIGABRT) into
the failure report and its process group is killed.
"""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

from core.cli import main as cli_main
from data_prep.cache import build_cache
from data_prep.document import Document
from eval.__main__ import COMMANDS
from eval.infer import GenRequest, InferConfig, PromptTemplate, page_images
from reward.response import parse_response, strip_reasoning
from tests.support import tiny_vllm
from tests.vllm.conftest import CPU_MEMORY_SHARE, REPO, VLLM_PY, vllm_env

FIXTURE_PDF = REPO.parent / "shared" / "fixtures" / "docling-project_docling" / "2305.03393v1-pg9.pdf"
TOTAL_PIXELS = 400_000
"""``--total-pixels``: the one-page fixture gets 400,000 pixels, the four-page sample 100,000 per page."""
MAX_TOKENS = 48
INFER_DEADLINE_S = 480.0
"""The engine starts in 70-130 s on two shared cores and four generations take seconds; a run past this hangs."""
TOKEN_PIXELS = 32 * 32
"""Pixels per image token of Qwen3-VL: 16-pixel patches merged 2 x 2."""
QUESTIONS_PER_DOC = 2


def _texts(cached, n: int) -> list:
    """``n`` text blocks of distinct, long text (a question quotes one; retrieval can tell them apart)."""
    seen, out = set(), []
    for b in sorted(cached.blocks, key=lambda b: -len(b.text)):
        t = " ".join(b.text.split())
        if len(t) >= 40 and t not in seen:
            seen.add(t)
            out.append(b)
    assert len(out) >= n, f"{cached.pdf_path}: only {len(out)} long text blocks"
    return out[:n]


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    """One block cache of two real documents: the shared fixture page (one page) and the generated sample (four)."""
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    if not FIXTURE_PDF.is_file():
        pytest.skip(f"{FIXTURE_PDF} not found (the shared fixtures)")
    root = tmp_path_factory.mktemp("infer-cache")
    encoder = get_encoder("minilm")
    return [build_cache(pdf, get_parser("pdftext"), encoder, root) for pdf in (FIXTURE_PDF, sample_pdf)]


@pytest.fixture(scope="module")
def gold(cache, tmp_path_factory) -> Path:
    """Two questions per document, each quoting one block of it, that block its ground truth."""
    rows = []
    for cached in cache:
        for b in _texts(cached, QUESTIONS_PER_DOC):
            box = [b.page, *b.bbox]
            rows.append({"index": len(rows), "doc_key": cached.key, "question": f"Where does it say: {b.text}?",
                         "answer": "here", "language": "en", "qtype": "Factual Retrieval", "gt_necessary": [box],
                         "gt_all": [box], "gt_types": ["text"], "block_id": b.block_id})  # fmt: skip
    path = tmp_path_factory.mktemp("infer-gold") / "gold.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _run_with_deadline(argv: list[str], log: Path, deadline_s: float) -> tuple[int, float]:
    """Run ``argv`` in its own process group with ``deadline_s``; past it dump its stacks (faulthandler) and kill
    the group, failing with the log's tail. Returns (exit code, seconds); asserts the group left nothing behind."""
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env=vllm_env(PYTHONFAULTHANDLER="1"))  # fmt: skip
        try:
            rc = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGABRT)  # faulthandler writes every thread's stack to the log
            time.sleep(5)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            pytest.fail(f"eval infer did not finish in {deadline_s:g} s; its stacks:\n{_tail(log, 8000)}")
    seconds = time.monotonic() - t0
    for _ in range(30):  # vLLM's engine and worker processes went with it
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"eval infer exited but left processes of its group running\n{_tail(log)}")
    return rc, seconds


def _tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


@pytest.fixture(scope="module")
def inferred(checkpoints, cache, gold, tmp_path_factory):
    """``eval infer`` once: predictions, log, exit code and seconds."""
    out_dir = tmp_path_factory.mktemp("infer-out")
    out, log = out_dir / "pred.jsonl", out_dir / "infer.log"
    argv = [str(VLLM_PY), "-m", "eval", "infer", "--model", str(checkpoints["policy"]), "--gold", str(gold),
            "--interface", "language", "--cache-dir", str(cache[0].path.parent), "--out", str(out),
            "--total-pixels", str(TOTAL_PIXELS), "--max-tokens", str(MAX_TOKENS), "--max-model-len", "8192",
            "--gpu-memory-utilization", CPU_MEMORY_SHARE]  # fmt: skip
    rc, seconds = _run_with_deadline(argv, log, INFER_DEADLINE_S)
    assert rc == 0, _tail(log)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {"rows": rows, "log": log, "seconds": seconds, "out": out}


def _golds(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.timeout(600)
def test_infer_answers_every_question_once_and_exits(inferred, gold):
    golds = _golds(gold)
    rows = inferred["rows"]
    assert sorted(r["index"] for r in rows) == [g["index"] for g in golds]  # each question once, none lost
    assert "4 generated, 0 already done, 4 questions" in _tail(inferred["log"], 100_000)
    for r in rows:
        used = r["usage"]  # what vLLM reported for this question
        assert r["interface"] == "language" and isinstance(r["response"], str) and r["response"]
        assert r["max_tokens"] == MAX_TOKENS and r["model"].endswith("policy")
        assert 1 <= used["completion_tokens"] <= MAX_TOKENS
        assert used["finish_reason"] in ("stop", "length")  # a cut reply is recorded as such
        assert (used["finish_reason"] == "length") == (used["completion_tokens"] == MAX_TOKENS)
    assert "[shutdown] MPClient: complete" in _tail(inferred["log"], 100_000)  # the engine was stopped, not orphaned


def _image_tokens(width: int, height: int) -> int:
    """Image tokens of one image in Qwen3-VL's processor: each side rounded to a multiple of 32 pixels (within the
    processor's pixel bounds), one token per 32 x 32 pixels."""
    f = 32
    h, w = max(f, round(height / f) * f), max(f, round(width / f) * f)
    if h * w > tiny_vllm.MAX_PIXELS or h * w < tiny_vllm.MIN_PIXELS:
        s = math.sqrt(
            height * width / (tiny_vllm.MAX_PIXELS if h * w > tiny_vllm.MAX_PIXELS else tiny_vllm.MIN_PIXELS)
        )
        rnd = math.floor if h * w > tiny_vllm.MAX_PIXELS else math.ceil
        h, w = max(f, rnd(height / s / f) * f), max(f, rnd(width / s / f) * f)
    return (h // f) * (w // f)


@pytest.mark.timeout(600)
def test_page_images_reach_vllm_at_the_pixel_budget(inferred, gold, cache, checkpoints):
    """vLLM's prompt token count of each question is its text's tokens plus one token per 32 x 32 pixels of every
    page image, and those images hold the per-page budget ``min(1e6, total / pages)``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(checkpoints["policy"])
    pad = tok.convert_tokens_to_ids("<|image_pad|>")
    template = PromptTemplate("language")
    by_key = {c.key: c for c in cache}
    rows = {r["index"]: r for r in inferred["rows"]}
    cfg = InferConfig(total_pixels=TOTAL_PIXELS)
    seen_pages = set()
    for g in _golds(gold):
        cached = by_key[g["doc_key"]]
        with Document.open(cached.pdf_path) as doc:
            images = page_images(doc, cfg)  # what eval infer rendered (deterministic)
        budget = min(cfg.max_pixels_per_page, TOTAL_PIXELS / len(images))
        sizes = [Image.open(io.BytesIO(b)).size for b in images]
        assert all(0.97 * budget <= w * h <= budget for w, h in sizes), (budget, sizes)
        system, user = template.render(g["question"], len(images))
        messages = GenRequest(g["index"], system, images, user).messages()
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids.count(pad) == len(images)  # one placeholder per page, in the text vLLM expands
        want = len(ids) - len(images) + sum(_image_tokens(w, h) for w, h in sizes)
        got = rows[g["index"]]["usage"]["prompt_tokens"]
        assert got == want, f"question {g['index']}: vLLM counted {got} prompt tokens, expected {want}"
        image_tokens = got - (len(ids) - len(images))
        assert abs(image_tokens * TOKEN_PIXELS - budget * len(images)) <= 0.15 * budget * len(images)
        seen_pages.add(len(images))
    assert seen_pages == {1, 4}  # one document of each page count, each at its own per-page budget


def _resolve(pred: Path, gold: Path, cache_dir: Path, out: Path, *extra: str) -> None:
    argv = ["resolve", "--pred", str(pred), "--gold", str(gold), "--cache-dir", str(cache_dir), "--out", str(out)]
    assert cli_main("eval", "", COMMANDS, [*argv, *extra]) == 0


def _score(pred: Path, gold: Path, cache_dir: Path, out: Path) -> dict:
    argv = ["score", "--gold", str(gold), "--pred", str(pred), "--cache-dir", str(cache_dir), "--out", str(out),
            "--judge", "lexical", "--no-report"]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, argv) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.mark.timeout(600)
def test_resolve_and_score_the_vllm_predictions(inferred, gold, cache, tmp_path):
    """``eval resolve`` reads vLLM's replies with the reward's parser and ties every citation to a cached block;
    ``eval score`` scores every question. The random policy's replies carry no JSON: under ``--query quotes``
    (the default) nothing is cited and each record says why; ``--query question --budget 1`` cites the block the
    question quotes, so the same predictions score full recall."""
    golds = {g["index"]: g for g in _golds(gold)}
    cache_dir = cache[0].path.parent
    blocks = {c.key: c.blocks for c in cache}

    quotes = tmp_path / "quotes.jsonl"
    _resolve(inferred["out"], gold, cache_dir, quotes)
    records = [json.loads(line) for line in quotes.read_text().splitlines()]
    assert sorted(r["index"] for r in records) == sorted(golds)
    for r in records:
        parsed = parse_response(r["response"])
        assert r["resolve"]["parse_ok"] == parsed.ok and r["resolve"]["reason"] == parsed.reason
        if not parsed.ok:  # recorded as failed, with the parser's reason; its text is still the judge's answer
            assert r["citations"] == [] and parsed.reason
            assert r["answer"] == strip_reasoning(r["response"]).strip()
        assert r["usage"] == next(p for p in inferred["rows"] if p["index"] == r["index"])["usage"]  # kept
    parsed_ok = sum(r["resolve"]["parse_ok"] for r in records)

    budget = tmp_path / "budget.jsonl"
    _resolve(inferred["out"], gold, cache_dir, budget, "--query", "question", "--budget", "1")
    for r in (json.loads(line) for line in budget.read_text().splitlines()):
        g = golds[r["index"]]
        assert len(r["citations"]) == 1
        (c,) = r["citations"]
        b = blocks[g["doc_key"]][c["block_id"]]  # the cited block, as the cache holds it
        assert c["page"] == b.page and c["bbox"] == pytest.approx(list(b.bbox))
        assert c["block_id"] == g["block_id"]  # the block the question quotes

    m_quotes = _score(quotes, gold, cache_dir, tmp_path / "score-quotes")
    m_budget = _score(budget, gold, cache_dir, tmp_path / "score-budget")
    assert m_quotes["n"] == m_budget["n"] == len(golds)
    assert m_quotes["format_rate"] == pytest.approx(parsed_ok / len(golds))
    if parsed_ok == 0:
        assert m_quotes["recall"]["0.5"] == 0.0 and m_quotes["citations_per_response"] == 0.0
    assert m_budget["recall"]["0.5"] == 1.0 and m_budget["precision"] == 1.0
    rows = [json.loads(x) for x in (tmp_path / "score-budget" / "per_question.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in rows) == sorted(golds)
