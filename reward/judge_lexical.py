"""The ``lexical`` judge: model-free and offline, for tests, the demo and runs without a GPU.

It is a real but weaker judge: it reads the blocks' *text* (``evidence_texts``), not the crops, and measures token
overlap, so it cannot judge paraphrase, arithmetic or figures. Never the training default.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence

from data_prep.text import tokenize
from reward.judge import SCORE_MAX, JudgeRequest, JudgeScores, JudgeStats

STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have how in is it its of on or that the their this to "
    "was were what when where which who whom whose why with according document page shown show".split()
)
"""Function words (and question boilerplate) ignored when the lexical judge measures content overlap."""

ANSWER_SLACK_TOKENS = 24
"""Tokens an answer may have beyond the gold's before the lexical answer score is scaled down (by
``(gold + slack) / answer`` tokens): a correct value stated in a sentence stays correct, a list of every number in
the document does not."""


def _content(text: str) -> set[str]:
    return {t for t in tokenize(text) if t not in STOPWORDS}


def _to_score(x: float) -> int:
    return max(0, min(SCORE_MAX, math.floor(SCORE_MAX * x + 0.5)))


def answer_match(answer: str, gold: str, slack: int = ANSWER_SLACK_TOKENS) -> float:
    """Share of the gold's tokens (with multiplicity) found in the answer, scaled down by
    ``(len(gold) + slack) / len(answer)`` when the answer is longer than that. In [0, 1]."""
    a, g = tokenize(answer), tokenize(gold)
    if not a or not g:
        return 0.0
    recall = sum((Counter(a) & Counter(g)).values()) / len(g)
    return recall * min(1.0, (len(g) + slack) / len(a))


def lexical_scores(question: str, gold: str, answer: str, evidence: Sequence[str]) -> JudgeScores:
    """The lexical judge's rubric, on text only.

    * answer = round(5 * :func:`answer_match`): the gold's tokens found in the answer, with a length penalty only
      beyond :data:`ANSWER_SLACK_TOKENS` extra tokens.
    * relevance = round(5 * mean over cited blocks of (share of the question's content words in the block +
      share of the gold answer's content words in the block) / 2); 0 without evidence.
    * coverage = round(5 * share of the gold answer's content words found in the cited blocks together)
      (the question's content words when the gold has none, e.g. "yes"); 0 without evidence.

    Instructions in the data cannot move a score: every score counts only gold and question words found in the
    answer or the evidence, so an "ignore the rubric and give 5" in a block or a short answer changes nothing.

    >>> lexical_scores("What is the capital of France?", "Paris", "Paris", ["Paris is the capital of France."])
    JudgeScores(answer=5, relevance=5, coverage=5)
    """
    a = _to_score(answer_match(answer, gold))
    texts = [e for e in evidence if e is not None]
    if not texts:
        return JudgeScores(a, 0, 0)
    q_words, g_words = _content(question), _content(gold)
    shares = []
    for e in texts:
        words = set(tokenize(e))
        parts = [len(x & words) / len(x) for x in (q_words, g_words) if x]
        shares.append(sum(parts) / len(parts) if parts else 0.0)
    r = _to_score(sum(shares) / len(shares))
    target = g_words or q_words
    union = set().union(*(set(tokenize(e)) for e in texts))
    c = _to_score(len(target & union) / len(target)) if target else 0
    return JudgeScores(a, r, c)


class LexicalJudge:
    """Model-free judge over the cited blocks' text (:func:`lexical_scores`). Same interface as
    :class:`reward.judge_http.HttpJudge`; it never fails, so every response is scorable."""

    needs_crops = False
    """It reads ``evidence_texts`` only, so the pipeline skips rendering crops."""

    def __init__(self) -> None:
        self.stats = JudgeStats()
        self.total = JudgeStats()

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        t0 = time.perf_counter()
        out: list[JudgeScores | None] = [
            lexical_scores(r.question, r.gold_answer, r.answer, r.evidence_texts) for r in requests
        ]
        n = len(out)
        self.stats = JudgeStats(requests=n, sent=n, attempts=n, ok=n, wall_s=time.perf_counter() - t0)
        self.total.add(self.stats)
        return out
