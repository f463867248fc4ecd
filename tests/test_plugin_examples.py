"""The plug-in guide's worked examples (``examples/plugins/``, ``docs/plugins.md``) run: each file is imported as a
user would import it (its one registration line registers it), listed by ``python -m quotecite plugins --import``,
and run through the real commands: the judge through ``reward score``, the parser and the encoder through
``data_prep blocks`` (and the encoder's vectors through ``eval resolve``), the resolver through ``eval resolve``,
the metric through ``eval score``. So the guide cannot rot: a change of a protocol breaks these tests."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from core.cli import main as cli_main
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.sample import SAMPLE_FACTS
from tests.conftest import REPO

EXAMPLES = REPO / "examples" / "plugins"
KINDS = {  # module: (registry kind, registered name)
    "judge_keywords": ("judge", "keywords"),
    "parser_lines": ("parser", "lines"),
    "encoder_hashing": ("encoder", "hashing"),
    "resolver_trigrams": ("resolver", "trigrams"),
    "metric_page_precision": ("metric", "page_precision"),
}


def _registries():
    from quotecite.cmd_plugins import registries

    return registries()


@pytest.fixture
def example(monkeypatch):
    """``example(module)``: import ``examples/plugins/<module>.py`` the way the guide says (the folder on the path,
    ``import <module>``); afterwards its entry is unregistered and the module forgotten, so each test imports it
    afresh and no other test sees it."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    imported: list[str] = []

    def load(module: str):
        kind, name = KINDS[module]
        assert name not in _registries()[kind].names(), f"{kind} {name!r} registered before the example's import"
        imported.append(module)
        return importlib.import_module(module)

    yield load
    for module in imported:
        kind, name = KINDS[module]
        if name in _registries()[kind].names():
            _registries()[kind].unregister(name)
        sys.modules.pop(module, None)


def _run(package: str, argv: list[str]) -> int:
    """``python -m <package> ARGV`` in this process (the registered examples are visible to it)."""
    commands = importlib.import_module(f"{package}.__main__").COMMANDS
    return cli_main(f"python -m {package}", "", commands, [str(a) for a in argv])


@pytest.fixture(scope="module")
def sample_cache(sample_pdf, tmp_path_factory):
    """The sample PDF's cache with the CPU defaults (pdftext, minilm), built by ``data_prep blocks``."""
    from data_prep.cache import DocCache

    cache_dir = tmp_path_factory.mktemp("cache")
    assert _run("data_prep", ["blocks", sample_pdf, "--parser", "pdftext", "--encoder", "minilm",
                              "--cache-dir", cache_dir]) == 0  # fmt: skip
    (key,) = [p.name for p in cache_dir.iterdir() if p.is_dir()]
    return DocCache(cache_dir).get(key)


def _gold_and_predictions(cached, tmp_path):
    """The demo's gold for the sample and its language-interface predictions (``eval/demo.py``), as files."""
    from eval.demo import build_demo_gold, demo_predictions

    gold = build_demo_gold(cached)
    language, _ = demo_predictions(cached, gold)
    gold_file, pred_file = tmp_path / "gold.jsonl", tmp_path / "raw.jsonl"
    gold_file.write_text("".join(json.dumps(g) + "\n" for g in gold), encoding="utf-8")
    pred_file.write_text("".join(json.dumps(p) + "\n" for p in language), encoding="utf-8")
    return gold, gold_file, pred_file


