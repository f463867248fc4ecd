"""Hostile inputs at the last boundaries: the training parquet of ``reward check``, the reward
settings (``worker.reward.reward_function_kwargs``), the block records of a cache entry, the integer fields of gold
and prediction records, and the judge's verdicts. Each boundary has table-driven cases and one hypothesis
generator, fed to every command that crosses it; all run through the harness (harness.py), so they are counted in
the suite's summary, and each asserts the exact error (the file, row and field named) or the exact count.

* **parquet**: columns of the wrong type (``prompt`` as int64, ``images`` as a string or a list of ints,
  ``answer`` as a number), nulls in required columns, missing columns, hostile numbers inside the packed ground
  truth, a FIFO or a non-parquet file: one ``reward check failed: data: ...`` line naming the file, the row, the
  column and the type expected;
* **settings**: every numeric reward setting given a word, NaN, an infinity, a bool, a 400-digit integer and a
  value out of range, through the EasyR1 plugin (``reward/quote_reward.py``), ``reward score --recipe`` and
  ``reward check --recipe``; JSON settings holding NaN; unknown keys with a suggestion;
* **cache**: a ``blocks.jsonl`` (its checksums kept consistent) whose ``block_id``, ``page``, ``parent``, ``bbox``,
  ``type`` or ``text`` is of the wrong kind (``"page": true`` is not page 1), and a manifest holding a 5,000-digit
  number, for every command that loads a cache entry;
* **gold/predictions**: ``"index": true`` (a bool is an int in Python), a bool block id or page, in every command
  that reads gold or prediction records;
* **judge**: verdicts holding NaN, infinities, 400- and 5,000-digit integers or nesting past the bound are
  unparseable (counted in ``JudgeStats.unparseable``), never an exception, for the judge client and the commands.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import InputError
from tests.hostile import harness
from tests.hostile.harness import Case, clean_error, ids, run_case, success, value
from tests.hostile.test_boundaries import HANG_S, HYP, RECORD_SLOTS, fresh, hostile_number, make_special, slot_setup
from tests.hostile.test_hostile_reward import HTTP, chat_reply, with_server
from tests.support.openai_server import Reply, chat_completion

REPO = Path(__file__).resolve().parents[2]
FAILURE_PREFIX = "reward check failed: "


def run_exact(case: Case, tmp: Path, env, suite: str, expected: str | None = None, prefix: bool = False):
    """Run ``case``; it must end in a good outcome within :data:`HANG_S`, and with a clean error its one error
    line must be ``error: <expected>`` (or start with it, ``prefix``)."""
    outcome, why, res = run_case(case, tmp, env, suite)
    assert outcome in ("clean_error", "success"), f"{case.name}: {outcome}: {why}"
    assert res.seconds < HANG_S, f"{case.name}: took {res.seconds:.1f} s (a hang)"
    if expected is not None:
        want = "error: " + expected.format(tmp=tmp, **_vars(tmp, env))
        line = why.strip()
        line = line[line.find("error: ") :] if "error: " in line else line  # after "python -m PROG: "
        assert line.startswith(want) if prefix else line == want, f"{case.name}:\n got  {line!r}\n want {want!r}"
    return res


def _vars(tmp: Path, env) -> dict:
    return {"key": env.doc_key, "cache": tmp / "cache"} if env is not None else {}


def cli_as_error(argv_fn):
    """A command line as a library case whose failure lines (``reward check failed: KIND: ...``, which are not
    ``error:`` lines) become the case's one error; a traceback stays a crash."""

    def cmd(c):
        res = harness.run_cli([str(a) for a in argv_fn(c)])
        if res.exc is not None:
            raise res.exc
        if "Traceback (most recent call last)" in res.stderr:
            sys.stderr.write(res.stderr)
            return None
        if res.rc:
            lines = [ln[len(FAILURE_PREFIX) :] for ln in res.stderr.splitlines() if ln.startswith(FAILURE_PREFIX)]
            errors = [ln.split("error:", 1)[1].strip() for ln in res.stderr.splitlines() if "error:" in ln]
            raise InputError(" | ".join(lines + errors) or f"exit {res.rc}")
        return res.stdout

    return cmd


# ---------------------------------------------------------------------------------------------- the training set
def recipe_text(data: Path, cache: Path, kwargs: str = "") -> str:
    return (
        f"data:\n  train_files: {data}\nworker:\n  reward:\n"
        f"    reward_function: {REPO / 'reward' / 'quote_reward.py'}:compute_score\n"
        f"    reward_function_kwargs:\n      cache_dir: {cache}\n      judge: lexical\n      resolver: lexical\n"
        + "".join(f"      {line}\n" for line in kwargs.splitlines() if line.strip())
    )


def base_rows(c) -> list[dict]:
    """One clean training row of the hostile environment's document: a one-page window, its one image."""
    from data_prep.groundtruth import GroundTruth, pack_ground_truth

    (c.tmp / "p1.png").write_bytes(b"\x89PNG stand-in")
    gt = pack_ground_truth(GroundTruth("q0", c.env.doc_key, "What grew?", "revenue", (1, 1)))
    return [{"prompt": "<image>What grew?", "images": ["p1.png"], "answer": gt, "doc_key": c.env.doc_key,
             "n_images": 1}]  # fmt: skip


def parquet_setup(mutate=None, table=None, kind: str | None = None, cache=None):
    """Set-up: ``tmp/train.parquet`` from the clean row changed by ``mutate(rows, c)`` (or built by
    ``table(rows) -> pa.Table``; ``kind``: a special file instead), and a recipe of the lexical reward."""

    def setup(c) -> None:
        rows = base_rows(c)
        data = c.tmp / "train.parquet"
        if kind is not None:
            make_special(c, "train.parquet", kind)
        else:
            if mutate is not None:
                mutate(rows, c)
            pq.write_table(table(rows) if table is not None else pa.Table.from_pylist(rows), data)
        c.vars["data"] = data
        c.vars["cache"] = cache(c) if cache is not None else c.env.cache_dir
        c.vars["recipe"] = c.write("recipe.yaml", recipe_text(data, c.vars["cache"]))
        c.protect(c.env.cache_dir)
        if kind is None:
            c.protect(data)

    return setup


