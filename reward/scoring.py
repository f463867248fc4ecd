"""Judge scores -> scalar reward, and the per-response breakdown the plugin logs.

Reward forms (registry :data:`REWARD_FORMS`; ``a``, ``r``, ``c`` are the judge's 0..5 integers):

* ``gated`` (default): ``R = (a/5) * (r + c)/10``, in [0, 1]. The paper's Eq. 2 is described (multiplicative, so
  evidence counts only when the answer is right; the two evidence scores summed to keep within-group variance)
  but its exact formula is not public. This is the simplest form with both properties, read as a *soft* gate:
  the answer score scales the evidence credit, so a wrong answer (``a = 0``) earns nothing whatever it cites (the
  case Attribution Hallucination is about), and summing ``r + c`` gives 11 evidence levels instead of the 6 of
  either alone, so a GRPO group of correct answers still has a spread to normalise. A mostly wrong answer keeps
  partial credit: ``a = 1, r = c = 5`` gives 0.2. Not public means not verified: keep it configurable and compare.
* ``hard_gate``: ``R = (a/5) * (r + c)/10`` when the answer is *correct*, ``a >= correct_at`` (weight, default 4:
  the judge metrics' rule, Ans >= 4, for SAA and AH), else 0. The other reading of "evidence scores contribute
  only when the answer is already correct": evidence earns nothing for a partly right answer (``a = 1, r = c = 5``
  gives 0; ``a = 3`` too). Above the gate it equals ``gated``, so the two differ only in the gate.
* ``precision`` (beyond the paper): ``R = gated * (1 - penalty * (1 - P))`` with ``P`` = relevant citations /
  citations (:class:`CitedEvidence`). A citation is relevant when the judge's per-crop list marks its crop
  relevant (``crop_relevance`` in the judge's reply, :mod:`reward.judge`); a citation that repeats an earlier
  one (same block, or the same quote text) and a citation the judge never saw (beyond ``max_crops``) never are.
  The paper's GRPO model bought recall with 4.6 citations per answer at 26.5 precision; ``gated`` pays nothing
  for restraint (a correct citation plus three irrelevant ones loses only what the judge's ``r`` loses), this
  form charges each extra block: one correct citation alone gets ``gated``, the same plus three irrelevant ones
  at most ``gated * (1 - 0.75 penalty)``. ``penalty`` in [0, 1] (default 0.5; 1 multiplies by ``P``). When the
  judge returns no per-crop list (an older prompt, the lexical judge) only repeats are charged, and the reward
  counts it (``judge_no_crop_relevance``).
* ``additive``: ``R = w_answer * a/5 + w_evidence * (r + c)/10`` (weights ``answer``, ``evidence``; default 0.5
  each). Evidence earns credit even for a wrong answer, which rewards attribution-hallucination's mirror image
  (good evidence, wrong answer); an ablation, not the recipe.
* ``answer_only``: ``R = a/5``. The no-evidence baseline: what GRPO does without the attribution signal.

An unparseable response earns 0 (``format_ok = 0``). An *unscorable* response (its judge call failed after
retries) gets the mean reward of the scorable responses of its group in the same batch (its advantage is then
~0 and the group's baseline is unchanged); see :mod:`reward.pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Protocol

from core.errors import InputError
from core.registry import REQUIRED, Registry
from reward.judge import SCORE_MAX, JudgeScores


class ScoreFn(Protocol):
    """A reward form: ``fn(scores, weights) -> float``; a form that needs ``evidence`` is called
    ``fn(scores, weights, evidence)`` (:class:`CitedEvidence`)."""

    def __call__(self, scores: JudgeScores, weights: Mapping[str, float]) -> float: ...


@dataclass(frozen=True)
class CitedEvidence:
    """What the ``precision`` form counts about one response's citations.

    Attributes:
        n_cited: citations kept (after the abstention threshold).
        n_repeats: citations that repeat an earlier one: the same block, or the same quote text.
        n_relevant: crops the judge marked relevant (its ``crop_relevance`` list); None when the judge gave no list.
    """

    n_cited: int
    n_repeats: int = 0
    n_relevant: int | None = None

    @property
    def precision(self) -> float:
        """Relevant citations / citations, in [0, 1] (1 without citations: nothing to charge). Without a judge list
        every citation that is not a repeat counts as relevant.

        >>> CitedEvidence(4, 0, 1).precision, CitedEvidence(2, 1, None).precision, CitedEvidence(0).precision
        (0.25, 0.5, 1.0)
        """
        if self.n_cited <= 0:
            return 1.0
        distinct = self.n_cited - self.n_repeats
        relevant = distinct if self.n_relevant is None else min(self.n_relevant, distinct)
        return max(0, relevant) / self.n_cited


@dataclass(frozen=True)
class RewardForm:
    """A reward formula with its weight names, defaults and allowed ranges."""

    name: str
    fn: ScoreFn
    default_weights: Mapping[str, float]
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """Allowed ``(low, high)`` per weight (default: >= 0)."""
    uses_evidence: bool = False
    """The formula reads :class:`CitedEvidence` (the pipeline passes it)."""

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
        for k, (lo, hi) in self.bounds.items():
            if not lo <= out[k] <= hi:
                raise InputError(
                    f"reward form {self.name!r}: weight {k!r} must be in [{lo:g}, {hi:g}], got {out[k]:g}"
                )
        return out

    def __call__(
        self, scores: JudgeScores, weights: Mapping[str, float] | None = None, evidence: CitedEvidence | None = None
    ) -> float:
        if self.uses_evidence:
            if evidence is None:
                raise ValueError(f"reward form {self.name!r} needs the response's CitedEvidence")
            return float(self.fn(scores, self.weights(weights), evidence))
        return float(self.fn(scores, self.weights(weights)))


REWARD_FORMS: Registry[ScoreFn] = Registry(
    "reward form",
    base=ScoreFn,
    needs=("judge", "steps", "evidence"),
    options={"weights": REQUIRED, "bounds": {}},
    arguments={"evidence": None},
)
"""Registration line: ``@REWARD_FORMS.register("name", needs=("judge",), weights={...})`` on the formula (summary:
its docstring's first paragraph). Needs: ``judge`` (a formula over the judge's scores, :mod:`reward.pipeline`),
``steps`` (scored from the response itself, :mod:`reward.lat`), ``evidence`` (also given the response's
:class:`CitedEvidence`). Options: ``weights`` (names and defaults), ``bounds`` (allowed ``(low, high)`` per
weight)."""


@REWARD_FORMS.register("gated", needs=("judge",), weights={})
def gated(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``(a/5) * (r + c)/10``.

    >>> gated(JudgeScores(5, 4, 3), {})
    0.7
    >>> gated(JudgeScores(0, 5, 5), {})
    0.0
    """
    return (s.answer / SCORE_MAX) * (s.relevance + s.coverage) / (2 * SCORE_MAX)


