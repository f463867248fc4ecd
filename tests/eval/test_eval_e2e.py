"""End to end on a real document: gold from Docling's ground-truth regions, verbatim quotes of those regions,
resolved with the embedding resolver (MiniLM), scored and reported through the commands."""

from __future__ import annotations

import json
import re

import pytest

from core.cli import main as cli_main
from data_prep.cache import build_cache
from eval.__main__ import COMMANDS
from eval.schemas import write_jsonl
from tests.conftest import fixture_path

pytestmark = pytest.mark.fixtures


def longest_sentence(text: str) -> str:
    return max(re.split(r"(?<=[.!?])\s+", text.strip()), key=len)


@pytest.fixture(scope="module")
def docling_cache(tmp_path_factory):
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    pdf = fixture_path("docling-project_docling", "multi_page.pdf")
    js = fixture_path("docling-project_docling", "multi_page.json")
    return build_cache(pdf, get_parser("docling"), get_encoder("minilm"), tmp_path_factory.mktemp("cache"),
                       parser_output=js)  # fmt: skip


def test_verbatim_quotes_of_single_block_regions_recall_everything(docling_cache, tmp_path, capsys):
    cached = docling_cache
    # Questions over Docling's paragraph regions of pages 1-3, one region each, and one over two regions.
    regions = [b for b in cached.blocks if b.type == "text" and b.page <= 3 and len(b.text) >= 80]
    assert len(regions) >= 8
    groups = [[b] for b in regions] + [[regions[0], regions[-1]]]
    gold, raw = [], []
    for i, group in enumerate(groups):
        boxes = [[b.page, *b.bbox] for b in group]
        gold.append({"index": i, "doc_key": cached.key, "question": f"question {i}", "answer": "answer",
                     "language": "en", "qtype": "Factual Retrieval", "gt_necessary": boxes, "gt_all": boxes,
                     "gt_types": ["text"] * len(group)})  # fmt: skip
        quotes = [longest_sentence(b.text) for b in group]
        assert all(q in b.text for q, b in zip(quotes, group, strict=True))  # verbatim
        raw.append({"index": i, "interface": "language", "response": json.dumps({"answer": "answer", "quotes": quotes}),
                    "answer": "", "citations": []})  # fmt: skip
    write_jsonl(tmp_path / "gold.jsonl", gold)
    write_jsonl(tmp_path / "raw.jsonl", raw)
    cache_dir = str(cached.path.parent)
    rc = cli_main("eval", "", COMMANDS, ["resolve", "--pred", str(tmp_path / "raw.jsonl"), "--gold",
                                         str(tmp_path / "gold.jsonl"), "--cache-dir", cache_dir, "--resolver",
                                         "embedding", "--out", str(tmp_path / "pred.jsonl")])  # fmt: skip
    assert rc == 0
    out = tmp_path / "score"
    rc = cli_main("eval", "", COMMANDS, ["score", "--gold", str(tmp_path / "gold.jsonl"), "--pred",
                                         str(tmp_path / "pred.jsonl"), "--cache-dir", cache_dir, "--out", str(out)])  # fmt: skip
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["recall"]["0.5"] == 1.0
    assert m["recall"] == {"page": 1.0, "0.1": 1.0, "0.3": 1.0, "0.5": 1.0, "0.7": 1.0}
    assert m["precision"] == 1.0 and m["f1"] == 1.0 and m["format_rate"] == 1.0
    assert m["parser_ceiling"]["0.5"] == 1.0
    a = json.loads((out / "analyses.json").read_text())
    assert a["residuals"]["iou"]["recovered"] == 1.0
    fid = a["quote_fidelity"]
    assert (fid["n_quotes"], fid["exact"]) == (len(groups) + 1, 1.0)
    # Fuzzy (token F1 >= 0.8 against a block, read literally) is a separate test: the quotes are sentences of
    # longer blocks, so some exact quotes are not fuzzy.
    assert 0.0 < fid["fuzzy"] < 1.0
    html = (out / "report.html").read_text()
    assert html.count("class='q'") == len(groups)
    assert len(list((out / "report_files").glob("*.jpg"))) >= len(groups)