REWARD_CHECK = cli_as_error(lambda c: ["reward", "check", "--recipe", c.vars["recipe"], "--data", c.vars["data"]])


def put(column: str, value):
    def mutate(rows, c) -> None:
        rows[0][column] = value

    return mutate


def drop(column: str):
    def mutate(rows, c) -> None:
        del rows[0][column]

    return mutate


def two_rows_second(column: str, value):
    """Two rows; the second has ``column`` set to ``value`` (a null in a column of strings)."""

    def mutate(rows, c) -> None:
        rows.append({**rows[0], column: value})

    return mutate


def packed(text_fn):
    def mutate(rows, c) -> None:
        rows[0]["answer"] = text_fn(rows[0]["answer"])

    return mutate


def struct_answer(rows, c) -> None:
    rows[0]["answer"] = json.loads(rows[0]["answer"])


def embedded_images(rows, c) -> None:
    rows[0]["images"] = [{"bytes": b"\x89PNG stand-in", "path": None}]


def typed(column: str, arrow_type):
    """A table whose ``column`` has ``arrow_type`` (a value pyarrow would not infer: a list of large strings)."""

    def build(rows):
        t = pa.Table.from_pylist(rows)
        return t.set_column(t.schema.get_field_index(column), column, pa.array([r[column] for r in rows], arrow_type))

    return build


ROW = "data: 1 row: {tmp}/train.parquet row 0: "
NOCOL = "data: 1 problem: {tmp}/train.parquet: no column(s) "
GT = "ground_truth: 1 row: column 'answer': "
PARQUET_CASES = [
    # (case name, set-up, the exact failure (None: it passes), prefix only)
    ("prompt-int64", parquet_setup(put("prompt", 5)), ROW + "field 'prompt' must be a string, got int", False),
    ("prompt-double", parquet_setup(put("prompt", 2.5)), ROW + "field 'prompt' must be a string, got float", False),
    ("prompt-bool", parquet_setup(put("prompt", True)), ROW + "field 'prompt' must be a string, got bool", False),
    ("prompt-list", parquet_setup(put("prompt", ["<image>", "q"])), ROW + "field 'prompt' must be a string, got "
     "list", False),
    ("prompt-null", parquet_setup(put("prompt", None)), ROW + "column 'prompt' is null, expected a string", False),
    ("prompt-null-second-row", parquet_setup(two_rows_second("prompt", None)),
     "data: 1 row: {tmp}/train.parquet row 1: column 'prompt' is null, expected a string", False),
    ("images-string", parquet_setup(put("images", "p1.png")), ROW + "field 'images' must be a list of image paths, "
     "got str 'p1.png'", False),
    ("images-int", parquet_setup(put("images", 1)), ROW + "field 'images' must be a list of image paths, got int "
     "'1'", False),
    ("images-list-of-ints", parquet_setup(put("images", [1])), ROW + "field 'images[0]' must be a string, got int",
     False),
    ("images-list-of-bools", parquet_setup(put("images", [True])), ROW + "field 'images[0]' must be a string, got "
     "bool", False),
    ("images-list-of-lists", parquet_setup(put("images", [["p1.png"]])), ROW + "field 'images[0]' must be a "
     "string, got list", False),
    ("images-null", parquet_setup(put("images", None)), ROW + "column 'images' is null, expected a list of image "
     "paths", False),
    ("images-null-item", parquet_setup(put("images", [None])), ROW + "field 'images[0]' is missing", False),
    ("images-nul-byte", parquet_setup(put("images", ["p\x00.png"])), "missing_image: 1 row, 1 document: "
     "{tmp}/p\x00.png does not exist", False),
    ("images-path-5000-chars", parquet_setup(put("images", ["p" * 5000])), "missing_image: 1 row, 1 document: "
     "{tmp}/" + "p" * 5000 + " does not exist", False),
    ("answer-int64", parquet_setup(put("answer", 5)), ROW + "field 'answer' must be a string (the packed ground "
     "truth) or a struct, got int '5'", False),
    ("answer-double-nan", parquet_setup(put("answer", float("nan"))), ROW + "field 'answer' must be a string (the "
     "packed ground truth) or a struct, got float 'nan'", False),
    ("answer-list", parquet_setup(put("answer", ["q0"])), ROW + "field 'answer' must be a string (the packed ground "
     "truth) or a struct, got list", True),
    ("answer-null", parquet_setup(put("answer", None)), ROW + "column 'answer' is null, expected a string (the "
     "packed ground truth) or a struct", False),
    ("answer-int5000", parquet_setup(packed(lambda t: t.replace('"q0"', "1" * 5000))),
     GT + "an integer of 5000 digits (more than 300)", False),
    ("answer-nan-page", parquet_setup(packed(lambda t: t.replace("[1, 1]", "[NaN, 1]"))),
     GT + "NaN is not a finite number (NaN and infinities are refused)", False),
    ("answer-infinity", parquet_setup(packed(lambda t: t.replace('"revenue"', "Infinity"))),
     GT + "Infinity is not a finite number (NaN and infinities are refused)", False),
    ("answer-float-overflow", parquet_setup(packed(lambda t: t.replace('"revenue"', "1e400"))),
     GT + "the number 1e400 is too large (not a finite number)", False),
    ("answer-deep", parquet_setup(packed(lambda t: "[" * 3000 + "]" * 3000)),
     GT + "JSON nested too deeply (more than 200 levels)", False),
    ("n-images-text", parquet_setup(put("n_images", "1")), ROW + "field 'n_images' must be an integer, got str "
     "'1'", False),
    ("n-images-bool", parquet_setup(put("n_images", True)), ROW + "field 'n_images' must be an integer, got a bool "
     "(True)", False),
    ("n-images-fraction", parquet_setup(put("n_images", 1.5)), ROW + "field 'n_images' must be an integer, got 1.5",
     False),
    ("n-images-nan", parquet_setup(put("n_images", float("nan"))), ROW + "field 'n_images' must be an integer, got "
     "nan", False),
    ("n-images-negative", parquet_setup(put("n_images", -1)), ROW + "field 'n_images' = -1 is out of range [0, "
     "100000]", False),
    ("n-images-huge", parquet_setup(put("n_images", 2**62)), ROW + f"field 'n_images' = {2**62} is out of range [0, "
     "100000]", False),
    ("doc-key-int", parquet_setup(put("doc_key", 7)), ROW + "field 'doc_key' must be a string, got int", False),
    ("missing-prompt", parquet_setup(drop("prompt")), NOCOL + "prompt (has ", True),
    ("missing-images", parquet_setup(drop("images")), NOCOL + "images (has ", True),
    ("missing-answer", parquet_setup(drop("answer")), NOCOL + "answer (has ", True),
    ("fifo", parquet_setup(kind="fifo"), "data: 1 problem: {tmp}/train.parquet: is a FIFO (named pipe), not a "
     "regular file", False),
    ("folder", parquet_setup(kind="dir"), "data: 1 problem: {tmp}/train.parquet: a folder with no .parquet file",
     False),
    ("missing-file", parquet_setup(kind="missing"), "data: 1 problem: {tmp}/train.parquet: no such file", False),
    ("binary", parquet_setup(kind="binary"), "data: 1 problem: {tmp}/train.parquet: not a readable parquet file (",
     True),
    # what EasyR1 accepts passes: a struct ground truth, images embedded as bytes, large strings
    ("answer-struct", parquet_setup(struct_answer), None, False),
    ("images-embedded", parquet_setup(embedded_images), None, False),
    ("images-large-strings", parquet_setup(table=typed("images", pa.list_(pa.large_string()))), None, False),
    ("clean", parquet_setup(), None, False),
]  # fmt: skip


