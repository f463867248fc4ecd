"""Evaluation benchmarks (``make bench``). Figures only, no timed assertions.

1. Scoring the paper's matrix: 719 questions x 13 conditions read from prediction files (synthesised with the
   eval set's shape: 1-3 necessary and 1-5 annotated elements per question, 0-6 citations per response over
   34-page documents), against a baseline measured in the same run: the same box metrics computed with plain
   Python loops over the records (the CiteVQA scorer's way), and the time to only read the files.
2. The resolve step per question on a 400-block document (the paper's median is 388): parse the response,
   embed 3 quotes, assign and store the top-5 candidates, against the baseline of embedding the 3 quotes alone
   (the unavoidable model call); the lexical and BM25 resolvers on the same quotes.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

from reportlab.pdfgen import canvas

from benchmarks.report import print_table
from data_prep.cache import DocCache, build_cache
from data_prep.types import Block
from eval.cmd_resolve import Resolver
from eval.cmd_score import _join, score
from eval.schemas import Element, Gold, Prediction, read_gold, read_predictions, write_jsonl

N_QUESTIONS = 719
N_CONDITIONS = 13
N_PAGES = 34
N_BLOCKS = 400
N_RESOLVE = 60


def _box(rng: random.Random) -> list[float]:
    x0, y0 = rng.uniform(40, 400), rng.uniform(40, 700)
    return [round(x0, 2), round(y0, 2), round(x0 + rng.uniform(30, 150), 2), round(y0 + rng.uniform(10, 90), 2)]


def _synthesise(tmp: Path) -> tuple[Path, list[Path]]:
    rng = random.Random(0)
    gold = []
    for i in range(N_QUESTIONS):
        nec = [[rng.randint(1, N_PAGES), *_box(rng)] for _ in range(rng.randint(1, 3))]
        extra = [[rng.randint(1, N_PAGES), *_box(rng)] for _ in range(rng.randint(0, 2))]
        gold.append({"index": i, "doc_key": f"doc{i % 440}", "question": f"q{i}", "answer": "a", "language": "en",
                     "qtype": "Complex Synthesis", "gt_necessary": nec, "gt_all": nec + extra,
                     "gt_types": ["text"] * len(nec)})  # fmt: skip
    gpath = write_jsonl(tmp / "gold.jsonl", gold)
    preds = []
    for c in range(N_CONDITIONS):
        rows = []
        for g in gold:
            cits = []
            for _ in range(rng.randint(0, 6)):
                if rng.random() < 0.4:  # a citation on a gold element, jittered
                    e = rng.choice(g["gt_necessary"])
                    page, box = e[0], [v + rng.uniform(-8, 8) for v in e[1:]]
                else:
                    page, box = rng.randint(1, N_PAGES), _box(rng)
                cits.append({"page": page, "bbox": box, "similarity": rng.random(), "quote": "q"})
            rows.append({"index": g["index"], "interface": "language", "response": "{}", "answer": "a",
                         "citations": cits})  # fmt: skip
        preds.append(write_jsonl(tmp / f"pred_{c}.jsonl", rows))
    return gpath, preds


def _iou(a, b) -> float:
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    if ix <= 0 or iy <= 0:
        return 0.0
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _loop_scores(golds: list[Gold], preds: list[Prediction | None]) -> tuple[float, float]:
    """Baseline: recall at five thresholds and precision at 0.5 with nested Python loops."""
    recalls, precisions = [], []
    for g, p in zip(golds, preds, strict=True):
        cits = p.citations if p else ()
        for t in (None, 0.1, 0.3, 0.5, 0.7):
            hit = 0
            for e in g.gt_necessary:
                for c in cits:
                    if c.page == e.page and (t is None or _iou(c.bbox, e.bbox) >= t):
                        hit += 1
                        break
            recalls.append(hit / len(g.gt_necessary))
        if cits:
            hit = sum(any(c.page == e.page and _iou(c.bbox, e.bbox) >= 0.5 for c in cits) for e in g.gt_all)
            precisions.append(hit / len(cits))
    return statistics.mean(recalls), statistics.mean(precisions)


def test_scoring_719_questions_by_13_conditions_from_files(tmp_path):
    gpath, ppaths = _synthesise(tmp_path)
    t0 = time.perf_counter()
    golds = read_gold(gpath)
    loaded = [_join(golds, read_predictions(p), p) for p in ppaths]
    t_read = time.perf_counter() - t0
    t0 = time.perf_counter()
    runs = [score(golds, preds) for preds in loaded]
    t_score = time.perf_counter() - t0
    t0 = time.perf_counter()
    for preds in loaded:
        _loop_scores(golds, preds)
    t_loop = time.perf_counter() - t0
    n = N_QUESTIONS * N_CONDITIONS
    n_cit = sum(r.metrics["counts"]["citations"] for r in runs)
    print_table(
        f"scoring {N_QUESTIONS} questions x {N_CONDITIONS} conditions ({n_cit} citations) from prediction files",
        ["step", "seconds", "questions/s", "vs loop baseline"],
        [
            ["read + validate files", f"{t_read:.2f}", f"{n / t_read:.0f}", f"{t_read / t_loop:.2f}x"],
            ["loop baseline (5 recalls + precision)", f"{t_loop:.2f}", f"{n / t_loop:.0f}", "1.00x"],
            [
                "eval score (all metrics + analyses)",
                f"{t_score:.2f}",
                f"{n / t_score:.0f}",
                f"{t_score / t_loop:.2f}x",
            ],
        ],
    )
    assert all(r.metrics["n"] == N_QUESTIONS for r in runs)


def _grid_pdf(path: Path, pages: int) -> Path:
    c = canvas.Canvas(str(path), pagesize=(595.0, 842.0), invariant=1)
    for _ in range(pages):
        c.drawString(72, 770, "benchmark page")
        c.showPage()
    c.save()
    return path


class _GridParser:
    """``N_BLOCKS`` text blocks, 20 to a page, with distinct texts (no need for real text in the PDF)."""

    name = "eval-grid"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def version(self) -> str:
        return "1"

    def parse(self, doc, output=None) -> list[Block]:
        out = []
        for i, t in enumerate(self.texts):
            page, row = divmod(i, 20)
            out.append(Block(i, page + 1, (60.0, 40.0 + 38.0 * row, 535.0, 70.0 + 38.0 * row), "text", t))
        return out


def test_resolve_per_question_on_a_400_block_document(tmp_path):
    from data_prep.encoders import get_encoder

    rng = random.Random(1)
    words = "revenue cost margin site yield panel output growth share market region table figure note year".split()
    texts = [f"Block {i}: " + " ".join(rng.choice(words) for _ in range(18)) + f" ({i})." for i in range(N_BLOCKS)]
    pdf = _grid_pdf(tmp_path / "grid.pdf", N_BLOCKS // 20)
    encoder = get_encoder("minilm")
    encoder.embed_texts(["warm-up"])
    cached = build_cache(pdf, _GridParser(texts), encoder, tmp_path / "cache")
    docs = DocCache(tmp_path / "cache")
    e = (Element(1, (60.0, 40.0, 535.0, 70.0)),)
    golds, preds = [], []
    for i in range(N_RESOLVE):
        quotes = [" ".join(texts[rng.randrange(N_BLOCKS)].split()[2:10]) + f" {i}-{k}" for k in range(3)]
        golds.append(Gold(i, cached.key, f"question {i}", "a", "en", "t", e, e))
        preds.append(Prediction(i, "language", json.dumps({"answer": "a", "quotes": quotes}), "", ()))
    all_quotes = [json.loads(p.response)["quotes"] for p in preds]
    t0 = time.perf_counter()
    for q in all_quotes:
        encoder.embed_texts(q)
    t_embed = (time.perf_counter() - t0) / N_RESOLVE
    rows = [["embed 3 quotes (baseline)", f"{1000 * t_embed:.1f}", "1.00x"]]
    for name in ("embedding", "lexical", "bm25"):
        r = Resolver(docs, resolver=name)
        r.resolve(golds[0], preds[0])  # warm caches (text index, encoder memo)
        t0 = time.perf_counter()
        for g, p in zip(golds, preds, strict=True):
            out = r.resolve(g, p)
        t = (time.perf_counter() - t0) / N_RESOLVE
        assert len(out["citations"]) == 3
        rows.append([f"resolve, {name} resolver (+ top-5 candidates)", f"{1000 * t:.1f}", f"{t / t_embed:.2f}x"])
    print_table(
        f"resolve step per question: 3 quotes, {N_BLOCKS}-block document ({N_RESOLVE} questions)",
        ["step", "ms/question", "vs embedding the quotes"],
        rows,
    )
