"""Plug-ins describe themselves: a throwaway judge, resolver, parser, encoder and metric registered from a test
module (one factory plus one registration line each, as CONTRIBUTING.md says) are listed by ``quotecite plugins``,
offered by the command lines, and used by the pipeline without touching any other file; no caller compares a
plug-in's name outside its registry."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest

from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.registry import Registry, UnknownNameError
from data_prep.sample import SAMPLE_FACTS

REPO = Path(__file__).resolve().parents[1]
EN = SAMPLE_FACTS.fact("en_sentence").text
QA = SAMPLE_FACTS.qa[0]


@pytest.fixture
def registered():
    """Register throwaway plug-ins for one test, then remove them."""
    added = []

    def add(registry: Registry, name: str, factory, **kw):
        registry.register(name, **kw)(factory)
        added.append((registry, name))

    yield add
    for registry, name in added:
        registry.unregister(name)


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("c"))


def _input(cache, quotes, answer="Shenzhen"):
    gt = pack_ground_truth(GroundTruth("q1", cache.key, QA.question, QA.answer, None))
    text = json.dumps({"answer": answer, "quotes": quotes})
    return {"response": text, "response_length": len(text), "ground_truth": gt}


class ConstantJudge:
    """Always answers 5/5/5 (a throwaway judge for the registry test)."""

    needs_crops = False

    def __init__(self) -> None:
        from reward.judge import JudgeStats

        self.stats = JudgeStats()
        self.total = JudgeStats()
        self.seen: list = []

    def score_batch(self, requests):
        from reward.judge import JudgeScores

        self.seen.extend(requests)
        return [JudgeScores(5, 5, 5) for _ in requests]


def test_a_new_judge_is_one_registration_line_and_the_reward_uses_it(registered, cache):
    from reward.config import RewardConfig
    from reward.judge import JUDGES
    from reward.pipeline import RewardScorer

    registered(JUDGES, "constant", ConstantJudge, summary="always 5/5/5")
    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="constant", resolver="lexical"))
    ((b, cits),) = scorer.score([_input(cache, [EN])])
    assert b.overall == pytest.approx(1.0) and len(cits) == 1
    assert scorer.judge.seen and scorer.judge.seen[0].crops == ()  # needs_crops False: nothing rendered
    assert not JUDGES.needs("constant", "url")


def test_a_new_resolver_is_used_by_its_name_and_its_needs_are_asked(registered, cache):
    from reward.resolve import RESOLVERS, resolver_uses_context, resolver_uses_encoder, similarity_matrix

    def last_block(quotes, cached, ids, encoder, context=None):
        """Scores the last candidate block highest (a throwaway resolver)."""
        out = np.zeros((len(quotes), len(ids)), dtype=np.float32)
        out[:, -1] = 1.0 if context else 0.5
        return out

    registered(RESOLVERS, "last_block", last_block, needs=("context",))
    assert resolver_uses_context("last_block") and not resolver_uses_encoder("last_block")
    sim, ids = similarity_matrix(["anything"], cache, resolver="last_block", context="question")
    assert sim[0, -1] == 1.0  # it was given the context because its entry says it needs one
    assert {"name": "last_block", "summary": "Scores the last candidate block highest (a throwaway resolver).",
            "needs": ["context"]} in RESOLVERS.describe()  # fmt: skip


def test_a_new_parser_and_encoder_build_a_cache(registered, sample_pdf, tmp_path):
    from data_prep.cache import build_cache
    from data_prep.encoders import ENCODERS, get_encoder
    from data_prep.parsers import PARSERS, get_parser
    from data_prep.types import Block

    class OneBlockParser:
        """The whole first page as one block."""

        name = "one_block"

        def version(self) -> str:
            return "1"

        def parse(self, doc, output=None):
            w, h = doc.page_sizes[0]
            return [Block(0, 1, (0.0, 0.0, w, h), "text", "all of page one")]

    class OnesEncoder:
        name = "ones"
        dim = 4

        def fingerprint(self) -> str:
            return "ones-4"

        def embed_texts(self, texts):
            return np.full((len(texts), 4), 0.5, dtype=np.float32)

        def embed_blocks(self, doc, blocks):
            return np.full((len(blocks), 4), 0.5, dtype=np.float32)

    registered(PARSERS, "one_block", OneBlockParser, summary="page one as one block", needs=("pdf",))
    registered(ENCODERS, "ones", OnesEncoder, summary="constant vectors")
    entry = build_cache(sample_pdf, get_parser("one_block"), get_encoder("ones"), tmp_path)
    assert [b.text for b in entry.blocks] == ["all of page one"]
    assert entry.embeddings.shape == (1, 4)


def test_the_registry_checks_what_a_factory_makes(registered):
    from data_prep.encoders import ENCODERS, get_encoder

    class NotAnEncoder:
        name = "broken"

    registered(ENCODERS, "broken", NotAnEncoder)
    with pytest.raises(TypeError, match="not a Encoder .missing: dim, fingerprint, embed_texts, embed_blocks"):
        get_encoder("broken")


def test_a_new_metric_is_scored_and_listed(registered):
    from eval.metrics import METRICS

    registered(METRICS, "always_one", lambda: None, summary="1 for every question")
    assert "always_one" in METRICS.names()
    rows = {r["name"]: r for r in METRICS.describe()}
    assert rows["always_one"]["summary"] == "1 for every question"
    assert rows["saa"]["needs"] == ["judge"]


def test_plugins_command_lists_every_kind_and_a_new_entry(registered, capsys):
    from quotecite.cmd_plugins import add_arguments, registries, run
    from reward.judge import JUDGES

    registered(JUDGES, "constant", ConstantJudge, summary="always 5/5/5")
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert run(p.parse_args(["--json"])) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["kind"] for r in rows} == set(registries())
    assert {"kind": "judge", "name": "constant", "summary": "always 5/5/5", "needs": []} in rows
    assert {
        "kind": "judge",
        "name": "http",
        "summary": JUDGES.entry("http").summary,
        "needs": ["crops", "url"],
    } in rows


def test_command_line_choices_come_from_the_registries(registered):
    from reward import cmd_score as reward_score
    from reward.judge import JUDGES
    from reward.resolve import RESOLVERS

    registered(JUDGES, "constant", ConstantJudge)
    registered(RESOLVERS, "last_block", lambda quotes, cached, ids, encoder: np.zeros((len(quotes), len(ids))))
    p = argparse.ArgumentParser()
    reward_score.add_arguments(p)
    choices = {a.dest: a.choices for a in p._actions if a.choices}
    assert "constant" in choices["judge"] and "last_block" in choices["resolver"]


def test_eval_score_builds_a_url_free_judge_by_name_and_refuses_a_url_for_it(registered):
    from data_prep.types import InputError
    from eval.cmd_score import add_arguments, make_judge
    from reward.judge import JUDGES

    registered(JUDGES, "constant", ConstantJudge)
    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--gold", "g", "--pred", "p", "--out", "o"]
    judge = make_judge(p.parse_args([*base, "--judge", "constant"]))
    assert isinstance(judge, ConstantJudge)
    with pytest.raises(InputError, match="either --judge-url .* or --judge constant"):
        make_judge(p.parse_args([*base, "--judge", "constant", "--judge-url", "http://127.0.0.1:1/v1"]))


def test_one_judge_settings_object_serves_the_reward_and_eval_score():
    from eval.cmd_score import add_arguments, make_judge
    from reward.config import RewardConfig

    p = argparse.ArgumentParser()
    add_arguments(p)
    base = ["--gold", "g", "--pred", "p", "--out", "o", "--judge-url", "http://127.0.0.1:1/v1", "--judge-model", "m"]
    args = p.parse_args([*base, "--judge-protocol", "rubric", "--judge-concurrency", "5"])
    assert make_judge(args).concurrency == 5  # eval score's flag reaches the judge it builds
    cfg = RewardConfig(cache_dir="/", max_crops=3, concurrency=7)
    assert cfg.judge_settings().max_crops == 3 and cfg.judge_settings().client_kwargs()["concurrency"] == 7


def test_unknown_names_get_a_did_you_mean_and_unknown_needs_are_typos():
    from reward.judge import JUDGES

    with pytest.raises(UnknownNameError, match="did you mean 'lexical'"):
        JUDGES.entry("lexicl")
    with pytest.raises(ValueError, match="unknown need 'gpu'"):
        JUDGES.needs("http", "gpu")


def test_lazy_entries_import_nothing_until_used():
    reg: Registry = Registry("widget")
    reg.add_lazy("json_dumps", "json:dumps", summary="stdlib")
    reg.add_lazy("missing", "no_such_module_qc:thing", summary="absent optional dependency")
    assert not reg.entry("json_dumps").loaded and reg.get("json_dumps") is json.dumps
    assert [r["name"] for r in reg.describe()] == ["json_dumps", "missing"]  # listing does not import it
    from data_prep.types import InputError

    with pytest.raises(InputError, match="widget 'missing' cannot be loaded"):
        reg.get("missing")


def _registered_names() -> set[str]:
    from quotecite.cmd_plugins import registries

    return {n for reg in registries().values() for n in reg.names()}


def test_no_caller_compares_a_plugin_name_outside_its_registry():
    """The issue's grep: ``x == "http"``, ``x != "lat"``, ``x in ("embedding", ...)`` on a registered name, in any
    module of the packages (tests excluded)."""
    names = _registered_names()
    pattern = re.compile(
        r"""([\w.\]]+)\s*(?:==|!=)\s*["']([\w.-]+)["']|(?<!for )(\b\w+)\s+in\s*[(\[{]\s*["']([\w.-]+)["']"""
    )
    other = {"transport"}  # settings whose values happen to share a plug-in's name (qwen3-vl's "http" transport)
    hits = []
    for pkg in ("data_prep", "reward", "eval", "launch", "recipes"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                code = line.split("#", 1)[0]
                if re.search(r"\bfor\s+[\w, ]+\s+in\s*[(\[]", code):
                    continue  # iterating over names is not comparing them
                for m in pattern.finditer(code):
                    lhs, name = (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))
                    if name in names and lhs.rsplit(".", 1)[-1] not in other:
                        hits.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not hits, "plug-in names compared outside their registry:\n" + "\n".join(hits)