@pytest.mark.parametrize("name, setup, expected, prefix", PARQUET_CASES, ids=[n for n, *_ in PARQUET_CASES])
def test_parquet(name, setup, expected, prefix, hostile_env, tmp_path):
    expect = success() if expected is None else clean_error()
    run_exact(Case(f"parquet-{name}", REWARD_CHECK, expect, setup), tmp_path, hostile_env, "boundary parquet",
              expected, prefix)  # fmt: skip


def wrong_value(column: str):
    """A value pyarrow stores in ``column`` that the check must refuse for its type."""
    ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
    floats = st.floats(allow_nan=True, allow_infinity=True)
    lists = st.lists(st.one_of(ints, st.booleans()), min_size=1, max_size=3).filter(
        lambda v: len({type(x) for x in v}) == 1
    )
    common = [ints, floats, st.booleans(), lists]
    if column in ("images", "n_images"):
        common.append(st.text(max_size=20))
    if column == "n_images":  # an integer in range is a count (compared with the images), not a type error
        common = [st.integers(max_value=-1, min_value=-(2**63)), st.integers(min_value=100_001, max_value=2**63 - 1),
                  floats.filter(lambda f: f != f or f in (float("inf"), -float("inf")) or f != int(f)),
                  st.booleans(), lists, st.text(max_size=20)]  # fmt: skip
    if column in ("prompt", "answer", "images"):
        common.append(st.none())
    return st.one_of(*common)


@pytest.mark.parametrize("column", ["prompt", "answer", "images", "n_images", "doc_key"])
@HYP
@given(data=st.data())
def test_generated_parquet(column, data, hostile_env, tmp_path_factory):
    """A generated value of the wrong type in any column: one failure line naming the file, row 0 and the column."""
    v = data.draw(wrong_value(column))
    tmp = fresh(tmp_path_factory)
    case = Case(
        f"gen-parquet-{column}", REWARD_CHECK, clean_error(f"'{column}", "row 0"), parquet_setup(put(column, v))
    )
    run_exact(case, tmp, hostile_env, "boundary generated", ROW, prefix=True)


# ---------------------------------------------------------------------------------------------- reward settings
# (setting, int or float, lowest allowed, highest allowed, lowest excluded)
NUMERIC_SETTINGS = [
    ("concurrency", "int", 1, 4096, False),
    ("timeout_s", "float", 0, 86_400, True),
    ("retries", "int", 0, 100, False),
    ("backoff_s", "float", 0, 3_600, False),
    ("judge_outage_s", "float", 0, 30 * 86_400, False),
    ("batch_groups", "int", 1, None, False),
    ("samples_every", "int", 0, None, False),
    ("samples_groups", "int", 1, 1_000_000, False),
    ("samples_max_mb", "float", 0, 10_000_000, True),
    ("judge_max_tokens", "int", 1, 1_000_000, False),
    ("judge_temperature", "float", 0, 10, False),
    ("max_crops", "int", 0, 1_000, False),
    ("crop_dpi", "float", 0, 1_200, True),
    ("max_quotes", "int", 1, 1_000_000, False),
    ("doc_cache_size", "int", 1, 1_000_000, False),
    ("abstain_threshold", "float", None, None, False),
]
BIG = "9" * 400


def bad_settings(name: str, kind: str, lo, hi, lo_open: bool) -> list[tuple[str, object, str, str]]:
    """(label, YAML text of the value, the Python value, the start of the expected message)."""
    head = f"reward setting {name}: expected {kind}, got "
    number = "an integer" if kind == "int" else "a number"
    out = [
        ("word", "abc", "abc", head + "'abc' ("),
        ("nan", ".nan", float("nan"), head + "'nan' (expected " + ("an integer" if kind == "int" else "a finite")),
        ("inf", ".inf", float("inf"), head + "'inf' (expected " + ("an integer" if kind == "int" else "a finite")),
        ("bool", "true", True, head + "True"),
        ("digits400", BIG, int(BIG), head + f"'{BIG[:40]}' (expected {number}, got 400 characters)"),
    ]
    if lo is not None:
        below = lo if lo_open else lo - 1
        rule = f"{'>' if lo_open else '>='} {lo}"
        out.append(("below", str(below), below, f"reward setting {name} must be {rule}"))
    if hi is not None:
        out.append(("above", str(hi + 1), hi + 1, f"reward setting {name} must be "))
    return out


