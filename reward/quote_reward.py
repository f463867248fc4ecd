"""EasyR1 batch reward plugin: ``worker.reward.reward_function=./reward/quote_reward.py:compute_score``.

Settings come from ``worker.reward.reward_function_kwargs`` (:class:`reward.config.RewardConfig`). The logic lives in
:mod:`reward.pipeline`; this file only adapts it to EasyR1's contract.

EasyR1's contract (``verl/workers/reward/function.py`` at b44b311): the file is loaded by path as module
``custom_reward_fn`` inside a Ray actor (``num_cpus = worker.reward.num_cpus``, synchronous methods, so no event loop
runs in its thread; the judge's ``run_sync`` copes either way); the kwargs are bound with ``functools.partial`` and the
batch is passed positionally as a list of ``{"response", "response_length", "ground_truth"}``, where
``ground_truth`` is the dataset's answer column (our packed JSON, :mod:`data_prep.groundtruth`). The returned dicts'
``overall`` becomes the last token's reward and every key is averaged with ``np.mean`` into ``reward/<key>``, so
every value must be a number. The n responses of a prompt are consecutive when the reward runs inside online
filtering, but not in the main step, where ``_balance_batch`` reorders the batch first: groups are therefore found by
``qid``, never by position.
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
    """One dict of numbers per input, the reward form's breakdown: for a judged form overall, answer, relevance,
    coverage, format_ok, n_quotes, n_citations, mean_similarity, unscorable, judge_s, keep
    (:class:`reward.scoring.RewardBreakdown`); for ``lat`` :class:`reward.lat.LatBreakdown`. Raises only for
    misconfiguration (see :mod:`reward.pipeline`)."""
    config = RewardConfig.from_kwargs(**kwargs)
    return [breakdown.to_dict() for breakdown, _ in score_batch(reward_inputs, config)]
