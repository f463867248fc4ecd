"""``eval resolve``: quotes, budget-matched question controls, coordinate tags and snap, cache lookup."""

from __future__ import annotations

import json

import pytest

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.cache import DocCache, build_cache
from data_prep.types import Block
from eval.__main__ import COMMANDS
from eval.cmd_resolve import Resolver, resolve_file
from eval.schemas import Gold, Prediction, read_predictions, write_jsonl

TEXTS = [
    (1, (60.0, 80.0, 530.0, 120.0), "The harbour bridge was opened to traffic in 1932 after six years of work."),
    (1, (60.0, 140.0, 530.0, 180.0), "Steel for the arch came from mills in Middlesbrough, England."),
    (1, (60.0, 200.0, 530.0, 240.0), "The harbour tunnel opened in 1992 to relieve congestion."),
    (2, (60.0, 80.0, 530.0, 120.0), "Annual toll revenue reached 120 million dollars in 2019."),
    (2, (60.0, 300.0, 530.0, 340.0), "Table 2: Daily crossings by vehicle type."),
]


class FixedParser:
    """A parser that returns given blocks (the cache's own validation still applies)."""

    name = "fixed"

    def __init__(self, blocks: list[Block]) -> None:
        self.blocks = blocks

    def version(self) -> str:
        return f"1-{abs(hash(tuple(self.blocks)))}"

    def parse(self, doc, output=None) -> list[Block]:
        return self.blocks


@pytest.fixture(scope="module")
def cache(tmp_path_factory, sample_pdf):
    blocks = [Block(i, p, b, "text", t) for i, (p, b, t) in enumerate(TEXTS)]
    d = tmp_path_factory.mktemp("cache")
    cached = build_cache(sample_pdf, FixedParser(blocks), None, d)
    return cached


def gold(doc_key: str, question: str = "When was the harbour bridge opened?", index: int = 0) -> Gold:
    from eval.schemas import Element

    e = (Element(1, TEXTS[0][1]),)
    return Gold(index, doc_key, question, "1932", "en", "Factual Retrieval", e, e)


def lang(response: str, index: int = 0) -> Prediction:
    return Prediction(index, "language", response, "", ())


def test_doc_cache_finds_entries_by_key_pdf_stem_and_sha_prefix(cache, sample_pdf):
    docs = DocCache(cache.path.parent)
    assert docs.key_for(cache.key) == cache.key
    assert docs.key_for(sample_pdf.stem) == cache.key
    assert docs.key_for(cache.manifest["pdf_sha256"][:12]) == cache.key
    with pytest.raises(InputError, match="no cache entry"):
        docs.key_for("other-document")
    with pytest.raises(InputError, match="no entry"):
        DocCache(cache.path.parent, parser="mineru").key_for(sample_pdf.stem)


def test_doc_cache_refuses_to_guess_between_two_entries_of_one_pdf(tmp_path, sample_pdf):
    blocks = [Block(0, 1, TEXTS[0][1], "text", TEXTS[0][2])]
    build_cache(sample_pdf, FixedParser(blocks), None, tmp_path)
    build_cache(sample_pdf, FixedParser(blocks[:0] + [Block(0, 1, TEXTS[1][1], "text", "x")]), None, tmp_path)
    with pytest.raises(InputError, match="matches 2 cache entries"):
        DocCache(tmp_path).key_for(sample_pdf.stem)


def test_quotes_resolve_to_their_blocks_with_candidates(cache):
    r = Resolver(DocCache(cache.path.parent), resolver="lexical", top_k=2)
    resp = json.dumps({"answer": "1932", "quotes": [TEXTS[0][2], "toll revenue reached 120 million dollars"]})
    out = r.resolve(gold(cache.key), lang(resp))
    assert out["answer"] == "1932"
    assert [c["block_id"] for c in out["citations"]] == [0, 3]
    assert out["citations"][0]["bbox"] == list(TEXTS[0][1]) and out["citations"][0]["page"] == 1
    assert out["citations"][0]["quote"] == TEXTS[0][2]
    assert [row[0] for row in out["candidates"]] == [0, 3] and all(len(row) == 2 for row in out["candidates"])
    assert out["resolve"] == {
        "resolver": "lexical",
        "query": "quotes",
        "parse_ok": True,
        "reason": None,
        "n_quotes": 2,
    }


def test_response_with_no_parseable_json_cites_nothing_and_keeps_its_text_as_answer(cache):
    r = Resolver(DocCache(cache.path.parent), resolver="lexical")
    out = r.resolve(gold(cache.key), lang("<think>hmm</think>It opened in 1932."))
    assert out["citations"] == []
    assert out["answer"] == "It opened in 1932."
    assert out["resolve"]["parse_ok"] is False and out["resolve"]["reason"] == "no_object"
    assert r.stats["unparsed:no_object"] == 1


