"""EasyR1 batch reward plugin: ``worker.reward.reward_function=./reward/quote_reward.py:compute_score``.

Settings come from ``worker.reward.reward_function_kwargs`` (:class:`reward.config.RewardConfig`). The logic lives in
:mod:`reward.pipeline`; this file only adapts it to EasyR1's contract.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import reward.pipeline  # noqa: F401
except ImportError:  # loaded by file path from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reward.config import RewardConfig
from reward.pipeline import score_batch

REWARD_NAME = "quote_reward"
REWARD_TYPE = "batch"


def compute_score(reward_inputs: list[dict], **kwargs) -> list[dict]:
    """One dict of numbers per input: overall, answer, relevance, coverage, format_ok, n_quotes, n_citations,
    mean_similarity, unscorable, judge_s. Raises only for misconfiguration (see :mod:`reward.pipeline`)."""
    config = RewardConfig.from_kwargs(**kwargs)
    return [breakdown.to_dict() for breakdown, _ in score_batch(reward_inputs, config)]
