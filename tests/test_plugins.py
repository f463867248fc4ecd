"""Plug-ins describe themselves, and adding one is one new file plus one registration line (CONTRIBUTING.md): for
each of the seven kinds, a throwaway module written to ``tmp_path`` (the plug-in and its one registration line) is
imported, listed by ``python -m quotecite plugins`` and used by its caller without touching any other file. The
registry checks each kind's protocol and names the entry and the missing member; no caller compares a plug-in's
name, or an interface's attributes, outside its registry."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.registry import PluginShapeError, Registry, UnknownNameError
from data_prep.groundtruth import GroundTruth, pack_ground_truth
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


def _all_names() -> dict[str, set[str]]:
    from quotecite.cmd_plugins import registries

    return {kind: set(reg.names()) for kind, reg in registries().items()}


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    """``write(module, body, registration)``: the recipe's one new file, ``tmp_path/<module>.py``, holding the
    plug-in (``body``) and its registration, which must be one line. Importing it is left to the test (through
    ``quotecite plugins --import``). Afterwards every entry the test added is unregistered and the module forgotten."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = _all_names()
    written: list[str] = []

    def write(module: str, body: str, registration: str) -> Path:
        assert "\n" not in registration.strip(), "the recipe's registration is one line"
        path = tmp_path / f"{module}.py"
        path.write_text(f"{body.strip()}\n\n\n{registration.strip()}\n" if not registration.startswith("@") else
                        _decorate(body, registration), encoding="utf-8")  # fmt: skip
        written.append(module)
        return path

    yield write
    from quotecite.cmd_plugins import registries

    regs = registries()
    for kind, names in _all_names().items():
        for name in names - before[kind]:
            regs[kind].unregister(name)
    for module in written:
        sys.modules.pop(module, None)


def _decorate(body: str, decorator: str) -> str:
    """``body`` with ``decorator`` on its last top-level ``def`` or ``class`` (the plug-in)."""
    lines = body.strip().splitlines()
    at = max(i for i, line in enumerate(lines) if re.match(r"(def|class) ", line))
    return "\n".join([*lines[:at], decorator.strip(), *lines[at:]]) + "\n"


def _listed(kind: str, module: str | None = None) -> dict[str, dict]:
    """``python -m quotecite plugins --json [--import module]`` run in this process: the rows of ``kind``."""
    from quotecite.cmd_plugins import add_arguments, run

    p = argparse.ArgumentParser()
    add_arguments(p)
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(p.parse_args(["--json", *(["--import", module] if module else [])])) == 0
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    return {r["name"]: r for r in rows if r["kind"] == kind}


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


# ------------------------------------------------------------------------------------- the seven throwaway plug-ins
PARSER = """
from data_prep.parsers import PARSERS
from data_prep.types import Block


class OneBlockParser:
    \"\"\"The whole first page as one block.\"\"\"

    name = "one_block"

    def version(self) -> str:
        return "1"

    def parse(self, doc, output=None):
        w, h = doc.page_sizes[0]
        return [Block(0, 1, (0.0, 0.0, w, h), "text", "all of page one")]
"""

ENCODER = """
import numpy as np

from data_prep.encoders import ENCODERS


class OnesEncoder:
    \"\"\"Constant unit vectors.\"\"\"

    name = "ones"
    dim = 4

    def fingerprint(self) -> str:
        return "ones-4"

    def embed_texts(self, texts):
        return np.full((len(texts), 4), 0.5, dtype=np.float32)

    def embed_blocks(self, doc, blocks):
        return np.full((len(blocks), 4), 0.5, dtype=np.float32)
"""

RESOLVER = """
import numpy as np

from reward.resolve import RESOLVERS


def last_block(quotes, cached, ids, encoder, context=None):
    \"\"\"Scores the last candidate block highest (a throwaway resolver).\"\"\"
    out = np.zeros((len(quotes), len(ids)), dtype=np.float32)
    out[:, -1] = 1.0 if context else 0.5
    return out
"""

