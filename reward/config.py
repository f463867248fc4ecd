"""Settings of the reward, from EasyR1's ``worker.reward.reward_function_kwargs`` (or the CLI).

>>> RewardConfig.from_kwargs(cache_dir="/tmp/c", judge="lexical", concurency=4)
Traceback (most recent call last):
...
core.errors.InputError: unknown reward setting 'concurency'; did you mean 'concurrency'?
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import types
import typing
from dataclasses import dataclass, field

from core.errors import InputError
from core.io import loads_record
from data_prep.validate import bounded_float, bounded_int, check_option, finite, one_of
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
    # --- samples (reward/samples.py) ---
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
    cap): quotes beyond it are left out, counted (``quotes_over_bound``) and logged as a warning."""
    dedupe_quotes: bool = False
    """Drop exact repeats of a quote before resolving. Default False, as in the paper: repeated
    quotes are separate quotes, and the one-to-one assignment gives them distinct blocks."""
    candidates: str = "document"
    """Blocks a quote may resolve to: ``document`` (every block of the document, the paper's Section 3.2: the
    evidence pages only place the rendered window) or ``window`` (only the pages the policy saw)."""
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

        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # a value given directly (not through from_kwargs) is typed here too
            setattr(self, f.name, _coerce(f.name, getattr(self, f.name), hints[f.name]))
        for name, registry in (("judge", JUDGES), ("resolver", RESOLVERS), ("reward_form", REWARD_FORMS)):
            try:
                registry.get(getattr(self, name))
            except KeyError as e:
                raise InputError(f"reward setting {name}: {e.args[0]}") from None
        for name, (check, rule) in _BOUNDED.items():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, check_option(check, value, f"reward setting {name} must be {rule}"))
        check_option(
            one_of(*CANDIDATES), self.candidates, f"reward setting candidates must be one of {', '.join(CANDIDATES)}"
        )
        if self.weights is not None:
            self.weights = _numbers("weights", self.weights)
        if self.lat is not None:
            _numbers("lat", self.lat, LAT_VALUE)  # checked; LatSettings converts each to its field's type
        if self.keep_band is not None:
            band = self.keep_band
            if not (isinstance(band, list | tuple) and len(band) == 2):
                raise InputError(f"reward setting keep_band: expected [filter_low, filter_high], got {band!r}")
            low, high = (check_option(finite, x, f"reward setting keep_band[{i}]") for i, x in enumerate(band))
            if low > high:
                raise InputError(f"reward setting keep_band: filter_low {low} is above filter_high {high}")
            self.keep_band = [low, high]
        from reward.scoring import get_reward_form

        get_reward_form(self.reward_form).weights(self.weights)  # unknown weight names fail here

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


_NO_HIGHER = 2**62
"""Upper bound of a count that has no natural one (what :data:`data_prep.validate.positive_int` allows)."""


def _int_in(lo: int, hi: int = _NO_HIGHER) -> tuple:
    return bounded_int(lo, hi), f">= {lo}" + (f" and <= {hi}" if hi < _NO_HIGHER else "")


def _float_in(lo: float, hi: float, lo_open: bool = False) -> tuple:
    return bounded_float(lo, hi, lo_open), f"{'>' if lo_open else '>='} {lo:g} and <= {hi:g}"


_BOUNDED: dict[str, tuple] = {
    "concurrency": _int_in(1, 4096),
    "timeout_s": _float_in(0, 86_400, lo_open=True),
    "retries": _int_in(0, 100),
    "backoff_s": _float_in(0, 3_600),
    "judge_outage_s": _float_in(0, 30 * 86_400),
    "batch_groups": _int_in(1),
    "samples_every": _int_in(0),
    "samples_groups": _int_in(1, 1_000_000),
    "samples_max_mb": _float_in(0, 10_000_000, lo_open=True),
    "judge_max_tokens": _int_in(1, 1_000_000),
    "judge_temperature": _float_in(0, 10),
    "max_crops": _int_in(0, 1_000),
    "crop_dpi": _float_in(0, 1_200, lo_open=True),
    "max_quotes": _int_in(1, 1_000_000),
    "abstain_threshold": (finite, "a finite number (or None)"),
    "doc_cache_size": _int_in(1, 1_000_000),
}
"""Every numeric reward setting with its shared validator (:mod:`data_prep.validate`) and its rule in words: a
value outside (NaN, infinities, a bool, a word, an overlong number) is an :class:`InputError` naming the setting."""

LAT_VALUE = bounded_float(-1e6, 1e6)
"""Each value of the ``lat`` setting is a finite number of sensible size; :class:`reward.lat.LatSettings` checks
each one's own range and the keys."""


def _numbers(name: str, mapping: dict, check=finite) -> dict:
    """A mapping of setting names to numbers (``weights``, ``lat``), each value through ``check``."""
    return {k: check_option(check, v, f"reward setting {name}.{k}") for k, v in mapping.items()}


def _json_setting(name: str, value):
    """A JSON setting (``weights``, ``judge_extra_body``, ``keep_band``): text parsed by the one record parser
    (:func:`core.io.loads_record`: numbers bounded, nesting bounded); a mapping or list from a recipe goes
    through the same bounds (NaN, a 400-digit integer, 300 levels of nesting are refused)."""
    where = f"reward setting {name}"
    if not isinstance(value, str):
        try:
            value = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            raise InputError(f"{where}: not JSON data: {str(value)[:80]!r}") from None
    return loads_record(value, where)


_BASE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", dict: "dict", list: "list"}


def _coerce(name: str, value, hint):
    """Convert ``value`` to the field type ``hint`` (``int``, ``float``, ``str``, ``bool``, ``dict``, ``list``,
    optionally ``| None``): numbers through :mod:`data_prep.validate` (no bool for a number, no NaN, no overlong
    number), JSON through :func:`_json_setting`; the ranges are checked by :data:`_BOUNDED`."""
    args = typing.get_args(hint)
    optional = isinstance(hint, types.UnionType) and type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if optional else hint
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        if optional:
            return None
        raise InputError(f"reward setting {name} may not be empty")
    expected = f"reward setting {name}: expected {_BASE_NAMES.get(base, base)}"
    if base in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise InputError(f"{expected}, got {value!r}"[:200])
        if base is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        try:
            return (bounded_int(-_NO_HIGHER, _NO_HIGHER) if base is int else finite)(str(value))
        except argparse.ArgumentTypeError as e:
            raise InputError(f"{expected}, got {str(value)[:40]!r} ({e})") from None
    if base is bool:
        if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.strip().lower() in ("true", "1", "yes")
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise InputError(f"{expected}, got {str(value)[:40]!r}")
    if base is str:
        if isinstance(value, list | tuple) and name.endswith("_url"):  # several servers: replicas (reward.servers)
            if not all(isinstance(v, str) for v in value):
                raise InputError(f"{expected} or a list of URLs, got {str(value)[:80]!r}")
            return ",".join(value)
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        if not isinstance(value, str):
            raise InputError(f"{expected}, got {type(value).__name__} {str(value)[:40]!r}")
        return value
    if base in (dict, list):
        parsed = _json_setting(name, value)
        if not isinstance(parsed, base):
            raise InputError(f"{expected}, got {type(parsed).__name__} {str(value)[:40]!r}")
        return parsed
    return value
