"""Batch orchestration of the reward: reward inputs -> (RewardBreakdown, citations) per response.

Per batch (one GRPO step's rollout_batch x n responses):

1. unpack each ground truth (:mod:`data_prep.groundtruth`) and parse each response (:mod:`reward.response`);
2. load each document's cache once (kept between calls, least recently used dropped);
3. embed the distinct quotes (one encoder call per encoder and wave of responses, each quote once a batch), then
   resolve each response's quotes to blocks of the whole document, as the paper does (its page window only placed
   the rendered pages; ``candidates: window`` restricts them to the window) (:mod:`reward.resolve`);
4. crop the cited blocks (first ``max_crops`` distinct ones): each crop rendered once per process
   (:func:`data_prep.crops.crop_pngs`), a PDF opened once per batch;
5. judge every parseable response in one concurrent batch (:mod:`reward.judge`), each request sent as soon as its
   response has its crops, while the next wave is embedded (:class:`_JudgeStream`; the counters and the failure
   policy are those of one batch);
6. turn scores into rewards (:mod:`reward.scoring`).

That is a reward form that ``needs`` the ``judge`` (:data:`reward.scoring.REWARD_FORMS`). A form that needs
``steps`` (``lat``) is scored from the response itself by the same scorer: steps 1 and 2 and the failure policy below
are the same; in place of 3-6 its :class:`reward.lat.StepTerms` parses the Chain-of-Evidence response, places each
box on its page, embeds the steps (its step embedders) and computes its terms; no judge is built. The scorer asks
the registry what the form needs; it never compares a form's name.

Failure policy. Misconfiguration (missing cache dir, unknown setting, unknown judge/resolver/form, a ground truth
that does not unpack, a document missing from the cache, a judge that rejects every request of its first scored
batch as malformed: HTTP 4xx other than 408/429, a non-chat reply) raises :class:`~core.errors.InputError` on
the first call that meets it. A bad response or an outage never raises: an unparseable response earns 0 (``format_ok = 0``, no judge
call); a response whose quote embedding, resolution or judge call failed is *unscorable* and gets the mean reward
(and mean judge scores) of the responses of its ``qid`` in the batch whose reward is known, i.e. judged ones and
unparseable ones (whose 0 is their real reward). Under a ``steps`` form a response whose steps could not be embedded
is unscorable the same way (its own terms kept, ``step`` 0). Its reward then equals the group mean: zero advantage,
and the group's baseline is what it would be without it. A group with no known reward gets 0 for all and is counted.

Outages are waited out, never scored (``judge_outage_s``, default 600 s): when the judge is in an outage (every
request of the batch failing with timeouts, refused connections, 5xx or 429, or some failing so while its
``/health`` does not answer; :mod:`reward.judge`) or the HTTP quote (or step) embedder's call fails while its
``/health`` does not answer, the call pauses, probes ``/health`` with backoff and then scores for real. Past the budget it raises
:class:`reward.servers.ServerOutageError` (one line: server, URL, seconds waited) and, under the launch, first writes
``$QUOTECITE_METRICS_DIR/server_outage.json``, which is how ``launch/grpo_8b.sh`` knows to restart the servers and
resume. With the server up, a failure may still be the outage's (it came back while the batch ran): a judge
request that failed so while others got scores is sent once more (also after a wait, :mod:`reward.judge`), and an
embedder call that failed without a wait is made once more; failing again with the server up, it is a single bad
call and stays unscorable as above. A document whose quote encoder could not be had leaves its other responses of
that round unscorable without asking again.

The keep key. EasyR1 b44b311's online filter keeps a group when the mean of ``filter_key`` over its responses lies
strictly inside ``(filter_low, filter_high)``. ``keep`` (``algorithm.filter_key: keep``) is the same for every
response of a group: the group's mean reward when its known rewards differ, :data:`reward.scoring.KEEP_DROP` (-1,
outside any band) when they are all equal (DAPO's zero-variance groups: every advantage would be 0, e.g. five
responses all scoring 0.9) or when none is known (all unscorable: dropped, never trained on as zeros). So the
paper's band and the zero-variance rule both hold with EasyR1's filter as it is.

Which responses trained (``batch_groups``, ``keep_band``: the launch passes ``data.rollout_batch_size`` and the
filter band). EasyR1 logs ``reward/*`` over every response generated across its filter attempts, not over the
batch that trains. The reward sees every attempt in order and knows each group's ``keep``, so it replays the
filter: groups strictly inside the band, in the order they come, until ``batch_groups`` are kept (EasyR1 then cuts
the batch to that many groups); that is one training batch, and :class:`TrainBatchTracker` appends its record
(kept qids, groups dropped by reason, attempts, the mean reward and parts over the responses that trained) to
``$QUOTECITE_METRICS_DIR/reward_batches.jsonl``. Validation calls (groups of one response) are not counted.
``launch/runlog.py`` puts the n-th record of a segment on step ``resume_step + n`` of ``run_log.jsonl``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from core.errors import InputError
from core.geometry import BBox
from data_prep.cache import CachedDoc, DocCache
from data_prep.crops import CropStats, crop_pngs
from data_prep.encoders import MemoEncoder
from data_prep.encoders.qwen3vl import EmbeddingServerError
from data_prep.groundtruth import GroundTruth, unpack_ground_truth
from reward.config import RewardConfig
from reward.judge import CONFIG_FAILURES, JudgeRequest, JudgeScores, JudgeStats, build_judge
from reward.lat import LatBreakdown, StepEmbedder, StepItem, StepTerms, vectors
from reward.resolve import (
    Citation,
    make_quote_encoder,
    quote_encoder,
    resolve_quotes,
    resolver_uses_context,
    resolver_uses_encoder,
)
from reward.response import ParsedResponse, parse_response
from reward.scoring import KEEP_DROP, REWARD_FORMS, CitedEvidence, RewardBreakdown, get_reward_form
from reward.servers import ServerOutageError, health_url, probe_health, through_outages, wait_for_health

log = logging.getLogger("reward")


@dataclass
class BatchStats:
    """What happened in one batch (also accumulated in :attr:`RewardScorer.total`)."""

    responses: int = 0
    format_ok: int = 0
    reject_reasons: Counter = field(default_factory=Counter)
    """Unparseable responses by :data:`reward.response.REJECT_REASONS`."""
    unscorable: int = 0
    unscorable_reasons: Counter = field(default_factory=Counter)
    """``judge`` (no score after retries), ``embed``, ``resolve``, ``crop``."""
    groups: int = 0
    groups_all_unscorable: int = 0
    """Groups with no known reward: every response got 0 and ``keep`` -1 (the filter drops them)."""
    groups_zero_variance: int = 0
    """Groups with known rewards that are all equal (``keep`` -1: the filter drops them)."""
    embed_outages: int = 0
    """Outages of the quote embedder waited out."""
    embed_outage_wait_s: float = 0.0
    """Seconds spent waiting for the embedder's ``/health``."""
    responses_over_bound: int = 0
    """Responses with more quotes than the ``max_quotes`` safety bound (their extra quotes were left out)."""
    quotes_over_bound: int = 0
    """Quotes left out by the ``max_quotes`` safety bound."""
    judge_no_crop_relevance: int = 0
    """Judged responses with crops whose judge reply had no valid per-crop list (``precision`` form only)."""
    judge: JudgeStats = field(default_factory=JudgeStats)
    terms: Counter = field(default_factory=Counter)
    """Counts of the reward form's own terms (a ``steps`` form: ``step_paid``, ``ground_paid``; see
    :meth:`reward.lat.StepTerms.counts`)."""
    seconds: Counter = field(default_factory=Counter)
    """Wall seconds per phase: parse, load, embed, resolve, crop, judge, total."""

    def add(self, other: BatchStats) -> None:
        for n in ("responses", "format_ok", "unscorable", "groups", "groups_all_unscorable", "groups_zero_variance",
                  "embed_outages", "embed_outage_wait_s"):  # fmt: skip
            setattr(self, n, getattr(self, n) + getattr(other, n))
        for n in ("responses_over_bound", "quotes_over_bound", "judge_no_crop_relevance"):
            setattr(self, n, getattr(self, n) + getattr(other, n))
        self.reject_reasons.update(other.reject_reasons)
        self.unscorable_reasons.update(other.unscorable_reasons)
        self.judge.add(other.judge)
        self.terms.update(other.terms)
        self.seconds.update(other.seconds)

    def counters(self) -> dict[str, float]:
        """The stats as one flat dict of numbers (what the launch sums per job segment)."""
        flat: dict[str, float] = {}

        def walk(prefix: str, value) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}_{k}" if prefix else str(k), v)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                flat[prefix] = value

        walk("", self.to_dict())
        return flat

    def to_dict(self) -> dict:
        return {
            "responses": self.responses,
            "format_ok": self.format_ok,
            "reject_reasons": dict(self.reject_reasons),
            "unscorable": self.unscorable,
            "unscorable_reasons": dict(self.unscorable_reasons),
            "groups": self.groups,
            "groups_all_unscorable": self.groups_all_unscorable,
            "groups_zero_variance": self.groups_zero_variance,
            "embed_outages": self.embed_outages,
            "embed_outage_wait_s": round(self.embed_outage_wait_s, 3),
            "responses_over_bound": self.responses_over_bound,
            "quotes_over_bound": self.quotes_over_bound,
            "judge_no_crop_relevance": self.judge_no_crop_relevance,
            "judge": self.judge.to_dict(),
            **dict(self.terms),
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
        }