JUDGE = """
from reward.judge import JUDGES, JudgeScores, JudgeStats


class ConstantJudge:
    \"\"\"Always answers 5/5/5.\"\"\"

    needs_crops = False

    def __init__(self) -> None:
        self.stats = JudgeStats()
        self.total = JudgeStats()
        self.seen = []

    def score_batch(self, requests):
        self.seen.extend(requests)
        return [JudgeScores(5, 5, 5) for _ in requests]
"""

REWARD_FORM = """
from reward.scoring import REWARD_FORMS


def flat(s, w):
    \"\"\"The weight ``scale`` for every judged response, whatever the judge says.\"\"\"
    return w["scale"]
"""

METRIC = """
from eval.metrics import METRICS


def cited_pages(r):
    \"\"\"Distinct pages cited (None without a prediction).\"\"\"
    return None if r.prediction is None else float(len({c.page for c in r.prediction.citations}))
"""

INTERFACE = """
from eval.interfaces import INTERFACES


class FirstPageInterface:
    \"\"\"Cites page one whole; the answer is the response upper-cased.\"\"\"

    def answer(self, text):
        return text.upper()

    def cite(self, resolver, gold, pred, cached):
        w, h = cached.page_sizes[0]
        return resolver.record(pred, self.answer(pred.response), [{"page": 1, "bbox": [0.0, 0.0, w, h]}],
                               {"interface": pred.interface})
"""

REGISTRATIONS = {
    # kind: (module, body, registry, name, object, the registration's arguments after the name)
    "parser": ("qc_tmp_parser", PARSER, "PARSERS", "one_block", "OneBlockParser",
               'summary="page one as one block", needs=("pdf",)'),
    "encoder": ("qc_tmp_encoder", ENCODER, "ENCODERS", "ones", "OnesEncoder", 'summary="constant vectors"'),
    "resolver": ("qc_tmp_resolver", RESOLVER, "RESOLVERS", "last_block", "last_block", 'needs=("context",)'),
    "judge": ("qc_tmp_judge", JUDGE, "JUDGES", "constant", "ConstantJudge", 'summary="always 5/5/5"'),
    "reward form": ("qc_tmp_form", REWARD_FORM, "REWARD_FORMS", "flat", "flat",
                    'needs=("judge",), weights={"scale": 0.5}'),
    "metric": ("qc_tmp_metric", METRIC, "METRICS", "cited_pages", "cited_pages",
               'summary="mean over questions with a prediction", higher_is_better=False'),
    "interface": ("qc_tmp_interface", INTERFACE, "INTERFACES", "first_page", "FirstPageInterface",
                  'summary="page one whole", needs=("generation",)'),
}  # fmt: skip
HOWS = ("decorator", "add_lazy")
"""The two forms of the one registration line: a decorator in the new module, or ``add_lazy`` next to the registry
(here: run by the test, as the registry's module would run it)."""


def _registration(kind: str, how: str) -> str:
    module, _, registry, name, obj, args = REGISTRATIONS[kind]
    if how == "decorator":
        return f'@{registry}.register("{name}", {args})'
    return f'{registry}.add_lazy("{name}", "{module}:{obj}", {args})'


def _add(plugin_module, kind: str, how: str = "decorator") -> dict:
    """Write the kind's throwaway module and register it (``how``); returns its ``quotecite plugins`` row. A
    decorated module is imported by ``quotecite plugins --import``; a lazy one stays unimported by the listing."""
    module, body, registry, name, _, _ = REGISTRATIONS[kind]
    line = _registration(kind, how)
    if how == "decorator":
        plugin_module(module, body, line)
        assert module not in sys.modules
        rows = _listed(kind, module)
    else:
        plugin_module(module, body, "")
        from quotecite.cmd_plugins import registries

        exec(line, {registry: registries()[kind]})  # the one line in the registry's module
        rows = _listed(kind)
        assert module not in sys.modules  # listed without importing it
    assert name in rows, f"{kind} {name!r} not listed by quotecite plugins"
    return rows[name]


