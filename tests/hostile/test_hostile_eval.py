"""Hostile inputs for ``python -m eval resolve|score|compare`` (harness: harness.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.hostile.harness import Case, check_case, clean_error, ids, success, value
from tests.support.openai_server import Reply, chat_completion


# ---------------------------------------------------------------------------------------------- helpers
def read_rows(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]


def write_rows(c, name: str, rows: list[dict]) -> Path:
    return c.write(name, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def use_env(c) -> None:
    e = c.env
    c.vars.update(gold=e.gold, raw=e.raw, pred=e.pred, cache=e.cache_dir, score=e.score_dir)


def own(kind: str, fn=None, data: bytes | None = None):
    """Set-up: the case's own copy of the shared ``kind`` file (gold, raw or pred), changed by ``fn(rows, c)`` or
    replaced by raw bytes."""

    def setup(c) -> None:
        use_env(c)
        src = getattr(c.env, kind)
        if data is not None:
            p = c.write(f"{kind}.jsonl", data)
        else:
            rows = read_rows(src)
            if fn is not None:
                fn(rows, c)
            p = write_rows(c, f"{kind}.jsonl", rows)
        c.vars[kind] = p

    return setup


def own_bytes(kind: str, fn):
    """Set-up: the case's own copy of ``kind`` with ``fn(bytes) -> bytes`` applied."""

    def setup(c) -> None:
        use_env(c)
        c.vars[kind] = c.write(f"{kind}.jsonl", fn(getattr(c.env, kind).read_bytes()))

    return setup


def latin1_line2(b: bytes) -> bytes:
    lines = b.split(b"\n")
    lines[1] = lines[1].replace(b"Shenzhen", b"Sh\xe9nzhen").replace(b"site", b"s\xefte")
    return b"\n".join(lines)


def setkey(i: int, key: str, v):
    return lambda rows, c: rows[i].__setitem__(key, v)


def both(*fns):
    def setup(c) -> None:
        for f in fns:
            f(c)

    return setup


# ---------------------------------------------------------------------------------------------- eval resolve
RES = ["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out", "{tmp}/p.jsonl",
       "--resolver", "lexical"]  # fmt: skip


def resolved(c, res) -> None:
    rows = read_rows(c.tmp / "p.jsonl")
    assert len(rows) == len(read_rows(c.env.raw))
    assert all(r["citations"] for r in rows), "a verbatim quote resolved to nothing"


def protect_var(*names):
    def setup(c) -> None:
        c.protect(*(c.vars[n] for n in names))

    return setup


