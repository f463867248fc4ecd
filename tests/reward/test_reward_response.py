"""The response contract: extract -> normalise -> validate, one row per case."""

from __future__ import annotations

import json

import pytest

from reward.response import (
    DEFAULT_MAX_QUOTES,
    REJECT_REASONS,
    ScanStats,
    find_json_objects,
    parse_response,
    strip_reasoning,
)

OK = '{"answer": "12%", "quotes": ["Revenue grew 12% in 2023."]}'
Q = ("Revenue grew 12% in 2023.",)

PARSE_CASES = [
    # (response text, expected ok, expected reason, expected answer, expected quotes)
    (OK, True, None, "12%", Q),  # the plain contract
    ("<think>Let me look at page 3.</think>" + OK, True, None, "12%", Q),  # reasoning
    ("</think>\n" + OK, True, None, "12%", Q),  # template put <think> in the prompt
    ('<think>draft {"answer": "9%", "quotes": ["x"]}</think>' + OK, True, None, "12%", Q),  # draft in reasoning
    ("<think>a<think>b</think>c</think>" + OK, True, None, "12%", Q),  # nested think
    ('<think>still thinking {"answer": "9%", "quotes": ["x"]}', False, "no_object", "", ()),  # cut off mid-thought
    ("```json\n" + OK + "\n```", True, None, "12%", Q),  # markdown fence
    ("```\n" + OK + "\n```\nHope this helps!", True, None, "12%", Q),  # bare fence
    ("Here is my answer: " + OK + " Let me know.", True, None, "12%", Q),  # prose
    ('He said "hi. ' + OK, True, None, "12%", Q),  # unbalanced quote in prose
    ("Use {braces} in prose, then " + OK, True, None, "12%", Q),  # braces in prose
    ("A stray { before " + OK, True, None, "12%", Q),  # never-closed brace before
    ("{wrapper " + OK + " end}", True, None, "12%", Q),  # invalid span around it
    ('{ he said "hi ' + OK, True, None, "12%", Q),  # unbalanced quote inside a stray brace: second scan
    ('{"answer": "a } b {", "quotes": ["x \\" } y"]}', True, None, "a } b {", ('x " } y',)),  # braces/quotes in str
    ('{"answer": "9%", "quotes": ["a"]} then ' + OK, True, None, "12%", Q),  # last wins
    (OK + ' {"note": "extra"}', True, None, "12%", Q),  # later non-contract object
    (
        '{"answer": "营收增长12%", "quotes": ["2023年营收增长12%。"]}',
        True,
        None,
        "营收增长12%",
        ("2023年营收增长12%。",),
    ),  # CJK
    (
        '{"answer": "\\u8425\\u6536", "quotes": ["\\u00e9t\\u00e9 \\ud83d\\ude00"]}',
        True,
        None,
        "营收",
        ("été 😀",),
    ),  # escaped unicode incl. a surrogate pair
    ('{"answer": "x", "quotes": ["bad \\ud800 half"]}', True, None, "x", ("bad ? half",)),  # lone surrogate
    ('{"answer": 42, "quotes": ["q"]}', True, None, "42", ("q",)),  # a numeric answer
    ('{"answer": "  a\\n b ", "quotes": ["  two\\n\\tlines  "]}', True, None, "a b", ("two lines",)),  # whitespace
    ('{"answer": "x", "quotes": ["a", "a", "b", " a "]}', True, None, "x", ("a", "a", "b", "a")),  # repeats kept
    ('{"answer": "x", "quotes": ["", "  ", "a"]}', True, None, "x", ("a",)),  # empty quotes dropped, rest kept
    ("I could not find the answer.", False, "no_object", "", ()),  # no object
    ("", False, "no_object", "", ()),  # empty response
    ('{"answer": "x", "quotes": ["a"]', False, "no_object", "", ()),  # truncated object
    ("[1, 2, 3]", False, "no_object", "", ()),  # JSON, but not an object
    ('{"quotes": ["a"]}', False, "no_answer", "", ()),  # answer missing
    ('{"answer": "   ", "quotes": ["a"]}', False, "no_answer", "", ()),  # blank answer
    ('{"answer": ["x"], "quotes": ["a"]}', False, "no_answer", "", ()),  # answer not a string
    ('{"answer": true, "quotes": ["a"]}', False, "no_answer", "", ()),  # a boolean is not an answer
    ('{"foo": 1}', False, "no_answer", "", ()),  # an object without the contract's keys
    ('{"answer": "x"}', False, "no_quotes", "x", ()),  # quotes missing
    ('{"answer": "x", "quotes": []}', False, "no_quotes", "x", ()),  # empty list
    ('{"answer": "x", "quotes": "a"}', False, "no_quotes", "x", ()),  # a string, not a list
    ('{"answer": "x", "quotes": ["a", {"page": 3}]}', False, "non_string_quote", "x", ()),  # object quote
    ('{"answer": "x", "quotes": [null]}', False, "non_string_quote", "x", ()),  # null quote
    ('{"answer": "x", "quotes": ["", " \\n "]}', False, "empty_quotes", "x", ()),  # only blank quotes
]