@pytest.mark.parametrize("how", HOWS)
def test_a_new_parser_is_one_file_and_builds_a_cache(plugin_module, sample_pdf, tmp_path, how):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    row = _add(plugin_module, "parser", how)
    assert row["summary"] == "page one as one block" and row["needs"] == ["pdf"]
    entry = build_cache(sample_pdf, get_parser("one_block"), get_encoder("minilm"), tmp_path / "c")
    assert [b.text for b in entry.blocks] == ["all of page one"]


@pytest.mark.parametrize("how", HOWS)
def test_a_new_encoder_is_one_file_and_embeds_the_cache(plugin_module, sample_pdf, tmp_path, how):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    row = _add(plugin_module, "encoder", how)
    assert row == {"kind": "encoder", "name": "ones", "summary": "constant vectors", "needs": []}
    entry = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("ones"), tmp_path / "c")
    assert entry.embeddings.shape == (len(entry.blocks), 4) and np.allclose(entry.embeddings, 0.5)


@pytest.mark.parametrize("how", HOWS)
def test_a_new_resolver_is_one_file_and_its_needs_are_asked(plugin_module, cache, how):
    from reward.resolve import (
        RESOLVERS,
        resolve_quotes,
        resolver_uses_context,
        resolver_uses_encoder,
        similarity_matrix,
    )

    assert _add(plugin_module, "resolver", how)["needs"] == ["context"]
    assert resolver_uses_context("last_block") and not resolver_uses_encoder("last_block")
    sim, ids = similarity_matrix(["anything"], cache, resolver="last_block", context="question")
    assert sim[0, -1] == 1.0  # it was given the context because its entry says it needs one
    (cit,) = resolve_quotes(["anything"], cache, resolver="last_block")
    assert cit.block_id == int(ids[-1])
    # the summary is the docstring's first sentence (a lazy entry's once it is loaded)
    assert RESOLVERS.entry("last_block").summary == "Scores the last candidate block highest (a throwaway resolver)."


@pytest.mark.parametrize("how", HOWS)
def test_a_new_judge_is_one_file_and_the_reward_uses_it(plugin_module, cache, how):
    from reward.config import RewardConfig
    from reward.judge import JUDGES
    from reward.pipeline import RewardScorer

    _add(plugin_module, "judge", how)
    scorer = RewardScorer(RewardConfig(cache_dir=str(cache.path.parent), judge="constant", resolver="lexical"))
    ((b, cits),) = scorer.score([_input(cache, [EN])])
    assert b.overall == pytest.approx(1.0) and len(cits) == 1
    assert scorer.judge.seen and scorer.judge.seen[0].crops == ()  # needs_crops False: nothing rendered
    assert not JUDGES.needs("constant", "url")


@pytest.mark.parametrize("how", HOWS)
def test_a_new_reward_form_is_one_file_and_the_reward_uses_it_with_its_weights(plugin_module, cache, how):
    from reward.config import RewardConfig
    from reward.pipeline import RewardScorer
    from reward.scoring import REWARD_FORMS

    assert _add(plugin_module, "reward form", how)["needs"] == ["judge"]
    for weights, expected in ((None, 0.5), ({"scale": 0.25}, 0.25)):
        cfg = RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", resolver="lexical",
                           reward_form="flat", weights=weights)  # fmt: skip
        ((b, _),) = RewardScorer(cfg).score([_input(cache, [EN])])
        assert b.overall == pytest.approx(expected)
    assert REWARD_FORMS.entry("flat").summary == "The weight scale for every judged response, whatever the judge says."


@pytest.mark.parametrize("how", HOWS)
def test_a_new_metric_is_one_file_and_eval_score_reports_it(plugin_module, how):
    from eval.cmd_score import score
    from eval.metrics import metric_docs
    from eval.schemas import Cited, Element, Gold, Prediction

    _add(plugin_module, "metric", how)
    box = (0.0, 0.0, 10.0, 10.0)
    gold = [
        Gold(i, "doc", "q?", "a", "en", "Factual Retrieval", (Element(1, box),), (Element(1, box),)) for i in (0, 1)
    ]
    preds = [Prediction(0, "language", "{}", "a", (Cited(1, box), Cited(2, box))), None]
    metrics = score(gold, preds).metrics
    assert metrics["cited_pages"] == 2.0  # the question without a prediction does not count
    assert {"name": "cited_pages", "aggregation": "mean over questions with a prediction",
            "higher_is_better": False} in metric_docs()  # fmt: skip


