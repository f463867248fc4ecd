"""The servers under the judge and the embedder: health, the one backoff wait, the outage error, replicas.

* :func:`health_url` / :func:`probe_health` / :func:`wait_for_health`: vLLM's ``/health`` of an API base URL, one
  probe, and the one wait with exponential backoff (:data:`HEALTH_BACKOFF_S`) that the judge, the quote embedder
  and the launch's server start-up share.
* :class:`ServerOutageError`: a server stayed down past its outage budget; :func:`through_outages`: one call
  made again while the outage wait says so.
* Judge replicas: one judge behind several OpenAI-compatible servers.

``judge_url`` (and ``--judge-url`` on the command lines) takes one base URL or several (a comma-separated string,
a list in ``reward_function_kwargs``, or the flag repeated). With several, :class:`ReplicaSet` spreads the
requests: each HTTP call goes to the replica with the fewest calls in flight (ties: the one sent the fewest so
far). A call that fails with a transport kind (:data:`DOWN_KINDS`: timeout, refused or dropped connection,
HTTP 5xx) marks its replica *down* and is sent again at once to another replica that has not failed it, without
using one of the request's retries; an overloaded replica (HTTP 408/429) is passed over the same way but not
marked down. So is a replica that answers but not with a valid verdict (:data:`CONTENT_KINDS`: a 200 that is
not a chat completion, a reply without a parseable score): replica health is judged by content too, so a healthy
replica takes the call instead of the batch going unscorable. A down replica gets no calls while another one is up; once its cool-down has passed (2 s, doubling
with each failure in a row up to 30 s) the next call first probes its ``/health`` and it is back when that
answers 200. Only when every replica has failed a call does the call fail (with the last replica's failure), so
the judge's retries, outage wait and unscorable policy (:mod:`reward.judge`) apply only when none answers.

With one URL nothing changes: the one replica is always tried, whatever its state.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from core.errors import InputError, QuoteciteError

log = logging.getLogger("reward")

HEALTH_BACKOFF_S: tuple[float, float] = (1.0, 30.0)
"""First and largest pause between two ``/health`` probes during an outage, seconds."""


class ServerOutageError(QuoteciteError):
    """A judge or embedding server stayed down past the outage budget (``judge_outage_s``). One line naming the
    server, its URL and the time waited; the training launch restarts the servers and resumes when the trainer
    stops with it (``launch/grpo_8b.sh``). Not bad input: a :class:`~core.errors.QuoteciteError`, so the
    command lines print it as one line and the reward never counts it as a misconfigured input."""

    def __init__(self, what: str, url: str, waited_s: float, budget_s: float, detail: str = "") -> None:
        self.what, self.url, self.waited_s, self.budget_s = what, url, float(waited_s), float(budget_s)
        msg = (
            f"{what} at {url} is down: no answer for {waited_s:.0f} s (outage budget judge_outage_s={budget_s:g})"
            + (f"; last: {' '.join(detail.split())[:200]}" if detail else "")
        )
        super().__init__(msg)

    def to_dict(self) -> dict:
        return {"what": self.what, "url": self.url, "waited_s": round(self.waited_s, 1), "budget_s": self.budget_s,
                "message": str(self)}  # fmt: skip


def health_url(base_url: str) -> str:
    """vLLM's liveness URL for an API base URL: ``http://h:8000/v1`` -> ``http://h:8000/health``.

    >>> health_url("http://127.0.0.1:8000/v1/")
    'http://127.0.0.1:8000/health'
    """
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    return base + "/health"


def probe_health(url: str, timeout_s: float = 5.0) -> str:
    """``""`` when ``url`` answers HTTP 200 within ``timeout_s``, else why not (one line)."""
    import httpx

    try:
        r = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return "" if r.status_code == 200 else f"HTTP {r.status_code}"


def wait_for_health(
    url: str | Callable[[], str], deadline: float, started: float, what: str, budget_s: float,
    server_url: str | None = None, alive: Callable[[], str] | None = None,
    backoff_s: tuple[float, float] = HEALTH_BACKOFF_S,
) -> float:  # fmt: skip
    """Probe ``url`` with exponential backoff until it answers 200; returns the seconds slept. Raises
    :class:`ServerOutageError` naming ``server_url`` (default ``url``; time counted from ``started``,
    ``time.monotonic()``) once ``deadline`` passes.

    The launch waits for the servers it starts with the same function: ``url`` may be a callable (a server whose port
    is chosen when it binds: ``""`` while it is not known yet), and ``alive`` returns why the wait is pointless (the
    server process exited), which ends it at once with that reason."""
    pause, cap = backoff_s
    slept = 0.0
    while True:
        target = url() if callable(url) else url
        why = probe_health(target) if target else "no port yet"
        if not why:
            return slept
        dead = alive() if alive else ""
        now = time.monotonic()
        if dead or now >= deadline:
            raise ServerOutageError(what, server_url or target, now - started, budget_s,
                                    f"{target or what}: {dead or why}")  # fmt: skip
        if target:
            log.warning("%s at %s is down (%s); waiting (%.0f s of %g s)", what, target, why, now - started, budget_s)
        step = min(pause, max(deadline - now, 0.05))
        time.sleep(step)
        slept += step
        pause = min(cap, pause * 2)


def through_outages(await_outage: Callable[[Exception, bool], bool], call: Callable, *args):
    """``(call(*args), None)``, or ``(None, error)`` once the call has failed for good: after each failure other than an
    :class:`~core.errors.InputError` (misconfiguration: raised), ``await_outage(error, again)`` says whether to call
    again (it may wait for the server, or raise :class:`ServerOutageError`); ``again`` is True until it first says
    so (the embedder's "once more while /health answers", :mod:`reward.pipeline`).

    >>> through_outages(lambda error, again: False, divmod, 7, 2)
    ((3, 1), None)
    >>> through_outages(lambda error, again: False, divmod, 7, 0)[1].__class__.__name__
    'ZeroDivisionError'
    """
    again = True
    while True:
        try:
            return call(*args), None
        except InputError:
            raise
        except Exception as e:
            if not await_outage(e, again):
                return None, e
            again = False


DOWN_KINDS: frozenset[str] = frozenset({"timeout", "connection", "http_5xx"})
"""Failure kinds that mark a replica down (it does not answer, or answers only errors)."""
CONTENT_KINDS: frozenset[str] = frozenset({"bad_response", "unparseable"})
"""Failure kinds of a replica that answers, but not with a chat completion holding a valid verdict (an HTML page,
a score out of range, garbage): with several replicas it counts as failing, like a dead one (it is skipped and the
call goes to another replica); with one, the call's failure stands."""
FAILOVER_KINDS: frozenset[str] = DOWN_KINDS | CONTENT_KINDS | {"overloaded"}
"""Failure kinds after which the call is sent to another replica."""
COOLDOWN_S: tuple[float, float] = (2.0, 30.0)
"""First and largest cool-down of a down replica before its ``/health`` is probed again, seconds."""
PROBE_TIMEOUT_S = 2.0
"""Deadline of one ``/health`` probe of a down replica, seconds."""


def parse_urls(value, what: str = "judge_url") -> list[str]:
    """Base URLs from a comma- (or whitespace-) separated string or a list of them; order kept, repeats dropped.

    >>> parse_urls("http://a:8000/v1, http://b:8000/v1/,http://a:8000/v1")
    ['http://a:8000/v1', 'http://b:8000/v1']
    >>> parse_urls(["http://a:1/v1", "http://b:2/v1"])
    ['http://a:1/v1', 'http://b:2/v1']
    """
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"{what}: expected URL strings, got {item!r}")
        for url in item.replace(",", " ").split():
            url = url.rstrip("/")
            if url and url not in out:
                out.append(url)
    return out


