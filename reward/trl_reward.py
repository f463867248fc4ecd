"""The quote reward as a TRL reward function: ``GRPOTrainer(reward_funcs=[QuoteReward(cache_dir=..., ...)])``.

Settings are :class:`reward.config.RewardConfig`'s; the logic is :mod:`reward.pipeline`'s, as for the EasyR1 plug-in
(:mod:`reward.quote_reward`); this file only adapts it to TRL 1.16's contract (``GRPOTrainer._calculate_rewards``):

* the function is called once per generation batch with ``prompts``, ``completions`` (conversational: a list of
  messages each), ``completion_ids``, ``trainer_state``, ``log_metric``, ``log_extra`` and every other dataset column
  as a list with one entry per completion (the ``num_generations`` completions of a prompt are consecutive). The
  ground truth is the ``answer`` column that ``data_prep longdocurl`` writes (:mod:`data_prep.groundtruth`); groups
  are found by its ``qid``, as in the plug-in. One call scores the whole batch, so the judge's concurrency applies.
* it returns one float per completion, or ``None`` for an *unscorable* one (its quote embedding, resolution, crop or
  judge call failed; the pipeline's failure policy): TRL leaves a ``None`` out of its group's baseline and gives it
  advantage 0, which is what the plug-in's group-mean fill achieves in EasyR1. Misconfiguration raises
  (:class:`~core.errors.InputError`), outages are waited out and then raise, as in the plug-in.
* the breakdown is logged through ``log_metric`` as ``quote_reward/<part>`` (the mean over the batch: answer,
  relevance, coverage, format_ok, n_quotes, n_citations, mean_similarity, unscorable) with the batch's counters
  (``quote_reward/judge_failures``, ``quote_reward/format_rejects``, ...); with ``$QUOTECITE_METRICS_DIR`` set the
  pipeline appends its counters to ``reward_counters.jsonl`` there, as under EasyR1.
* samples (:mod:`reward.samples`): with ``$QUOTECITE_METRICS_DIR`` set and ``samples_every`` > 0, each due call's
  sampled groups go to ``samples/batch_<step>.json`` (step: ``trainer_state.global_step + 1``, the optimizer step
  the batch trains). When the trainer hands back its own advantages (:meth:`QuoteReward.write_samples`, which
  :class:`reward.trl_train.SampledGRPOTrainer` calls after TRL computed them) the samples show TRL's advantages;
  a plain ``GRPOTrainer`` never calls it, and the samples are written at the end of the call with EasyR1's GRPO rule
  (:func:`reward.samples.grpo_advantages`), which differs from TRL's only in its epsilon and the unbiased standard
  deviation TRL also uses.

The object pickles (settings only; the scorer, its caches and its judge client are rebuilt on first use), so it
crosses ``accelerate``'s process spawn and ``copy.deepcopy``.
"""

from __future__ import annotations

import threading

from core.errors import InputError
from reward.config import RewardConfig

METRIC_PREFIX = "quote_reward"
"""Prefix of the metrics logged through TRL's ``log_metric``."""
PARTS = ("overall", "answer", "relevance", "coverage", "format_ok", "n_quotes", "n_citations", "mean_similarity",
         "unscorable")  # fmt: skip
"""Breakdown keys logged as ``quote_reward/<key>`` (the batch mean)."""
COUNTERS = {
    "judge_failures": lambda s: float(sum(s.judge.failures.values())),
    "judge_retries": lambda s: float(getattr(s.judge, "retries", 0) or 0),
    "format_rejects": lambda s: float(s.responses - s.format_ok),
    "groups_zero_variance": lambda s: float(s.groups_zero_variance),
    "groups_all_unscorable": lambda s: float(s.groups_all_unscorable),
    "reward_seconds": lambda s: float(s.seconds.get("total", 0.0)),
}
"""Counters of the batch (:class:`reward.pipeline.BatchStats`) logged as ``quote_reward/<name>``."""


def completion_text(completion) -> str:
    """The text of one TRL completion: a string (standard format) or a list of messages (conversational: the
    assistant turn's content, a string or text parts).

    >>> completion_text([{"role": "assistant", "content": '{"answer": "x"}'}])
    '{"answer": "x"}'
    >>> completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    'ab'
    """
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "".join(parts)


class _SampleBuffer:
    """Stands in for the scorer's :class:`reward.samples.BatchSampler`: keeps the rows of the last call so they can
    be written with the trainer's advantages (:meth:`QuoteReward.write_samples`)."""

    def __init__(self, base) -> None:
        self.writer = base.writer
        self.display_crops = base.display_crops
        self.rows: list[dict] | None = None

    def add_call(self, items, out, record, tracked) -> None:
        from reward.samples import response_rows

        self.rows = response_rows(items, out, self.display_crops)