RESOLVE_CASES = [
    Case("resolve-ok", RES, success(resolved), use_env),
    Case("resolve-embedding-ok", [*RES[:-2], "--resolver", "embedding"], success(resolved), use_env),
    Case("resolve-bm25-ok", [*RES[:-2], "--resolver", "bm25"], success(resolved), use_env),
    Case("resolve-bom", RES, success(resolved), own_bytes("raw", lambda b: b"\xef\xbb\xbf" + b)),
    Case("resolve-crlf", RES, success(resolved), own_bytes("raw", lambda b: b.replace(b"\n", b"\r\n"))),
    Case("resolve-question-control", [*RES, "--query", "question"], success(), use_env),
    Case(
        "resolve-budget-3",
        [*RES, "--query", "question", "--budget", "3"],
        value(lambda c, r: assert_all_len(read_rows(c.tmp / "p.jsonl"), 3), "3 citations each"),
        use_env,
    ),
    Case(
        "resolve-coordinate-page-999",
        RES,
        success(),
        own(
            "raw",
            lambda rows, c: rows[0].update(
                interface="coordinate", response='<bbox page="999" x1="1" y1="1" x2="500" y2="500"/> answer'
            ),
        ),
    ),  # fmt: skip
    Case("resolve-response-number", RES, success(), own("raw", setkey(0, "response", 12345))),
    Case(
        "resolve-10k-quotes",
        RES,
        success(),
        own("raw", setkey(0, "response", json.dumps({"answer": "a", "quotes": ["q"] * 10_000}))),
    ),
    Case("resolve-threshold", [*RES, "--threshold", "0.5"], success(), use_env),
    Case(
        "resolve-pred-missing",
        [*RES[:3], "{tmp}/none.jsonl", *RES[4:]],
        clean_error("none.jsonl", "no such file"),
        use_env,
    ),
    Case("resolve-gold-missing", [*RES[:5], "{tmp}/none.jsonl", *RES[6:]], clean_error("none.jsonl"), use_env),
    Case("resolve-pred-latin1", RES, clean_error("raw.jsonl:2", "not UTF-8"), own_bytes("raw", latin1_line2)),
    Case("resolve-gold-latin1", RES, clean_error("gold.jsonl:2", "not UTF-8"), own_bytes("gold", latin1_line2)),
    Case(
        "resolve-pred-utf16",
        RES,
        clean_error("not UTF-8"),
        own_bytes("raw", lambda b: b.decode("utf-8").encode("utf-16")),
    ),
    Case(
        "resolve-pred-truncated",
        RES,
        clean_error("raw.jsonl:4", "not valid JSON"),
        own_bytes("raw", lambda b: b[:-30]),
    ),
    Case("resolve-pred-unknown-index", RES, clean_error("77"), own("raw", setkey(0, "index", 77))),
    Case("resolve-pred-duplicate-index", RES, clean_error("twice"), own("raw", setkey(1, "index", 0))),
    Case("resolve-gold-duplicate-index", RES, clean_error("twice"), own("gold", setkey(1, "index", 0))),
    Case("resolve-pred-bad-interface", RES, clean_error("interface"), own("raw", setkey(0, "interface", "vision"))),
    Case("resolve-pred-citations-not-list", RES, clean_error("citations"), own("raw", setkey(0, "citations", "x"))),
    Case("resolve-gold-no-doc-key", RES, clean_error("doc_key"), own("gold", lambda rows, c: rows[0].pop("doc_key"))),
    Case("resolve-gold-unknown-doc", RES, clean_error("nosuchdoc"), own("gold", setkey(0, "doc_key", "nosuchdoc"))),
    Case(
        "resolve-gold-page-zero",
        RES,
        clean_error("1-based"),
        own("gold", lambda rows, c: rows[0]["gt_necessary"][0].__setitem__(0, 0)),
    ),
    Case(
        "resolve-gold-nan-box",
        RES,
        clean_error("finite"),
        own("gold", lambda rows, c: rows[0]["gt_necessary"][0].__setitem__(1, float("nan"))),
    ),
    Case(
        "resolve-out-is-pred",
        [*RES[:-4], "--out", "{raw}", "--resolver", "lexical"],
        clean_error("is the input"),
        both(own("raw"), protect_var("raw")),
    ),
    Case(
        "resolve-out-is-gold",
        [*RES[:-4], "--out", "{gold}", "--resolver", "lexical"],
        clean_error("is the input"),
        both(own("gold"), protect_var("gold")),
    ),
    Case(
        "resolve-out-is-dir", [*RES[:-4], "--out", "{tmp}", "--resolver", "lexical"], clean_error("directory"), use_env
    ),
    *[
        Case(f"resolve-option-{f.strip('-')}-{v}", [*RES, f, v], clean_error(f.strip("-").split("-")[-1]), use_env)
        for f, v in [
            ("--threshold", "nan"),
            ("--threshold", "inf"),
            ("--max-quotes", "0"),
            ("--max-quotes", "1000000"),
            ("--top-k", "-1"),
            ("--resolver", "magic"),
            ("--query", "all"),
        ]
    ],  # fmt: skip
    Case("resolve-budget-without-question", [*RES, "--budget", "3"], clean_error("budget"), use_env),
    Case("resolve-cache-missing", [*RES[:7], "{tmp}/nocache", *RES[8:]], clean_error("nocache"), use_env),
]


def assert_all_len(rows, n) -> None:
    assert all(len(r["citations"]) == n for r in rows), [len(r["citations"]) for r in rows]


# ---------------------------------------------------------------------------------------------- eval score
SCORE = ["eval", "score", "--gold", "{gold}", "--pred", "{pred}", "--out", "{tmp}/score", "--no-report"]
SCORE_C = [*SCORE, "--cache-dir", "{cache}"]


def metrics(c, name: str = "score") -> dict:
    return json.loads((c.tmp / name / "metrics.json").read_text())


def recall_is(v: float):
    def check(c, res) -> None:
        m = metrics(c)
        assert abs(m["recall"]["0.5"] - v) < 1e-9, f"recall {m['recall']['0.5']} != {v}"

    return check


def warned(*phrases):
    def check(c, res) -> None:
        err = res.stderr.lower()
        for p in phrases:
            assert p.lower() in err, f"{p!r} not on the console: {res.stderr[-500:]!r}"

    return check


def keep_first(rows, c) -> None:
    del rows[1:]


def stale_folder(c) -> None:
    use_env(c)
    d = c.tmp / "score" / "report_files"
    d.mkdir(parents=True)
    (d / "q99_p1.jpg").write_bytes(b"old image")
    (c.tmp / "score" / "report.html").write_text("old report")


