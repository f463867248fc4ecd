"""Reward forms, the breakdown type and the reward settings."""

from __future__ import annotations

import pytest

from data_prep.types import InputError
from reward.config import DEFAULT_JUDGE_MODEL, RewardConfig
from reward.judge import JudgeScores
from reward.scoring import BREAKDOWN_KEYS, REWARD_FORMS, RewardBreakdown, get_reward_form

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
]


@pytest.mark.parametrize(("form", "weights", "scores", "expected"), FORM_CASES)
def test_reward_forms(form, weights, scores, expected):
    assert get_reward_form(form)(JudgeScores(*scores), weights) == pytest.approx(expected, abs=1e-12)


def test_gated_reward_has_eleven_levels_for_a_correct_answer():
    levels = {get_reward_form("gated")(JudgeScores(5, r, c)) for r in range(6) for c in range(6)}
    assert len(levels) == 11  # r + c in 0..10: the within-group spread the paper sums the two scores for


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
    assert REWARD_FORMS.names() == ["additive", "answer_only", "gated"]


def test_breakdown_dict_is_all_numbers_with_the_plugin_keys():
    b = RewardBreakdown(0.5, 5, 4, 1, 1, 3, 2, 0.61, 0, 1.25)
    d = b.to_dict()
    assert list(d) == list(BREAKDOWN_KEYS) == [
        "overall", "answer", "relevance", "coverage", "format_ok", "n_quotes", "n_citations", "mean_similarity",
        "unscorable", "judge_s",
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
    ({"cache_dir": "/x", "timeout_s": 0}, "timeout_s must be > 0"),  # out of range
    ({"cache_dir": "/x", "weights": "{bad"}, "not valid JSON"),  # malformed JSON
    ({"cache_dir": "/x", "weights": {"answer": 1}}, "has no weight"),  # weight the gated form lacks
]


@pytest.mark.parametrize(("kwargs", "fragment"), BAD_SETTINGS)
def test_bad_settings_raise_with_a_clear_message(kwargs, fragment):
    with pytest.raises(InputError) as e:
        RewardConfig.from_kwargs(**kwargs)
    assert fragment in str(e.value)