# (label, YAML lines of reward_function_kwargs, the same as Python keyword arguments, the expected message)
OTHER_SETTINGS = [
    ("unknown-key", "concurency: 4", {"concurency": 4}, "unknown reward setting 'concurency'; did you mean "
     "'concurrency'?"),
    ("unknown-key-far", "zzzzzz: 4", {"zzzzzz": 4}, "unknown reward setting 'zzzzzz' (known: cache_dir, "),
    ("bool-word", "dedupe_quotes: perhaps", {"dedupe_quotes": "perhaps"}, "reward setting dedupe_quotes: expected "
     "bool, got 'perhaps'"),
    ("str-number", "judge_model: 5", {"judge_model": 5}, "reward setting judge_model: expected str, got int '5'"),
    ("str-list", "encoder: [a, b]", {"encoder": ["a", "b"]}, "reward setting encoder: expected str, got list"),
    ("candidates", "candidates: pages", {"candidates": "pages"}, "reward setting candidates must be one of document, "
     "window: expected one of document, window, got 'pages'"),
    ("weights-nan", "reward_form: additive\nweights: {answer: .nan}", {"reward_form": "additive",
     "weights": {"answer": float("nan")}}, "reward setting weights: NaN is not a finite number (NaN and "
     "infinities are refused)"),
    ("weights-word", "reward_form: additive\nweights: {answer: lots}", {"reward_form": "additive",
     "weights": {"answer": "lots"}}, "reward setting weights.answer: expected a number, got 'lots'"),
    ("weights-text-int5000", "weights: '{\"answer\": " + "1" * 5000 + "}'", {"weights": '{"answer": ' + "1" * 5000
     + "}"}, "reward setting weights: an integer of 5000 digits (more than 300)"),
    ("extra-body-inf", "judge_extra_body: {top_k: .inf}", {"judge_extra_body": {"top_k": float("inf")}},
     "reward setting judge_extra_body: Infinity is not a finite number (NaN and infinities are refused)"),
    ("extra-body-list", "judge_extra_body: [1]", {"judge_extra_body": [1]}, "reward setting judge_extra_body: "
     "expected dict, got list"),
    ("keep-band-nan", "keep_band: [0.1, .nan]", {"keep_band": [0.1, float("nan")]}, "reward setting keep_band: NaN "
     "is not a finite number (NaN and infinities are refused)"),
    ("keep-band-reversed", "keep_band: [0.9, 0.1]", {"keep_band": [0.9, 0.1]}, "reward setting keep_band: "
     "filter_low 0.9 is above filter_high 0.1"),
    ("keep-band-bool", "keep_band: [true, 0.5]", {"keep_band": [True, 0.5]}, "reward setting keep_band[0]: "
     "expected a number, got True"),
    ("keep-band-short", "keep_band: [0.5]", {"keep_band": [0.5]}, "reward setting keep_band: expected "
     "[filter_low, filter_high], got [0.5]"),
    ("lat-word", "reward_form: lat\nlat: {tau: abc}", {"reward_form": "lat", "lat": {"tau": "abc"}},
     "reward setting lat.tau: expected a number, got 'abc'"),
    ("lat-nan", "reward_form: lat\nlat: {tau: .nan}", {"reward_form": "lat", "lat": {"tau": float("nan")}},
     "reward setting lat: NaN is not a finite number (NaN and infinities are refused)"),
    ("lat-bool", "reward_form: lat\nlat: {max_steps: true}", {"reward_form": "lat", "lat": {"max_steps": True}},
     "reward setting lat.max_steps: expected a number, got True"),
    ("lat-huge", "reward_form: lat\nlat: {max_steps: " + BIG + "}", {"reward_form": "lat", "lat": {"max_steps":
     int(BIG)}}, "reward setting lat: an integer of 400 digits (more than 300)"),
]  # fmt: skip


def plugin_cmd(kwargs: dict):
    """The EasyR1 plugin, as EasyR1 calls it: ``compute_score(inputs, **reward_function_kwargs)``."""

    def cmd(c):
        from reward.quote_reward import compute_score

        rows = [json.loads(x) for x in c.env.inputs.read_text(encoding="utf-8").splitlines()]
        return compute_score(rows, **{"cache_dir": str(c.env.cache_dir), "judge": "lexical", "resolver": "lexical",
                                      **kwargs})  # fmt: skip

    return cmd


def settings_setup(yaml_lines: str):
    def setup(c) -> None:
        rows = base_rows(c)
        data = c.tmp / "train.parquet"
        pq.write_table(pa.Table.from_pylist(rows), data)
        c.vars.update(data=data, cache=c.env.cache_dir, inputs=c.env.inputs)
        c.vars["recipe"] = c.write("recipe.yaml", recipe_text(data, c.env.cache_dir, yaml_lines))

    return setup


SETTING_COMMANDS = {
    "plugin": None,
    "score": ["reward", "score", "--recipe", "{recipe}", "--inputs", "{inputs}", "--cache-dir", "{cache}", "--out",
              "{tmp}/out.jsonl"],
    "check": cli_as_error(lambda c: ["reward", "check", "--recipe", c.vars["recipe"]]),
}  # fmt: skip


def setting_case(cmd: str, label: str, yaml_lines: str, kwargs: dict, expected: str) -> tuple[Case, str]:
    """The case and its exact expected error line (without ``error: ``)."""
    if cmd == "plugin":
        command = plugin_cmd(kwargs)
    else:
        command = SETTING_COMMANDS[cmd]
    want = f"config: 1 problem: {expected}" if cmd == "check" else expected
    return Case(f"setting-{cmd}-{label}", command, clean_error(), settings_setup(yaml_lines)), want


SETTING_CASES = [
    setting_case(cmd, f"{name}-{label}", f"{name}: {text}", {name: v}, msg)
    for cmd in SETTING_COMMANDS
    for name, kind, lo, hi, lo_open in NUMERIC_SETTINGS
    for label, text, v, msg in bad_settings(name, kind, lo, hi, lo_open)
] + [
    setting_case(cmd, label, lines, kwargs, msg) for cmd in SETTING_COMMANDS for label, lines, kwargs, msg in
    OTHER_SETTINGS
]  # fmt: skip


