"""The hostile-input suite's harness: a case is a name, a command, a set-up and what it expects.

A **command** is either a command line (``["reward", "score", "--inputs", "{tmp}/in.jsonl", ...]``: the first word
names the program, ``python -m data_prep|reward|eval``, the rest is its argv; ``{name}`` fields are filled from
:attr:`Ctx.vars`, ``{tmp}`` is the case's own folder) or a callable ``command(ctx) -> value`` for a library entry
point (the judge client). Command lines run in-process through the real dispatcher (:func:`core.cli.main`)
with stdout and stderr captured, exactly as ``python -m`` would run them, only without a new interpreter.

An **expectation** is one of :func:`clean_error` (non-zero exit, no traceback, one ``error:`` line holding the
given phrases), :func:`success` (exit 0, optionally a check of what was written) or :func:`value` (exit 0 and a
check of a specific value: the check raising ``AssertionError`` is a silent wrong result).

Every case ends in exactly one outcome:

* ``clean_error`` / ``success``: what the case expects happened;
* ``crash``: a traceback escaped (an exception out of the command, or ``Traceback`` on stderr);
* ``silent_wrong``: the command exited 0 where an error was due, or its result failed the case's check;
* ``data_lost``: a file the set-up protected (:meth:`Ctx.protect`) changed or vanished;
* ``unclear_error``: it failed, but not with one clear line holding the phrases; ``unexpected_error``: it failed
  where it should have succeeded.

Outcomes are recorded in :data:`RESULTS` and summarised at the end of the pytest run (``tests/hostile/conftest.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTCOMES: tuple[str, ...] = (
    "clean_error", "success", "crash", "silent_wrong", "data_lost", "unclear_error", "unexpected_error",
)  # fmt: skip
GOOD_OUTCOMES = frozenset({"clean_error", "success"})

RESULTS: list[tuple[str, str, str]] = []
"""``(suite, case name, outcome)`` of every case run in this session."""


@dataclass
class Ctx:
    """What a case's set-up, command and check see: its own folder ``tmp``, the shared environment ``env`` (built
    once per session by the suite's conftest; never modify it, copy what you corrupt), and ``vars`` for the
    command line's ``{fields}``."""

    tmp: Path
    env: Any = None
    vars: dict = field(default_factory=dict)
    protected: dict[Path, str | None] = field(default_factory=dict)
    cleanups: list = field(default_factory=list)

    def server(self, handler=None, **kwargs):
        """A started :class:`tests.support.openai_server.ScriptedOpenAIServer` (stopped after the case); its URL is
        ``vars["judge_url"]``."""
        from tests.support.openai_server import ScriptedOpenAIServer

        srv = ScriptedOpenAIServer(handler=handler, **kwargs).start()
        self.cleanups.append(srv.stop)
        self.vars["judge_url"] = srv.url
        return srv

    def protect(self, *paths: str | Path) -> None:
        """Files that must come out of the command unchanged (their sha256 is compared afterwards)."""
        for p in paths:
            p = Path(p)
            self.protected[p] = _digest(p)

    def write(self, name: str, data: str | bytes) -> Path:
        """Write ``data`` to ``tmp/name`` (parents created) and return the path."""
        p = self.tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            p.write_bytes(data)
        else:
            p.write_text(data, encoding="utf-8")
        return p


def _digest(p: Path) -> str | None:
    if p.is_file():
        return hashlib.sha256(p.read_bytes()).hexdigest()
    if p.is_dir():
        h = hashlib.sha256()
        for f in sorted(x for x in p.rglob("*") if x.is_file()):
            h.update(str(f.relative_to(p)).encode())
            h.update(hashlib.sha256(f.read_bytes()).digest())
        return "dir:" + h.hexdigest()
    return None


@dataclass(frozen=True)
class Expect:
    kind: str
    """``clean_error``, ``success`` or ``value``."""
    phrases: tuple[str, ...] = ()
    """clean_error: substrings (case-insensitive) of the error line; ``{name}`` fields are filled like the argv."""
    check: Callable[[Ctx, Result], None] | None = None
    """success/value: raises AssertionError when the result is wrong."""
    what: str = ""
    """What is expected, in words (shown when the case fails)."""


def clean_error(*phrases: str, what: str = "") -> Expect:
    """Non-zero exit with one ``error:`` line on stderr holding every phrase, no traceback."""
    return Expect("clean_error", tuple(phrases), None, what or f"one clear error line with {phrases}")


def success(check: Callable[[Ctx, Result], None] | None = None, what: str = "") -> Expect:
    """Exit 0 (and ``check`` passes)."""
    return Expect("success", (), check, what or "success")


def value(check: Callable[[Ctx, Result], None], what: str) -> Expect:
    """Exit 0 and a specific value (``check`` raises AssertionError otherwise)."""
    return Expect("value", (), check, what)