def check_judge_setup(js: JudgeStats, judge, answered: bool, hint: str) -> bool:
    """The judge-misconfiguration rule shared by training and evaluation; returns whether the judge has answered.

    Raises :class:`InputError` when a judge that has never produced a score (``answered`` False) rejects every
    distinct request of a batch as malformed (:data:`reward.judge.CONFIG_FAILURES`): a wrong model name or path, or
    a body the server refuses, would otherwise make every response unscorable for the whole run without an error.
    Timeouts, 5xx and refused connections are outages and never raise. ``hint`` names the settings to check."""
    if js.ok:
        return True
    failed = sum(js.failures.values())
    if answered or not js.sent or failed < js.sent or not set(js.failures) <= CONFIG_FAILURES:
        return answered
    examples = getattr(judge, "failure_examples", {}) or {}
    detail = "; ".join(" ".join(str(examples.get(k, k)).split()) for k in sorted(js.failures))
    where = f"{getattr(judge, 'url', '?')} (model {getattr(judge, 'model', '?')!r})"
    raise InputError(
        f"the judge at {where} rejected all {js.sent} requests of its first scored batch ({detail}); "
        f"check {hint} against the server"
    )


RESOLVE_ERRORS: tuple[type[BaseException], ...] = (EmbeddingServerError, OSError)
"""What resolving a response's quotes may raise by contract and still leave the batch scorable (that response is
unscorable): an embedding server failing the call, a file read failing. Bad input (:class:`InputError`) stops the
call; anything else is a bug and raises, from the first batch on."""
CROP_ERRORS: tuple[type[BaseException], ...] = (InputError, OSError, ValueError)
"""What rendering one response's crops may raise by contract (a box pdfium or PIL cannot render, a page that fails
to draw): that response is unscorable; anything else is a bug and raises."""

