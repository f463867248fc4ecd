"""A judge plug-in, modelled on ``reward/judge_lexical.py``: model-free, strict on the answer.

The ``keywords`` judge gives the answer 5 when the gold answer appears in it (after the project's text
normalisation) and 0 otherwise; relevance and coverage are the share of the gold answer's words that the cited
blocks' text holds, per block (mean) and together. Like ``lexical`` it reads ``evidence_texts``, never crops, so it
declares ``needs_crops = False`` and the pipeline renders nothing for it.

Use it: ``PYTHONPATH=examples/plugins python -m quotecite plugins --import judge_keywords`` lists it; in your own
code, ``import judge_keywords`` before building the reward (``RewardConfig(judge="keywords")``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from data_prep.text import normalize_for_compare, tokenize
from reward.judge import JUDGES, SCORE_MAX, JudgeRequest, JudgeScores, JudgeStats


def _share(words: set[str], text: str) -> float:
    return len(words & set(tokenize(text))) / len(words) if words else 0.0


def keyword_scores(gold: str, answer: str, evidence: Sequence[str]) -> JudgeScores:
    """Answer: 5 if the normalised gold answer is in the normalised answer, else 0. Relevance: mean over the cited
    blocks of the share of the gold's words each holds; coverage: the share all of them hold together."""
    a = SCORE_MAX if normalize_for_compare(gold).lower() in normalize_for_compare(answer).lower() else 0
    words = set(tokenize(gold))
    if not evidence or not words:
        return JudgeScores(a, 0, 0)
    r = sum(_share(words, e) for e in evidence) / len(evidence)
    c = _share(words, " ".join(evidence))
    return JudgeScores(a, round(SCORE_MAX * r), round(SCORE_MAX * c))


@JUDGES.register("keywords", summary="gold answer contained in the answer; gold words in the cited text")
class KeywordJudge:
    """Model-free judge: the gold answer's words in the answer and in the cited blocks' text."""

    needs_crops = False

    def __init__(self) -> None:
        self.stats = JudgeStats()
        self.total = JudgeStats()

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        t0 = time.perf_counter()
        out: list[JudgeScores | None] = [keyword_scores(r.gold_answer, r.answer, r.evidence_texts) for r in requests]
        n = len(out)
        self.stats = JudgeStats(requests=n, sent=n, attempts=n, ok=n, wall_s=time.perf_counter() - t0)
        self.total.add(self.stats)
        return out