@pytest.mark.parametrize("case, expected", SETTING_CASES, ids=ids([c for c, _ in SETTING_CASES]))
def test_settings(case, expected, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    monkeypatch.delenv("QUOTECITE_METRICS_DIR", raising=False)
    run_exact(case, tmp_path, hostile_env, "boundary settings", expected, prefix=True)


def test_good_settings_still_build(hostile_env, tmp_path):
    """The validators refuse only what is wrong: every numeric setting at its bounds, given as text, builds."""
    from reward.config import RewardConfig

    for name, kind, lo, hi, lo_open in NUMERIC_SETTINGS:
        for v in [x for x in (lo, hi) if x is not None and not (x == lo and lo_open)] or [0.5]:
            c = RewardConfig.from_kwargs(cache_dir="/x", judge="lexical", **{name: str(v)})
            assert getattr(c, name) == v and type(getattr(c, name)).__name__ == kind, (name, v, getattr(c, name))
    harness.RESULTS.append(("boundary settings", "settings-at-bounds", "success"))


def yaml_text(v) -> str:
    """``v`` as a YAML scalar (NaN and infinities in YAML's spelling, text quoted)."""
    if isinstance(v, float) and v != v:
        return ".nan"
    if isinstance(v, float) and abs(v) == float("inf"):
        return ".inf" if v > 0 else "-.inf"
    return json.dumps(v)


def hostile_setting_value(kind: str, lo, hi, lo_open: bool):
    parts = [
        st.sampled_from(["nan", "-nan", "inf", "-inf", "abc", "1,5", "0x10", "1e99999", "none!"]),
        st.sampled_from([float("nan"), float("inf"), -float("inf"), True, False]),
        st.integers(min_value=65, max_value=2000).map(lambda n: int("8" * n)),
    ]
    if lo is not None:
        parts.append(st.integers(max_value=int(lo) - (0 if lo_open else 1), min_value=-(10**30)))
    if hi is not None:
        parts.append(st.integers(min_value=int(hi) + 1, max_value=10**30))
    if kind == "int":
        parts.append(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)
                     .filter(lambda f: f != int(f)))  # fmt: skip
    return st.one_of(*parts)


@pytest.mark.parametrize("cmd", ["plugin", "score"])
@pytest.mark.parametrize("name, kind, lo, hi, lo_open", NUMERIC_SETTINGS, ids=[s[0] for s in NUMERIC_SETTINGS])
@HYP
@given(data=st.data())
def test_generated_settings(cmd, name, kind, lo, hi, lo_open, data, hostile_env, tmp_path_factory, monkeypatch):
    """A generated out-of-domain value of any numeric setting: one error naming the setting, from the plugin and
    from ``reward score --recipe`` alike."""
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    v = data.draw(hostile_setting_value(kind, lo, hi, lo_open))
    case, _ = setting_case(cmd, name, f"{name}: {yaml_text(v)}", {name: v}, "")
    tmp = fresh(tmp_path_factory)
    run_exact(case, tmp, hostile_env, "boundary generated", f"reward setting {name}", prefix=True)


# ---------------------------------------------------------------------------------------------- cache records
def cache_setup(edit_block=None, raw_line=None, edit_manifest=None, raw_manifest=None, parquet: bool = False):
    """Set-up: a private copy of the cache whose first block record is changed (``edit_block(dict)`` or the line
    replaced by ``raw_line``) with the manifest's checksums made to agree, so only the record itself is wrong;
    or the manifest changed (``edit_manifest``, checksum kept) or replaced by ``raw_manifest``."""

    def setup(c) -> None:
        from data_prep.cache import manifest_content_sha256

        cache = c.env.copy_cache(c.tmp / "cache")
        entry = cache / c.env.doc_key
        lines = (entry / "blocks.jsonl").read_text(encoding="utf-8").splitlines()
        if edit_block is not None:
            d = json.loads(lines[0])
            edit_block(d)
            lines[0] = json.dumps(d)
        if raw_line is not None:
            lines[0] = raw_line(lines[0])
        data = ("\n".join(lines) + "\n").encode("utf-8")
        (entry / "blocks.jsonl").write_bytes(data)
        manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
        manifest["blocks_sha256"] = hashlib.sha256(data).hexdigest()
        if edit_manifest is not None:
            edit_manifest(manifest)
        manifest["content_sha256"] = manifest_content_sha256(manifest)
        text = json.dumps(manifest)
        if raw_manifest is not None:
            text = raw_manifest(text)
        (entry / "manifest.json").write_text(text, encoding="utf-8")
        c.vars.update(cache=cache, key=c.env.doc_key, gold=c.env.gold, raw=c.env.raw, inputs=c.env.inputs)
        if parquet:
            parquet_setup(cache=lambda c: cache)(c)
        c.protect(cache)

    return setup


def set_field(key: str, v):
    def edit(d) -> None:
        d[key] = v

    return edit


def del_field(key: str):
    def edit(d) -> None:
        d.pop(key)

    return edit