@pytest.mark.parametrize("how", HOWS)
def test_a_new_interface_is_one_file_and_eval_resolve_and_infer_use_it(plugin_module, cache, tmp_path, how):
    from data_prep.cache import DocCache
    from eval.cmd_infer import add_arguments as infer_arguments
    from eval.cmd_resolve import Resolver
    from eval.interfaces import get_interface
    from eval.schemas import Gold, read_predictions

    row = _add(plugin_module, "interface", how)
    assert row["needs"] == ["generation"]
    pred_file = tmp_path / "pred.jsonl"
    pred_file.write_text(json.dumps({"index": 0, "interface": "first_page", "response": "shenzhen"}) + "\n")
    (pred,) = read_predictions(pred_file)  # the prediction schema accepts the new interface
    gold = Gold(0, cache.key, QA.question, QA.answer, "en", "Factual Retrieval", (), ())
    record = Resolver(DocCache(cache.path.parent), resolver="lexical").resolve(gold, pred)
    assert record["answer"] == "SHENZHEN" and record["citations"][0]["page"] == 1
    assert get_interface("first_page").answer("shenzhen") == "SHENZHEN"  # what eval infer reads as the answer
    p = argparse.ArgumentParser()
    infer_arguments(p)
    assert "first_page" in next(a.choices for a in p._actions if a.dest == "interface")


def test_the_plugins_command_lists_all_seven_throwaway_modules(plugin_module, tmp_path):
    """The real command line, in a fresh process: ``--import`` each of the seven modules."""
    argv = [sys.executable, "-m", "quotecite", "plugins", "--json"]
    for kind, (module, body, *_) in REGISTRATIONS.items():
        plugin_module(module, body, _registration(kind, "decorator"))
        argv += ["--import", module]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {(r["kind"], r["name"]) for r in map(json.loads, out.stdout.splitlines())}
    wanted = {(kind, name) for kind, (_, _, _, name, _, _) in REGISTRATIONS.items()}
    assert wanted <= rows and len({kind for kind, _ in wanted}) == 7


def test_plugins_command_refuses_a_module_it_cannot_import(capsys):
    from core.errors import InputError
    from quotecite.cmd_plugins import add_arguments, run

    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(InputError, match="--import no_such_plugin_qc"):
        run(p.parse_args(["--import", "no_such_plugin_qc"]))


# ------------------------------------------------------------------------------------- the protocols are checked
def test_a_class_entry_lacking_a_method_is_refused_at_registration_naming_it():
    from data_prep.encoders import ENCODERS
    from eval.interfaces import INTERFACES
    from reward.judge import JUDGES

    class NotAnEncoder:
        name = "broken"

    with pytest.raises(PluginShapeError, match="encoder 'broken'.*missing: fingerprint, embed_texts, embed_blocks"):
        ENCODERS.register("broken")(NotAnEncoder)

    class NoScoreBatch:
        needs_crops = False

    with pytest.raises(PluginShapeError, match="judge 'mute'.*missing: score_batch"):
        JUDGES.register("mute")(NoScoreBatch)

    class AnswerOnly:
        def answer(self, text):
            return text

    with pytest.raises(PluginShapeError, match="interface 'answer_only'.*missing: cite"):
        INTERFACES.register("answer_only", needs=("generation",))(AnswerOnly)
    assert "broken" not in ENCODERS and "mute" not in JUDGES and "answer_only" not in INTERFACES


