"""Judges: question + gold answer + model answer + crops of the cited blocks -> three integers 0..5.

``answer`` (correctness against the gold answer), ``relevance`` (of the cited crops to the question and the gold
answer) and ``coverage`` (do the crops together hold what is needed to derive the gold answer). docs/METHOD.md step 5.

* ``http`` (:class:`HttpJudge`, the training default): a VLM behind an OpenAI-compatible chat API (vLLM serving
  Qwen3.5-9B on the cluster). One request per response with the crops as base64 PNG ``image_url`` parts; the quote
  strings are never sent, so a fluent quote that was resolved to the wrong block is judged by the wrong block.
  The prompt (``recipes/prompts/judge.txt``) frames the question, the answers and the crops' text as data inside
  delimiters with an explicit rule that they are never instructions; delimiter tags inside the data are removed.
  Requests run concurrently under a limit, each with a deadline; timeouts, connection errors, 5xx, 408 and 429
  (the server asking us to slow down) are retried with exponential backoff and full jitter; other 4xx are not
  (the request itself is wrong). Identical requests of a batch (same question, gold, answer and crops: common in
  a GRPO group) are sent once. A request that still fails, or whose reply has no valid score object, gives None.
  A reply is read up to :data:`MAX_REPLY_BYTES` (a score object is a few hundred bytes; a server streaming
  megabytes is broken): beyond that it is a ``bad_response`` and the rest is never read.
  With ``outage_s`` set, an *outage* pauses the batch instead (:meth:`HttpJudge.ascore_batch`): see below.
* ``lexical`` (:class:`LexicalJudge`): model-free and offline, for tests, the demo and runs without a GPU. It is
  a real but weaker judge: it reads the blocks' *text* (``evidence_texts``), not the crops, and measures token
  overlap, so it cannot judge paraphrase, arithmetic or figures. Never the training default.

Outage or bad response (the rule the reward and ``eval score`` share). After its retries, a request that failed
with a transport kind (:data:`OUTAGE_FAILURES`: timeout, refused or dropped connection, HTTP 5xx, 408/429) is an
*outage* failure; any other failure (a 4xx, a reply without a valid score object) is a bad response. A batch is in
an outage when it has outage failures and either no request of it got a score ("every call failing") or the
server's ``/health`` (the base URL without ``/v1``) does not answer 200 (the server is down, whatever the others
got). Then the judge probes ``/health`` with exponential backoff (1 s doubling to 30 s) and, once it answers,
sends the outage-failed requests again; this repeats for at most ``outage_s`` seconds from the first outage of the
batch (a round already sent may finish past that), after which :class:`ServerOutageError` names the URL and the
time waited. Outage failures in a batch where other requests got scores and ``/health`` answers are single bad
calls: those responses stay unscorable. ``outage_s=None`` keeps the old behaviour (never wait, never raise).
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import dataclasses
import hashlib
import inspect
import io
import json
import logging
import math
import random
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.errors import InputError
from core.io import MAX_INT_DIGITS, loads_record
from core.registry import Registry
from data_prep.text import tokenize
from recipes import prompt_path
from reward.response import iter_json_objects, strip_reasoning
from reward.servers import HEALTH_BACKOFF_S, ReplicaSet, ServerOutageError, health_url, parse_urls, probe_health

log = logging.getLogger("reward")

SCORE_KEYS: tuple[str, ...] = ("answer", "relevance", "coverage")
SCORE_MAX = 5
DEFAULT_PROMPT = prompt_path("judge.txt")
"""The judge prompt: a ``=== system ===`` section and a ``=== user ===`` template with ``{{name}}`` fields."""

FAILURE_KINDS: tuple[str, ...] = (
    "timeout", "connection", "http_5xx", "overloaded", "http_4xx", "bad_response", "unparseable", "error",
)  # fmt: skip
"""Why a judge request gave no score (counted in :class:`JudgeStats`). ``overloaded`` is HTTP 408/429 (retried);
``http_4xx`` any other 4xx (not retried: the request itself is wrong)."""

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
    max_crops: int = 6
    """Cited blocks shown per response (the first distinct ones, in citation order; CiteVQA shows at most six)."""
    crop_dpi: float = 150.0
    """Resolution of the crops, dots per inch (CiteVQA's 150)."""
    thinking: bool = False
    """The judge model's thinking mode (Qwen3.5's chat template reads ``enable_thinking``; every request sends
    ``chat_template_kwargs: {"enable_thinking": <this>}``). Off: the judge answers the rubric directly. On, a
    thinking model spends the reply's token budget reasoning, and a reply cut inside it has no score."""
    structured: bool = True
    """Constrain the judge's decoding to its reply format (vLLM's structured outputs): the rubric through a JSON
    schema (``response_format``; the crop list exactly as long as the crops), CiteVQA's two prompts through a
    regex of their own shape (:func:`eval.citevqa.reply_regex`). No reply can then be unparseable; False sends
    the paper's unconstrained requests (an exact reproduction: the paper lost 253 of 18,694 judge calls)."""

    def client_kwargs(self) -> dict:
        """Keyword arguments of :class:`HttpJudge` (and of the CiteVQA judge's calls)."""
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


MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest judge reply read, bytes (a chat completion with ``max_tokens`` 1024 is a few kilobytes)."""

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
        d["prompt_tokens"] = self.prompt_tokens
        d["completion_tokens"] = self.completion_tokens
        return d


# --------------------------------------------------------------------------------------------- output parsing
def _score_value(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and 0 <= v <= SCORE_MAX:
        return v
    return None


_DIGITS = re.compile(r"\d+")
_NOT_JSON = ": not valid JSON ("
"""How :func:`core.io.loads_record` says a text is no JSON at all (prose around the verdict), as opposed to
JSON it refuses (a number past its bounds, NaN, nesting too deep)."""


def _verdict_objects(text: str) -> list[dict] | None:
    """The JSON objects of a reply's verdict text (its reasoning removed), each through the one record parser
    (:func:`core.io.loads_record`: no integer of more than 300 digits, no NaN or infinity, nesting bounded);
    None when any of them fails those bounds (the reply is unparseable, never an exception).

    A reply that is one JSON value (a structured reply, or one inside a code fence) is parsed as it is; otherwise
    the objects are found in the prose (:func:`reward.response.iter_json_objects`) and each is parsed again
    through the record parser from its JSON text, so NaN, an infinity or a 400-digit integer that the scan
    accepted are refused the same way.

    >>> _verdict_objects('{"answer": 5, "relevance": 4, "coverage": 3}')
    [{'answer': 5, 'relevance': 4, 'coverage': 3}]
    >>> _verdict_objects('{"answer": 5, "relevance": 4, "coverage": NaN}') is None
    True
    """
    body = strip_reasoning(text).strip()
    if len(body) >= 6 and body.startswith("```") and body.endswith("```"):  # one code fence (sliced: linear)
        inner = body[3:-3]
        body = (inner[4:] if inner[:4].lower() == "json" else inner).strip()
    if any(len(m.group()) > MAX_INT_DIGITS for m in _DIGITS.finditer(body)):
        return None  # a number the record parser refuses, even where the scan below would skip its object
    try:
        whole = loads_record(body, "judge reply")
    except InputError as e:
        if _NOT_JSON not in str(e):
            return None
    else:
        if isinstance(whole, dict):
            return [whole]
    out = []
    for obj in iter_json_objects(body):
        try:
            out.append(loads_record(json.dumps(obj), "judge reply"))
        except (InputError, ValueError, RecursionError):
            return None
    return out


def parse_judge_output(text: str) -> JudgeScores | None:
    """The one verdict of a reply: the JSON object naming a score, anywhere in it (after reasoning, inside a code
    fence).

    Every one of ``answer``, ``relevance``, ``coverage`` must be an integer 0..5 (``4.0`` counts as 4); anything
    else (missing, out of range, a string, a reply cut off inside ``<think>``) gives None, never a guess. A reply
    with two score objects that disagree (a verdict, then one quoted from injected text) is unparseable too: no
    "last one wins"; the same object repeated counts once.

    >>> parse_judge_output('The answer matches.\\n```json\\n{"answer": 5, "relevance": 4, "coverage": 3}\\n```')
    JudgeScores(answer=5, relevance=4, coverage=3)
    >>> parse_judge_output('{"answer": 6, "relevance": 4, "coverage": 3}') is None
    True
    """
    objects = _verdict_objects(text) if isinstance(text, str) else None
    if objects is None:
        return None
    found: list[JudgeScores] = []
    for obj in objects:
        if any(k in obj for k in SCORE_KEYS):
            values = [_score_value(obj.get(k)) for k in SCORE_KEYS]
            if any(v is None for v in values):
                return None
            scores = JudgeScores(*values, crop_relevance=parse_crop_relevance(obj.get(CROP_RELEVANCE_KEY)))
            if found and (scores != found[0] or scores.crop_relevance != found[0].crop_relevance):
                return None
            found.append(scores)
    return found[0] if found else None


def reply_schema(n_crops: int) -> dict:
    """The JSON schema of the rubric's reply for ``n_crops`` crops (what :attr:`JudgeSettings.structured` sends):
    the three scores as integers 0..5 and exactly one 0/1 per crop, nothing else.

    >>> reply_schema(2)["properties"]["crop_relevance"]["minItems"]
    2
    """
    score = {"type": "integer", "minimum": 0, "maximum": SCORE_MAX}
    return {
        "type": "object",
        "properties": {
            **{k: score for k in SCORE_KEYS},
            CROP_RELEVANCE_KEY: {"type": "array", "items": {"type": "integer", "enum": [0, 1]},
                                 "minItems": n_crops, "maxItems": n_crops},
        },
        "required": [*SCORE_KEYS, CROP_RELEVANCE_KEY],
        "additionalProperties": False,
    }  # fmt: skip


def thinking_body(thinking: bool, extra_body: dict | None, what: str = "judge") -> dict:
    """``extra_body`` with ``chat_template_kwargs.enable_thinking`` set from the one ``thinking`` setting; an
    ``extra_body`` that sets it the other way is an :class:`InputError` (two settings may not disagree).

    >>> thinking_body(False, {"top_k": 1})
    {'top_k': 1, 'chat_template_kwargs': {'enable_thinking': False}}
    """
    body = dict(extra_body or {})
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise InputError(f"{what}: extra_body chat_template_kwargs must be an object, got {kwargs!r}")
    if "enable_thinking" in kwargs and bool(kwargs["enable_thinking"]) != bool(thinking):
        raise InputError(
            f"{what}: extra_body sets chat_template_kwargs.enable_thinking={kwargs['enable_thinking']!r} but the "
            f"thinking setting is {bool(thinking)}; set thinking (judge_thinking / --judge-thinking) only"
        )
    body["chat_template_kwargs"] = {**kwargs, "enable_thinking": bool(thinking)}
    return body


CROP_RELEVANCE_KEY = "crop_relevance"
"""Optional key of the judge's reply: one 0/1 per crop, in order (the ``precision`` reward form reads it)."""


def parse_crop_relevance(value) -> tuple[int, ...] | None:
    """The judge's per-crop relevance list as a tuple of 0/1 (``true``/``false`` and ``1.0`` accepted); None when
    absent or not such a list (the three scores still count: a reply without the list is the older format).

    >>> parse_crop_relevance([1, 0, True]), parse_crop_relevance([1, 2]), parse_crop_relevance(None)
    ((1, 0, 1), None, None)
    """
    if not isinstance(value, list):
        return None
    out = []
    for v in value:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or v not in (0, 1):
            return None
        out.append(int(v))
    return tuple(out)


# --------------------------------------------------------------------------------------------- prompt
_DATA_TAGS = re.compile(r"</?\s*(?:question|gold_answer|model_answer)\b[^>]*>", re.IGNORECASE)
_FIELD = re.compile(r"\{\{(\w+)\}\}")


def frame_data(text: str) -> str:
    """Data placed between the prompt's delimiters: our delimiter tags are removed so data cannot close its
    own frame and pose as prompt text."""
    return _DATA_TAGS.sub("[tag removed]", text)


class JudgePrompt:
    """The judge prompt file split into its system text and user template."""

    def __init__(self, path: str | Path = DEFAULT_PROMPT) -> None:
        path = Path(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except OSError as e:
            raise InputError(f"judge prompt {path}: cannot read ({e.strerror or e})") from None
        m = re.search(r"^=== system ===\n(.*?)^=== user ===\n(.*)\Z", raw, re.DOTALL | re.MULTILINE)
        if not m:
            raise InputError(f"judge prompt {path}: expected '=== system ===' then '=== user ===' sections")
        self.path = path
        self.system = m.group(1).strip()
        self.user_template = m.group(2).strip()
        missing = {"question", "gold_answer", "answer"} - set(_FIELD.findall(self.user_template))
        if missing:
            raise InputError(f"judge prompt {path}: user template lacks {{{{{sorted(missing)[0]}}}}}")

    def render_user(self, request: JudgeRequest) -> str:
        values = {
            "question": frame_data(request.question),
            "gold_answer": frame_data(request.gold_answer),
            "answer": frame_data(request.answer),
            "n_crops": str(len(request.crops)),
        }
        # One pass over the template: inserted data is never scanned for fields again.
        return _FIELD.sub(lambda m: values.get(m.group(1), m.group(0)), self.user_template)

    def messages(self, request: JudgeRequest) -> list[dict]:
        """OpenAI chat messages: the system rubric, then the user text followed by one image part per crop."""
        parts: list[dict] = [{"type": "text", "text": self.render_user(request)}]
        for i, png in enumerate(request.crops, 1):
            parts.append({"type": "text", "text": f"Evidence crop {i} of {len(request.crops)}:"})
            url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        return [{"role": "system", "content": self.system}, {"role": "user", "content": parts}]


# --------------------------------------------------------------------------------------------- running async code
def run_sync(coro):
    """Run a coroutine to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


# --------------------------------------------------------------------------------------------- http judge
class _Failure(Exception):
    def __init__(self, kind: str, retryable: bool, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.retryable = retryable


class HttpJudge:
    """Async client for an OpenAI-compatible chat server.

    Args:
        base_url: API root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended); several
            (comma-separated or a list) are replicas of one judge (:mod:`reward.servers`).
        model: served model name.
        concurrency: requests in flight at once.
        timeout_s: deadline of one HTTP call (connect to last byte), seconds.
        retries: extra attempts after a retryable failure.
        backoff_s: base of the exponential backoff: retry k (1, 2, ...) first sleeps
            ``uniform(0, min(max_backoff_s, backoff_s * 2**(k-1)))`` seconds (full jitter).
        max_backoff_s: cap of one backoff sleep, seconds.
        max_tokens: reply token limit (room for a short reasoning before the object).
        temperature: sampling temperature (0 = greedy, so identical requests get identical scores).
        prompt_path: the prompt file (default ``recipes/prompts/judge.txt``).
        extra_body: extra JSON fields for every request (e.g. ``{"chat_template_kwargs": {"enable_thinking": false}}``
            for vLLM).
        api_key: sent as a bearer token when set (vLLM needs none).
        seed: seed of the jitter.
        outage_s: how long a batch waits out an outage (module docstring) before raising
            :class:`ServerOutageError`; None: never wait (outage failures are unscorable like any other).
        thinking: the judge model's thinking mode (:attr:`JudgeSettings.thinking`; sent as
            ``chat_template_kwargs.enable_thinking``).
        structured: constrain decoding to the reply format (:attr:`JudgeSettings.structured`).
    """

    needs_crops = True
    """The judge looks at the crops (the pipeline renders them)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        model: str,
        *,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        max_tokens: int = 1024,
        temperature: float = 0.0,
        prompt_path: str | Path | None = None,
        extra_body: dict | None = None,
        api_key: str | None = None,
        seed: int | None = None,
        outage_s: float | None = None,
        thinking: bool = False,
        structured: bool = True,
    ) -> None:
        urls = parse_urls(base_url, "http judge")
        if not urls:
            raise InputError("http judge: no base URL (set judge_url or QUOTECITE_JUDGE_URL)")
        for u in urls:
            if not u.startswith(("http://", "https://")):
                raise InputError(f"http judge: base URL {u!r} must start with http:// or https://")
        if concurrency < 1 or timeout_s <= 0 or retries < 0:
            raise InputError(
                f"http judge: need concurrency >= 1, timeout_s > 0, retries >= 0 "
                f"(got {concurrency}, {timeout_s}, {retries})"
            )
        self.replicas = ReplicaSet(urls, what="judge")
        """The servers (one, or replicas of one judge); :meth:`ReplicaSet.stats` counts calls per server."""
        self.url = self.replicas.label
        self.model = model
        self.concurrency = int(concurrency)
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.max_tokens = int(max_tokens)
        self.temperature = float(temperature)
        self.prompt = JudgePrompt(prompt_path or DEFAULT_PROMPT)
        self.thinking = bool(thinking)
        self.structured = bool(structured)
        self.extra_body = thinking_body(self.thinking, extra_body, "http judge")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if outage_s is not None and outage_s < 0:
            raise InputError(f"http judge: outage_s must be >= 0 (got {outage_s})")
        self.outage_s = None if outage_s is None else float(outage_s)
        self.health_url = health_url(urls[0])
        self._rng = random.Random(seed)
        self.stats = JudgeStats()
        """Counts of the last :meth:`score_batch` call."""
        self.total = JudgeStats()
        """Counts accumulated over every call."""
        self.failure_examples: dict[str, str] = {}
        """One example message per final failure kind of the last :meth:`score_batch` call (for error reports)."""
        self.max_reply_bytes = MAX_REPLY_BYTES
        self._usage: Counter = Counter()  # tokens the server reported during the current batch
        """Largest reply read (:data:`MAX_REPLY_BYTES`)."""

    def body(self, request: JudgeRequest) -> dict:
        """The JSON body of the chat completion request for ``request``."""
        return {
            "model": self.model,
            "messages": self.prompt.messages(request),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
            **self.format_constraint(request),
        }

    def format_constraint(self, request: JudgeRequest) -> dict:
        """The request fields that force the reply format (:attr:`JudgeSettings.structured`), ``{}`` when off."""
        if not self.structured:
            return {}
        schema = reply_schema(len(request.crops))
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "judge_scores", "schema": schema}}}

    def _backoff(self, attempt: int) -> float:
        return self._rng.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    async def _call(self, client, body: dict) -> JudgeScores:
        """One call, on the replica with the fewest in flight (others after a transport failure)."""
        return await self.replicas.call(
            lambda url: self._call_url(client, url, body), lambda e: e.kind if isinstance(e, _Failure) else None
        )

    async def _call_url(self, client, url: str, body: dict) -> JudgeScores:
        import httpx

        try:
            async with asyncio.timeout(self.timeout_s):
                async with client.stream("POST", url, json=body, headers=self.headers) as resp:
                    status = resp.status_code
                    raw = await self._read_bounded(resp)
        except (TimeoutError, httpx.TimeoutException) as e:
            raise _Failure("timeout", True, type(e).__name__) from None
        except httpx.TransportError as e:
            raise _Failure("connection", True, f"{type(e).__name__}: {e}") from None
        text = raw.decode("utf-8", "replace")
        if status >= 500:
            raise _Failure("http_5xx", True, f"HTTP {status}")
        if status in (408, 429):
            raise _Failure("overloaded", True, f"HTTP {status}")
        if status >= 400:
            raise _Failure("http_4xx", False, f"HTTP {status}: {text[:200]}")
        try:  # the chat completion around the verdict, through the one record parser (numbers, nesting bounded)
            reply = loads_record(text, "judge reply")
            content = reply["choices"][0]["message"]["content"]
        except (InputError, KeyError, IndexError, TypeError):
            raise _Failure("bad_response", False, text[:200]) from None
        usage = reply.get("usage") if isinstance(reply, dict) else None
        if isinstance(usage, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                n = usage.get(key)
                if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 10**9:
                    self._usage[key] += n
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str):
            raise _Failure("bad_response", False, f"content is {type(content).__name__}")
        scores = self.parse_reply(content)
        if scores is None:
            raise _Failure("unparseable", False, content[:200])
        if isinstance(scores, JudgeScores):
            scores = dataclasses.replace(scores, reply=content[:REPLY_KEEP_CHARS])
        return scores

    def parse_reply(self, content: str):
        """The scores in a reply's text, None when it holds none (a subclass with another reply format overrides
        this, e.g. :class:`eval.citevqa.CiteVQAJudge`'s calls)."""
        return parse_judge_output(content)

    async def _read_bounded(self, resp) -> bytes:
        """The reply body, at most :attr:`max_reply_bytes` (more is a ``bad_response``, left unread)."""
        limit = self.max_reply_bytes
        declared = resp.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise _Failure("bad_response", False, f"reply of {int(declared)} bytes, over the {limit}-byte limit")
        chunks, size = [], 0
        async for chunk in resp.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise _Failure("bad_response", False, f"reply over the {limit}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _one(self, client, sem: asyncio.Semaphore, request: JudgeRequest, stats: JudgeStats):
        """(scores, None) or (None, final failure kind)."""
        body = self.body(request)
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt))  # outside the semaphore: others use the slot meanwhile
                stats.retries += 1
            async with sem:
                stats.attempts += 1
                try:
                    scores = await self._call(client, body)
                except _Failure as f:
                    if f.retryable and attempt < self.retries:
                        stats.retry_reasons[f.kind] += 1
                        continue
                    stats.failures[f.kind] += 1
                    self.failure_examples.setdefault(f.kind, str(f)[:300])
                    return None, f.kind
                except Exception as e:  # anything unforeseen fails this request, never the batch
                    log.warning("judge request failed: %s: %s", type(e).__name__, e)
                    stats.failures["error"] += 1
                    self.failure_examples.setdefault("error", f"{type(e).__name__}: {e}"[:300])
                    return None, "error"
            stats.ok += 1
            return scores, None
        return None, "error"  # unreachable: the loop returns on its last attempt

    async def ascore_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        """Score ``requests`` concurrently; one entry per request, None where judging failed."""
        import httpx

        t0 = time.perf_counter()
        stats = JudgeStats(requests=len(requests))
        unique: dict[str, int] = {}
        slot = []
        firsts: list[JudgeRequest] = []
        for r in requests:
            k = r.key()
            if k not in unique:
                unique[k] = len(firsts)
                firsts.append(r)
            slot.append(unique[k])
        stats.sent = len(firsts)
        stats.deduplicated = len(requests) - len(firsts)
        self.failure_examples = {}
        self._usage = Counter()
        results: list[JudgeScores | None] = []
        if firsts:
            sem = asyncio.Semaphore(self.concurrency)
            limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
            timeout = httpx.Timeout(self.timeout_s)
            async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
                pairs = list(await asyncio.gather(*(self._one(client, sem, r, stats) for r in firsts)))
                if self.outage_s is not None:
                    await self._wait_out_outages(client, sem, firsts, pairs, stats)
            results = [sc for sc, _ in pairs]
        stats.wall_s = time.perf_counter() - t0
        stats.prompt_tokens, stats.completion_tokens = self._usage["prompt_tokens"], self._usage["completion_tokens"]
        self.stats = stats
        self.total.add(stats)
        if stats.failures.get("unparseable"):
            log.warning(
                "judge: %d of %d replies held no parseable score (structured decoding %s); e.g. %s",
                stats.failures["unparseable"], stats.sent, "on" if self.structured else "off",
                self.failure_examples.get("unparseable", "")[:120],
            )  # fmt: skip
        return [results[i] for i in slot]

    async def _wait_out_outages(self, client, sem, firsts, pairs: list, stats: JudgeStats) -> None:
        """Re-send the outage-failed requests of ``pairs`` (in place) while the batch is in an outage (module
        docstring), waiting for ``/health`` in between; raises :class:`ServerOutageError` past ``outage_s``."""
        started = None
        while True:
            down = [i for i, (sc, kind) in enumerate(pairs) if sc is None and kind in OUTAGE_FAILURES]
            if not down:
                return
            answered = any(sc is not None for sc, _ in pairs)
            health = await asyncio.to_thread(self.replicas.probe_health, probe_health)
            if answered and not health:
                return  # the server is up and answers others: single bad calls, unscorable
            now = time.monotonic()
            if started is None:
                started = now
                log.warning(
                    "judge outage: %d of %d requests failed (%s), /health: %s; waiting up to %g s",
                    len(down), len(pairs), dict(stats.failures), health or "HTTP 200", self.outage_s,
                )  # fmt: skip
            deadline = started + self.outage_s
            if now >= deadline:
                kinds = sorted({pairs[i][1] for i in down})
                detail = health or "; ".join(self.failure_examples.get(k, k) for k in kinds)
                raise ServerOutageError("judge", self.url, now - started, self.outage_s, detail)
            if health:
                stats.outage_wait_s += await asyncio.to_thread(
                    self.replicas.wait_for_health, probe_health, deadline, started, self.outage_s, HEALTH_BACKOFF_S
                )
            else:  # /health answers but every request failed: give the server a moment before the next round
                pause = min(HEALTH_BACKOFF_S[0] * 2**stats.outages, HEALTH_BACKOFF_S[1], max(deadline - now, 0))
                await asyncio.sleep(pause)
                stats.outage_wait_s += pause
            stats.outages += 1
            for i in down:  # these requests are judged again: their failures are recounted by the new round
                stats.failures[pairs[i][1]] -= 1
            stats.failures += Counter()  # drop zero counts
            again = await asyncio.gather(*(self._one(client, sem, firsts[i], stats) for i in down))
            for i, pair in zip(down, again, strict=True):
                pairs[i] = pair

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        """Sync wrapper of :meth:`ascore_batch` (safe whether or not an event loop runs in this thread)."""
        return run_sync(self.ascore_batch(list(requests)))


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