B = "{cache}/{key}/blocks.jsonl:1: "
M = "{cache}/{key}/manifest.json: "
CACHE_RECORDS = [
    # (label, setup keyword arguments, the CacheError message)
    ("block-id-text", {"edit_block": set_field("block_id", "0")}, B + "field 'block_id' must be an integer, got str "
     "'0'; rebuild"),
    ("block-id-bool", {"edit_block": set_field("block_id", False)}, B + "field 'block_id' must be an integer, got a "
     "bool (False); rebuild"),
    ("block-id-fraction", {"edit_block": set_field("block_id", 0.5)}, B + "field 'block_id' must be an integer, got "
     "0.5; rebuild"),
    ("block-id-negative", {"edit_block": set_field("block_id", -1)}, B + "field 'block_id' = -1 is out of range [0, "
     "None]; rebuild"),
    ("block-id-null", {"edit_block": set_field("block_id", None)}, B + "field 'block_id' is missing; rebuild"),
    ("block-id-list", {"edit_block": set_field("block_id", [0])}, B + "field 'block_id' must be an integer, got list "
     "'[0]'; rebuild"),
    ("block-id-out-of-order", {"edit_block": set_field("block_id", 1)}, B + "field 'block_id' is 1, expected 0 (ids "
     "are 0..N-1 in order: the rows of embeddings.npy); rebuild"),
    ("block-id-nan", {"raw_line": lambda t: t.replace('"block_id": 0', '"block_id": NaN', 1)}, B
     + "NaN is not a finite number (NaN and infinities are refused); rebuild"),
    ("block-id-int5000", {"raw_line": lambda t: t.replace('"block_id": 0', '"block_id": ' + "1" * 5000, 1)},
     B + "an integer of 5000 digits (more than 300); rebuild"),
    ("page-bool", {"edit_block": set_field("page", True)}, B + "field 'page' must be an integer, got a bool (True); "
     "rebuild"),
    ("page-text", {"edit_block": set_field("page", "1")}, B + "field 'page' must be an integer, got str '1'; rebuild"),
    ("page-fraction", {"edit_block": set_field("page", 1.5)}, B + "field 'page' must be an integer, got 1.5; rebuild"),
    ("page-zero", {"edit_block": set_field("page", 0)}, B + "field 'page' = 0 is out of range [1, None]; rebuild"),
    ("page-infinity", {"raw_line": lambda t: t.replace('"page": 1', '"page": Infinity', 1)}, B
     + "Infinity is not a finite number (NaN and infinities are refused); rebuild"),
    ("page-missing", {"edit_block": del_field("page")}, B + "field 'page' is missing; rebuild"),
    ("parent-bool", {"edit_block": set_field("parent", True)}, B + "field 'parent' must be an integer, got a bool "
     "(True); rebuild"),
    ("parent-text", {"edit_block": set_field("parent", "0")}, B + "field 'parent' must be an integer, got str '0'; "
     "rebuild"),
    ("parent-dangling", {"edit_block": set_field("parent", 10**6)}, "{cache}/{key}/blocks.jsonl: block 0: field "
     "'parent' = 1000000 is not a block id; rebuild"),
    ("bbox-text", {"edit_block": set_field("bbox", ["a", 0, 1, 1])}, B + "field 'bbox' must be a number, got str "
     "'a'; rebuild"),
    ("bbox-bool", {"edit_block": set_field("bbox", [True, 0, 1, 1])}, B + "field 'bbox' must be a number, got bool "
     "'True'; rebuild"),
    ("bbox-three", {"edit_block": set_field("bbox", [0, 0, 1])}, B + "field 'bbox' must be [x0, y0, x1, y1], got "
     "[0, 0, 1]; rebuild"),
    ("bbox-overflow", {"raw_line": lambda t: t.replace('"bbox": [', '"bbox": [1e400, ', 1)}, B
     + "the number 1e400 is too large (not a finite number); rebuild"),
    ("type-number", {"edit_block": set_field("type", 5)}, B + "field 'type' must be a string, got int; rebuild"),
    ("type-unknown", {"edit_block": set_field("type", "blob")}, B + "block 0: unknown type 'blob'; expected one of "),
    ("text-number", {"edit_block": set_field("text", 5)}, B + "field 'text' must be a string, got int; rebuild"),
    ("line-not-object", {"raw_line": lambda t: "[1, 2]"}, B + "expected a JSON object (a block record), got list; "
     "rebuild"),
    ("line-deep", {"raw_line": lambda t: "[" * 3000 + "]" * 3000}, B + "JSON nested too deeply (more than 200 "
     "levels); rebuild"),
    ("manifest-n-pages-bool", {"edit_manifest": set_field("n_pages", True)}, M + "n_pages True is not a positive "
     "page count; rebuild"),
    ("manifest-int5000", {"raw_manifest": lambda t: t.replace('"created": ', '"created": ' + "1" * 5000 + ", \"x\": ",
                                                             1)},
     M + "unreadable manifest ({cache}/{key}/manifest.json: an integer of 5000 digits (more than 300))"),
    ("manifest-nan", {"raw_manifest": lambda t: t.replace('"created": ', '"created": NaN, "x": ', 1)},
     M + "unreadable manifest ({cache}/{key}/manifest.json: NaN is not a finite number (NaN and infinities are "
     "refused))"),
]  # fmt: skip

CACHE_COMMANDS = {
    "show": (["data_prep", "show", "{key}", "--cache-dir", "{cache}", "--out", "{tmp}/s.png"], "", False),
    "resolve": (["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out",
                 "{tmp}/p.jsonl", "--resolver", "lexical"], "", False),
    "reward-score": (["reward", "score", "--inputs", "{inputs}", "--cache-dir", "{cache}", "--out", "{tmp}/out.jsonl",
                      "--judge", "lexical", "--resolver", "lexical"], "", False),
    "reward-check": (cli_as_error(lambda c: ["reward", "check", "--recipe", c.vars["recipe"], "--data",
                                             c.vars["data"]]), "cache: 1 row, 1 document: ", True),
}  # fmt: skip

CACHE_CASES = [
    (Case(f"cache-{cmd}-{label}", argv, clean_error("blocks.jsonl" if "manifest" not in label else "manifest.json"),
          cache_setup(**kw, parquet=needs_parquet)), head + msg)
    for cmd, (argv, head, needs_parquet) in CACHE_COMMANDS.items()
    for label, kw, msg in CACHE_RECORDS
]  # fmt: skip


@pytest.mark.parametrize("case, expected", CACHE_CASES, ids=ids([c for c, _ in CACHE_CASES]))
def test_cache_records(case, expected, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    monkeypatch.delenv("QUOTECITE_METRICS_DIR", raising=False)
    run_exact(case, tmp_path, hostile_env, "boundary cache", expected, prefix=True)


not_an_int = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6).filter(lambda f: f != int(f)),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["a", "page"]), st.integers(0, 3), max_size=1),
)
"""A JSON value that is not an integer (a bool is not one here)."""