def no_stale(c, res) -> None:
    out = c.tmp / "score"
    assert not (out / "report_files" / "q99_p1.jpg").exists(), "a stale report image survived"
    assert not (out / "report.html").exists(), "a stale report.html survived a --no-report run"
    assert (out / "metrics.json").is_file()


def foreign_folder(c) -> None:
    use_env(c)
    c.protect(c.write("score/notes.txt", "my own notes"))


def pred_in_out(c) -> None:
    use_env(c)
    p = c.write("score/pred.jsonl", c.env.pred.read_text(encoding="utf-8"))
    c.vars["pred"] = p
    c.protect(p)


def judge_server(handler):
    def setup(c) -> None:
        use_env(c)
        c.server(handler)

    return setup


JUDGE = [*SCORE_C, "--judge-url", "{judge_url}", "--judge-model", "judge-model", "--judge-protocol", "rubric"]


def chat(content: str):
    return lambda p, b, n: chat_completion(content) if "chat" in p else None


SCORE_CASES = [
    Case("score-ok", SCORE, success(recall_is(1.0)), use_env),
    Case("score-with-cache", SCORE_C, success(recall_is(1.0)), use_env),
    Case(
        "score-report",
        [*SCORE_C[:-3], "--cache-dir", "{cache}"],
        value(lambda c, r: assert_file(c.tmp / "score" / "report.html"), "report.html written"),
        use_env,
    ),
    Case(
        "score-lexical-judge",
        [*SCORE_C, "--judge", "lexical"],
        value(lambda c, r: assert_true("saa" in metrics(c), "no SAA"), "judge metrics"),
        use_env,
    ),
    Case(
        "score-rubric-judge",
        JUDGE,
        value(lambda c, r: assert_true("saa" in metrics(c), "no SAA"), "judge metrics"),
        judge_server(None),
    ),
    Case("score-bom-gold", SCORE, success(recall_is(1.0)), own_bytes("gold", lambda b: b"\xef\xbb\xbf" + b)),
    Case("score-crlf-pred", SCORE, success(recall_is(1.0)), own_bytes("pred", lambda b: b.replace(b"\n", b"\r\n"))),
    Case(
        "score-index-as-string",
        SCORE,
        success(recall_is(1.0)),
        own("pred", lambda rows, c: [r.update(index=str(r["index"])) for r in rows]),
    ),
    Case("score-extra-keys", SCORE, success(recall_is(1.0)), own("pred", setkey(0, "my_note", {"a": 1}))),
    Case("score-reused-out-folder-cleaned", SCORE, value(no_stale, "no stale file in a reused folder"), stale_folder),
    Case(
        "score-most-missing-warned",
        SCORE,
        value(
            lambda c, r: (warned("3 of 4", "75%")(c, r), recall_is(0.25)(c, r))[0],
            "the missing count and share on the console",
        ),
        own("pred", keep_first),
    ),
    Case(
        "score-one-missing-warned",
        SCORE,
        value(warned("1 of 4", "25%"), "the missing count on the console"),
        own("pred", lambda rows, c: rows.pop()),
    ),
    Case(
        "score-gold-box-off-edge",
        SCORE_C,
        value(warned("run off their page", "1 of"), "boxes running off the page counted on the console"),
        own("gold", lambda rows, c: rows[0]["gt_necessary"][0].__setitem__(3, c.env.page_sizes[0][0] + 50)),
    ),
    Case("score-empty-pred", SCORE, clean_error("pred.jsonl", "empty"), own("pred", data=b"")),
    Case("score-blank-pred", SCORE, clean_error("empty"), own("pred", data=b"\n\n  \n")),
    Case("score-gold-as-pred", [*SCORE[:5], "{gold}", *SCORE[6:]], clean_error("gold"), use_env),
    Case(
        "score-gold-page-beyond-doc",
        SCORE_C,
        clean_error("page 9", "pages"),
        own("gold", lambda rows, c: rows[0]["gt_necessary"][0].__setitem__(0, 9)),
    ),
    Case(
        "score-gold-all-page-beyond-doc",
        SCORE_C,
        clean_error("gt_all", "pages"),
        own("gold", lambda rows, c: rows[1]["gt_all"][0].__setitem__(0, 50)),
    ),
    Case(
        "score-gold-box-outside-page",
        SCORE_C,
        clean_error("outside page"),
        own("gold", lambda rows, c: rows[0]["gt_necessary"][0].__setitem__(slice(1, 5), [5000, 5000, 5100, 5100])),
    ),
    Case(
        "score-gold-box-in-pixels",
        SCORE_C,
        clean_error("outside page"),
        own(
            "gold",
            lambda rows, c: [
                e.__setitem__(slice(1, 5), [2000, 3000, 2400, 3100])
                for r in rows
                for e in r["gt_necessary"] + r["gt_all"]
            ],
        ),
    ),  # fmt: skip
    Case("score-pred-missing-file", [*SCORE[:5], "{tmp}/none.jsonl", *SCORE[6:]], clean_error("none.jsonl"), use_env),
    Case("score-gold-missing-file", [*SCORE[:3], "{tmp}/none.jsonl", *SCORE[4:]], clean_error("none.jsonl"), use_env),
    Case("score-pred-latin1", SCORE, clean_error("pred.jsonl:2", "not UTF-8"), own_bytes("pred", latin1_line2)),
    Case("score-gold-latin1", SCORE, clean_error("gold.jsonl:2", "not UTF-8"), own_bytes("gold", latin1_line2)),
    Case("score-gold-empty", SCORE, clean_error("no gold records"), own("gold", data=b"")),
    Case("score-pred-unknown-index", SCORE, clean_error("not in the gold"), own("pred", setkey(0, "index", 404))),
    Case(
        "score-pred-nan-bbox",
        SCORE,
        clean_error("finite"),
        own("pred", lambda rows, c: rows[0]["citations"][0]["bbox"].__setitem__(0, float("nan"))),
    ),
    Case(
        "score-pred-inf-bbox",
        SCORE,
        clean_error("finite"),
        own("pred", lambda rows, c: rows[0]["citations"][0]["bbox"].__setitem__(2, float("inf"))),
    ),
    Case(
        "score-pred-page-zero",
        SCORE,
        clean_error("1-based"),
        own("pred", lambda rows, c: rows[0]["citations"][0].__setitem__("page", 0)),
    ),
    Case(
        "score-pred-similarity-string",
        SCORE,
        clean_error("similarity"),
        own("pred", lambda rows, c: rows[0]["citations"][0].__setitem__("similarity", "high")),
    ),
    Case(
        "score-pred-citation-not-object", SCORE, clean_error("citations[0]"), own("pred", setkey(0, "citations", [3]))
    ),
    Case("score-gold-no-necessary", SCORE, clean_error("gt_necessary"), own("gold", setkey(0, "gt_necessary", []))),
    Case(
        "score-gold-types-mismatch", SCORE, clean_error("gt_types"), own("gold", setkey(0, "gt_types", ["text"] * 9))
    ),
    Case(
        "score-out-is-a-file",
        [*SCORE[:7], "{tmp}/f", "--no-report"],
        clean_error("existing file"),
        lambda c: (use_env(c), c.protect(c.write("f", "x"))),
    ),
    Case("score-out-holds-pred", SCORE, clean_error("holds the input"), pred_in_out),
    Case("score-out-foreign-files", SCORE, clean_error("did not write", "notes.txt"), foreign_folder),
    Case(
        "score-out-in-proc",
        [*SCORE[:7], "/proc/quotecite-score", "--no-report"],
        clean_error("quotecite-score"),
        use_env,
    ),
    Case("score-judge-without-cache", [*SCORE, "--judge", "lexical"], clean_error("--cache-dir"), use_env),
    Case(
        "score-judge-url-without-model",
        [*SCORE_C, "--judge-url", "http://127.0.0.1:9/v1"],
        clean_error("--judge-model"),
        use_env,
    ),
    Case("score-report-limit-negative", [*SCORE, "--report-limit", "-1"], clean_error("report-limit"), use_env),
    Case(
        "score-judge-concurrency-zero", [*SCORE, "--judge-concurrency", "0"], clean_error("judge-concurrency"), use_env
    ),
    Case("score-judge-unparseable", JUDGE, clean_error("no score"), judge_server(chat("looks fine"))),
    Case(
        "score-judge-out-of-range",
        JUDGE,
        clean_error("no score"),
        judge_server(chat('{"answer": 9, "relevance": 9, "coverage": 9}')),
    ),
    Case(
        "score-judge-404",
        JUDGE,
        clean_error("judge"),
        judge_server(lambda p, b, n: Reply(status=404) if "chat" in p else None),
    ),
    Case(
        "score-judge-50mb",
        JUDGE,
        clean_error("judge"),
        judge_server(lambda p, b, n: Reply(text="x" * 50_000_000) if "chat" in p else None),
    ),
]