def test_question_control_cites_as_many_blocks_as_the_response_quoted(cache):
    resp = json.dumps({"answer": "The tunnel opened in 1992", "quotes": ["a", "b"]})
    q = Resolver(DocCache(cache.path.parent), resolver="lexical", query="question")
    out = q.resolve(gold(cache.key), lang(resp))
    assert out["resolve"]["budget"] == 2
    assert [c["block_id"] for c in out["citations"]] == [0, 2]  # the two blocks sharing the most question words
    qa = Resolver(DocCache(cache.path.parent), resolver="lexical", query="question+answer")
    out_qa = qa.resolve(gold(cache.key), lang(resp))
    assert [c["block_id"] for c in out_qa["citations"]][0] == 2  # the model's own answer pulls the tunnel block up
    unparsed = q.resolve(gold(cache.key), lang("no json"))
    assert unparsed["citations"] == []  # budget 0 when the response cites nothing


def test_coordinate_tags_become_points_and_a_page_the_document_lacks_is_a_citation_that_matches_nothing(
    cache, tmp_path
):
    # Raw-output semantics keep the page-9 tag (4-page document) in the precision denominator;
    # --drop-missing-pages drops it.
    from eval.metrics import score_boxes
    from eval.schemas import Element

    w, h = cache.page_sizes[0]
    text = 'Yes <bbox page="1" x1="100" y1="100" x2="900" y2="150" /> <bbox page="9" x1="1" y1="1" x2="2" y2="2" />'
    out = Resolver(DocCache(cache.path.parent)).resolve(gold(cache.key), Prediction(0, "coordinate", text, "", ()))
    assert [c["page"] for c in out["citations"]] == [1, 9]
    assert out["citations"][0]["bbox"] == pytest.approx([0.1 * w, 0.1 * h, 0.9 * w, 0.15 * h], abs=1e-3)
    assert out["citations"][1]["page_missing"] is True
    assert out["resolve"]["pages_out_of_range"] == 1
    assert out["answer"] == "Yes"
    old = Resolver(DocCache(cache.path.parent), drop_missing_pages=True)
    dropped = old.resolve(gold(cache.key), Prediction(0, "coordinate", text, "", ()))
    assert [c["page"] for c in dropped["citations"]] == [1] and dropped["resolve"]["pages_out_of_range"] == 1
    # Scored against an element the page-1 tag matches: precision 1/2 by default, 1/1 with the tag dropped.
    e = Element(1, tuple(out["citations"][0]["bbox"]))
    g = Gold(0, cache.key, "q", "a", "en", "", (e,), (e,))
    for name, rec, precision in (("keep", out, 0.5), ("drop", dropped, 1.0)):
        write_jsonl(tmp_path / f"{name}.jsonl", [rec])
        (pred,) = read_predictions(tmp_path / f"{name}.jsonl")
        s = score_boxes(g, pred.citations)
        assert (s.recall["0.5"], s.precision) == (1.0, precision), name


def test_snap_replaces_a_coordinate_box_by_the_best_block(cache):
    r = Resolver(DocCache(cache.path.parent), snap=True)
    w, h = cache.page_sizes[0]
    # A loose box around block 2 (y 200-240 pt): y 190-250 pt on the 0-1000 scale.
    y0, y1 = round(190 / h * 1000), round(250 / h * 1000)
    out = r.resolve(gold(cache.key), Prediction(0, "coordinate", f'<bbox page="1" 50 {y0} 950 {y1}/>', "", ()))
    assert out["citations"] == [{"page": 1, "bbox": list(TEXTS[2][1]), "block_id": 2}]


def test_resolve_command_writes_citations_and_rejects_unknown_indices(cache, tmp_path, capsys):
    g = tmp_path / "gold.jsonl"
    write_jsonl(g, [gold(cache.key).to_json()])
    p = tmp_path / "pred.jsonl"
    write_jsonl(p, [lang(json.dumps({"answer": "x", "quotes": [TEXTS[1][2]]})).to_json()])
    out = tmp_path / "resolved.jsonl"
    argv = ["resolve", "--pred", str(p), "--gold", str(g), "--cache-dir", str(cache.path.parent)]
    assert cli_main("eval", "", COMMANDS, [*argv, "--resolver", "bm25", "--out", str(out)]) == 0
    (pred,) = read_predictions(out)
    assert [c.block_id for c in pred.citations] == [1]
    assert "resolved 1 responses" in capsys.readouterr().out
    write_jsonl(p, [lang("{}", index=99).to_json()])
    assert cli_main("eval", "", COMMANDS, [*argv, "--out", str(out)]) == 2
    assert "prediction index 99 is not in" in capsys.readouterr().err