@pytest.mark.parametrize("cmd", ["show", "resolve"])
@HYP
@given(field=st.sampled_from(["block_id", "page", "parent"]), v=not_an_int)
def test_generated_cache_records(cmd, field, v, hostile_env, tmp_path_factory, monkeypatch):
    """A generated non-integer id, page or parent in a block record: one error naming blocks.jsonl:1 and the field."""
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    argv = CACHE_COMMANDS[cmd][0]
    case = Case(f"gen-cache-{cmd}-{field}", argv, clean_error("blocks.jsonl:1", f"field '{field}'"),
                cache_setup(edit_block=set_field(field, v)))  # fmt: skip
    tmp = fresh(tmp_path_factory)
    run_exact(case, tmp, hostile_env, "boundary generated", B + f"field '{field}' must be an integer, got ",
              prefix=True)  # fmt: skip


# ---------------------------------------------------------------------------------------------- gold and predictions
def first_record(fn):
    """A mutation of a JSONL text: ``fn(first record)`` applied, the other lines kept."""

    def mutate(text: str) -> str:
        lines = text.splitlines()
        d = json.loads(lines[0])
        fn(d)
        lines[0] = json.dumps(d, ensure_ascii=False)
        return "\n".join(lines) + "\n"

    return mutate


def set_gt_page(v):
    def edit(d) -> None:
        d["gt_necessary"][0][0] = v

    return edit


def set_citation(key: str, v):
    def edit(d) -> None:
        d["citations"][0][key] = v

    return edit


GOLD_SLOTS = ["resolve-gold", "score-gold", "convert-gold"]
PRED_SLOTS = ["resolve-pred", "score-pred"]
INDEX_VALUES = [
    ("true", True, "field 'index' must be an integer, got a bool (True)"),
    ("false", False, "field 'index' must be an integer, got a bool (False)"),
    ("fraction", 0.5, "field 'index' must be an integer, got 0.5"),
    ("list", [0], "field 'index' must be an integer, got list '[0]'"),
    ("object", {"i": 0}, "field 'index' must be an integer, got dict \"{{'i': 0}}\""),
    ("null", None, "field 'index' is missing"),
]


def _file(slot: str) -> str:
    return RECORD_SLOTS[slot][2]


RECORD_FIELD_CASES = [
    (Case(f"record-{slot}-index-{label}", RECORD_SLOTS[slot][0], clean_error(_file(slot), "'index'"),
          slot_setup(slot, first_record(set_field("index", v)))), f"{{tmp}}/{_file(slot)}:1: {msg}")
    for slot in GOLD_SLOTS + PRED_SLOTS
    for label, v, msg in INDEX_VALUES
] + [
    (Case(f"record-{slot}-gt-page-{label}", RECORD_SLOTS[slot][0], clean_error(_file(slot), "page"),
          slot_setup(slot, first_record(set_gt_page(v)))),
     f"{{tmp}}/{_file(slot)}:1: gt_necessary[0] page must be an integer >= 1 (pages are 1-based), got {got}")
    for slot in GOLD_SLOTS
    for label, v, got in (("true", True, "bool True"), ("text", "1", "str '1'"))
] + [
    (Case(f"record-score-pred-citation-{key}-{label}", RECORD_SLOTS["score-pred"][0], clean_error("pred.jsonl", key),
          slot_setup("score-pred", first_record(set_citation(key, v)))), "{tmp}/pred.jsonl:1: " + msg)
    for key, label, v, msg in (
        ("block_id", "true", True, "citations[0]: field 'block_id' must be an integer, got a bool (True)"),
        ("block_id", "text", "3", "citations[0]: field 'block_id' must be an integer, got str '3'"),
        ("block_id", "fraction", 2.5, "citations[0]: field 'block_id' must be an integer, got 2.5"),
        ("block_id", "negative", -1, "citations[0]: field 'block_id' = -1 is out of range [0, None]"),
        ("page", "true", True, "citations[0] page must be an integer >= 1 (pages are 1-based), got bool True"),
    )
]  # fmt: skip