def assert_file(p: Path) -> None:
    assert p.is_file(), f"{p} not written"


def assert_true(ok: bool, msg: str) -> None:
    assert ok, msg


# ---------------------------------------------------------------------------------------------- eval compare
CMP = ["eval", "compare", "{score}", "{b}", "--resamples", "200"]


def b_copy(fn=None, data: bytes | None = None):
    """Set-up: run B = the case's own copy of the shared score folder's per_question.jsonl, changed."""

    def setup(c) -> None:
        use_env(c)
        src = c.env.score_dir / "per_question.jsonl"
        if data is not None:
            p = c.write("b/per_question.jsonl", data)
        else:
            rows = read_rows(src)
            if fn is not None:
                fn(rows, c)
            p = write_rows(c, "b/per_question.jsonl", rows)
        c.vars["b"] = p.parent

    return setup


def compared(c, res) -> None:
    assert "paired questions: 4" in res.stdout, res.stdout


COMPARE_CASES = [
    Case("compare-ok", CMP, success(compared), b_copy()),
    Case(
        "compare-file-args",
        ["eval", "compare", "{score}/per_question.jsonl", "{b}/per_question.jsonl", "--resamples", "100"],
        success(compared),
        b_copy(),
    ),  # fmt: skip
    Case(
        "compare-out-json",
        [*CMP, "--out", "{tmp}/cmp.json"],
        value(lambda c, r: assert_file(c.tmp / "cmp.json"), "the JSON written"),
        b_copy(),
    ),
    Case("compare-missing-run", ["eval", "compare", "{score}", "{tmp}/none"], clean_error("none"), use_env),
    Case(
        "compare-folder-without-table", ["eval", "compare", "{score}", "{tmp}"], clean_error("per_question"), use_env
    ),
    Case(
        "compare-latin1",
        CMP,
        clean_error("per_question.jsonl:2", "not UTF-8"),
        lambda c: b_copy(data=latin1_line2((c.env.score_dir / "per_question.jsonl").read_bytes()))(c),
    ),
    Case("compare-empty", CMP, clean_error("empty"), b_copy(data=b"")),
    Case("compare-array-line", CMP, clean_error("expected a JSON object"), b_copy(data=b"[1]\n")),
    Case("compare-not-per-question", CMP, clean_error("per_question"), b_copy(data=b'{"a": 1}\n')),
    Case("compare-recall-not-object", CMP, clean_error("recall"), b_copy(setkey(0, "recall", 0.5))),
    Case(
        "compare-recall-above-one",
        CMP,
        clean_error("recall"),
        b_copy(lambda rows, c: rows[0]["recall"].__setitem__("0.5", 1.5)),
    ),
    Case(
        "compare-recall-nan",
        CMP,
        clean_error("recall"),
        b_copy(lambda rows, c: rows[0]["recall"].__setitem__("0.5", float("nan"))),
    ),
    Case(
        "compare-recall-string",
        CMP,
        clean_error("recall"),
        b_copy(lambda rows, c: rows[0]["recall"].__setitem__("0.5", "1.0")),
    ),
    Case("compare-duplicate-index", CMP, clean_error("twice"), b_copy(setkey(1, "index", 0))),
    Case(
        "compare-no-shared-index",
        CMP,
        clean_error("share no question"),
        b_copy(lambda rows, c: [r.update(index=100 + i) for i, r in enumerate(rows)]),
    ),
    Case("compare-saa-two", CMP, clean_error("saa"), b_copy(setkey(0, "saa", 2))),
    Case("compare-precision-negative", CMP, clean_error("precision"), b_copy(setkey(0, "precision", -0.5))),
    Case("compare-bad-iou", [*CMP, "--iou", "0.55"], clean_error("0.55"), b_copy()),
    Case("compare-resamples-zero", [*CMP[:-1], "0"], clean_error("resamples"), b_copy()),
    Case("compare-resamples-huge", [*CMP[:-1], "1000000000"], clean_error("resamples"), b_copy()),
    Case(
        "compare-out-is-a-per-question",
        [*CMP, "--out", "{b}/per_question.jsonl"],
        clean_error("is the input"),
        both(b_copy(), lambda c: c.protect(c.vars["b"] / "per_question.jsonl")),
    ),
    Case("compare-out-is-a-dir", [*CMP, "--out", "{tmp}"], clean_error("directory"), b_copy()),
]

ALL = (
    [("eval resolve", c) for c in RESOLVE_CASES]
    + [("eval score", c) for c in SCORE_CASES]
    + [("eval compare", c) for c in COMPARE_CASES]
)


@pytest.mark.parametrize("suite, case", ALL, ids=ids([c for _, c in ALL]))
def test_eval(suite, case, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    check_case(case, tmp_path, hostile_env, suite)