@dataclass
class Case:
    name: str
    command: Sequence[str] | Callable[[Ctx], Any]
    expect: Expect
    setup: Callable[[Ctx], None] | None = None
    timeout_note: str = ""

    def __str__(self) -> str:
        return self.name


@dataclass
class Result:
    rc: int | None
    stdout: str
    stderr: str
    exc: BaseException | None = None
    tb: str = ""
    value: Any = None
    seconds: float = 0.0

    @property
    def error_lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if "error:" in ln]


PROGRAMS = {"data_prep": "data_prep.__main__", "reward": "reward.__main__", "eval": "eval.__main__"}


def run_cli(argv: Sequence[str]) -> Result:
    """Run ``python -m argv[0] argv[1:]`` in-process through the real dispatcher; capture everything."""
    from core.cli import main

    prog, rest = argv[0], [str(a) for a in argv[1:]]
    mod = importlib.import_module(PROGRAMS[prog])
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    rc: int | None = None
    exc, tb = None, ""
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(f"python -m {prog}", mod.__doc__ or "", mod.COMMANDS, rest)
        except SystemExit as e:  # argparse
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # a traceback the user would see
            exc, tb = e, traceback.format_exc()
    return Result(rc, out.getvalue(), err.getvalue(), exc, tb, None, time.perf_counter() - t0)


def run_callable(fn: Callable[[Ctx], Any], ctx: Ctx) -> Result:
    """A library entry point: returns a value (success), raises InputError (a clean error) or anything else
    (a crash)."""
    from core.errors import InputError

    t0 = time.perf_counter()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            v = fn(ctx)
        except InputError as e:
            return Result(2, out.getvalue(), err.getvalue() + f"error: {e}\n", seconds=time.perf_counter() - t0)
        except Exception as e:
            return Result(None, out.getvalue(), err.getvalue(), e, traceback.format_exc(), None,
                          time.perf_counter() - t0)  # fmt: skip
    return Result(0, out.getvalue(), err.getvalue(), None, "", v, time.perf_counter() - t0)


def _fill(s: str, ctx: Ctx) -> str:
    return s.format(tmp=ctx.tmp, **ctx.vars) if "{" in s else s


def classify(case: Case, ctx: Ctx, res: Result) -> tuple[str, str]:
    """``(outcome, explanation)`` of one run."""
    if res.exc is not None or "Traceback (most recent call last)" in res.stderr:
        return "crash", res.tb or res.stderr[-3000:]
    lost = [str(p) for p, h in ctx.protected.items() if _digest(p) != h]
    if lost:
        return "data_lost", f"changed or removed: {lost}"
    exp = case.expect
    if exp.kind == "clean_error":
        if res.rc == 0:
            return "silent_wrong", f"exit 0 where {exp.what} was due; stdout: {res.stdout[-500:]!r}"
        lines = res.error_lines
        if len(lines) != 1:
            return "unclear_error", f"expected one error line, got {len(lines)}: {res.stderr[-1500:]!r}"
        missing = [p for p in (_fill(p, ctx) for p in exp.phrases) if p.lower() not in lines[0].lower()]
        if missing:
            return "unclear_error", f"error line lacks {missing}: {lines[0]!r}"
        return "clean_error", lines[0]
    if res.rc != 0:
        return "unexpected_error", f"exit {res.rc} where {exp.what} was due: {res.stderr[-1500:]!r}"
    if exp.check is not None:
        try:
            exp.check(ctx, res)
        except AssertionError as e:
            return "silent_wrong", f"{exp.what}: {e}"
    return "success", ""


def run_case(case: Case, tmp: Path, env: Any = None, suite: str = "") -> tuple[str, str, Result]:
    """Set up, run and classify one case; records the outcome in :data:`RESULTS`."""
    ctx = Ctx(tmp=tmp, env=env)
    try:
        if case.setup is not None:
            case.setup(ctx)
        if callable(case.command):
            res = run_callable(case.command, ctx)
        else:
            res = run_cli([_fill(a, ctx) for a in case.command])
        outcome, why = classify(case, ctx, res)
    finally:
        for stop in reversed(ctx.cleanups):
            stop()
    RESULTS.append((suite, case.name, outcome))
    return outcome, why, res


def check_case(case: Case, tmp: Path, env: Any = None, suite: str = "") -> Result:
    """:func:`run_case`, failing the test unless the outcome is the expected one."""
    outcome, why, res = run_case(case, tmp, env, suite)
    assert outcome in GOOD_OUTCOMES, f"{case.name}: {outcome}: {why}"
    return res


def summary() -> dict[str, int]:
    """Counts of the recorded outcomes (every key of :data:`OUTCOMES`) plus ``cases``."""
    c = Counter(o for _, _, o in RESULTS)
    return {"cases": len(RESULTS), **{o: c.get(o, 0) for o in OUTCOMES}}


def ids(cases: Sequence[Case]) -> list[str]:
    names = [c.name for c in cases]
    dup = [n for n, k in Counter(names).items() if k > 1]
    assert not dup, f"duplicate case names: {dup}"
    return names
