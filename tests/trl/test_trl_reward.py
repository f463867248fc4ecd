"""The quote reward as a TRL reward function (reward/trl_reward.py): TRL's call contract, the pipeline's numbers,
None for an unscorable response, the breakdown through log_metric, pickling, samples with the trainer's
advantages."""

from __future__ import annotations

import json
import pickle

import pytest

from core.errors import InputError
from data_prep.groundtruth import GroundTruth, pack_ground_truth


@pytest.fixture(scope="module")
def cached(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), None, tmp_path_factory.mktemp("cache"))


def _settings(cached, **kw):
    return {"cache_dir": str(cached.path.parent), "judge": "lexical", "resolver": "lexical", **kw}


def _batch(cached):
    """Two groups of three conversational completions, as TRL passes them, with their ground truths."""
    from data_prep.sample import SAMPLE_FACTS

    qa, qb = SAMPLE_FACTS.qa[0], SAMPLE_FACTS.qa[3]
    ea, eb = [f.text for f in SAMPLE_FACTS.evidence(qa)], [f.text for f in SAMPLE_FACTS.evidence(qb)]
    gta = pack_ground_truth(GroundTruth("qa", cached.key, qa.question, qa.answer, None))
    gtb = pack_ground_truth(GroundTruth("qb", cached.key, qb.question, qb.answer, None))

    def c(answer, quotes):
        return [{"role": "assistant", "content": json.dumps({"answer": answer, "quotes": quotes})}]

    completions = [c(qa.answer, ea), c("Beijing", ea), [{"role": "assistant", "content": "no json"}],
                   c(qb.answer, eb), c(qb.answer, eb), c("Every 30 days", eb)]  # fmt: skip
    return completions, [gta] * 3 + [gtb] * 3


def test_scores_like_the_easyr1_plugin_and_logs_the_breakdown(cached):
    from reward.quote_reward import compute_score
    from reward.trl_reward import PARTS, QuoteReward

    completions, truths = _batch(cached)
    fn = QuoteReward(**_settings(cached))
    logged = {}
    rewards = fn(prompts=[[{"role": "user", "content": "q"}]] * 6, completions=completions,
                 completion_ids=[[1, 2, 3]] * 6, trainer_state=None, log_metric=logged.__setitem__,
                 log_extra=None, answer=truths, images=[[None]] * 6)  # fmt: skip
    from reward.trl_reward import completion_text

    easyr1 = compute_score(
        [
            {"response": completion_text(c), "response_length": 3, "ground_truth": g}
            for c, g in zip(completions, truths, strict=True)
        ],
        **_settings(cached),
    )
    assert rewards == pytest.approx([r["overall"] for r in easyr1])
    assert rewards[0] > 0 and rewards[1] == 0 and rewards[2] == 0  # gated: a wrong answer earns nothing
    for part in PARTS:
        assert logged[f"quote_reward/{part}"] == pytest.approx(sum(r[part] for r in easyr1) / 6)
    assert logged["quote_reward/format_rejects"] == 1
    assert fn.__name__ == "quote_reward"


def test_an_unscorable_response_is_none(cached, monkeypatch):
    """A response whose judge call fails is unscorable: None (TRL leaves it out of the group's baseline)."""
    from reward.trl_reward import QuoteReward

    completions, truths = _batch(cached)
    fn = QuoteReward(**_settings(cached))
    judge = fn.scorer.judge
    real = judge.score_batch

    def fail_first(requests):
        scores = real(requests)
        return [None, *scores[1:]]

    monkeypatch.setattr(judge, "score_batch", fail_first)
    rewards = fn(completions=completions, answer=truths)
    assert rewards[0] is None
    assert all(r is not None for r in rewards[1:])
    assert fn.metrics()["unscorable"] == pytest.approx(1 / 6)


def test_pickles_without_its_scorer(cached):
    from reward.trl_reward import QuoteReward

    completions, truths = _batch(cached)
    fn = QuoteReward(**_settings(cached))
    before = fn(completions=completions, answer=truths)
    clone = pickle.loads(pickle.dumps(fn))
    assert clone._scorer is None and clone.settings == fn.settings
    assert clone(completions=completions, answer=truths) == before


def test_bad_settings_and_columns_are_one_line_errors(cached):
    from reward.trl_reward import QuoteReward

    with pytest.raises(InputError, match="concurency"):
        QuoteReward(**_settings(cached, concurency=2))
    with pytest.raises(InputError, match="keep_band"):
        QuoteReward(**_settings(cached, keep_band=[0.01, 0.99]))
    fn = QuoteReward(**_settings(cached))
    completions, truths = _batch(cached)
    with pytest.raises(InputError, match="no 'answer' column"):
        fn(completions=completions, solution=truths)


def test_samples_carry_the_trainers_advantages(cached, tmp_path, monkeypatch):
    from reward.samples import load_steps
    from reward.trl_reward import QuoteReward

    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path))
    completions, truths = _batch(cached)
    fn = QuoteReward(**_settings(cached, samples_groups=2))
    fn.defer_samples = True

    class State:
        global_step = 6

    fn(completions=completions, answer=truths, trainer_state=State())
    assert not (tmp_path / "samples").exists()  # deferred until the trainer hands its advantages
    advantages = [1.5, -0.5, -1.0, 0.25, 0.25, -0.5]
    path = fn.write_samples(advantages)
    assert path.name == "batch_000007.json"  # the step the batch trains
    (rec,) = load_steps(tmp_path)
    got = [r["advantage"] for g in rec["groups"] for r in g["responses"]]
    assert sorted(got) == sorted(advantages)
    # without the trainer (a plain GRPOTrainer): EasyR1's GRPO rule, written at the end of the call
    fn2 = QuoteReward(**_settings(cached, samples_groups=2))
    State.global_step = 7
    fn2(completions=completions, answer=truths, trainer_state=State())
    rec2 = load_steps(tmp_path)[-1]
    assert rec2["step"] == 8
    for g in rec2["groups"]:
        assert sum(r["advantage"] for r in g["responses"]) == pytest.approx(0, abs=1e-6)