CORRECT_AT = 4
"""``hard_gate``'s default threshold: an answer is correct when the judge's answer score is at least this (the
rule of the judge metrics: SAA and AH count Ans >= 4 as correct)."""


@REWARD_FORMS.register("hard_gate", needs=("judge",), weights={"correct_at": float(CORRECT_AT)},
                       bounds={"correct_at": (0.0, float(SCORE_MAX))})  # fmt: skip
def hard_gate(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``(a/5) * (r + c)/10`` if ``a >= correct_at`` else 0.

    >>> hard_gate(JudgeScores(1, 5, 5), {"correct_at": 4}), gated(JudgeScores(1, 5, 5), {})
    (0.0, 0.2)
    >>> hard_gate(JudgeScores(4, 5, 3), {"correct_at": 4}) == gated(JudgeScores(4, 5, 3), {})
    True
    """
    return gated(s, w) if s.answer >= w["correct_at"] else 0.0


@REWARD_FORMS.register(
    "precision", needs=("judge", "evidence"), weights={"penalty": 0.5}, bounds={"penalty": (0.0, 1.0)}
)
def precision(s: JudgeScores, w: Mapping[str, float], e: CitedEvidence) -> float:
    """``gated * (1 - penalty * (1 - P))``, ``P`` = :attr:`CitedEvidence.precision`.

    >>> precision(JudgeScores(5, 5, 5), {"penalty": 0.5}, CitedEvidence(1, 0, 1))
    1.0
    >>> precision(JudgeScores(5, 5, 5), {"penalty": 0.5}, CitedEvidence(4, 0, 1))
    0.625
    """
    return gated(s, w) * (1.0 - w["penalty"] * (1.0 - e.precision))


@REWARD_FORMS.register("additive", needs=("judge",), weights={"answer": 0.5, "evidence": 0.5})
def additive(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``w_answer * a/5 + w_evidence * (r + c)/10``."""
    return w["answer"] * s.answer / SCORE_MAX + w["evidence"] * (s.relevance + s.coverage) / (2 * SCORE_MAX)


@REWARD_FORMS.register("answer_only", needs=("judge",), weights={})
def answer_only(s: JudgeScores, w: Mapping[str, float]) -> float:
    """``a/5``."""
    return s.answer / SCORE_MAX


@REWARD_FORMS.register("lat", needs=("steps",), weights={"format": 1.0, "accuracy": 1.0, "step": 1.0, "ground": 1.0})
def lat(s: JudgeScores, w: Mapping[str, float]) -> float:
    """LAT's Chain-of-Evidence reward: computed from the response's steps (``needs=("steps",)``: the pipeline's
    scorer calls :class:`reward.lat.StepTerms`), never from judge scores. Its weights scale LAT's four terms (unit
    weights, as LAT sums them)."""
    raise InputError("reward form 'lat' is scored from the response's steps (reward.lat), not from judge scores")


def get_reward_form(name: str) -> RewardForm:
    """The registered form ``name`` with its weights and bounds; unknown names raise ``KeyError`` with a
    did-you-mean."""
    opt = REWARD_FORMS.entry(name).options
    return RewardForm(
        name, REWARD_FORMS.get(name), dict(opt["weights"]), dict(opt["bounds"]), REWARD_FORMS.needs(name, "evidence")
    )


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
        keep: the key of EasyR1's online filter (``algorithm.filter_key: keep``): the group's mean reward when the
            rewards of its scored members differ, :data:`KEEP_DROP` when they are all equal (zero variance: every
            advantage would be 0) or none is known (all unscorable). See :mod:`reward.pipeline`.
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
    keep: float = -1.0

    def to_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


BREAKDOWN_KEYS: tuple[str, ...] = tuple(RewardBreakdown.__dataclass_fields__)

KEEP_DROP = -1.0
"""``keep`` of a group that must not train: below any keep band in [0, 1], so EasyR1's filter drops it."""