# --------------------------------------------------------------------------------------------- lexical judge
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
    :class:`HttpJudge`; it never fails, so every response is scorable."""

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


# --------------------------------------------------------------------------------------------- registry and crops
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
JUDGES.register("http", summary="an OpenAI-compatible VLM server (vLLM): the paper's judge", needs=("url", "crops"))(
    HttpJudge
)
JUDGES.register("lexical", summary="model-free text overlap of the cited blocks (offline runs, tests)")(LexicalJudge)


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


def crop_pngs(
    cached, citations, max_crops: int = JudgeSettings.max_crops, dpi: float = JudgeSettings.crop_dpi, doc=None
) -> tuple[bytes, ...]:
    """PNG bytes of the first ``max_crops`` distinct cited blocks (citation order), rendered from the cached
    document's PDF at ``dpi``. ``doc``: an already open :class:`~data_prep.document.Document` of that PDF (saves
    re-opening and re-hashing it per response). A block with an empty box is skipped."""
    seen: set[int] = set()
    chosen = []
    for c in citations:
        if c.block_id not in seen and len(chosen) < max_crops:
            seen.add(c.block_id)
            chosen.append(c)
    if not chosen:
        return ()
    own = doc is None
    if own:
        doc = cached.open_pdf()
    try:
        out = []
        for c in chosen:
            try:
                img = doc.crop(c.page, c.bbox, dpi=dpi)
            except InputError:
                continue  # zero-area box: nothing for the judge to see
            buf = io.BytesIO()
            img.save(buf, format="PNG", optimize=False)
            out.append(buf.getvalue())
        return tuple(out)
    finally:
        if own:
            doc.close()