def _read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------------------------ judge
def test_the_example_judge_scores_rollouts_through_reward_score(example, sample_cache, tmp_path):
    module = example("judge_keywords")
    en, row = SAMPLE_FACTS.fact("en_sentence").text, SAMPLE_FACTS.fact("table_row").text
    qa = SAMPLE_FACTS.qa[0]  # "Which test site had the highest annual yield?" -> "Shenzhen"
    gt = pack_ground_truth(GroundTruth("q1", sample_cache.key, qa.question, qa.answer, None))
    responses = [
        {"answer": "Shenzhen", "quotes": [en, row]},  # right answer, quotes that name it
        {"answer": "Kunming", "quotes": [en]},  # wrong answer: the gated reward pays nothing
    ]
    inputs = tmp_path / "rollouts.jsonl"
    inputs.write_text("".join(json.dumps({"response": json.dumps(r), "response_length": 10, "ground_truth": gt})
                              + "\n" for r in responses), encoding="utf-8")  # fmt: skip
    out = tmp_path / "scored.jsonl"
    argv = ["score", "--inputs", inputs, "--cache-dir", sample_cache.path.parent, "--judge", "keywords",
            "--resolver", "lexical", "--out", out]  # fmt: skip
    assert _run("reward", argv) == 0
    right, wrong = _read_jsonl(out)
    # the judge's own rule, on the texts of the blocks the quotes resolved to, gives the reward's parts
    texts = [sample_cache.blocks[c["block_id"]].text for c in right["citations"]]
    s = module.keyword_scores(qa.answer, "Shenzhen", texts)
    assert s.answer == 5 and s.coverage == 5  # "Shenzhen" is in the answer and in the cited text
    assert right["overall"] == pytest.approx(s.answer / 5 * (s.relevance + s.coverage) / 10)
    assert right["overall"] > 0.5
    assert wrong["overall"] == 0.0


# ----------------------------------------------------------------------------------------------------- parser
def test_the_example_parser_builds_a_cache_through_data_prep_blocks(example, sample_pdf, tmp_path):
    from data_prep.cache import DocCache
    from data_prep.document import Document

    example("parser_lines")
    assert _run("data_prep", ["blocks", sample_pdf, "--parser", "lines", "--encoder", "minilm",
                              "--cache-dir", tmp_path]) == 0  # fmt: skip
    (key,) = [p.name for p in tmp_path.iterdir() if p.is_dir()]
    cached = DocCache(tmp_path).get(key)
    with Document.open(sample_pdf) as doc:
        lines = [ln for p in range(1, doc.n_pages + 1) for ln in doc.text_lines(p) if ln.text.strip()]
    assert len(cached.blocks) == len(lines) and cached.manifest["parser"]["name"] == "lines"
    assert [b.block_id for b in cached.blocks] == list(range(len(lines)))
    assert {b.page for b in cached.blocks} == set(range(1, cached.n_pages + 1))
    assert cached.embeddings.shape[0] == len(lines)
    # a line of the sample is one block of its own, on its page
    title = [b for b in cached.blocks if b.text == SAMPLE_FACTS.title]
    assert len(title) == 1 and title[0].page == 1


# ---------------------------------------------------------------------------------------------------- encoder
def test_the_example_encoder_embeds_the_cache_and_resolves_quotes(example, sample_pdf, tmp_path):
    from data_prep.cache import DocCache

    module = example("encoder_hashing")
    cache_dir = tmp_path / "cache"
    assert _run("data_prep", ["blocks", sample_pdf, "--parser", "pdftext", "--encoder", "hashing",
                              "--cache-dir", cache_dir]) == 0  # fmt: skip
    (key,) = [p.name for p in cache_dir.iterdir() if p.is_dir()]
    cached = DocCache(cache_dir).get(key)
    assert cached.manifest["encoder"]["name"] == "hashing" and cached.embeddings.shape == (len(cached.blocks), 256)
    norms = (cached.embeddings.astype("float32") ** 2).sum(axis=1)
    assert ((abs(norms - 1) < 1e-2) | (norms == 0)).all()  # unit rows (float16 in the cache)
    # eval resolve's default resolver (embedding) embeds the quotes with the cache's own encoder: this one
    gold, gold_file, pred_file = _gold_and_predictions(cached, tmp_path)
    out = tmp_path / "resolved.jsonl"
    assert _run("eval", ["resolve", "--pred", pred_file, "--gold", gold_file, "--cache-dir", cache_dir,
                         "--out", out]) == 0  # fmt: skip
    first = _read_jsonl(out)[0]
    quotes = [c["quote"] for c in first["citations"]]
    assert quotes == [SAMPLE_FACTS.fact("en_sentence").text, SAMPLE_FACTS.fact("table_row").text]
    enc = module.HashingEncoder()
    for c in first["citations"]:
        block = cached.blocks[c["block_id"]]
        assert c["similarity"] == pytest.approx(
            float(enc.embed_texts([c["quote"]])[0] @ enc.embed_texts([block.text])[0]), abs=1e-2
        )
    # the sentence's words are its block's: it lands on the gold element (a table row shares its block with the
    # other rows, so a bag of words is a weaker match there: what a better encoder is for)
    assert first["citations"][0]["page"] == gold[0]["gt_necessary"][0][0]