def test_what_a_factory_builds_is_checked_for_its_data_members(registered):
    from data_prep.encoders import ENCODERS, get_encoder
    from reward.judge import JUDGES, get_judge

    class NoDim:
        name = "nodim"

        def fingerprint(self):
            return "x"

        def embed_texts(self, texts):
            return np.zeros((len(texts), 1))

        def embed_blocks(self, doc, blocks):
            return np.zeros((len(blocks), 1))

    class Stateless:
        needs_crops = False

        def score_batch(self, requests):
            return [None for _ in requests]

    registered(ENCODERS, "nodim", NoDim)
    registered(JUDGES, "stateless", Stateless)
    with pytest.raises(PluginShapeError, match="encoder 'nodim' made a NoDim, which is not a Encoder .missing: dim"):
        get_encoder("nodim")
    with pytest.raises(PluginShapeError, match="judge 'stateless' .* not a Judge .missing: stats, total"):
        get_judge("stateless")


def test_a_function_entry_with_the_wrong_signature_is_refused_at_registration():
    from eval.metrics import METRICS
    from reward.resolve import RESOLVERS
    from reward.scoring import REWARD_FORMS

    with pytest.raises(PluginShapeError, match=r"metric 'two_args': .*cannot be called as a MetricFn\(result\)"):
        METRICS.register("two_args", higher_is_better=True)(lambda r, extra: 1.0)
    with pytest.raises(
        PluginShapeError, match=r"resolver 'no_context': .*Scorer\(quotes, cached, ids, encoder, context=\)"
    ):
        RESOLVERS.register("no_context", needs=("context",))(lambda quotes, cached, ids, encoder: None)
    RESOLVERS.register("no_context_ok")(lambda quotes, cached, ids, encoder: None)  # without the need it is fine
    RESOLVERS.unregister("no_context_ok")
    with pytest.raises(PluginShapeError, match=r"reward form 'no_evidence': .*ScoreFn\(scores, weights, \.\.\.\)"):
        REWARD_FORMS.register("no_evidence", needs=("judge", "evidence"), weights={})(lambda s, w: 0.0)
    with pytest.raises(TypeError, match="reward form 'unweighted': the registration must give weights"):
        REWARD_FORMS.register("unweighted", needs=("judge",))(lambda s, w: 0.0)
    with pytest.raises(TypeError, match="metric 'typo': unknown option 'higher_is_beter'"):
        METRICS.register("typo", higher_is_beter=True)(lambda r: 1.0)
    assert not {"two_args", "typo"} & set(METRICS.names()) and "no_context" not in RESOLVERS


def test_a_lazy_entry_is_checked_when_it_is_first_loaded(plugin_module):
    from data_prep.parsers import PARSERS, get_parser

    plugin_module(
        "qc_tmp_lazy_parser", "class Half:\n    name = 'half'\n\n    def version(self):\n        return '1'\n", ""
    )
    PARSERS.add_lazy("half", "qc_tmp_lazy_parser:Half", summary="no parse method")
    try:
        assert "qc_tmp_lazy_parser" not in sys.modules  # registering imported nothing
        with pytest.raises(PluginShapeError, match="parser 'half': class Half is not a Parser .missing: parse"):
            get_parser("half")
    finally:
        PARSERS.unregister("half")


def test_interfaces_say_what_they_need_instead_of_being_named():
    from eval.interfaces import INTERFACES

    assert INTERFACES.with_need("attention") == ["attention"]
    assert INTERFACES.with_need("quotes") == ["language"]
    assert INTERFACES.with_need("citevqa_prompt") == ["coordinate"]
    assert set(INTERFACES.with_need("generation")) == {"coordinate", "language", "lat"}


