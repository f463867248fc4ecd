"""Reward forms, the breakdown type and the reward settings."""

from __future__ import annotations

import pytest

from core.errors import InputError
from reward.config import DEFAULT_JUDGE_MODEL, RewardConfig
from reward.judge import JudgeScores
from reward.scoring import BREAKDOWN_KEYS, REWARD_FORMS, CitedEvidence, RewardBreakdown, get_reward_form

FORM_CASES = [
    # (form, weights, (a, r, c), expected reward)
    ("gated", None, (5, 5, 5), 1.0),  # the maximum
    ("gated", None, (5, 4, 3), 0.7),  # (5/5) * 7/10
    ("gated", None, (3, 4, 4), 0.48),  # (3/5) * 8/10
    ("gated", None, (0, 5, 5), 0.0),  # a wrong answer earns nothing whatever it cites
    ("gated", None, (5, 0, 0), 0.0),  # a right answer without evidence earns nothing
    ("additive", None, (0, 5, 5), 0.5),  # evidence counts without the answer
    ("additive", None, (5, 0, 0), 0.5),  # and the answer without evidence
    ("additive", {"answer": 0.8, "evidence": 0.2}, (5, 4, 3), 0.8 + 0.2 * 0.7),  # custom weights
    ("additive", {"evidence": 0.0}, (4, 5, 5), 0.5 * 0.8),  # partial weights keep the other default
    ("answer_only", None, (4, 0, 0), 0.8),  # the no-evidence baseline
    ("hard_gate", None, (5, 4, 3), 0.7),  # a correct answer: the same as gated
    ("hard_gate", None, (4, 5, 5), 0.8),  # a = 4 is correct (the judge metrics' Ans >= 4)
    ("hard_gate", None, (3, 5, 5), 0.0),  # partly right: no evidence credit (gated gives 0.6)
    ("hard_gate", {"correct_at": 3}, (3, 5, 5), 0.6),  # the threshold is a setting
]


@pytest.mark.parametrize(("form", "weights", "scores", "expected"), FORM_CASES)
def test_reward_forms(form, weights, scores, expected):
    assert get_reward_form(form)(JudgeScores(*scores), weights) == pytest.approx(expected, abs=1e-12)


def test_gated_reward_has_eleven_levels_for_a_correct_answer():
    levels = {get_reward_form("gated")(JudgeScores(5, r, c)) for r in range(6) for c in range(6)}
    assert len(levels) == 11  # r + c in 0..10: the within-group spread the paper sums the two scores for


def test_partial_credit_is_the_soft_gate_and_hard_gate_removes_it():
    # a = 1 (mostly wrong) with perfect evidence. The paper's text does not print Eq. 2; the two readings
    # of "evidence counts only when the answer is already correct" differ exactly here.
    mostly_wrong = JudgeScores(1, 5, 5)
    assert get_reward_form("gated")(mostly_wrong) == pytest.approx(0.2)  # the default (soft gate): the old number
    assert get_reward_form("hard_gate")(mostly_wrong) == 0.0
    # Above the gate the two forms agree on every score, so they differ only in the gate.
    for a in range(6):
        for r in range(6):
            for c in range(6):
                s = JudgeScores(a, r, c)
                hard, soft = get_reward_form("hard_gate")(s), get_reward_form("gated")(s)
                assert hard == (soft if a >= 4 else 0.0)


def test_hard_gate_threshold_must_be_a_judge_score():
    with pytest.raises(InputError, match="'correct_at' must be in"):
        get_reward_form("hard_gate").weights({"correct_at": 6})


PERFECT = JudgeScores(5, 5, 5)


def test_precision_form_prefers_a_tight_correct_citation_to_one_plus_three_irrelevant():
    form = get_reward_form("precision")
    tight = form(PERFECT, None, CitedEvidence(n_cited=1, n_repeats=0, n_relevant=1))
    # Even when the judge's overall relevance and coverage stay perfect, the three irrelevant crops cost.
    padded = form(PERFECT, None, CitedEvidence(n_cited=4, n_repeats=0, n_relevant=1))
    padded_realistic = form(JudgeScores(5, 2, 5), None, CitedEvidence(4, 0, 1))
    assert tight == 1.0 and tight > padded > padded_realistic
    assert padded == pytest.approx(1 - 0.5 * 0.75)
    # gated pays the padded response in full when the judge's r does not drop: what this form fixes
    assert get_reward_form("gated")(PERFECT) == tight


def test_precision_form_charges_repeats_and_unseen_citations_and_keeps_the_gate():
    form = get_reward_form("precision")
    two_relevant = form(PERFECT, None, CitedEvidence(2, 0, 2))
    with_repeat = form(PERFECT, None, CitedEvidence(3, 1, 3))  # the judge cannot make a repeat relevant
    assert two_relevant == 1.0 and with_repeat == pytest.approx(1 - 0.5 / 3)
    no_list = form(PERFECT, None, CitedEvidence(3, 1, None))  # an older judge reply: only repeats are charged
    assert no_list == with_repeat
    assert form(JudgeScores(0, 5, 5), None, CitedEvidence(1, 0, 1)) == 0.0  # a wrong answer still earns nothing
    assert form(PERFECT, {"penalty": 1.0}, CitedEvidence(4, 0, 1)) == pytest.approx(0.25)  # penalty 1: times P
    assert form(PERFECT, {"penalty": 0.0}, CitedEvidence(4, 0, 1)) == 1.0  # penalty 0: gated
    with pytest.raises(InputError, match="'penalty' must be in"):
        form.weights({"penalty": 1.5})
    with pytest.raises(ValueError, match="needs the response's CitedEvidence"):
        form(PERFECT)