@pytest.mark.parametrize("case, expected", RECORD_FIELD_CASES, ids=ids([c for c, _ in RECORD_FIELD_CASES]))
def test_record_fields(case, expected, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    run_exact(case, tmp_path, hostile_env, "boundary records 4", expected)


def test_index_seven_point_zero_is_question_seven(hostile_env):
    """``7.0`` joins ``7`` (an integer), ``"7"`` stays a string key; ``true`` is never question 1."""
    from eval.schemas import gold_from_json, prediction_from_json

    gold = json.loads(hostile_env.gold.read_text(encoding="utf-8").splitlines()[0])
    assert gold_from_json({**gold, "index": 1.0}).index == 1 and gold_from_json({**gold, "index": "1"}).key == "1"
    assert prediction_from_json({"index": 3.0, "citations": [{"page": 1, "bbox": [0, 0, 1, 1], "block_id": 2.0}]}
                                ).citations[0].block_id == 2  # fmt: skip
    with pytest.raises(InputError, match=r"^g:1: field 'index' must be an integer, got a bool \(True\)$"):
        gold_from_json({**gold, "index": True}, "g:1")
    harness.RESULTS.append(("boundary records 4", "record-index-float-joins", "success"))


@pytest.mark.parametrize("slot", GOLD_SLOTS + PRED_SLOTS)
@HYP
@given(v=not_an_int.filter(lambda v: not isinstance(v, str)))
def test_generated_record_index(slot, v, hostile_env, tmp_path_factory, monkeypatch):
    """A generated non-integer, non-string ``index`` in any gold or prediction file: one error naming file:1."""
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    case = Case(f"gen-record-index-{slot}", RECORD_SLOTS[slot][0], clean_error(_file(slot), "'index'"),
                slot_setup(slot, first_record(set_field("index", v))))  # fmt: skip
    tmp = fresh(tmp_path_factory)
    run_exact(case, tmp, hostile_env, "boundary generated", f"{{tmp}}/{_file(slot)}:1: field 'index' must be an "
              "integer, got ", prefix=True)  # fmt: skip


# ---------------------------------------------------------------------------------------------- judge verdicts
VALID = '{"answer": 4, "relevance": 4, "coverage": 4'
VERDICTS = {
    "nan-score": '{"answer": NaN, "relevance": 4, "coverage": 4}',
    "infinity-score": '{"answer": Infinity, "relevance": 4, "coverage": 4}',
    "nan-crop-relevance": VALID + ', "crop_relevance": [1, NaN]}',
    "float-overflow-extra": VALID + ', "note": 1e400}',
    "neg-infinity-extra": VALID + ', "note": -Infinity}',
    "int400-extra": VALID + ', "n": ' + "9" * 400 + "}",
    "int5000-extra": VALID + ', "n": ' + "9" * 5000 + "}",
    "int400-score": '{"answer": ' + "4" * 400 + ', "relevance": 4, "coverage": 4}',
    "long-float-score": '{"answer": 4.' + "0" * 400 + ', "relevance": 4, "coverage": 4}',
    "deep-extra": VALID + ', "d": ' + "[" * 300 + "]" * 300 + "}",
    "fenced-nan": "```json\n" + VALID + ', "x": NaN}\n```',
    "prose-infinity": "The answer is right.\n" + VALID + ', "x": Infinity}\nDone.',
    "prose-then-int5000": "Verdict: "
    + VALID
    + '}\nQuoted: {"answer": 1, "relevance": 1, "coverage": 1, "n": '
    + "1" * 5000
    + "}",
    "prose-deep": "Verdict: " + VALID + ', "d": ' + "[" * 250 + "]" * 250 + "} end",
}
SCORED = {
    "plain": VALID + "}",
    "prose-around": "The answer matches the gold answer.\n```json\n" + VALID + "}\n```",
    "numbers-in-reasoning": "<think>1e400 NaN " + "9" * 5000 + "</think>" + VALID + "}",
}


def judge_call(handler):
    """A library case: one HttpJudge batch of three distinct requests against a scripted server; the value is
    (scores, stats)."""

    def command(c):
        from reward.judge import JudgeRequest
        from reward.judge_http import HttpJudge

        c.server(handler)
        judge = HttpJudge(c.vars["judge_url"], "judge-model", timeout_s=5, retries=0, backoff_s=0.01)
        reqs = [JudgeRequest("q?", "gold", f"answer {i}", ()) for i in range(3)]
        return judge.score_batch(reqs), judge.stats

    return command


def unparseable(n: int, kind: str = "unparseable"):
    def check(c, res) -> None:
        scores, stats = res.value
        assert scores == [None] * n, f"scores {scores} from verdicts past the record bounds"
        assert dict(stats.failures) == {kind: n}, f"failures {dict(stats.failures)}, expected {{{kind!r}: {n}}}"
        assert stats.to_dict()["unparseable"] == (n if kind == "unparseable" else 0)

    return check


def scored(c, res) -> None:
    scores, stats = res.value
    assert all(s is not None and (s.answer, s.relevance, s.coverage) == (4, 4, 4) for s in scores), scores
    assert stats.ok == 3 and not stats.failures, stats.to_dict()


def envelope(text: str):
    return lambda p, b, n: Reply(text=text) if p.endswith("/chat/completions") else None


ENVELOPE_NAN = json.dumps(chat_completion(VALID + "}")).replace('"prompt_tokens": 0', '"prompt_tokens": NaN')
JUDGE_CASES = (
    [Case(f"judge-client-{k}", judge_call(chat_reply(v)), value(unparseable(3), "3 unparseable"))
     for k, v in VERDICTS.items()]
    + [Case(f"judge-client-scored-{k}", judge_call(chat_reply(v)), value(scored, "scored")) for k, v in SCORED.items()]
    + [Case("judge-client-envelope-nan", judge_call(envelope(ENVELOPE_NAN)),
            value(unparseable(3, "bad_response"), "a chat completion with NaN is no chat completion"))]
    + [Case(f"judge-reward-score-{k}", HTTP, clean_error("no score", "unparseable"), with_server(chat_reply(v)))
       for k, v in VERDICTS.items()]
)  # fmt: skip


@pytest.mark.parametrize("case", JUDGE_CASES, ids=ids(JUDGE_CASES))
def test_judge_verdicts(case, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    monkeypatch.delenv("QUOTECITE_METRICS_DIR", raising=False)
    monkeypatch.delenv("QUOTECITE_JUDGE_MODEL", raising=False)
    run_exact(case, tmp_path, hostile_env, "boundary judge")


@settings(HYP, max_examples=8)
@given(token=hostile_number, key=st.sampled_from(["answer", "relevance", "coverage", "crop_relevance", "zz"]),
       fenced=st.booleans())  # fmt: skip
def test_generated_verdicts(token, key, fenced, tmp_path_factory):
    """A generated hostile number anywhere in the verdict: each of the three requests is unparseable."""
    verdict = {"answer": "4", "relevance": "4", "coverage": "4", "crop_relevance": "[1]", "zz": "0"}
    verdict[key] = token
    text = "{" + ", ".join(f'"{k}": {v}' for k, v in verdict.items()) + "}"
    if fenced:
        text = "Here it is:\n```json\n" + text + "\n```"
    case = Case("gen-judge-verdict", judge_call(chat_reply(text)), value(unparseable(3), "3 unparseable"))
    run_exact(case, fresh(tmp_path_factory), None, "boundary generated")


def test_parse_judge_output_never_raises_on_hostile_numbers():
    """The parser itself (what ``eval score`` and the reward share): a hostile verdict is None, never an error."""
    from reward.judge_prompt import parse_judge_output

    for k, v in {**VERDICTS, "whole-int5000": "9" * 5000, "nan": "NaN"}.items():
        assert parse_judge_output(v) is None, k
    for k, v in SCORED.items():
        assert parse_judge_output(v) is not None, k
    harness.RESULTS.append(("boundary judge", "judge-parser-direct", "success"))