def test_plugins_command_lists_every_kind(capsys):
    from data_prep.encoders import ENCODERS
    from data_prep.parsers import PARSERS
    from eval.interfaces import INTERFACES
    from eval.metrics import METRICS
    from quotecite.cmd_plugins import add_arguments, run
    from reward.judge import JUDGES
    from reward.resolve import RESOLVERS
    from reward.scoring import REWARD_FORMS

    kinds = {"parser": PARSERS, "encoder": ENCODERS, "resolver": RESOLVERS, "judge": JUDGES,
             "reward form": REWARD_FORMS, "metric": METRICS, "interface": INTERFACES}  # fmt: skip
    p = argparse.ArgumentParser()
    add_arguments(p)
    assert run(p.parse_args(["--json"])) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    listed = {(r["kind"], r["name"]) for r in rows}
    assert listed == {(kind, name) for kind, reg in kinds.items() for name in reg.names()}  # every entry, once
    assert len(rows) == len(listed)
    assert {"kind": "judge", "name": "http", "summary": "an OpenAI-compatible VLM server (vLLM): the paper's judge",
            "needs": ["crops", "url"]} in rows  # fmt: skip
    assert run(p.parse_args(["interface"])) == 0
    text = capsys.readouterr().out
    assert text.startswith("interfaces (4):") and "[needs: generation, quotes]" in text


class ConstantJudge:
    """Always answers 5/5/5 (a throwaway judge for the command-line tests)."""

    needs_crops = False

    def __init__(self) -> None:
        from reward.judge import JudgeStats

        self.stats = JudgeStats()
        self.total = JudgeStats()

    def score_batch(self, requests):
        from reward.judge import JudgeScores

        return [JudgeScores(5, 5, 5) for _ in requests]


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
    from core.errors import InputError
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
    from core.errors import InputError

    with pytest.raises(InputError, match="widget 'missing' cannot be loaded"):
        reg.get("missing")


def _registered_names() -> set[str]:
    from quotecite.cmd_plugins import registries

    return {n for reg in registries().values() for n in reg.names()}


def _package_code():
    """``(where, code)`` per line of every module of the packages (tests excluded), comments removed."""
    for pkg in ("data_prep", "reward", "eval", "launch", "recipes", "quotecite"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                yield f"{path.relative_to(REPO)}:{lineno}: {line.strip()}", line.split("#", 1)[0]


COMPARISON = re.compile(
    r"""([\w.\])]+)\s*(?:==|!=)\s*["']([\w.+-]+)["']|(?<!for )(\b\w+)\s+in\s*[(\[{]\s*["']([\w.-]+)["']"""
)


def _comparisons(code: str):
    """``(left-hand side, string)`` of each ``x == "s"``, ``x != "s"``, ``x in ("s", ...)`` in ``code``."""
    if re.search(r"\bfor\s+[\w, ]+\s+in\s*[(\[]", code):
        return  # iterating over names is not comparing them
    for m in COMPARISON.finditer(code):
        yield (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))


def test_no_caller_compares_a_plugin_name_outside_its_registry():
    """The issue's grep: ``x == "http"``, ``x != "lat"``, ``x in ("embedding", ...)`` on a registered name, in any
    module of the packages (tests excluded)."""
    names = _registered_names()
    other = {"transport"}  # settings whose values happen to share a plug-in's name (qwen3-vl's "http" transport)
    hits = [where for where, code in _package_code() for lhs, name in _comparisons(code)
            if name in names and lhs.rsplit(".", 1)[-1] not in other]  # fmt: skip
    assert not hits, "plug-in names compared outside their registry:\n" + "\n".join(hits)


def test_no_caller_branches_on_how_an_interface_cites():
    """An interface's needs are asked (``INTERFACES.needs(name, "quotes")``) and it cites a prediction itself
    (``Interface.cite``): no module reads a ``cites_by`` field, compares what an interface object holds, or
    compares a value against the old ``cites_by`` strings on an interface."""
    cites_by_values = {"quotes", "boxes", "steps", "citations"}
    hits = []
    for where, code in _package_code():
        if re.search(r"\bcites_by\b", code):
            hits.append(where)
        for lhs, value in _comparisons(code):
            if re.search(r"get_interface\(|\binterface\b|\biface\b", lhs) and value in cites_by_values:
                hits.append(where)
        if re.search(r"get_interface\([^)]*\)\.\w+\s*(?:==|!=|\bin\b)", code):
            hits.append(where)
    assert not hits, "callers branching on an interface's fields:\n" + "\n".join(dict.fromkeys(hits))
    # the check itself sees the old form
    assert list(_comparisons('how = get_interface(p.interface).cites_by == "quotes"'))