METRICS_DIR_ENV = "QUOTECITE_METRICS_DIR"
"""When set (the Slurm launch sets it per job segment), every batch appends its counters as one JSON line to
``$QUOTECITE_METRICS_DIR/reward_counters.jsonl``, so format rejects, judge retries/failures and unscorable rates
survive alongside EasyR1's own log."""


REWARD_BATCHES = "reward_batches.jsonl"
"""Per-segment file of training-batch records (:class:`TrainBatchTracker`)."""
SERVER_OUTAGE = "server_outage.json"
"""Written to ``$QUOTECITE_METRICS_DIR`` just before :class:`~reward.servers.ServerOutageError` leaves the reward."""
NO_GROUP_KEPT = "no_group_kept.json"
"""Written to ``$QUOTECITE_METRICS_DIR`` when a training reward call (an attempt of EasyR1's online filter) kept no
group: EasyR1 b44b311 then raises ``No sample is kept after filtering`` (at the first such attempt, whatever
``max_try_make_batch`` says) and the trainer dies; the launch reads this file to stop the run with one line instead
of requeueing into the same wall (:class:`TrainBatchTracker`)."""


def append_metrics_line(name: str, obj: dict) -> None:
    """One JSON line appended to ``$QUOTECITE_METRICS_DIR/name`` (nothing when unset); never raises."""
    folder = os.environ.get(METRICS_DIR_ENV)
    if not folder:
        return
    line = json.dumps(obj) + "\n"
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        # One write on an O_APPEND descriptor: a line is never interleaved with another process's line.
        fd = os.open(Path(folder) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as e:  # metrics must never kill a training step
        log.warning("could not append to %s in %s: %s", name, folder, e)


def _append_counters(stats: BatchStats) -> None:
    append_metrics_line("reward_counters.jsonl", {"time": round(time.time(), 3), **stats.counters()})


def _report_outage(e: ServerOutageError) -> None:
    folder = os.environ.get(METRICS_DIR_ENV)
    if not folder:
        return
    from core.io import atomic_write_json

    try:
        atomic_write_json(Path(folder) / SERVER_OUTAGE, {"time": round(time.time(), 3), **e.to_dict()})
    except OSError as err:
        log.warning("could not write %s in %s: %s", SERVER_OUTAGE, folder, err)


BATCH_PARTS = ("overall", "answer", "relevance", "coverage", "format_ok", "n_quotes", "n_citations", "unscorable")
"""Breakdown keys averaged over the responses that trained, in a training-batch record."""


class TrainBatchTracker:
    """Replays EasyR1's online filter over the reward calls of one trainer process (module docstring) and appends
    one record per training batch to ``$QUOTECITE_METRICS_DIR/reward_batches.jsonl``::

        {"batch": 1, "time": ..., "calls": 2, "groups_seen": 40, "groups_trained": 32, "responses": 160,
         "dropped": {"zero_variance": 6, "all_unscorable": 0, "out_of_band": 2, "surplus": 0},
         "reward": {"overall": 0.41, "answer": 2.9, ...}, "counters": {"unscorable": 3, ...}, "qids": ["q17", ...]}

    ``reward`` averages :data:`BATCH_PARTS` over the responses of the trained groups: the reward that produced the
    gradient. ``counters`` sums :meth:`BatchStats.counters` over every call (attempt) of the batch: unscorable
    responses, judge failures and retries, outages waited out."""

    def __init__(self, batch_groups: int, keep_band: list | None) -> None:
        self.batch_groups = batch_groups
        self.band = keep_band
        self.batches = 0
        self._reset()

    def _reset(self) -> None:
        self.calls = 0
        self.seen = 0
        self.dropped: Counter = Counter({"zero_variance": 0, "all_unscorable": 0, "out_of_band": 0, "surplus": 0})
        self.qids: list[str] = []
        self.rows: list[dict] = []
        self.counters: Counter = Counter()

    def add_call(self, groups: dict[str, list[int]], rows: list[RewardBreakdown], stats: BatchStats) -> dict | None:
        """Account for one reward call (``groups``: qid -> member indices, in call order); returns the batch record
        when this call completed a training batch (also appended to the metrics file), else None."""
        if not groups or all(len(m) == 1 for m in groups.values()):
            return None  # validation (n = 1) or nothing
        self.calls += 1
        self.counters.update(stats.counters())
        kept_before = len(self.qids)
        dropped_before = Counter(self.dropped)
        for qid, members in groups.items():
            self.seen += 1
            keep = rows[members[0]].keep
            if self.band is not None and not self.band[0] < keep < self.band[1]:
                if keep != KEEP_DROP:
                    self.dropped["out_of_band"] += 1
                elif all(rows[i].unscorable for i in members):
                    self.dropped["all_unscorable"] += 1
                else:
                    self.dropped["zero_variance"] += 1
            elif len(self.qids) >= self.batch_groups:
                self.dropped["surplus"] += 1
            else:
                self.qids.append(qid)
                self.rows.extend(rows[i].to_dict() for i in members)
        if self.band is not None and len(self.qids) == kept_before:
            self._report_no_group_kept(len(groups), self.dropped - dropped_before)
        if self.band is not None and len(self.qids) < self.batch_groups:
            return None  # EasyR1 generates another attempt
        self.batches += 1
        n = len(self.rows)
        record = {
            "batch": self.batches,
            "time": round(time.time(), 3),
            "calls": self.calls,
            "groups_seen": self.seen,
            "groups_trained": len(self.qids),
            "responses": n,
            "dropped": dict(self.dropped),
            "reward": {k: (float(np.mean([r[k] for r in self.rows])) if n else 0.0) for k in BATCH_PARTS},
            "counters": {k: round(v, 3) if isinstance(v, float) else v for k, v in sorted(self.counters.items())},
            "qids": list(self.qids),
        }
        append_metrics_line(REWARD_BATCHES, record)
        self._reset()
        return record

    def _report_no_group_kept(self, groups: int, dropped: Counter) -> None:
        """Write :data:`NO_GROUP_KEPT` (atomically) for the attempt that kept no group, with why each was dropped."""
        record = {"time": round(time.time(), 3), "batch": self.batches + 1, "attempt": self.calls, "groups": groups,
                  "dropped": {k: dropped.get(k, 0) for k in ("zero_variance", "all_unscorable", "out_of_band")}}  # fmt: skip
        log.warning("reward: attempt %d of batch %d kept no group of %d (%s); EasyR1 stops here", self.calls,
                    self.batches + 1, groups, record["dropped"])  # fmt: skip
        folder = os.environ.get(METRICS_DIR_ENV)
        if not folder:
            return
        from core.io import atomic_write_json

        try:
            atomic_write_json(Path(folder) / NO_GROUP_KEPT, record)
        except OSError as err:
            log.warning("could not write %s in %s: %s", NO_GROUP_KEPT, folder, err)


ZERO_VARIANCE_TOL = 1e-9
"""Known rewards of a group closer than this are equal (its ``keep`` is -1)."""


@dataclass
class _Item:
    gt: GroundTruth
    parsed: ParsedResponse
    cached: CachedDoc | None = None
    citations: list[Citation] = field(default_factory=list)
    shown: list[Citation] = field(default_factory=list)
    crops: tuple[bytes, ...] = ()
    failed: str | None = None
    scores: JudgeScores | None = None


class RewardScorer:
    """Holds what outlives a batch: the loaded caches, the encoders and the judge client, or, for a reward form that
    needs ``steps`` (scored from the response itself, ``lat``), its :class:`reward.lat.StepTerms` (``step_embedder``:
    inject a :class:`reward.lat.StepEmbedder`; default: the one of each cache's encoder)."""

    def __init__(self, config: RewardConfig, step_embedder: StepEmbedder | None = None) -> None:
        self.config = config
        self.cache_dir = config.cache_path()
        self.form = get_reward_form(config.reward_form)
        self.weights = self.form.weights(config.weights)
        judged = REWARD_FORMS.needs(self.form.name, "judge")
        self.steps = (
            StepTerms(config, self.weights, step_embedder) if REWARD_FORMS.needs(self.form.name, "steps") else None
        )
        """LAT's terms when the form is scored from the response's steps, else None."""
        self.judge = (
            build_judge(config.judge, config.judge_url, config.judge_model, config.judge_settings())
            if judged
            else None
        )
        self.needs_crops = judged and bool(getattr(self.judge, "needs_crops", True))
        self.docs = DocCache(self.cache_dir, max_loaded=config.doc_cache_size)
        self._encoders: dict[tuple[str, str], object] = {}
        self._lock = threading.Lock()
        self._judge_answered = False  # set once the judge has produced one score: later failures are outages
        self.tracker = (
            TrainBatchTracker(config.batch_groups, config.keep_band)
            if config.batch_groups is not None and judged
            else None
        )
        """Training-batch records (None without ``batch_groups``, and for a form without a judge: the records read
        :class:`~reward.scoring.RewardBreakdown`'s ``keep`` and parts)."""
        self.last_batch: dict | None = None
        """The training-batch record completed by the last call, if any."""
        # --- samples (reward/samples.py) ---
        from reward.samples import make_sampler

        self.sampler = make_sampler(config) if judged else None
        # --- end samples ---
        self._outage_started: float | None = None
        self.crop_stats = CropStats()
        """Crop cache hits and misses of the last batch (the crops themselves are kept per process:
        :func:`data_prep.crops.shared_crop_cache`)."""
        self.last = BatchStats()
        """Stats of the last batch."""
        self.total = BatchStats()
        """Stats accumulated over every batch."""

    # ----------------------------------------------------------------------------------------- resources
    def doc(self, key: str) -> CachedDoc:
        """The cache entry ``key`` (LRU-kept). Raises :class:`~data_prep.cache.CacheError` when missing."""
        return self.docs.get(key)

    def encoder_for(self, cached: CachedDoc):
        """The quote encoder for ``cached`` (:func:`reward.resolve.make_quote_encoder`), created once per
        encoder fingerprint and reused across batches."""
        meta = cached.manifest.get("encoder") or {}
        name = self.config.encoder or meta.get("name")
        if not name:
            raise InputError(
                f"cache {cached.key} has no embeddings; set resolver to 'lexical' or 'bm25' or rebuild with an encoder"
            )
        if meta.get("name") and name != meta["name"]:
            raise InputError(
                f"reward setting encoder is {name!r} but cache {cached.key} was embedded with {meta['name']!r}; "
                "quotes must be embedded with the cache's encoder"
            )
        fp = meta.get("fingerprint") or ""
        enc = self._encoders.get((name, fp))
        if enc is None:
            enc = make_quote_encoder(cached, name=name, embed_url=self.config.embed_url)
            self._encoders[(name, fp)] = enc
        return quote_encoder(cached, enc)  # checks name and dimension against the cache's embeddings

    # ----------------------------------------------------------------------------------------- the batch
    def score(self, reward_inputs: list[dict]) -> list[tuple[RewardBreakdown, list[Citation]]]:
        with self._lock:
            self._outage_started = None
            try:
                return self._score(reward_inputs)
            except ServerOutageError as e:
                _report_outage(e)
                raise

    def _score(self, reward_inputs: list[dict]) -> list[tuple[RewardBreakdown | LatBreakdown, list[Citation]]]:
        stats = BatchStats(responses=len(reward_inputs))
        t_all = t0 = time.perf_counter()
        items = [self._read(i, inp, stats) for i, inp in enumerate(reward_inputs)]
        stats.seconds["parse"] += time.perf_counter() - t0
        if stats.responses_over_bound:
            log.warning(
                "%d response(s) had more than max_quotes=%d quotes: %d quote(s) left out (raise max_quotes to keep "
                "them)", stats.responses_over_bound, self.config.max_quotes, stats.quotes_over_bound,
            )  # fmt: skip

        t0 = time.perf_counter()
        for i, it in enumerate(items):
            it.cached = self.doc(it.gt.doc_key)
            if it.gt.pages is not None and it.gt.pages[1] > it.cached.n_pages:
                raise InputError(
                    f"reward input {i}: page window {it.gt.pages} of {it.gt.qid!r} exceeds document "
                    f"{it.gt.doc_key} ({it.cached.n_pages} pages)"
                )
        stats.seconds["load"] += time.perf_counter() - t0

        out = self._score_steps(items, stats) if self.steps is not None else self._score_judged(items, stats)
        stats.seconds["total"] += time.perf_counter() - t_all
        self.last = stats
        self.total.add(stats)
        _append_counters(stats)
        log.info(
            "reward batch (%s): %d responses, format %d, unscorable %d, judge %s, %.2fs",
            self.form.name,
            stats.responses,
            stats.format_ok,
            stats.unscorable,
            stats.judge.to_dict(),
            stats.seconds["total"],
        )
        return out

    def _read(self, i: int, inp, stats: BatchStats) -> _Item | StepItem:
        """Reward input ``i``: its ground truth unpacked and its response parsed in the form's response format."""
        if not isinstance(inp, dict) or "response" not in inp or "ground_truth" not in inp:
            raise InputError(f"reward input {i}: expected a dict with 'response' and 'ground_truth'")
        try:
            gt = unpack_ground_truth(inp["ground_truth"])
            if self.steps is not None:
                it = self.steps.item(gt, inp["ground_truth"], inp["response"])
                stats.format_ok += self.steps.format_ok(it)
                return it
        except InputError as e:
            raise InputError(f"reward input {i}: {e}") from None
        parsed = parse_response(inp["response"], self.config.max_quotes, self.config.dedupe_quotes)
        if parsed.dropped:
            stats.responses_over_bound += 1
            stats.quotes_over_bound += parsed.dropped
        if parsed.ok:
            stats.format_ok += 1
        else:
            stats.reject_reasons[parsed.reason] += 1
        return _Item(gt, parsed)

    def _score_steps(self, items: list[StepItem], stats: BatchStats) -> list[tuple[LatBreakdown, list[Citation]]]:
        """A form scored from the response's own steps (:class:`reward.lat.StepTerms`): place the boxes, embed the
        steps, the terms; an unscorable response (its steps could not be embedded) gets its group's mean."""
        t0 = time.perf_counter()
        self.steps.place(items)
        self.steps.embed(items, await_outage=partial(self._await_embedder, stats=stats))
        embed_s = time.perf_counter() - t0
        stats.seconds["embed"] += embed_s
        rows = [self.steps.breakdown(it, embed_s) for it in items]
        known = {i: (b.overall,) for i, (b, it) in enumerate(zip(rows, items, strict=True)) if not it.failed}
        fill, _, _ = self._group_means(items, known, 1, stats)
        for i, (mean,) in fill.items():
            rows[i] = self.steps.unscorable(rows[i], mean)
            stats.unscorable += 1
            stats.unscorable_reasons[items[i].failed or "embed"] += 1
        stats.terms.update(self.steps.counts(rows))
        return [(b, []) for b in rows]

    def _score_judged(self, items: list[_Item], stats: BatchStats) -> list[tuple[RewardBreakdown, list[Citation]]]:
        """A formula over the judge's scores: resolve the quotes, crop the cited blocks, judge.

        A pipeline: the parseable responses go through in waves (:data:`WAVES`); each wave's quotes are embedded,
        resolved and cropped, and each of its judge requests leaves as it is made (:class:`_JudgeStream`); the next
        wave is embedded (in a thread of its own) while this one is resolved, cropped and sent and while the judge
        answers the ones before. The encoder calls, the requests, their order, the judge's counters and every reward
        are those of one batch judged at the end."""
        cfg = self.config
        live = [it for it in items if it.parsed.ok]
        uses_encoder = resolver_uses_encoder(cfg.resolver)
        self.crop_stats = CropStats()
        facades: dict[str, tuple[MemoEncoder, set[str]]] = {}
        judged: list[_Item] = []
        stream = _JudgeStream(self.judge)
        docs = _OpenDocs()
        t_judge = None
        waves = list(_waves(live))
        # The quotes of the next wave are embedded in a thread of their own while this wave is resolved, cropped and
        # sent: the same encoder calls, in the same order, as one wave after the other.
        ahead = ThreadPoolExecutor(1, thread_name_prefix="reward-embed")

        def embed(wave: list[_Item]) -> dict[str, MemoEncoder]:
            return self._embed_quotes(wave, stats, facades) if uses_encoder else {}

        try:
            coming = ahead.submit(embed, waves[0]) if waves else None
            for k, wave in enumerate(waves):
                encoders = coming.result()
                coming = ahead.submit(embed, waves[k + 1]) if k + 1 < len(waves) else None
                self._resolve(wave, encoders, stats)
                t0 = time.perf_counter()
                if self.needs_crops:
                    self._crop(wave, docs)
                stats.seconds["crop"] += time.perf_counter() - t0
                for it in wave:
                    if it.failed:
                        continue
                    judged.append(it)
                    t_judge = t_judge or time.perf_counter()
                    stream.submit(
                        JudgeRequest(
                            question=it.gt.question,
                            gold_answer=it.gt.answer,
                            answer=it.parsed.answer,
                            crops=it.crops,
                            evidence_texts=tuple(it.cached.blocks[c.block_id].text for c in it.shown),
                        )
                    )
            docs.close()
            t_judge = t_judge or time.perf_counter()
            try:
                scores = stream.finish()
                stats.judge = getattr(self.judge, "stats", JudgeStats())
                if judged:
                    self._check_judge_setup(stats.judge)
            except (InputError, ServerOutageError):
                raise
            except Exception as e:  # a judge client failing in an unforeseen way: this batch is unscorable
                log.warning("judge batch failed: %s", e)
                scores = [None] * len(judged)
                stats.judge = JudgeStats(requests=len(judged), failures=Counter({"error": len(judged)}))
        finally:
            ahead.shutdown(wait=False, cancel_futures=True)  # done already unless this batch raised
            stream.close()
            docs.close()
        for it, s in zip(judged, scores, strict=True):
            shown = bool(it.crops) if self.needs_crops else bool(it.shown)
            if s is None:
                it.failed = "judge"
            elif not shown:
                # the judge saw no evidence: none can be relevant (its reply is kept for the samples)
                it.scores = dataclasses.replace(s, relevance=0, coverage=0, crop_relevance=None)
            else:
                it.scores = s
        judge_s = time.perf_counter() - t_judge
        stats.seconds["judge"] += judge_s

        out, groups = self._rewards(items, judge_s, stats)
        self.last_batch = self.tracker.add_call(groups, [b for b, _ in out], stats) if self.tracker else None
        if self.sampler is not None:  # --- samples (reward/samples.py) ---
            self.sampler.add_call(items, out, self.last_batch, tracked=self.tracker is not None)
        return out

    def _resolve(self, wave: list[_Item], encoders: dict[str, MemoEncoder], stats: BatchStats) -> None:
        """Each response's quotes to blocks, and the blocks it shows (the first ``max_crops`` distinct ones)."""
        cfg = self.config
        uses_context = resolver_uses_context(cfg.resolver)
        t0 = time.perf_counter()
        for it in wave:
            if it.failed:
                continue
            try:
                it.citations = resolve_quotes(
                    it.parsed.quotes,
                    it.cached,
                    resolver=cfg.resolver,
                    encoder=encoders.get(it.cached.key),
                    pages=it.gt.pages if cfg.candidates == "window" else None,  # the paper: the whole document
                    threshold=cfg.abstain_threshold,
                    context=_context(it) if uses_context else None,
                )
            except RESOLVE_ERRORS as e:  # a resolver's encoder failing by contract (server error); a bug raises
                log.warning("resolving quotes of %s failed: %s", it.gt.qid, e)
                it.failed = "resolve"
                continue
            seen: set[int] = set()
            for c in it.citations:
                if c.block_id not in seen and len(it.shown) < cfg.max_crops:
                    seen.add(c.block_id)
                    it.shown.append(c)
        stats.seconds["resolve"] += time.perf_counter() - t0

    def _check_judge_setup(self, js: JudgeStats) -> None:
        self._judge_answered = check_judge_setup(
            js, self.judge, self._judge_answered, hint="judge_url, judge_model and judge_extra_body"
        )

    def _embed_quotes(
        self, live: list[_Item], stats: BatchStats, facades: dict[str, tuple[MemoEncoder, set[str]]] | None = None
    ) -> dict[str, MemoEncoder]:
        """One encoder call per encoder for the distinct quotes of ``live`` not yet in ``facades`` (encoder name ->
        the batch's quote vectors so far and their texts; updated); doc key -> facade. A failed call leaves the
        responses of ``live`` that use that encoder unscorable (``embed``)."""
        t0 = time.perf_counter()
        facades = {} if facades is None else facades
        by_encoder: dict[str, list[_Item]] = defaultdict(list)
        encoders = {}
        await_outage = partial(self._await_embedder, stats=stats)
        unavailable: set[str] = set()  # documents whose encoder failed: their other responses fail without a call
        for it in live:
            if it.failed:
                continue
            if it.cached.key in unavailable:
                it.failed = "embed"
                continue
            # misconfiguration (no embeddings, wrong encoder) raises; an HTTP encoder's server unreachable: unscorable
            enc, error = through_outages(await_outage, self.encoder_for, it.cached)
            if error is not None:
                log.warning("quote encoder for %s unavailable: %s", it.cached.key, error)
                unavailable.add(it.cached.key)
                it.failed = "embed"
                continue
            encoders[enc.name] = enc
            by_encoder[enc.name].append(it)
        out: dict[str, MemoEncoder] = {}
        for name, its in by_encoder.items():
            texts = list(dict.fromkeys(q for it in its for q in it.parsed.quotes))
            if resolver_uses_context(self.config.resolver):
                texts = list(dict.fromkeys([*texts, *(_context(it) for it in its)]))
            if name not in facades:  # the batch's quotes, each embedded once
                facades[name] = (MemoEncoder(encoders[name], max_items=None), set())
            facade, known = facades[name]
            texts = [t for t in texts if t not in known]
            vecs, error = np.zeros((0, facade.dim), dtype=np.float32), None
            if texts:
                vecs, error = through_outages(await_outage, vectors, encoders[name].embed_texts, texts)
            if error is not None:  # the embedding server failed the call
                log.warning("embedding %d quotes with %s failed: %s", len(texts), name, error)
                for it in its:
                    it.failed = "embed"
                continue
            facade.remember(texts, vecs)
            known.update(texts)
            for it in its:
                out[it.cached.key] = facade
        stats.seconds["embed"] += time.perf_counter() - t0
        return out

    def _await_embedder(self, error: Exception, again: bool, stats: BatchStats) -> bool:
        """After a failed embedding call: True (call it again) when the HTTP embedder was down and answers
        ``/health`` again, or answers it now and ``again`` (the call's first such failure: it may have failed
        before the server came back); False when it is up (or no HTTP embedder is set): a bad call, the responses
        stay unscorable. Raises :class:`ServerOutageError` once this call has waited ``judge_outage_s``."""
        if not self.config.embed_url:
            return False
        url = health_url(self.config.embed_url)
        why = probe_health(url)
        if not why:
            return again
        now = time.monotonic()
        if self._outage_started is None:
            self._outage_started = now
            log.warning(
                "embedder outage (%s; /health: %s); waiting up to %g s", error, why, self.config.judge_outage_s
            )
        budget = self.config.judge_outage_s
        stats.embed_outage_wait_s += wait_for_health(
            url, self._outage_started + budget, self._outage_started, "embedding server", budget, self.config.embed_url
        )
        stats.embed_outages += 1
        return True

    def _crop(self, live: list[_Item], docs: _OpenDocs) -> None:
        """Each response's crops, from the process's crop cache (:func:`data_prep.crops.crop_pngs`): a crop is
        rendered once per (document, page, box, dpi); its PDF is opened once per batch, at its first crop not
        cached (a moved or changed PDF then raises: misconfiguration)."""
        for it in live:
            if it.failed or not it.shown:
                continue
            try:
                it.crops = crop_pngs(it.cached, it.shown, self.config.max_crops, self.config.crop_dpi,
                                     doc=docs.opener(it.cached), stats=self.crop_stats)  # fmt: skip
            except _OpenFailed as e:
                raise e.error from None
            except CROP_ERRORS as e:  # pdfium or PIL failing on this page or box; a bug raises
                log.warning("cropping the citations of %s failed: %s", it.gt.qid, e)
                it.failed = "crop"

    def _evidence(self, it: _Item, stats: BatchStats) -> CitedEvidence:
        """Citations, repeats and judge-relevant crops of one judged response (the ``precision`` form)."""
        blocks: set[int] = set()
        quotes: set[str] = set()
        repeats = 0
        for c in it.citations:
            repeats += c.block_id in blocks or c.quote in quotes
            blocks.add(c.block_id)
            quotes.add(c.quote)
        n_shown = len(it.crops) if self.needs_crops else len(it.shown)
        flags = it.scores.crop_relevance if it.scores is not None else None
        if flags is not None and len(flags) != n_shown:
            flags = None  # a list that does not match the crops cannot be attributed
        if flags is None and n_shown:
            stats.judge_no_crop_relevance += 1
        return CitedEvidence(len(it.citations), repeats, None if flags is None else sum(flags))

    @staticmethod
    def _group_means(items, known: dict[int, tuple[float, ...]], width: int, stats: BatchStats):
        """The failure policy's group rule. ``known``: index -> the ``width`` values of a response whose reward is
        known (``overall`` first). Returns ``(fill, keep, groups)``: for each response whose reward is not known, the
        means of its ``qid`` group's known values (zeros when none is known); each response's ``keep`` (the group's
        mean reward, :data:`KEEP_DROP` when its known rewards are all equal or none is known); qid -> members."""
        groups: dict[str, list[int]] = defaultdict(list)
        for i, it in enumerate(items):
            groups[it.gt.qid].append(i)
        stats.groups = len(groups)
        fill: dict[int, tuple[float, ...]] = {}
        keep: dict[int, float] = {}
        for members in groups.values():
            vals = [known[i] for i in members if i in known]
            mean = tuple(float(np.mean([v[k] for v in vals])) for k in range(width)) if vals else (0.0,) * width
            rewards = [v[0] for v in vals]
            if not vals:
                stats.groups_all_unscorable += 1
                group_keep = KEEP_DROP
            elif max(rewards) - min(rewards) <= ZERO_VARIANCE_TOL:
                stats.groups_zero_variance += 1
                group_keep = KEEP_DROP
            else:
                group_keep = mean[0]
            for i in members:
                keep[i] = group_keep
                if i not in known:
                    fill[i] = mean
        return fill, keep, dict(groups)

    def _rewards(self, items: list[_Item], judge_s: float, stats: BatchStats):
        known: dict[int, BBox] = {}  # index -> (overall, a, r, c)
        for i, it in enumerate(items):
            if not it.parsed.ok:
                known[i] = (0.0, 0.0, 0.0, 0.0)
            elif it.scores is not None:
                s = it.scores
                overall = self.form(s, self.weights, self._evidence(it, stats) if self.form.uses_evidence else None)
                known[i] = (overall, float(s.answer), float(s.relevance), float(s.coverage))
        fill, keep, groups = self._group_means(items, known, 4, stats)
        out = []
        for i, it in enumerate(items):
            unscorable = i in fill
            if unscorable:
                stats.unscorable += 1
                stats.unscorable_reasons[it.failed or "judge"] += 1
            overall, a, r, c = fill[i] if unscorable else known[i]
            sims = [c_.similarity for c_ in it.citations]
            out.append(
                (
                    RewardBreakdown(
                        overall=overall,
                        answer=a,
                        relevance=r,
                        coverage=c,
                        format_ok=1.0 if it.parsed.ok else 0.0,
                        n_quotes=float(len(it.parsed.quotes)),
                        n_citations=float(len(it.citations)),
                        mean_similarity=float(np.mean(sims)) if sims else 0.0,
                        unscorable=1.0 if unscorable else 0.0,
                        judge_s=judge_s,
                        keep=keep[i],
                    ),
                    list(it.citations),
                )
            )
        return out, groups


# --------------------------------------------------------------------------------------------- the batch's pipeline
WAVES: tuple[int, ...] = (8, 32)
"""Parseable responses per wave of the judged pipeline: the first wave small (the first judge requests leave
early), then 32 a wave (the last size repeats; the judge's default requests in flight): a quote-embedding call of
some hundred texts, where the encoder's fixed cost per call (and a CPU torch's thread start-up) stays small."""


def _waves(items: list, sizes: tuple[int, ...] = WAVES):
    """``items`` in consecutive slices of ``sizes`` (the last size repeating).

    >>> [len(w) for w in _waves(list(range(80)))]
    [8, 32, 32, 8]
    """
    i = k = 0
    while i < len(items):
        n = sizes[min(k, len(sizes) - 1)]
        yield items[i : i + n]
        i += n
        k += 1


class _OpenFailed(Exception):
    """Opening a document's PDF for its crops failed (misconfiguration: raised as the error it carries)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _OpenDocs:
    """The batch's open PDFs, each opened at its first crop not cached and closed at the end of the batch."""

    def __init__(self) -> None:
        self.docs: dict[str, object] = {}

    def opener(self, cached: CachedDoc):
        def open_doc():
            doc = self.docs.get(cached.key)
            if doc is None:
                try:
                    doc = self.docs[cached.key] = cached.open_pdf()
                except Exception as e:  # a moved or changed PDF: misconfiguration, never a failed crop
                    raise _OpenFailed(e) from e
            return doc

        return open_doc

    def close(self) -> None:
        docs, self.docs = self.docs, {}
        for doc in docs.values():
            doc.close()


class _JudgeStream:
    """One batch of judge requests, sent as they are made.

    An HTTP judge that keeps its batch call (:class:`reward.judge_http.HttpJudge`) gets each request on
    :meth:`submit` through its public :meth:`~reward.judge_http.HttpJudge.stream` (the same de-duplication, limit of
    requests in flight, retries, outage rule and counters as one batch call); any other judge gets the requests in
    one :meth:`score_batch` call from :meth:`finish`. :meth:`finish` returns the scores in submission order."""

    def __init__(self, judge) -> None:
        self.judge = judge
        self.requests: list[JudgeRequest] = []
        self._stream = judge.stream() if self.streams(judge) else None

    @staticmethod
    def streams(judge) -> bool:
        """Whether ``judge`` is sent its requests as they are made: an HTTP judge that keeps its batch call."""
        from reward.judge_http import HttpJudge

        kind = type(judge)
        return (
            isinstance(judge, HttpJudge)
            and kind.ascore_batch is HttpJudge.ascore_batch
            and kind.score_batch is HttpJudge.score_batch
        )

    def submit(self, request: JudgeRequest) -> None:
        self.requests.append(request)
        if self._stream is not None:
            self._stream.submit(request)

    def finish(self) -> list[JudgeScores | None]:
        """The scores of every submitted request, in order (raises what the judge raised)."""
        if self._stream is not None:
            return self._stream.finish()
        return self.judge.score_batch(self.requests) if self.requests else []

    def close(self) -> None:
        """Stop the stream if :meth:`finish` was not reached (the batch raised): requests in flight are dropped."""
        if self._stream is not None:
            self._stream.close()


def _context(it: _Item) -> str:
    """What a context-reading resolver (``fused``) gets beside the quotes: the question and the policy's answer."""
    return f"{it.gt.question}\n{it.parsed.answer}"


_SCORERS: OrderedDict[str, RewardScorer] = OrderedDict()
_SCORERS_LOCK = threading.Lock()


def get_scorer(config: RewardConfig) -> RewardScorer:
    """The scorer for ``config``, created on first use and reused (encoders and caches stay loaded)."""
    key = json.dumps(config.to_dict(), sort_keys=True, default=str)
    with _SCORERS_LOCK:
        scorer = _SCORERS.get(key)
        if scorer is None:
            scorer = RewardScorer(config)
            _SCORERS[key] = scorer
            while len(_SCORERS) > 4:
                _SCORERS.popitem(last=False)
        return scorer


def score_batch(reward_inputs: list[dict], config: RewardConfig) -> list[tuple[RewardBreakdown, list[Citation]]]:
    """Score a batch of EasyR1 reward inputs (``{"response", "response_length", "ground_truth"}``).

    Returns one ``(RewardBreakdown, citations)`` per input, in order. See the module docstring for what raises."""
    return get_scorer(config).score(reward_inputs)
