"""Judge scores -> scalar reward, and the per-response breakdown the plugin logs.

Reward forms (registry :data:`REWARD_FORMS`; ``a``, ``r``, ``c`` are the judge's 0..5 integers):

* ``gated`` (default): ``R = (a/5) * (r + c)/10``, in [0, 1]. The paper's Eq. 2 is described (multiplicative, so
  evidence counts only when the answer is right; the two evidence scores summed to keep within-group variance)
  but its exact formula is not public. This is the simplest form with both properties: a wrong answer earns
  nothing whatever it cites (the case Attribution Hallucination is about, so the policy cannot farm evidence
  credit with wrong answers), and summing ``r + c`` gives 11 evidence levels instead of the 6 of either alone,
  so a GRPO group of correct answers still has a spread to normalise. Not public means not verified: keep it
  configurable and compare.
* ``additive``: ``R = w_answer * a/5 + w_evidence * (r + c)/10`` (weights ``answer``, ``evidence``; default 0.5
  each). Evidence earns credit even for a wrong answer, which rewards attribution-hallucination's mirror image
  (good evidence, wrong answer); an ablation, not the recipe.
* ``answer_only``: ``R = a/5``. The no-evidence baseline: what GRPO does without the attribution signal.

An unparseable response earns 0 (``format_ok = 0``). An *unscorable* response (its judge call failed after
retries) gets the mean reward of the scorable responses of its group in the same batch (its advantage is then
~0 and the group's baseline is unchanged); see :mod:`reward.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from data_prep.registry import Registry
from data_prep.types import InputError
from reward.judge import SCORE_MAX, JudgeScores

ScoreFn = Callable[[JudgeScores, Mapping[str, float]], float]


@dataclass(frozen=True)
class RewardForm:
    """A reward formula with its weight names and defaults."""

    name: str
    fn: ScoreFn
    default_weights: Mapping[str, float]

    def weights(self, given: Mapping[str, float] | None) -> dict[str, float]:
        """Defaults overridden by ``given``; unknown weight names raise :class:`InputError`."""
        given = dict(given or {})
        unknown = set(given) - set(self.default_weights)
        if unknown:
            known = ", ".join(sorted(self.default_weights)) or "none"
            raise InputError(f"reward form {self.name!r} has no weight {sorted(unknown)[0]!r} (its weights: {known})")
        out = {**self.default_weights, **{k: float(v) for k, v in given.items()}}
        if any(v < 0 for v in out.values()):
            raise InputError(f"reward form {self.name!r}: weights must be >= 0, got {out}")
        return out

    def __call__(self, scores: JudgeScores, weights: Mapping[str, float] | None = None) -> float:
        return float(self.fn(scores, self.weights(weights)))


REWARD_FORMS: Registry[RewardForm] = Registry("reward form")


def _register(name: str, default_weights: Mapping[str, float]):
    def deco(fn: ScoreFn) -> ScoreFn:
        form = RewardForm(name, fn, dict(default_weights))
        REWARD_FORMS.register(name)(lambda: form)
        return fn

    return deco


@_register("gated", {})
def gated(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``(a/5) * (r + c)/10``.

    >>> gated(JudgeScores(5, 4, 3), {})
    0.7
    >>> gated(JudgeScores(0, 5, 5), {})
    0.0
    """
    return (s.answer / SCORE_MAX) * (s.relevance + s.coverage) / (2 * SCORE_MAX)


@_register("additive", {"answer": 0.5, "evidence": 0.5})
def additive(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``w_answer * a/5 + w_evidence * (r + c)/10``."""
    return w["answer"] * s.answer / SCORE_MAX + w["evidence"] * (s.relevance + s.coverage) / (2 * SCORE_MAX)


@_register("answer_only", {})
def answer_only(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``a/5``."""
    return s.answer / SCORE_MAX


def get_reward_form(name: str) -> RewardForm:
    """The registered form ``name``; unknown names raise ``KeyError`` with a did-you-mean."""
    return REWARD_FORMS.create(name)


@dataclass(frozen=True)
class RewardBreakdown:
    """What the plugin returns for one response (every field a number; EasyR1 logs each as ``reward/<key>``).

    Attributes:
        overall: the reward.
        answer: judge answer score 0..5 (0 when unparseable; the group mean when unscorable).
        relevance: judge evidence relevance 0..5 (same rules).
        coverage: judge evidence coverage 0..5 (same rules).
        format_ok: 1 when the response parsed, else 0.
        n_quotes: quotes kept after normalisation, de-duplication and the cap.
        n_citations: citations kept after the abstention threshold.
        mean_similarity: mean similarity of the kept citations (0 when none), in the resolver's units.
        unscorable: 1 when the judge failed after retries and the reward is the group mean, else 0.
        judge_s: wall-clock seconds of the batch's judge phase (the same for every response of a batch).
    """

    overall: float
    answer: float
    relevance: float
    coverage: float
    format_ok: float
    n_quotes: float
    n_citations: float
    mean_similarity: float
    unscorable: float
    judge_s: float

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


BREAKDOWN_KEYS: tuple[str, ...] = tuple(RewardBreakdown.__dataclass_fields__)