def test_precision_form_ordering_over_padding():
    # More irrelevant padding never pays more.
    form = get_reward_form("precision")
    rewards = [form(PERFECT, None, CitedEvidence(1 + k, 0, 1)) for k in range(6)]
    assert rewards == sorted(rewards, reverse=True) and len(set(rewards)) == 6


def test_unknown_weight_and_negative_weight_are_errors():
    with pytest.raises(InputError, match="has no weight 'evidnce'"):
        get_reward_form("additive").weights({"evidnce": 1.0})
    with pytest.raises(InputError, match="has no weight"):
        get_reward_form("gated").weights({"answer": 1.0})
    with pytest.raises(InputError, match=">= 0"):
        get_reward_form("additive").weights({"answer": -1})


def test_unknown_form_has_did_you_mean():
    with pytest.raises(KeyError, match="did you mean 'gated'"):
        get_reward_form("gatd")
    assert {"additive", "answer_only", "gated", "hard_gate", "precision"} <= set(REWARD_FORMS.names())


def test_breakdown_dict_is_all_numbers_with_the_plugin_keys():
    b = RewardBreakdown(0.5, 5, 4, 1, 1, 3, 2, 0.61, 0, 1.25)
    d = b.to_dict()
    assert list(d) == list(BREAKDOWN_KEYS) == [
        "overall", "answer", "relevance", "coverage", "format_ok", "n_quotes", "n_citations", "mean_similarity",
        "unscorable", "judge_s", "keep",
    ]  # fmt: skip
    assert all(type(v) is float for v in d.values())


# --------------------------------------------------------------------------------------------- settings
def test_config_defaults_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("QUOTECITE_JUDGE_URL", "http://judge:8000/v1")
    monkeypatch.setenv("QUOTECITE_EMBED_URL", "http://embed:8001/v1")
    monkeypatch.delenv("QUOTECITE_JUDGE_MODEL", raising=False)
    c = RewardConfig(cache_dir="/x")
    assert (c.judge_url, c.embed_url, c.judge_model) == ("http://judge:8000/v1", "http://embed:8001/v1",
                                                         DEFAULT_JUDGE_MODEL)  # fmt: skip
    assert (c.judge, c.resolver, c.reward_form, c.max_crops, c.crop_dpi, c.abstain_threshold) == (
        "http", "embedding", "gated", 6, 150.0, None)  # fmt: skip
    # The paper's resolution: whole-document candidates, no silent quote cap, repeated quotes kept.
    assert (c.candidates, c.max_quotes, c.dedupe_quotes) == ("document", 64, False)
    monkeypatch.setenv("QUOTECITE_JUDGE_MODEL", "other/model")
    assert RewardConfig(cache_dir="/x").judge_model == "other/model"


def test_from_kwargs_converts_command_line_strings():
    c = RewardConfig.from_kwargs(
        cache_dir="/x", concurrency="16", timeout_s="2.5", abstain_threshold="none", weights='{"answer": 0.7}',
        reward_form="additive", judge_extra_body='{"chat_template_kwargs": {"enable_thinking": false}}',
    )  # fmt: skip
    assert (c.concurrency, c.timeout_s, c.abstain_threshold) == (16, 2.5, None)
    assert c.weights == {"answer": 0.7}
    assert c.judge_extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    old = RewardConfig.from_kwargs(cache_dir="/x", candidates="window", max_quotes="8", dedupe_quotes="true")
    assert (old.candidates, old.max_quotes, old.dedupe_quotes) == ("window", 8, True)


BAD_SETTINGS = [
    # (kwargs, fragment of the message)
    ({"cache_dir": "/x", "concurency": 4}, "did you mean 'concurrency'"),  # typo
    ({"cache_dir": "/x", "zzz": 1}, "known:"),  # nothing close: list the known ones
    ({"cache_dir": "/x", "judge": "htp"}, "did you mean 'http'"),  # unknown judge
    ({"cache_dir": "/x", "resolver": "bm52"}, "did you mean 'bm25'"),  # unknown resolver
    ({"cache_dir": "/x", "reward_form": "gate"}, "did you mean 'gated'"),  # unknown form
    ({"cache_dir": "/x", "concurrency": "many"}, "expected int"),  # not a number
    ({"cache_dir": "/x", "concurrency": 2.5}, "expected int"),  # not an integer
    ({"cache_dir": "/x", "concurrency": 0}, "concurrency must be >= 1"),  # out of range
    ({"cache_dir": "/x", "max_quotes": 0}, "max_quotes must be >= 1"),  # out of range
    ({"cache_dir": "/x", "candidates": "pages"}, "candidates must be one of document, window"),
    ({"cache_dir": "/x", "dedupe_quotes": "perhaps"}, "expected bool"),
    ({"cache_dir": "/x", "reward_form": "precision", "weights": {"penalty": 2}}, "'penalty' must be in [0, 1]"),
    ({"cache_dir": "/x", "timeout_s": 0}, "timeout_s must be > 0"),  # out of range
    ({"cache_dir": "/x", "weights": "{bad"}, "not valid JSON"),  # malformed JSON
    ({"cache_dir": "/x", "weights": {"answer": 1}}, "has no weight"),  # weight the gated form lacks
]


@pytest.mark.parametrize(("kwargs", "fragment"), BAD_SETTINGS)
def test_bad_settings_raise_with_a_clear_message(kwargs, fragment):
    with pytest.raises(InputError) as e:
        RewardConfig.from_kwargs(**kwargs)
    assert fragment in str(e.value)
