"""Judges: question + gold answer + model answer + crops of the cited blocks -> three integers 0..5.

``answer`` (correctness against the gold answer), ``relevance`` (of the cited crops to the question and the gold
answer) and ``coverage`` (do the crops together hold what is needed to derive the gold answer). docs/METHOD.md step 5.

This module is what every judge shares: the request and score types, the counters, the settings, the protocol
and the registry (:data:`JUDGES`) with :func:`build_judge`. The judges live in their own modules:

* ``http`` (:class:`reward.judge_http.HttpJudge`, the training default): a VLM behind an OpenAI-compatible chat
  API (vLLM serving Qwen3.5-9B on the cluster), with the crops as images;
* ``lexical`` (:class:`reward.judge_lexical.LexicalJudge`): model-free and offline, for tests, the demo and runs
  without a GPU; it reads the blocks' text, not the crops. Never the training default.

The prompt they render and the reply format they read are :mod:`reward.judge_prompt`; the crops are rendered by
:func:`data_prep.crops.crop_pngs`.

Outage or bad response (the rule the reward and ``eval score`` share). After its retries, a request that failed
with a transport kind (:data:`OUTAGE_FAILURES`: timeout, refused or dropped connection, HTTP 5xx, 408/429) is an
*outage* failure; any other failure (a 4xx, a reply without a valid score object) is a bad response. A batch is in
an outage when it has outage failures and either no request of it got a score ("every call failing") or the
server's ``/health`` (the base URL without ``/v1``) does not answer 200 (the server is down, whatever the others
got). Then the judge probes ``/health`` with exponential backoff (1 s doubling to 30 s) and, once it answers,
sends the outage-failed requests again; this repeats for at most ``outage_s`` seconds from the first outage of the
batch (a round already sent may finish past that), after which :class:`~reward.servers.ServerOutageError` names
the URL and the time waited. Outage failures in a batch where other requests got scores and ``/health`` answers
are sent once more (they may have failed before the server came back while the batch ran); those that fail again
are single bad calls: their responses stay unscorable. ``outage_s=None``: never wait, never raise.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.errors import InputError
from core.registry import Registry
from data_prep.crops import CROP_DPI, MAX_CROPS

log = logging.getLogger("reward")

SCORE_KEYS: tuple[str, ...] = ("answer", "relevance", "coverage")
SCORE_MAX = 5
FAILURE_KINDS: tuple[str, ...] = (
    "timeout", "connection", "http_5xx", "overloaded", "http_4xx", "bad_response", "unparseable", "truncated",
    "error",
)  # fmt: skip
"""Why a judge request gave no score (counted in :class:`JudgeStats`). ``overloaded`` is HTTP 408/429 (retried);
``http_4xx`` any other 4xx (not retried: the request itself is wrong); ``truncated`` a reply with no score that the
server cut at ``max_tokens`` (``finish_reason: length``: raise the judge's ``max_tokens``, or turn thinking off);
``unparseable`` any other reply with no score."""

OUTAGE_FAILURES: frozenset[str] = frozenset({"timeout", "connection", "http_5xx", "overloaded"})
"""Failure kinds that say the server is down, restarting or overloaded (retried, and waited out when they fail a
whole batch: see the module docstring)."""


@dataclass(frozen=True)
class JudgeSettings:
    """How a judge is called, in one place: the reward (:class:`reward.config.RewardConfig` flattens these into
    its keys, with these defaults) and ``eval score`` build their judge from it (:func:`build_judge`).

    >>> JudgeSettings().concurrency, JudgeSettings().max_crops, JudgeSettings().crop_dpi
    (32, 6, 150.0)
    """

    concurrency: int = 32
    """Requests in flight at once (per judge client; replicas share it)."""
    timeout_s: float = 120.0
    """Deadline of one HTTP call, seconds."""
    retries: int = 3
    """Extra attempts after a timeout, connection error, 5xx, 408 or 429."""
    backoff_s: float = 1.0
    """Base of the exponential backoff with full jitter, seconds."""
    max_tokens: int = 1024
    """Token limit of a reply (room for a short reasoning before the score object)."""
    temperature: float = 0.0
    """Sampling temperature (0: identical requests get identical scores)."""
    extra_body: dict | None = None
    """Extra JSON fields for every request (e.g. vLLM's ``chat_template_kwargs``)."""
    prompt_path: str | None = None
    """Rubric prompt file; None = the packaged ``judge.txt``."""
    outage_s: float | None = 600.0
    """How long a batch waits out an outage (module docstring); None: never wait. The command lines use
    :data:`CLI_OUTAGE_S` instead: a person at a terminal should not wait ten minutes to learn the judge is down."""
    max_crops: int = MAX_CROPS
    """Cited blocks shown per response (the first distinct ones, in citation order; CiteVQA shows at most six)."""
    crop_dpi: float = CROP_DPI
    """Resolution of the crops, dots per inch (CiteVQA's 150)."""
    thinking: bool = False
    """The judge model's thinking mode (Qwen3.5's chat template reads ``enable_thinking``; every request sends
    ``chat_template_kwargs: {"enable_thinking": <this>}``). Off: the judge answers the rubric directly. On, a
    thinking model spends the reply's token budget reasoning, and a reply cut inside it has no score."""
    structured: bool = True
    """Constrain the judge's decoding to its reply format (vLLM's per-request ``structured_outputs`` regex, which
    any vLLM server honours whatever its flags): the rubric through :func:`reward.judge_prompt.reply_regex`
    (compact JSON, the crop list exactly as long as the crops), CiteVQA's two prompts through a regex of their own
    shape (:func:`eval.citevqa.reply_regex`). No reply can then be unparseable (one cut by ``max_tokens`` is counted
    as ``truncated``); False sends
    the paper's unconstrained requests (an exact reproduction: the paper lost 253 of 18,694 judge calls)."""

    def client_kwargs(self) -> dict:
        """Keyword arguments of :class:`reward.judge_http.HttpJudge` (and of the CiteVQA judge's calls)."""
        return {
            "concurrency": self.concurrency,
            "timeout_s": self.timeout_s,
            "retries": self.retries,
            "backoff_s": self.backoff_s,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "extra_body": self.extra_body,
            "prompt_path": self.prompt_path,
            "outage_s": self.outage_s,
            "thinking": self.thinking,
            "structured": self.structured,
        }


def add_judge_mode_arguments(parser) -> None:
    """``--judge-thinking`` and ``--judge-unconstrained``: :attr:`JudgeSettings.thinking` and
    :attr:`JudgeSettings.structured` on the command lines of ``reward score`` and ``eval score``."""
    parser.add_argument(
        "--judge-thinking", action="store_true", default=None,
        help="leave the judge model's thinking mode on (default off: enable_thinking=false in every request)",
    )  # fmt: skip
    parser.add_argument(
        "--judge-unconstrained", action="store_true", default=None,
        help="send unconstrained judge requests, as the paper did (default: decoding constrained to the reply "
        "format through vLLM's structured outputs, so no reply is unparseable)",
    )  # fmt: skip


def judge_mode_of(args) -> dict:
    """The :class:`JudgeSettings` fields given by :func:`add_judge_mode_arguments`' options (absent: not given)."""
    out = {}
    if getattr(args, "judge_thinking", None):
        out["thinking"] = True
    if getattr(args, "judge_unconstrained", None):
        out["structured"] = False
    return out


CLI_OUTAGE_S = 30.0
"""Default ``--judge-outage-s`` of ``reward score`` and ``eval score``."""


CONFIG_FAILURES: frozenset[str] = frozenset({"http_4xx", "bad_response", "error"})
"""Failure kinds that say the judge is set up wrong (wrong model name or path, a body the server rejects, a server
that is not an OpenAI chat API) rather than down or slow. A pipeline whose judge has never produced a score raises
when every distinct request of a batch failed with one of these (:meth:`reward.pipeline.RewardScorer.score`)."""


REPLY_KEEP_CHARS = 4000
"""Characters of a judge's reply kept with its scores (for the samples; a verdict is a few hundred)."""


@dataclass(frozen=True)
class JudgeScores:
    """Integers in 0..5: answer correctness, evidence relevance, evidence coverage; and, when the judge's reply
    has one, its per-crop relevance list (``crop_relevance``: 1 = relevant, 0 = not, one per crop in order; read
    by the ``precision`` reward form; None when the reply has no valid list)."""

    answer: int
    relevance: int
    coverage: int
    crop_relevance: tuple[int, ...] | None = field(default=None, repr=False)
    reply: str | None = field(default=None, repr=False, compare=False)
    """The judge's reply as it came (at most :data:`REPLY_KEEP_CHARS`; None for a judge without one, ``lexical``):
    the samples browser shows it beside the scores it gave."""


@dataclass(frozen=True)
class JudgeRequest:
    """What the judge sees for one response.

    Attributes:
        question: the question.
        gold_answer: the reference answer.
        answer: the policy's answer.
        crops: PNG bytes of the cited blocks, in citation order (at most ``max_crops``).
        evidence_texts: the cited blocks' text, same order; read only by the lexical judge, never sent.
    """

    question: str
    gold_answer: str
    answer: str
    crops: tuple[bytes, ...]
    evidence_texts: tuple[str, ...] = ()

    def key(self) -> str:
        """Identity for de-duplication: everything an HTTP judge is sent."""
        h = hashlib.sha256()
        for part in (self.question, self.gold_answer, self.answer):
            h.update(part.encode("utf-8", "replace"))
            h.update(b"\x00")
        for crop in self.crops:
            h.update(hashlib.sha256(crop).digest())
        return h.hexdigest()


@dataclass
class JudgeStats:
    """Counts for one :meth:`score_batch` call (or accumulated over many with :meth:`add`)."""

    requests: int = 0
    """Requests asked for (one per scorable response)."""
    sent: int = 0
    """Distinct requests actually judged (requests - deduplicated)."""
    deduplicated: int = 0
    """Requests answered by an identical one in the same batch."""
    attempts: int = 0
    """HTTP calls made, retries included."""
    retries: int = 0
    """Calls that were retries of a failed call."""
    ok: int = 0
    """Distinct requests that produced scores."""
    failures: Counter = field(default_factory=Counter)
    """Distinct requests that produced no score, by final failure kind (:data:`FAILURE_KINDS`)."""
    retry_reasons: Counter = field(default_factory=Counter)
    """Failed calls that were retried, by kind."""
    wall_s: float = 0.0
    """Wall-clock seconds of the batch."""
    outages: int = 0
    """Outages waited out (rounds of re-sending after ``/health`` answered again)."""
    outage_wait_s: float = 0.0
    """Seconds spent waiting for ``/health`` during outages."""
    prompt_tokens: int = 0
    """Prompt tokens the server reported (``usage``) over the calls that answered: grows with the crops sent."""
    completion_tokens: int = 0
    """Reply tokens the server reported over the calls that answered."""

    def add(self, other: JudgeStats) -> None:
        for name in ("requests", "sent", "deduplicated", "attempts", "retries", "ok", "wall_s", "outages",
                     "outage_wait_s", "prompt_tokens", "completion_tokens"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures.update(other.failures)
        self.retry_reasons.update(other.retry_reasons)

    def to_dict(self) -> dict:
        d = {n: getattr(self, n) for n in ("requests", "sent", "deduplicated", "attempts", "retries", "ok")}
        d["failures"] = dict(self.failures)
        d["retry_reasons"] = dict(self.retry_reasons)
        d["wall_s"] = round(self.wall_s, 3)
        d["outages"] = self.outages
        d["outage_wait_s"] = round(self.outage_wait_s, 3)
        d["unparseable"] = self.failures.get("unparseable", 0)
        d["truncated"] = self.failures.get("truncated", 0)
        d["prompt_tokens"] = self.prompt_tokens
        d["completion_tokens"] = self.completion_tokens
        return d


def no_score_error(stats: JudgeStats, judge, examples: dict[str, str] | None = None) -> str | None:
    """The one line a command-line run prints when its judge was asked and produced no score at all (``stats``
    accumulated over the run), else None. ``examples``: one message per failure kind (``failure_examples``)."""
    if stats.ok or not stats.sent:
        return None
    kinds = ", ".join(f"{k} {n}" for k, n in stats.failures.most_common()) or "no reply"
    examples = examples if examples is not None else (getattr(judge, "failure_examples", None) or {})
    first = next((examples[k] for k, _ in stats.failures.most_common() if k in examples), "")
    example = " ".join(str(first).split())[:200]
    where = getattr(judge, "url", None)
    who = f"the judge at {where} (model {getattr(judge, 'model', '?')!r})" if where else "the judge"
    return (
        f"{who} produced no score for any of {stats.sent} requests ({kinds}"
        + (f"; e.g. {example}" if example else "")
        + ")"
    )


# --------------------------------------------------------------------------------------------- registry
class Judge(Protocol):
    """A judge: scores a batch of :class:`JudgeRequest` (None where a request could not be scored), keeps the
    counters of its last batch (``stats``) and of its life (``total``), and says whether it reads crops of the
    cited regions (``needs_crops``: the pipeline renders them only then)."""

    needs_crops: bool
    stats: JudgeStats
    total: JudgeStats

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]: ...


JUDGES: Registry[Judge] = Registry("judge", base=Judge, needs=("url", "crops"))
"""Registration line: ``@JUDGES.register("name", summary=..., needs=(...))`` on the judge's class (needs: ``url``,
built with ``base_url``, ``model`` and :class:`JudgeSettings`' client settings; ``crops``, it sees crops)."""
DEFAULT_JUDGE = "http"
"""The judge of training and of ``--judge-url`` alone."""
OFFLINE_JUDGE = "lexical"
"""The judge that needs no server (checks that must run without one use it)."""
JUDGES.add_lazy("http", "reward.judge_http:HttpJudge", summary="an OpenAI-compatible VLM server (vLLM): the paper's judge",
                needs=("url", "crops"))  # fmt: skip
JUDGES.add_lazy("lexical", "reward.judge_lexical:LexicalJudge",
                summary="model-free text overlap of the cited blocks (offline runs, tests)")  # fmt: skip


def build_judge(name: str, url=None, model: str | None = None, settings: JudgeSettings | None = None):
    """The judge ``name`` of :data:`JUDGES`: a judge that needs a ``url`` gets ``url``, ``model`` and
    ``settings``; one that does not is built bare (and a ``url`` given to it is an error)."""
    settings = settings or JudgeSettings()
    if JUDGES.needs(name, "url"):
        return get_judge(name, base_url=url or "", model=model or "", **settings.client_kwargs())
    if url:
        raise InputError(f"judge {name!r} takes no server URL (got {url})")
    return get_judge(name)


def get_judge(name: str, **kwargs):
    """``get_judge("http", base_url=..., model=...)`` or ``get_judge("lexical")``; unknown names raise
    ``KeyError`` with a did-you-mean, unknown keyword arguments raise :class:`InputError`."""
    factory = JUDGES.get(name)
    try:  # only the arguments are checked here: a TypeError from inside the judge's set-up is a bug and raises
        inspect.signature(factory).bind(**kwargs)
    except TypeError as e:
        raise InputError(f"judge {name!r}: {e}") from None
    return JUDGES.check(name, factory(**kwargs))