class UrlListAction(argparse.Action):
    """``--judge-url`` given more than once and/or comma-separated: the values joined with commas (what
    :func:`parse_urls` and ``judge_url`` read)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        old = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, ",".join([*parse_urls(old), *parse_urls(values)]))


@dataclass
class Replica:
    """One server of the set and what is known about it."""

    base_url: str
    chat_url: str
    health_url: str
    in_flight: int = 0
    sent: int = 0
    ok: int = 0
    failed: int = 0
    down: bool = False
    down_until: float = 0.0
    """``time.monotonic()`` after which a down replica is probed again."""
    fails_in_row: int = 0
    times_down: int = 0
    probing: bool = False
    last_error: str = field(default="", repr=False)

    def to_dict(self) -> dict:
        return {"url": self.base_url, "sent": self.sent, "ok": self.ok, "failed": self.failed, "down": self.down,
                "times_down": self.times_down, "in_flight": self.in_flight}  # fmt: skip


class ReplicaSet:
    """Least-in-flight choice over ``base_urls`` with down detection (module docstring). Thread-safe: the reward
    may score batches from several threads, each with its own event loop."""

    def __init__(
        self,
        base_urls: Sequence[str],
        *,
        path: str = "/chat/completions",
        cooldown_s: tuple[float, float] = COOLDOWN_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
        what: str = "judge",
    ) -> None:
        if not base_urls:
            raise InputError(f"{what}: no server URL")
        self.what = what
        self.replicas = [Replica(u, u.rstrip("/") + path, health_url(u)) for u in base_urls]
        self.cooldown_s = (float(cooldown_s[0]), float(cooldown_s[1]))
        self.probe_timeout_s = float(probe_timeout_s)
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task] = set()  # background /health probes (kept referenced until done)

    def __len__(self) -> int:
        return len(self.replicas)

    @property
    def label(self) -> str:
        """The chat URL, or every replica's joined with ``, `` (for messages)."""
        return ", ".join(r.chat_url for r in self.replicas)

    def stats(self) -> list[dict]:
        with self._lock:
            return [r.to_dict() for r in self.replicas]

    # ------------------------------------------------------------------ choice
    def _pick(self, exclude: set[int], now: float) -> tuple[Replica | None, list[Replica]]:
        """(an up replica with the fewest in flight, down replicas due for a probe); under the lock."""
        up = [r for i, r in enumerate(self.replicas) if i not in exclude and not r.down]
        best = min(up, key=lambda r: (r.in_flight, r.sent)) if up else None
        due = [r for r in self.replicas if r.down and now >= r.down_until and not r.probing]
        if len(self.replicas) == 1:
            due = []  # nothing to choose from: the one replica is always tried
        for r in due:
            r.probing = True
        return best, due

    async def _probe(self, replica: Replica) -> bool:
        import httpx

        ok = False
        try:
            async with httpx.AsyncClient(timeout=self.probe_timeout_s) as client:
                ok = (await client.get(replica.health_url)).status_code == 200
        except (httpx.HTTPError, OSError):
            ok = False
        except asyncio.CancelledError:  # the batch's event loop ended first: probe again next time
            with self._lock:
                replica.probing = False
            raise
        with self._lock:
            replica.probing = False
            if ok and replica.down:
                replica.down = False
                log.warning("%s replica %s answers /health again; sending it requests", self.what, replica.base_url)
            elif not ok:
                replica.down_until = time.monotonic() + self._cooldown(replica)
        return ok

    def _cooldown(self, replica: Replica) -> float:
        first, cap = self.cooldown_s
        return min(cap, first * 2 ** max(replica.fails_in_row - 1, 0))

    async def acquire(self, exclude: set[int]) -> int | None:
        """Index of the replica for the next call (its in-flight count raised), None when every replica is in
        ``exclude``. Prefers up replicas; then down ones whose ``/health`` answers a probe now; then, so that a
        call is never refused while a replica is untried, the down replica that went down first. A down replica
        past its cool-down is probed in the background while an up one takes the call."""
        while True:
            with self._lock:
                best, due = self._pick(exclude, time.monotonic())
                if best is not None and due:
                    for r in due:
                        task = asyncio.get_running_loop().create_task(self._probe(r))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
                    due = []
                if best is None and not due:
                    rest = [i for i in range(len(self.replicas)) if i not in exclude]
                    if not rest:
                        return None
                    if len(self.replicas) > 1 and any(self.replicas[i].probing for i in rest):
                        best = None  # someone is probing: wait for its answer below
                    else:
                        best = self.replicas[min(rest, key=lambda i: self.replicas[i].down_until)]
                if best is not None:
                    best.in_flight += 1
                    best.sent += 1
                    return self.replicas.index(best)
            if due:
                for r in due:
                    await self._probe(r)
            else:
                await asyncio.sleep(0.05)

    def release(self, index: int, kind: str | None, detail: str = "") -> None:
        """Record the end of a call on replica ``index``: ``kind`` None = answered, else its failure kind."""
        with self._lock:
            r = self.replicas[index]
            r.in_flight -= 1
            failing = kind in DOWN_KINDS or (kind in CONTENT_KINDS and len(self.replicas) > 1)
            if not failing:
                # Any reply, even a 4xx or an unparseable one, shows the server answers.
                if kind is None:
                    r.ok += 1
                else:
                    r.failed += 1
                if kind != "overloaded":
                    r.fails_in_row = 0
                    if r.down:
                        r.down = False
                        log.warning("%s replica %s answers again", self.what, r.base_url)
                return
            r.failed += 1
            r.fails_in_row += 1
            r.last_error = detail
            r.down_until = time.monotonic() + self._cooldown(r)
            if not r.down:
                r.down = True
                r.times_down += 1
                if len(self.replicas) > 1:
                    log.warning(
                        "%s replica %s stopped answering (%s); skipping it (probing /health after %g s)",
                        self.what, r.base_url, detail or kind, self._cooldown(r),
                    )  # fmt: skip

    async def call(self, send: Callable[[str], Awaitable], kind_of: Callable[[BaseException], str | None]):
        """``await send(chat_url)`` on the chosen replica; on a :data:`FAILOVER_KINDS` failure (``kind_of(exc)``)
        again on another replica, until one answers or every replica has failed this call (then the last
        failure is raised)."""
        tried: set[int] = set()
        while True:
            i = await self.acquire(tried)
            if i is None:  # unreachable: the last failure is raised below before every replica is excluded
                raise InputError(f"{self.what}: no replica left to try")
            try:
                result = await send(self.replicas[i].chat_url)
            except asyncio.CancelledError:
                with self._lock:
                    self.replicas[i].in_flight -= 1
                raise
            except Exception as e:
                kind = kind_of(e) or "error"
                self.release(i, kind, str(e))
                tried.add(i)
                if kind in FAILOVER_KINDS and len(tried) < len(self.replicas):
                    continue
                raise
            self.release(i, None)
            return result

    # ------------------------------------------------------------------ health (outage handling)
    def probe_health(self, probe: Callable[[str], str]) -> str:
        """``""`` when any replica's ``/health`` answers (``probe(url)`` gives ``""``), else every reason."""
        reasons = []
        for r in self.replicas:
            why = probe(r.health_url)
            if not why:
                with self._lock:
                    if r.down:
                        r.down = False
                        r.down_until = 0.0
                return ""
            reasons.append(f"{r.health_url}: {why}")
        return "; ".join(reasons)

    def wait_for_health(self, probe: Callable[[str], str], deadline: float, started: float, budget_s: float,
                        backoff_s: tuple[float, float]) -> float:  # fmt: skip
        """Probe every replica's ``/health`` with exponential backoff until one answers; the seconds slept.
        Raises :class:`ServerOutageError` naming every replica once ``deadline`` passes."""
        pause, cap = backoff_s
        slept = 0.0
        while True:
            why = self.probe_health(probe)
            if not why:
                return slept
            now = time.monotonic()
            if now >= deadline:
                raise ServerOutageError(self.what, self.label, now - started, budget_s, why)
            log.warning("every %s replica is down (%s); waiting (%.0f s of %g s)", self.what, why, now - started,
                        budget_s)  # fmt: skip
            step = min(pause, max(deadline - now, 0.05))
            time.sleep(step)
            slept += step
            pause = min(cap, pause * 2)
