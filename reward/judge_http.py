"""The ``http`` judge (:class:`HttpJudge`, the training default): a VLM behind an OpenAI-compatible chat API (vLLM
serving Qwen3.5-9B on the cluster).

One request per response with the crops as base64 PNG ``image_url`` parts; the quote strings are never sent, so a
fluent quote that was resolved to the wrong block is judged by the wrong block. The prompt and the reply format are
:mod:`reward.judge_prompt`. Requests run concurrently under a limit, each with a deadline; timeouts, connection
errors, 5xx, 408 and 429 (the server asking us to slow down) are retried with exponential backoff and full jitter;
other 4xx are not (the request itself is wrong). Identical requests of a batch (same question, gold, answer and
crops: common in a GRPO group) are sent once. A request that still fails, or whose reply has no valid score
object, gives None. A reply is read up to :data:`MAX_REPLY_BYTES` (a score object is a few hundred bytes; a server
streaming megabytes is broken): beyond that it is a ``bad_response`` and the rest is never read. With ``outage_s``
set, an *outage* pauses the batch instead (:meth:`HttpJudge.ascore_batch`; the rule is in :mod:`reward.judge`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import AsyncIterable, Sequence
from pathlib import Path

from core.errors import InputError
from core.io import loads_record
from data_prep.crops import DataURL
from reward.judge import (
    OUTAGE_FAILURES,
    REPLY_KEEP_CHARS,
    JudgeRequest,
    JudgeScores,
    JudgeStats,
)
from reward.judge_prompt import DEFAULT_PROMPT, JudgePrompt, parse_judge_output, reply_regex
from reward.servers import HEALTH_BACKOFF_S, ReplicaSet, ServerOutageError, health_url, parse_urls, probe_health

log = logging.getLogger("reward")

MAX_REPLY_BYTES = 4 * 1024 * 1024
"""Largest judge reply read, bytes (a chat completion with ``max_tokens`` 1024 is a few kilobytes)."""


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


# --------------------------------------------------------------------------------------------- request bodies
_SLOT = "\x00quotecite-data-url\x00"
"""Stands in for a :class:`~data_prep.crops.DataURL` while :func:`encode_body` writes the rest of a body."""
_SLOT_JSON = json.dumps(_SLOT)


def _json(obj) -> str:
    """JSON as httpx writes a ``json=`` body (UTF-8, no spaces, no NaN)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_body(body: dict) -> bytes:
    """The JSON request body of ``body``, byte for byte what httpx sends for ``json=body``, without scanning its
    crops' base64: each :class:`~data_prep.crops.DataURL` (some 20 KB each, needing no escapes) is written around,
    then joined in as it is.

    >>> from data_prep.crops import png_data_url
    >>> body = {"messages": [{"url": png_data_url(b"png"), "text": "crop \u00e9"}], "n": 1}
    >>> encode_body(body) == _json(body).encode("utf-8")
    True
    """
    urls: list[DataURL] = []

    def swap(x):
        if isinstance(x, DataURL):
            urls.append(x)
            return _SLOT
        if isinstance(x, dict):
            return {k: swap(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [swap(v) for v in x]
        return x

    text = _json(swap(body))
    pieces = text.split(_SLOT_JSON) if urls else [text]
    if len(pieces) != len(urls) + 1:  # some text of the body holds the stand-in itself: write it all
        return _json(body).encode("utf-8")
    out = [pieces[0].encode("utf-8")]
    for url, piece in zip(urls, pieces[1:], strict=True):
        out += (b'"', url.encode("ascii"), b'"', piece.encode("utf-8"))
    return b"".join(out)


# --------------------------------------------------------------------------------------------- running async code
def run_sync(coro):
    """Run a coroutine to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@functools.cache
def tls_context():
    """The TLS context of every judge client of the process (httpx's default: certificate checks on, the CA bundle
    and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as when the process first asked), made once: loading the CA bundle costs
    some 50 ms of CPU, which a client made per batch would pay every batch."""
    import httpx

    return httpx.create_ssl_context()


# --------------------------------------------------------------------------------------------- http judge
def _finish_reason(reply) -> str | None:
    """The first choice's ``finish_reason`` of a chat completion (``"length"``: cut at ``max_tokens``), None when the
    reply has none.

    >>> _finish_reason({"choices": [{"finish_reason": "length"}]}), _finish_reason({"choices": []})
    ('length', None)
    """
    try:
        reason = reply["choices"][0].get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return reason if isinstance(reason, str) else None


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
        """Largest reply read (:data:`MAX_REPLY_BYTES`)."""
        self._usage: Counter = Counter()  # tokens the server reported during the current batch

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
        return {"structured_outputs": {"regex": reply_regex(len(request.crops))}}

    def _backoff(self, attempt: int) -> float:
        return self._rng.uniform(0.0, min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    async def _call(self, client, body: bytes) -> JudgeScores:
        """One call, on the replica with the fewest in flight (others after a transport failure)."""
        return await self.replicas.call(
            lambda url: self._call_url(client, url, body), lambda e: e.kind if isinstance(e, _Failure) else None
        )

    async def _call_url(self, client, url: str, body: bytes) -> JudgeScores:
        import httpx

        try:
            async with asyncio.timeout(self.timeout_s):
                headers = {**self.headers, "Content-Type": "application/json"}
                async with client.stream("POST", url, content=body, headers=headers) as resp:
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
            if _finish_reason(reply) == "length":
                raise _Failure("truncated", False, f"cut at max_tokens={self.max_tokens}: {content[:200]}")
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
        body = encode_body(self.body(request))  # once: every attempt sends these bytes
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

    def _client(self):
        """The HTTP client of one batch: ``concurrency`` connections, the call deadline, the judge's TLS context."""
        import httpx

        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(self.timeout_s), verify=tls_context())

    async def ascore_stream(self, requests: AsyncIterable[JudgeRequest]) -> list[JudgeScores | None]:
        """Score requests as they arrive from ``requests``: one batch whose requests come over time. Each distinct
        request is sent as soon as it arrives (an identical one is sent once), under the limit of requests in flight,
        with the retries and deadline of each call; once ``requests`` is exhausted and every call is done, the outage
        rule (module docstring) applies to the whole batch. One entry per request in arrival order, None where
        judging failed; :attr:`stats` counts the batch. :meth:`ascore_batch` is this over a list; :meth:`stream`
        feeds it from sync code."""
        t0 = time.perf_counter()
        stats = JudgeStats()
        unique: dict[str, int] = {}
        slot: list[int] = []
        firsts: list[JudgeRequest] = []
        calls: list[asyncio.Future] = []
        self.failure_examples = {}
        self._usage = Counter()
        sem = asyncio.Semaphore(self.concurrency)
        pairs: list = []
        async with contextlib.AsyncExitStack() as stack:
            client = None
            try:
                async for r in requests:
                    stats.requests += 1
                    k = r.key()
                    if k not in unique:
                        if client is None:  # made at the first request: an empty batch opens no connection
                            client = await stack.enter_async_context(self._client())
                        unique[k] = len(firsts)
                        firsts.append(r)
                        calls.append(asyncio.ensure_future(self._one(client, sem, r, stats)))
                    slot.append(unique[k])
                stats.sent = len(firsts)
                stats.deduplicated = stats.requests - len(firsts)
                pairs = list(await asyncio.gather(*calls))
            except BaseException:
                for c in calls:
                    c.cancel()
                raise
            if firsts and self.outage_s is not None:
                await self._wait_out_outages(client, sem, firsts, pairs, stats)
        results = [sc for sc, _ in pairs]
        stats.wall_s = time.perf_counter() - t0
        stats.prompt_tokens, stats.completion_tokens = self._usage["prompt_tokens"], self._usage["completion_tokens"]
        self.stats = stats
        self.total.add(stats)
        if stats.failures.get("truncated"):
            log.warning(
                "judge: %d of %d replies were cut at max_tokens=%d before a score; e.g. %s",
                stats.failures["truncated"], stats.sent, self.max_tokens,
                self.failure_examples.get("truncated", "")[:120],
            )  # fmt: skip
        if stats.failures.get("unparseable"):
            log.warning(
                "judge: %d of %d replies held no parseable score (structured decoding %s); e.g. %s",
                stats.failures["unparseable"], stats.sent, "on" if self.structured else "off",
                self.failure_examples.get("unparseable", "")[:120],
            )  # fmt: skip
        return [results[i] for i in slot]

    async def ascore_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        """Score ``requests`` concurrently; one entry per request, None where judging failed."""

        async def each():
            for r in requests:
                yield r

        return await self.ascore_stream(each())

    def stream(self) -> JudgeStream:
        """A :class:`JudgeStream` of this judge: requests submitted from sync code, each sent as it is submitted."""
        return JudgeStream(self)

    async def _wait_out_outages(self, client, sem, firsts, pairs: list, stats: JudgeStats) -> None:
        """Re-send the outage-failed requests of ``pairs`` (in place) while the batch is in an outage (module
        docstring), waiting for ``/health`` in between; raises :class:`ServerOutageError` past ``outage_s``."""
        started = None
        resent = False
        while True:
            down = [i for i, (sc, kind) in enumerate(pairs) if sc is None and kind in OUTAGE_FAILURES]
            if not down:
                return
            answered = any(sc is not None for sc, _ in pairs)
            health = await asyncio.to_thread(self.replicas.probe_health, probe_health)
            if answered and not health:
                if resent:
                    return  # the server is up and answers others: single bad calls, unscorable
                resent = True  # they may have failed before the server came back mid-batch: sent once more
                await self._resend(client, sem, firsts, pairs, down, stats)
                continue
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
            await self._resend(client, sem, firsts, pairs, down, stats)

    async def _resend(self, client, sem, firsts, pairs: list, down: list[int], stats: JudgeStats) -> None:
        """Judge the requests ``down`` of ``pairs`` again (in place); their failures are recounted by the new round."""
        for i in down:
            stats.failures[pairs[i][1]] -= 1
        stats.failures += Counter()  # drop zero counts
        again = await asyncio.gather(*(self._one(client, sem, firsts[i], stats) for i in down))
        for i, pair in zip(down, again, strict=True):
            pairs[i] = pair

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[JudgeScores | None]:
        """Sync wrapper of :meth:`ascore_batch` (safe whether or not an event loop runs in this thread)."""
        return run_sync(self.ascore_batch(list(requests)))


_END = object()


class JudgeStream:
    """One batch of an :class:`HttpJudge` whose requests are submitted from sync code while they are made.

    Each request leaves on :meth:`submit` (from an event loop in a thread of its own, started at the first one)
    while the caller makes the next; :meth:`finish` returns the scores in submission order. It is
    :meth:`HttpJudge.ascore_stream`: the same de-duplication, limit of requests in flight, retries, deadlines,
    outage rule over the whole batch and counters in ``judge.stats`` as one :meth:`HttpJudge.score_batch` call over
    the same requests. With nothing submitted, :meth:`finish` returns ``[]`` and the judge is not called.

    >>> stream = HttpJudge("http://127.0.0.1:9/v1", "judge-model").stream()
    >>> stream.finish()
    []
    """

    def __init__(self, judge: HttpJudge) -> None:
        self.judge = judge
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task | None = None
        self._result: list | None = None
        self._error: BaseException | None = None

    def submit(self, request: JudgeRequest) -> None:
        """Send ``request`` (after an identical one already submitted: counted, not sent again)."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._queue = asyncio.Queue()
            self._task = self._loop.create_task(self.judge.ascore_stream(self._requests()))
            self._thread = threading.Thread(target=self._serve, name="judge-stream", daemon=True)
            self._thread.start()
        self._send(self._queue.put_nowait, request)

    async def _requests(self):
        while (r := await self._queue.get()) is not _END:
            yield r

    def _send(self, fn, *args) -> None:
        """``fn(*args)`` in the stream's loop; nothing once the loop has ended (:meth:`finish` raises its error)."""
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: its task ended early
            pass

    def _serve(self) -> None:
        """The stream's thread: runs the batch's task, then closes its loop as :func:`asyncio.run` does."""
        loop = self._loop
        try:
            self._result = loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            self._error = RuntimeError("judge stream cancelled")
        except BaseException as e:  # handed to the caller by finish()
            self._error = e
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    def finish(self) -> list[JudgeScores | None]:
        """The scores of every submitted request, in order (raises what the judge raised)."""
        if self._loop is None:
            return []
        self._send(self._queue.put_nowait, _END)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def close(self) -> None:
        """Stop the stream if :meth:`finish` was not reached (the caller raised): requests in flight are dropped."""
        if self._thread is not None and self._thread.is_alive():
            self._send(self._task.cancel)
            self._thread.join()