@pytest.mark.parametrize(("text", "ok", "reason", "answer", "quotes"), PARSE_CASES)
def test_parse_response_table(text, ok, reason, answer, quotes):
    parsed = parse_response(text)
    assert (parsed.ok, parsed.reason, parsed.answer, parsed.quotes) == (ok, reason, answer, quotes)


def test_every_reject_reason_is_reachable():
    assert {row[2] for row in PARSE_CASES if not row[1]} == set(REJECT_REASONS)


def test_old_rule_dedupes_then_caps_in_order():
    quotes = ["q0", "q0", "q1", "q2", "q3", "q4"]
    parsed = parse_response(json.dumps({"answer": "x", "quotes": quotes}), max_quotes=3, dedupe=True)
    assert parsed.quotes == ("q0", "q1", "q2")
    assert parsed.dropped == 2  # q3, q4: counted, so the caller can log them


def test_repeated_quotes_are_separate_quotes_by_default():
    # The paper: every quote is resolved; the one-to-one assignment gives two equal quotes two blocks.
    text = json.dumps({"answer": "x", "quotes": ["A", "A"]})
    assert parse_response(text).quotes == ("A", "A")
    assert parse_response(text, dedupe=True).quotes == ("A",)  # the earlier rule


def test_no_silent_cap_ten_distinct_quotes_are_all_kept():
    quotes = [f"quote number {i}" for i in range(10)]
    parsed = parse_response(json.dumps({"answer": "x", "quotes": quotes}))
    assert parsed.quotes == tuple(quotes) and parsed.dropped == 0
    old = parse_response(json.dumps({"answer": "x", "quotes": quotes}), max_quotes=8, dedupe=True)
    assert old.quotes == tuple(quotes[:8]) and old.dropped == 2  # the earlier cap lost quotes 9 and 10


def test_safety_bound_keeps_the_first_quotes_and_counts_the_rest():
    assert DEFAULT_MAX_QUOTES >= 64
    quotes = [f"q{i}" for i in range(DEFAULT_MAX_QUOTES + 5)]
    parsed = parse_response(json.dumps({"answer": "x", "quotes": quotes}))
    assert parsed.quotes == tuple(quotes[:DEFAULT_MAX_QUOTES]) and parsed.dropped == 5


def test_non_string_input_is_no_object():
    assert parse_response(None).reason == "no_object"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a</think>b", "b"),  # closed reasoning dropped
        ("<think>a</think>b</think>c", "c"),  # everything up to the last close
        ("x<think>unfinished", "x"),  # unclosed: text before it only
        ("no tags", "no tags"),  # untouched
    ],
)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


def test_find_json_objects_returns_text_order():
    assert find_json_objects('a {"k": 1} b {"k": 2} c') == [{"k": 1}, {"k": 2}]


def test_second_scan_runs_only_when_the_first_finds_nothing():
    one, two = ScanStats(), ScanStats()
    find_json_objects("x " + OK, one)
    find_json_objects('{ he said "hi ' + OK, two)
    assert one.scanned == 10  # each brace, quote and backslash visited once
    assert two.scanned == 2 * 12  # string-aware scan found nothing; the string-blind one found the object


PATHOLOGICAL = [
    # (name, a 100 KB-periodic generator of text of length n)
    ("unclosed braces", lambda n: "{" * n),  # every brace opens, none closes
    ("deep nesting", lambda n: "{" * (n // 2) + "}" * (n // 2)),  # half a million levels
    ("many fragments", lambda n: ('{"a": 1} ' * (n // 9 + 1))[:n]),  # 100k tiny objects
    ("escaped quotes", lambda n: ('{"' + '\\"' * n)[:n]),  # one endless string of escapes
    ("braces in strings", lambda n: ('{"x": "}{" ' * (n // 11 + 1))[:n]),  # strings hiding braces, never closed
    ("valid objects", lambda n: ('{"answer": "x", "quotes": ["y {"]} ' * (n // 36 + 1))[:n]),  # real ones
]


@pytest.mark.parametrize(("name", "make"), PATHOLOGICAL, ids=[p[0] for p in PATHOLOGICAL])
def test_work_is_linear_in_response_size(name, make):
    """Counted steps (characters scanned + characters handed to json.loads) grow ~10x from 100 KB to 1 MB."""
    small, big = ScanStats(), ScanStats()
    find_json_objects(make(100_000), small)
    find_json_objects(make(1_000_000), big)
    assert big.steps <= 12 * max(small.steps, 1), (small.steps, big.steps)
    assert big.steps <= 8 * 1_000_000  # a small constant per character
    parse_response(make(1_000_000))  # and the full chain terminates on it


def test_the_real_object_after_many_fragments_is_found():
    text = '{"a": 1} ' * 100_000 + OK
    assert parse_response(text).answer == "12%"