class QuoteReward:
    """The TRL reward function (module docstring). ``ground_truth_key``: the dataset column holding the packed
    ground truth (``answer`` in ``data_prep longdocurl``'s parquet); ``settings``: :class:`RewardConfig`'s keys.
    ``keep_band`` is refused: TRL has no online filter, so no group is dropped by one."""

    def __init__(self, ground_truth_key: str = "answer", **settings) -> None:
        if settings.get("keep_band") is not None:
            raise InputError("reward setting keep_band: TRL has no online filter (every group trains); leave it unset")
        self.ground_truth_key = ground_truth_key
        self.settings = dict(settings)
        self.config = RewardConfig.from_kwargs(**settings)
        self.__name__ = METRIC_PREFIX  # TRL names a function's metrics by __name__
        self.defer_samples = False
        """Set by a trainer that calls :meth:`write_samples` with its advantages after each scored batch."""
        self._scorer = None
        self._lock = threading.Lock()
        self.last = None
        """``(RewardBreakdown, citations)`` per completion of the last call."""
        self.last_stats = None
        """:class:`reward.pipeline.BatchStats` of the last call."""
        self.last_batch: dict | None = None
        """The training-batch record of the last call (with ``batch_groups`` set; :class:`TrainBatchTracker`)."""
        self.last_step = 0

    def __getstate__(self) -> dict:
        return {"ground_truth_key": self.ground_truth_key, "settings": self.settings,
                "defer_samples": self.defer_samples}  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["ground_truth_key"], **state["settings"])
        self.defer_samples = state["defer_samples"]

    @property
    def scorer(self):
        """The pipeline's scorer, built on first use (:class:`reward.pipeline.RewardScorer`); its samples writer,
        when there is one, is replaced by a buffer written by :meth:`write_samples` or at the end of the call."""
        if self._scorer is None:
            from reward.pipeline import RewardScorer

            scorer = RewardScorer(self.config)
            if scorer.sampler is not None:
                scorer.sampler = _SampleBuffer(scorer.sampler)
            self._scorer = scorer
        return self._scorer

    def __call__(self, prompts=None, completions=None, completion_ids=None, trainer_state=None, log_metric=None,
                 log_extra=None, **columns) -> list[float | None]:  # fmt: skip
        if completions is None:
            raise InputError("quote reward: TRL passes completions=...; got none")
        if self.ground_truth_key not in columns:
            raise InputError(
                f"quote reward: the dataset has no {self.ground_truth_key!r} column (the packed ground truth); "
                f"columns: {', '.join(sorted(columns)) or 'none'}"
            )
        truths = columns[self.ground_truth_key]
        if len(truths) != len(completions):
            raise InputError(f"quote reward: {len(completions)} completions but {len(truths)} ground truths")
        inputs = []
        for i, (completion, gt) in enumerate(zip(completions, truths, strict=True)):
            text = completion_text(completion)
            n = len(completion_ids[i]) if completion_ids is not None else len(text)
            inputs.append({"response": text, "response_length": n, "ground_truth": gt})
        with self._lock:
            scorer = self.scorer
            out = scorer.score(inputs)
            self.last, self.last_stats, self.last_batch = out, scorer.last, scorer.last_batch
            self.last_step = int(getattr(trainer_state, "global_step", 0) or 0) + 1
            if isinstance(scorer.sampler, _SampleBuffer) and not self.defer_samples:
                self.write_samples(None)
        if log_metric is not None:
            for key, value in self.metrics().items():
                log_metric(f"{METRIC_PREFIX}/{key}", value)
        return [None if b.unscorable else float(b.overall) for b, _ in out]

    def metrics(self) -> dict[str, float]:
        """The last call's breakdown means (:data:`PARTS`) and counters (:data:`COUNTERS`)."""
        if not self.last:
            return {}
        rows = [b.to_dict() for b, _ in self.last]
        out = {k: sum(float(r.get(k, 0.0)) for r in rows) / len(rows) for k in PARTS if k in rows[0]}
        if self.last_stats is not None:
            out.update({k: fn(self.last_stats) for k, fn in COUNTERS.items()})
        return out

    def write_samples(self, advantages: list[float] | None, step: int | None = None):
        """Write the last call's samples (when due) with ``advantages`` (one per completion, in the call's order:
        the trainer's own), or EasyR1's GRPO advantages when None; returns the file written or None."""
        sampler = self._scorer.sampler if self._scorer is not None else None
        if not isinstance(sampler, _SampleBuffer) or sampler.rows is None:
            return None
        rows, sampler.rows = sampler.rows, None
        if advantages is not None:
            if len(advantages) != len(rows):
                raise ValueError(f"write_samples: {len(advantages)} advantages for {len(rows)} completions")
            rows = [{**r, "advantage": float(a)} for r, a in zip(rows, advantages, strict=True)]
        try:
            return sampler.writer.write(step or self.last_step, rows)
        except OSError as e:  # samples never stop a training step
            import logging

            logging.getLogger(__name__).warning("could not write samples of step %s: %s", step, e)
            return None