def test_resolve_file_keeps_prediction_order(cache, tmp_path):
    g = tmp_path / "gold.jsonl"
    write_jsonl(g, [gold(cache.key, index=i).to_json() for i in (3, 1, 2)])
    p = tmp_path / "pred.jsonl"
    write_jsonl(p, [lang("x", index=i).to_json() for i in (2, 3, 1)])
    resolve_file(g, p, tmp_path / "o.jsonl", Resolver(DocCache(cache.path.parent), resolver="lexical"))
    assert [x.index for x in read_predictions(tmp_path / "o.jsonl")] == [2, 3, 1]


def test_reversed_coordinate_box_is_kept_as_written_and_flagged_malformed_when_scored(cache, tmp_path):
    r = Resolver(DocCache(cache.path.parent))
    out = r.resolve(gold(cache.key), Prediction(0, "coordinate", '<bbox page="1" x1="900" y1="150" x2="100" y2="100"/>',
                                                "", ()))  # fmt: skip
    x0, y0, x1, y1 = out["citations"][0]["bbox"]
    assert x0 > x1 and y0 > y1  # not silently repaired here
    write_jsonl(tmp_path / "p.jsonl", [out])
    (pred,) = read_predictions(tmp_path / "p.jsonl")
    assert pred.citations[0].malformed and pred.citations[0].bbox[0] < pred.citations[0].bbox[2]


def test_fixed_budget_question_control_cites_k_blocks_even_for_an_unparsed_response(cache):
    # Appendix F's retrieval-only baseline: k blocks per question, independent of what the model wrote.
    q = Resolver(DocCache(cache.path.parent), resolver="lexical", query="question", budget=1)
    out = q.resolve(gold(cache.key), lang("no json"))
    assert out["resolve"]["budget"] == 1
    assert [c["block_id"] for c in out["citations"]] == [0]  # the block sharing the most question words
    with pytest.raises(InputError, match="--budget"):
        Resolver(DocCache(cache.path.parent), query="quotes", budget=3)


def test_quotes_are_neither_capped_at_eight_nor_deduplicated_by_default(cache, caplog):
    # Ten quotes all resolve (the paper has no cap), a repeated quote is a second citation; the options cap and
    # deduplicate, and the safety bound is logged when hit.
    quotes = [TEXTS[i % len(TEXTS)][2] for i in range(10)]
    resp = json.dumps({"answer": "1932", "quotes": quotes})
    out = Resolver(DocCache(cache.path.parent), resolver="lexical").resolve(gold(cache.key), lang(resp))
    assert out["resolve"]["n_quotes"] == 10 and len(out["citations"]) == 10
    old = Resolver(DocCache(cache.path.parent), resolver="lexical", max_quotes=8, dedupe_quotes=True)
    with caplog.at_level("WARNING", logger="eval"):
        out = old.resolve(gold(cache.key), lang(resp))
    assert out["resolve"]["n_quotes"] == 5 and old.stats["quotes_over_bound"] == 0  # 5 distinct texts
    bounded = Resolver(DocCache(cache.path.parent), resolver="lexical", max_quotes=8)
    with caplog.at_level("WARNING", logger="eval"):
        out = bounded.resolve(gold(cache.key), lang(resp))
    assert out["resolve"]["n_quotes"] == 8 and bounded.stats["quotes_over_bound"] == 2
    assert any("--max-quotes=8" in r.getMessage() for r in caplog.records)
    pair = json.dumps({"answer": "1932", "quotes": [TEXTS[0][2], TEXTS[0][2]]})
    out = Resolver(DocCache(cache.path.parent), resolver="lexical").resolve(gold(cache.key), lang(pair))
    assert [c["block_id"] for c in out["citations"]][0] == 0 and len({c["block_id"] for c in out["citations"]}) == 2


def test_fused_resolver_reads_the_question_and_the_models_answer(sample_pdf, tmp_path):
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from data_prep.sample import SAMPLE_FACTS
    from eval.schemas import Element
    from reward.resolve import resolve_quotes

    encoder = get_encoder("minilm")
    cached = build_cache(sample_pdf, get_parser("pdftext"), encoder, tmp_path)
    qa = SAMPLE_FACTS.qa[0]
    quote = SAMPLE_FACTS.fact("table_row").text
    e = (Element(2, (0.0, 0.0, 10.0, 10.0)),)
    g = Gold(0, cached.key, qa.question, qa.answer, "en", "Factual Retrieval", e, e)
    resp = json.dumps({"answer": "Shenzhen", "quotes": [quote]})
    out = Resolver(DocCache(tmp_path), resolver="fused").resolve(g, lang(resp))
    (cit,) = out["citations"]
    with_ctx = resolve_quotes([quote], cached, resolver="fused", encoder=encoder, context=f"{qa.question}\nShenzhen")
    without = resolve_quotes([quote], cached, resolver="fused", encoder=encoder)
    assert (cit["block_id"], cit["similarity"]) == (with_ctx[0].block_id, round(with_ctx[0].similarity, 6))
    assert cit["page"] == 2 and with_ctx[0].similarity > without[0].similarity  # the context's ranks add
