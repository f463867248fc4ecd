"""The response contract (language interface): the policy writes ``{"answer": str, "quotes": [str, ...]}``.

Parsing is a short chain of small, separately tested steps:

1. :func:`strip_reasoning` drops a reasoning prefix (everything up to the last ``</think>``; a ``<think>`` that is
   never closed means the response was cut off while still reasoning, so nothing after it counts).
2. :func:`iter_json_objects` finds the JSON objects in what is left, wherever they are: inside a markdown code
   fence, after prose, before prose. One left-to-right scan over the characters that matter (braces, quotes,
   backslashes) pairs braces, honouring JSON strings inside an open brace (so ``"a } b"`` does not close it) and
   ignoring quotes in prose outside any brace; a second scan that ignores strings runs only when the first finds
   nothing (an unbalanced quote inside a stray brace). Spans are handed to ``json.loads`` last first, each at
   most once, within a character budget proportional to the input, so a 1 MB response costs linear time whatever
   it holds (unclosed braces, deep nesting, thousands of fragments).
3. :func:`validate` checks the chosen object and normalises it (:func:`normalise_quote`: the wording is kept as
   written, only whitespace is collapsed and lone surrogates from ``\\ud800``-style escapes are replaced), giving a
   :class:`ParsedResponse`. Every quote is kept, repeats included (the paper's assignment gives two equal quotes
   two distinct blocks), up to the safety bound :data:`DEFAULT_MAX_QUOTES`; quotes beyond it are counted in
   ``ParsedResponse.dropped`` so the caller can log them (the reward and ``eval resolve`` do: a counter and a
   warning). ``dedupe=True`` drops exact repeats and ``max_quotes`` lowers the bound (``max_quotes=8`` keeps at most 8).

When several objects carry an ``answer`` or ``quotes`` key, the last one wins (models draft, then answer).
A rejected response carries one of :data:`REJECT_REASONS`, which the reward counts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

REJECT_REASONS: tuple[str, ...] = ("no_object", "no_answer", "no_quotes", "non_string_quote", "empty_quotes")
"""Why a response earns 0 for format:
``no_object``: no JSON object in the response; ``no_answer``: the object has no non-empty string answer;
``no_quotes``: no ``quotes`` list or an empty one; ``non_string_quote``: a quote that is not a string;
``empty_quotes``: every quote is empty after whitespace normalisation."""

DEFAULT_MAX_QUOTES = 64
"""Safety bound on the quotes kept per response (the paper states no cap). It is far above what a 768-token
response holds in practice (the paper's trained model averages 4.6 citations), so it only stops a degenerate
response from costing a large assignment; when it is hit the extra quotes are counted in
:attr:`ParsedResponse.dropped`, and the callers log a counter and a warning."""

_SPECIALS = re.compile(r'[{}"\\]')
_WS = re.compile(r"\s+")
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"

PARSE_BUDGET_FACTOR = 3
"""``json.loads`` may read at most this many times the input length in total (plus a constant)."""
MAX_PARSE_ATTEMPTS = 512
"""At most this many candidate spans are handed to ``json.loads`` per response."""


@dataclass(frozen=True)
class ParsedResponse:
    """A validated response. ``ok`` False means ``reason`` is one of :data:`REJECT_REASONS`."""

    ok: bool
    reason: str | None
    answer: str
    quotes: tuple[str, ...]
    dropped: int = field(default=0, repr=False)
    """Quotes beyond the ``max_quotes`` safety bound, left out (0 unless the bound was hit)."""


@dataclass
class ScanStats:
    """Work done by :func:`find_json_objects`: characters visited by the scan and read by ``json.loads``."""

    scanned: int = 0
    parsed_chars: int = 0
    attempts: int = 0

    @property
    def steps(self) -> int:
        return self.scanned + self.parsed_chars


def strip_reasoning(text: str) -> str:
    """Drop a ``<think>...</think>`` prefix (everything up to the last closing tag).

    >>> strip_reasoning('<think>hmm {"answer": 1}</think> {"answer": "x"}')
    ' {"answer": "x"}'
    >>> strip_reasoning("<think>still thinking {")
    ''
    """
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        return text[close + len(_THINK_CLOSE) :]
    open_ = text.find(_THINK_OPEN)
    if open_ >= 0:
        return text[:open_]
    return text


def _balanced_spans(text: str, track_strings: bool, stats: ScanStats) -> tuple[list[int], list[int], list[int]]:
    """Balanced ``{...}`` spans as parallel lists ``(starts, ends_exclusive, firsts)`` in closing order.

    A span's descendants are exactly the spans closed between its opening and its closing, so they are the
    contiguous index range ``firsts[i] .. i - 1``: the tree needs no per-span containers (a 1 MB response of
    nested braces allocates three int lists). Only ``{``, ``}``, ``"`` and ``\\`` are visited (a regex jumps
    between them), so the scan is linear."""
    starts: list[int] = []
    ends: list[int] = []
    firsts: list[int] = []
    open_at: list[int] = []  # offsets of the open braces
    open_count: list[int] = []  # spans closed before each open brace opened
    in_string = False
    skip_to = -1
    for m in _SPECIALS.finditer(text):
        i = m.start()
        stats.scanned += 1
        if i < skip_to:
            continue
        c = text[i]
        if in_string:
            if c == "\\":
                skip_to = i + 2  # the escaped character never ends the string
            elif c == '"':
                in_string = False
            continue
        if c == "{":
            open_at.append(i)
            open_count.append(len(starts))
        elif c == "}":
            if not open_at:
                continue  # a stray closing brace in prose
            starts.append(open_at.pop())
            firsts.append(open_count.pop())
            ends.append(i + 1)
        elif c == '"' and track_strings and open_at:
            in_string = True
    return starts, ends, firsts


def _siblings_backwards(last: int, stop: int, firsts: list[int]) -> Iterator[int]:
    """Spans of one level, last first: ``last``, then the span closed just before ``last``'s subtree, ...,
    down to index ``stop``."""
    j = last
    while j >= stop:
        yield j
        j = firsts[j] - 1


def iter_json_objects(text: str, stats: ScanStats | None = None) -> Iterator[dict]:
    """JSON objects (dicts) in ``text``, **last first**.

    Outermost balanced spans are tried from the end backwards; a span that is not valid JSON has its children
    tried in its place (a stray ``{`` in prose around the real object). Work is bounded by
    :data:`PARSE_BUDGET_FACTOR` and :data:`MAX_PARSE_ATTEMPTS`, spent on the end of the text first (where a
    final answer is); ``stats`` (optional) records it."""
    stats = stats if stats is not None else ScanStats()
    budget = PARSE_BUDGET_FACTOR * len(text) + 1024
    for track_strings in (True, False):  # the second pass survives an unbalanced quote inside a stray brace
        starts, ends, firsts = _balanced_spans(text, track_strings, stats)
        found_any = False
        # Depth-first, last first: a stack of sibling iterators.
        levels = [_siblings_backwards(len(starts) - 1, 0, firsts)]
        while levels:
            idx = next(levels[-1], None)
            if idx is None:
                levels.pop()
                continue
            size = ends[idx] - starts[idx]
            if stats.parsed_chars + size > budget or stats.attempts >= MAX_PARSE_ATTEMPTS:
                break
            stats.parsed_chars += size
            stats.attempts += 1
            try:
                obj = json.loads(text[starts[idx] : ends[idx]])  # a candidate object inside a model's reply: its
                # size is budgeted above, and what it holds is checked by the caller (the judge's verdict goes
                # through core.io.loads_record again, a response's fields through reward.response's own checks)
            except (ValueError, RecursionError):
                if firsts[idx] < idx:  # has children: try them in its place
                    levels.append(_siblings_backwards(idx - 1, firsts[idx], firsts))
                continue
            if isinstance(obj, dict):
                found_any = True
                yield obj
        if found_any:
            return


def find_json_objects(text: str, stats: ScanStats | None = None) -> list[dict]:
    """Every JSON object (dict) :func:`iter_json_objects` finds, in text order.

    >>> find_json_objects('Sure: ```json\\n{"answer": "a } b", "quotes": ["x"]}\\n``` done')
    [{'answer': 'a } b', 'quotes': ['x']}]
    """
    return list(iter_json_objects(text, stats))[::-1]


def _clean(s: str) -> str:
    # Lone surrogates (from "\ud800" escapes) cannot be encoded as UTF-8 and would break every later stage.
    s = s.encode("utf-8", "replace").decode("utf-8")
    return _WS.sub(" ", s).strip()


def normalise_quote(s: str) -> str:
    """Whitespace collapsed and stripped; lone surrogates replaced by ``?``. The wording itself is kept."""
    return _clean(s)


def _answer_text(value) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)  # a bare number is a legitimate answer ("answer": 42)
    if isinstance(value, str):
        return _clean(value)
    return None


def validate(obj: dict | None, max_quotes: int = DEFAULT_MAX_QUOTES, dedupe: bool = False) -> ParsedResponse:
    """Check one candidate object against the contract and normalise it: the first ``max_quotes`` non-empty quotes
    are kept in order (the rest counted in ``dropped``); ``dedupe`` drops exact repeats first.

    >>> validate({"answer": "x", "quotes": ["A", "A"]}).quotes
    ('A', 'A')
    >>> validate({"answer": "x", "quotes": ["A", "A", "B"]}, max_quotes=1, dedupe=True).dropped
    1
    """
    if obj is None:
        return ParsedResponse(False, "no_object", "", ())
    answer = _answer_text(obj.get("answer"))
    if not answer:
        return ParsedResponse(False, "no_answer", "", ())
    quotes = obj.get("quotes")
    if not isinstance(quotes, list) or not quotes:
        return ParsedResponse(False, "no_quotes", answer, ())
    if not all(isinstance(q, str) for q in quotes):
        return ParsedResponse(False, "non_string_quote", answer, ())
    seen: set[str] = set()
    kept: list[str] = []
    for q in quotes:
        q = normalise_quote(q)
        if q and not (dedupe and q in seen):
            seen.add(q)
            kept.append(q)
    if not kept:
        return ParsedResponse(False, "empty_quotes", answer, ())
    return ParsedResponse(True, None, answer, tuple(kept[:max_quotes]), max(0, len(kept) - max_quotes))


def select_object(objects: Iterable[dict]) -> dict | None:
    """From objects given last first: the first with an ``answer`` or ``quotes`` key, else the first, else None."""
    fallback = None
    for obj in objects:
        if "answer" in obj or "quotes" in obj:
            return obj
        if fallback is None:
            fallback = obj
    return fallback


def parse_response(text: str, max_quotes: int = DEFAULT_MAX_QUOTES, dedupe: bool = False) -> ParsedResponse:
    """extract -> normalise -> validate (``max_quotes`` and ``dedupe``: :func:`validate`).

    >>> parse_response('<think>...</think>```json\\n{"answer": "12%", "quotes": ["Revenue grew 12%."]}\\n```')
    ParsedResponse(ok=True, reason=None, answer='12%', quotes=('Revenue grew 12%.',))
    >>> parse_response("I cannot find it.").reason
    'no_object'
    """
    if max_quotes < 1:
        raise ValueError(f"max_quotes must be >= 1, got {max_quotes}")
    if not isinstance(text, str):
        return ParsedResponse(False, "no_object", "", ())
    return validate(select_object(iter_json_objects(strip_reasoning(text))), max_quotes, dedupe)
