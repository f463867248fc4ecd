"""Settings of the reward, from EasyR1's ``worker.reward.reward_function_kwargs`` (or the CLI).

>>> RewardConfig.from_kwargs(cache_dir="/tmp/c", judge="lexical", concurency=4)
Traceback (most recent call last):
...
data_prep.types.InputError: unknown reward setting 'concurency'; did you mean 'concurrency'?
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import types
import typing
from dataclasses import dataclass, field

from data_prep.types import InputError
from reward.judge import DEFAULT_JUDGE, JudgeSettings
from reward.response import DEFAULT_MAX_QUOTES

_J = JudgeSettings()  # the judge's defaults live there, once

DEFAULT_JUDGE_MODEL = "Qwen/Qwen3.5-9B"
CANDIDATES: tuple[str, ...] = ("document", "window")
"""Values of the ``candidates`` setting."""


def _env(name: str, default: str | None = None):
    return lambda: os.environ.get(name) or default


@dataclass
class RewardConfig:
    """Every knob of the reward. Unknown keys are errors (:meth:`from_kwargs`)."""

    cache_dir: str = ""
    """Directory of the block/embedding cache built by data preparation (``data_prep blocks``). Required."""
    encoder: str | None = None
    """Encoder for quotes; None = the one each document's cache was built with (its manifest)."""
    embed_url: str | None = field(default_factory=_env("QUOTECITE_EMBED_URL"))
    """Base URL of the embedding server for HTTP encoders (default: env ``QUOTECITE_EMBED_URL``)."""
    judge: str = DEFAULT_JUDGE
    """Judge: ``http`` (a VLM behind an OpenAI-compatible API; the training default) or ``lexical`` (offline)."""
    judge_url: str | None = field(default_factory=_env("QUOTECITE_JUDGE_URL"))
    """Base URL of the judge's OpenAI-compatible API, e.g. ``http://host:8000/v1`` (env ``QUOTECITE_JUDGE_URL``).
    Several (comma-separated, or a list) are replicas of one judge: requests go to the least busy one and a
    replica that stops answering is skipped until it answers again (:mod:`reward.servers`)."""
    judge_model: str = field(default_factory=_env("QUOTECITE_JUDGE_MODEL", DEFAULT_JUDGE_MODEL))
    """Model name the judge server serves (env ``QUOTECITE_JUDGE_MODEL``, else Qwen/Qwen3.5-9B)."""
    concurrency: int = _J.concurrency
    """Judge requests in flight at once."""
    timeout_s: float = _J.timeout_s
    """Deadline of one judge HTTP call, seconds."""
    retries: int = _J.retries
    """Extra attempts of a judge call after a timeout, connection error, 5xx, 408 or 429."""
    backoff_s: float = _J.backoff_s
    """Base of the judge's exponential backoff with full jitter, seconds."""
    judge_outage_s: float = _J.outage_s
    """How long one reward call waits out an outage of the judge or the HTTP quote embedder (probing their
    ``/health`` with backoff, then scoring for real) before it raises :class:`reward.servers.ServerOutageError`
    (:mod:`reward.judge` defines what counts as an outage). 0: raise at the first outage."""
    batch_groups: int | None = None
    """Groups (prompts) per training batch, EasyR1's ``data.rollout_batch_size`` (the launch passes it). With it,
    each call appends per-group records to ``$QUOTECITE_METRICS_DIR`` and the reward tells which groups trained
    (:func:`reward.pipeline.TrainBatchTracker`); None: no such records."""
    keep_band: list | None = None
    """``[filter_low, filter_high]`` of EasyR1's online filter when it is on (the launch passes it): a group
    trains when its ``keep`` lies strictly inside. None: online filtering is off and every group of a call trains."""
    # --- samples (issue 23, reward/samples.py) ---
    samples_every: int = 1
    """Write sampled groups (with crops, scores, advantages) of every n-th training batch to
    ``$QUOTECITE_METRICS_DIR/samples/`` (:mod:`reward.samples`); 0: never."""
    samples_groups: int = 2
    """Groups kept per sampled batch (seeded; at least one the keep band drops when there is one)."""
    samples_max_mb: float = 200.0
    """Bound on the size of a segment's ``samples/`` folder; the oldest batches are removed first."""
    # --- end samples ---
    judge_max_tokens: int = _J.max_tokens
    """Token limit of a judge reply (room for a short reasoning before the score object)."""
    judge_temperature: float = _J.temperature
    """Judge sampling temperature (0: identical requests get identical scores)."""
    judge_extra_body: dict | None = None
    """Extra JSON fields for every judge request (e.g. vLLM's ``top_k``); thinking is :attr:`judge_thinking`."""
    judge_thinking: bool = _J.thinking
    """The judge model's thinking mode (:attr:`reward.judge.JudgeSettings.thinking`; default off)."""
    judge_structured: bool = _J.structured
    """Constrained decoding of the judge's reply (:attr:`reward.judge.JudgeSettings.structured`; default on)."""
    judge_prompt: str | None = None
    """Judge prompt file; None = ``recipes/prompts/judge.txt``."""
    max_crops: int = _J.max_crops
    """Cited blocks shown to the judge per response (the first ones, in quote order)."""
    crop_dpi: float = _J.crop_dpi
    """Resolution of the crops sent to the judge, dots per inch."""
    max_quotes: int = DEFAULT_MAX_QUOTES
    """Safety bound on the quotes kept per response (:data:`reward.response.DEFAULT_MAX_QUOTES`; the paper has no
    cap): quotes beyond it are left out, counted (``quotes_over_bound``) and logged as a warning. Earlier: 8."""
    dedupe_quotes: bool = False
    """Drop exact repeats of a quote before resolving (the earlier rule). Default False, as in the paper: repeated
    quotes are separate quotes, and the one-to-one assignment gives them distinct blocks."""
    candidates: str = "document"
    """Blocks a quote may resolve to: ``document`` (every block of the document, the paper's Section 3.2: the
    evidence pages only place the rendered window) or ``window`` (only the pages the policy saw, the earlier rule)."""
    reward_form: str = "gated"
    """Reward formula (:data:`reward.scoring.REWARD_FORMS`): ``gated``, ``hard_gate``, ``precision``, ``additive``,
    ``answer_only``."""
    weights: dict | None = None
    """Weights of the reward form (``additive``: ``{"answer": .5, "evidence": .5}``); None = its defaults."""
    abstain_threshold: float | None = None
    """Drop citations whose similarity is below this (resolver units); None keeps every citation."""
    resolver: str = "embedding"
    """Quote -> block resolver (:mod:`reward.resolve`): ``embedding`` (the paper's), ``lexical``, ``bm25`` (Okapi),
    ``bm25_lucene`` or ``fused`` (quote + question/answer rank fusion)."""
    doc_cache_size: int = 64
    """Documents kept loaded between calls (least recently used are dropped)."""
    lat: dict | None = None
    """``reward_form: lat`` only: overrides of :class:`reward.lat.LatSettings` (``tau``, ``overlap_iou``,
    ``epsilon``, ``ground_iou``, ``min_steps``, ``crop_dpi``, ``max_steps``); None = LAT's values."""

    def cache_path(self):
        """``cache_dir`` as a folder that exists; :class:`InputError` when it is unset or not a folder."""
        from pathlib import Path

        if not self.cache_dir:
            raise InputError("reward setting cache_dir is required (the block/embedding cache of data preparation)")
        path = Path(self.cache_dir)
        if not path.is_dir():
            raise InputError(f"reward setting cache_dir: {path} is not a directory")
        return path

    def judge_settings(self) -> JudgeSettings:
        """The judge part of these settings (:func:`reward.judge.build_judge`)."""
        return JudgeSettings(
            concurrency=self.concurrency, timeout_s=self.timeout_s, retries=self.retries, backoff_s=self.backoff_s,
            max_tokens=self.judge_max_tokens, temperature=self.judge_temperature, extra_body=self.judge_extra_body,
            prompt_path=self.judge_prompt, outage_s=self.judge_outage_s, max_crops=self.max_crops,
            crop_dpi=self.crop_dpi, thinking=self.judge_thinking, structured=self.judge_structured,
        )  # fmt: skip

    def __post_init__(self) -> None:
        from reward.judge import JUDGES
        from reward.resolve import RESOLVERS
        from reward.scoring import REWARD_FORMS

        if isinstance(self.weights, str):
            self.weights = _json_setting("weights", self.weights)
        if isinstance(self.judge_extra_body, str):
            self.judge_extra_body = _json_setting("judge_extra_body", self.judge_extra_body)
        for name, registry in (("judge", JUDGES), ("resolver", RESOLVERS), ("reward_form", REWARD_FORMS)):
            try:
                registry.get(getattr(self, name))
            except KeyError as e:
                raise InputError(f"reward setting {name}: {e.args[0]}") from None
        from reward.scoring import get_reward_form

        get_reward_form(self.reward_form).weights(self.weights)  # unknown weight names fail here
        checks = [
            (self.concurrency >= 1, "concurrency must be >= 1"),
            (self.timeout_s > 0, "timeout_s must be > 0"),
            (self.retries >= 0, "retries must be >= 0"),
            (self.backoff_s >= 0, "backoff_s must be >= 0"),
            (self.max_crops >= 0, "max_crops must be >= 0"),
            (self.crop_dpi > 0, "crop_dpi must be > 0"),
            (self.max_quotes >= 1, "max_quotes must be >= 1"),
            (self.candidates in CANDIDATES, f"candidates must be one of {', '.join(CANDIDATES)}"),
            (self.doc_cache_size >= 1, "doc_cache_size must be >= 1"),
            (self.judge_max_tokens >= 1, "judge_max_tokens must be >= 1"),
            (
                self.abstain_threshold is None or math.isfinite(self.abstain_threshold),
                "abstain_threshold must be a finite number (or None)",
            ),  # fmt: skip
            (math.isfinite(self.timeout_s), "timeout_s must be finite"),
            (self.judge_outage_s >= 0, "judge_outage_s must be >= 0"),
            (self.batch_groups is None or self.batch_groups >= 1, "batch_groups must be >= 1"),
            (self.samples_every >= 0, "samples_every must be >= 0"),  # samples
            (self.samples_groups >= 1, "samples_groups must be >= 1"),  # samples
            (self.samples_max_mb > 0, "samples_max_mb must be > 0"),  # samples
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(f"reward setting {msg}")
        if self.keep_band is not None:
            band = self.keep_band
            if not (isinstance(band, list | tuple) and len(band) == 2 and all(_is_number(x) for x in band)):
                raise InputError(f"reward setting keep_band: expected [filter_low, filter_high], got {band!r}")
            self.keep_band = [float(band[0]), float(band[1])]

    @classmethod
    def from_kwargs(cls, **kwargs) -> RewardConfig:
        """Build from keyword settings, converting strings from a command line to each field's type.
        Unknown keys raise :class:`InputError` with a did-you-mean."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in kwargs.items():
            if key not in fields:
                close = difflib.get_close_matches(key, fields, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f" (known: {', '.join(fields)})"
                raise InputError(f"unknown reward setting {key!r}{hint}")
            values[key] = _coerce(key, value, typing.get_type_hints(cls)[key])
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _is_number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _json_setting(name: str, value: str):
    try:
        return json.loads(value)
    except ValueError as e:
        raise InputError(f"reward setting {name}: not valid JSON ({e}): {value!r}") from None


def _coerce(name: str, value, hint):
    """Convert ``value`` to the field type ``hint`` (``int``, ``float``, ``str``, ``dict``, optionally ``| None``)."""
    args = typing.get_args(hint)
    optional = isinstance(hint, types.UnionType) and type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        if optional:
            return None
        raise InputError(f"reward setting {name} may not be empty")
    try:
        if base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if base is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if base is bool:
            if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
                return value.strip().lower() in ("true", "1", "yes")
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                return bool(value)
            raise ValueError(value)
        if base is str:
            if isinstance(value, list | tuple) and name.endswith("_url"):
                return ",".join(str(v) for v in value)  # several servers: replicas (reward.servers)
            return str(value)
        if base is dict:
            return _json_setting(name, value) if isinstance(value, str) else dict(value)
        if base is list:
            return _json_setting(name, value) if isinstance(value, str) else list(value)
    except InputError:
        raise
    except (TypeError, ValueError):
        raise InputError(f"reward setting {name}: expected {getattr(base, '__name__', base)}, got {value!r}") from None
    return value