# --------------------------------------------------------------------------------------------------- resolver
def test_the_example_resolver_resolves_through_eval_resolve(example, sample_cache, tmp_path):
    from eval.boxes import iou

    example("resolver_trigrams")
    gold, gold_file, pred_file = _gold_and_predictions(sample_cache, tmp_path)
    out = tmp_path / "resolved.jsonl"
    assert _run("eval", ["resolve", "--pred", pred_file, "--gold", gold_file, "--cache-dir",
                         sample_cache.path.parent, "--resolver", "trigrams", "--out", out]) == 0  # fmt: skip
    records = _read_jsonl(out)
    # the three JSON responses quote their evidence verbatim: every quote lands on a necessary element's block
    for g, rec in zip(gold[:3], records[:3], strict=True):
        assert rec["citations"]
        for c in rec["citations"]:
            assert any(e[0] == c["page"] and iou(tuple(e[1:]), tuple(c["bbox"])) > 0.99 for e in g["gt_all"]), c
    assert records[3]["citations"] == []  # the response without JSON cites nothing


# ----------------------------------------------------------------------------------------------------- metric
def test_the_example_metric_is_reported_by_eval_score(example, sample_cache, tmp_path):
    example("metric_page_precision")
    gold, gold_file, pred_file = _gold_and_predictions(sample_cache, tmp_path)
    resolved = tmp_path / "resolved.jsonl"
    cache_dir = sample_cache.path.parent
    assert _run("eval", ["resolve", "--pred", pred_file, "--gold", gold_file, "--cache-dir", cache_dir,
                         "--out", resolved]) == 0  # fmt: skip
    out = tmp_path / "results"
    assert _run("eval", ["score", "--gold", gold_file, "--pred", resolved, "--cache-dir", cache_dir,
                         "--judge", "lexical", "--no-report", "--out", out]) == 0  # fmt: skip
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    # by hand: per question with a citation, citations on a page of a necessary element / citations
    expected = []
    for g, rec in zip(gold, _read_jsonl(resolved), strict=True):
        if rec["citations"]:
            pages = {e[0] for e in g["gt_necessary"]}
            expected.append(sum(c["page"] in pages for c in rec["citations"]) / len(rec["citations"]))
    assert len(expected) == 3 and metrics["page_precision"] == pytest.approx(sum(expected) / len(expected))


# ---------------------------------------------------------------------------------------------- the listing
def test_the_guide_command_lists_every_example(tmp_path):
    """The guide's command, in a fresh process: ``PYTHONPATH=examples/plugins python -m quotecite plugins --json
    --import MODULE ...``."""
    argv = [sys.executable, "-m", "quotecite", "plugins", "--json"]
    for module in KINDS:
        argv += ["--import", module]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLES), str(REPO)])}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {(r["kind"], r["name"]): r for r in map(json.loads, out.stdout.splitlines())}
    assert set(KINDS.values()) <= set(rows)
    assert rows[("judge", "keywords")]["summary"].startswith("gold answer contained")
    assert rows[("parser", "lines")]["needs"] == ["pdf"]


def test_every_example_file_is_tested_and_registers_one_entry():
    files = sorted(p.stem for p in EXAMPLES.glob("*.py"))
    assert files == sorted(KINDS)
    for module in KINDS:
        text = (EXAMPLES / f"{module}.py").read_text(encoding="utf-8")
        assert len([line for line in text.splitlines() if ".register(" in line]) == 1, module
