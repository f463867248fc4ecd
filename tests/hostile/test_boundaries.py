"""Hostile inputs at the boundaries every command crosses: records, options, files, outputs, work and
text. Each boundary has table-driven cases per class and one hypothesis generator fed to every command that
crosses it; all run through the harness (harness.py), so they are counted in the suite's summary.

* **records**: numbers Python cannot convert (5,000- and 400-digit integers, ``1e400``, ``NaN``, ``Infinity``) and
  nesting past the bound, in every record file a command reads (gold, predictions, raw responses, per-question
  tables, reward inputs, LongDocURL and CiteVQA rows, ``metrics.json``, ``--page-images-info``);
* **options**: NaN, infinities, zero, negatives, overlong numbers and words for every numeric flag;
* **files**: a FIFO (never waited on), a folder, a character device, a missing file, bytes that are not UTF-8,
  for every input; recipes: binary, deeply nested, alias bombs;
* **outputs**: ``--out`` a character device or a FIFO (refused, never replaced), inside ``--cache-dir``, the run
  log of ``runlog plot``; LongDocURL ``doc_no`` that would leave ``--out``;
* **work**: LAT's format check and tag scans on 750 KB of repeated tags, the overlap check of thousands of steps,
  a run log whose step is 1e12;
* **text**: invisible and bidi characters never change LAT accuracy or MultAttrEval span scores.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InputError
from tests.hostile.harness import Case, clean_error, ids, run_case, value

HYP = settings(
    max_examples=4,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HANG_S = 10.0
"""A case slower than this counts as a hang (the FIFO unblocker below opens the write end after it)."""


def run_ok(case: Case, tmp: Path, env, suite: str) -> None:
    outcome, why, res = run_case(case, tmp, env, suite)
    assert outcome in ("clean_error", "success"), f"{case.name}: {outcome}: {why}"
    assert res.seconds < HANG_S, f"{case.name}: took {res.seconds:.1f} s (a hang)"


_counter = iter(range(10**9))


def fresh(factory) -> Path:
    return factory.mktemp(f"b{next(_counter)}")


# ---------------------------------------------------------------------------------------------- records
def use_env(c) -> None:
    e = c.env
    c.vars.update(gold=e.gold, raw=e.raw, pred=e.pred, cache=e.cache_dir, score=e.score_dir, inputs=e.inputs)


LAT_LINE = '{"index": 0, "response": "<think>a</think><answer>Shenzhen</answer>"}\n'
LDU_LINE = '{"question_id": "q1", "doc_no": "1", "question": "q?", "answer": "a", "evidence_pages": [1]}\n'
CVQA_DOC = '[{"question": "q?", "answer": "a", "PDF_Source": "x.pdf"}]\n'


def _copy(kind: str):
    return lambda c: getattr(c.env, kind).read_text(encoding="utf-8")


RECORD_SLOTS = {
    # slot: (argv, var, file name, original text)
    "resolve-pred": (["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out",
                      "{tmp}/p.jsonl", "--resolver", "lexical"], "raw", "raw.jsonl", _copy("raw")),
    "resolve-gold": (["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out",
                      "{tmp}/p.jsonl", "--resolver", "lexical"], "gold", "gold.jsonl", _copy("gold")),
    "score-gold": (["eval", "score", "--gold", "{gold}", "--pred", "{pred}", "--out", "{tmp}/s", "--no-report"],
                   "gold", "gold.jsonl", _copy("gold")),
    "score-pred": (["eval", "score", "--gold", "{gold}", "--pred", "{pred}", "--out", "{tmp}/s", "--no-report"],
                   "pred", "pred.jsonl", _copy("pred")),
    "compare-b": (["eval", "compare", "{score}", "{b}", "--resamples", "50"], "b", "per_question.jsonl",
                  lambda c: (c.env.score_dir / "per_question.jsonl").read_text(encoding="utf-8")),
    "convert-input": (["eval", "convert", "--from", "lat", "--input", "{lat}", "--gold", "{gold}", "--cache-dir",
                       "{cache}", "--out", "{tmp}/c.jsonl"], "lat", "lat.jsonl", lambda c: LAT_LINE),
    "convert-gold": (["eval", "convert", "--from", "lat", "--input", "{lat}", "--gold", "{gold}", "--cache-dir",
                      "{cache}", "--out", "{tmp}/c.jsonl"], "gold", "gold.jsonl", _copy("gold")),
    "convert-images-info": (["eval", "convert", "--from", "lat", "--input", "{lat}", "--gold", "{gold}",
                             "--cache-dir", "{cache}", "--out", "{tmp}/c.jsonl", "--page-images-info", "{info}"],
                            "info", "info.json", lambda c: '{"k": [[100, 200]]}\n'),
    "reward-inputs": (["reward", "score", "--inputs", "{inputs}", "--cache-dir", "{cache}", "--out",
                       "{tmp}/out.jsonl", "--judge", "lexical", "--resolver", "lexical"], "inputs", "in.jsonl",
                      _copy("inputs")),
    "longdocurl-jsonl": (["data_prep", "longdocurl", "--jsonl", "{ldu}", "--pdf-dir", "{tmp}", "--out", "{tmp}/ld",
                          "--encoder", "none"], "ldu", "LongDocURL.jsonl", lambda c: LDU_LINE),
    "citevqa-json": (["data_prep", "citevqa", "--citevqa", "{cvqa}", "--pdf-dir", "{tmp}", "--out", "{tmp}/g.jsonl",
                      "--no-byte-check"], "cvqa", "CiteVQA.json", lambda c: CVQA_DOC),
    "report-metrics": (["eval", "report", "--score-dir", "{sd}"], "sd", "metrics.json",
                       lambda c: (c.env.score_dir / "metrics.json").read_text(encoding="utf-8")),
}  # fmt: skip


def slot_setup(slot: str, mutate):
    """Set-up: every shared input in vars; the slot's own file, its text changed by ``mutate(text) -> text``."""
    argv, var, name, original = RECORD_SLOTS[slot]

    def setup(c) -> None:
        use_env(c)
        c.vars["lat"] = c.write("lat.jsonl", LAT_LINE)
        if slot == "report-metrics":
            sd = c.tmp / "sd"
            sd.mkdir()
            for f in c.env.score_dir.iterdir():
                if f.is_file():
                    (sd / f.name).write_bytes(f.read_bytes())
            (sd / name).write_text(mutate(original(c)), encoding="utf-8")
            c.vars["sd"] = sd
            c.protect(sd / "per_question.jsonl")
            return
        p = c.write(f"{var}/{name}" if slot == "compare-b" else name, mutate(original(c)))
        c.vars[var] = p.parent if slot == "compare-b" else p
        c.protect(p)

    return setup


def inject(token: str, key: str = "zz"):
    """A mutation: ``"key": token`` added as the first field of the file's first object."""
    return lambda text: text.replace("{", '{"' + key + '": ' + token + ", ", 1)


HOSTILE_NUMBERS = {
    "int5000": ("1" * 5000, "digits"),
    "int400": ("9" * 400, "digits"),
    "neg-int400": ("-" + "9" * 400, "digits"),
    "float-overflow": ("1e400", "finite"),
    "nan": ("NaN", "finite"),
    "infinity": ("Infinity", "finite"),
    "neg-infinity": ("-Infinity", "finite"),
    "deep": ("[" * 3000 + "]" * 3000, "nested too deeply"),
}

RECORD_CASES = [
    Case(f"record-{slot}-{hn}", RECORD_SLOTS[slot][0], clean_error(RECORD_SLOTS[slot][2], phrase),
         slot_setup(slot, inject(token)))
    for slot in RECORD_SLOTS
    for hn, (token, phrase) in HOSTILE_NUMBERS.items()
]  # fmt: skip

# Fields of the right name with the wrong kind of value (bool for an integer, text block ids, NaN pages).
FIELD_CASES = [
    Case("field-ldu-doc-no-escapes", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("doc_no", "safe file name"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace('"doc_no": "1"', '"doc_no": "../../x"'))),
    Case("field-ldu-doc-no-slash", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("doc_no", "safe file name"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace('"doc_no": "1"', '"doc_no": "a/b"'))),
    Case("field-ldu-doc-no-dotdot", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("doc_no", "safe file name"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace('"doc_no": "1"', '"doc_no": ".."'))),
    Case("field-ldu-doc-no-empty", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("doc_no", "safe file name"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace('"doc_no": "1"', '"doc_no": ""'))),
    Case("field-ldu-doc-no-nul", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("doc_no", "safe file name"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace('"doc_no": "1"', '"doc_no": "a\\u0000b"'))),
    Case("field-ldu-page-huge", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("evidence_pages"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace("[1]", "[1000000000000]"))),
    Case("field-ldu-page-bool", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("evidence_pages"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace("[1]", "[true]"))),
    Case("field-ldu-total-pages-text", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("total_pages"),
         slot_setup("longdocurl-jsonl", inject('"many"', "total_pages"))),
    Case("field-ldu-total-pages-bool", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("total_pages"),
         slot_setup("longdocurl-jsonl", inject("true", "total_pages"))),
    Case("field-ldu-total-pages-zero", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("total_pages"),
         slot_setup("longdocurl-jsonl", inject("0", "total_pages"))),
    Case("field-ldu-pages-string-nan", RECORD_SLOTS["longdocurl-jsonl"][0], clean_error("evidence_pages"),
         slot_setup("longdocurl-jsonl", lambda t: t.replace("[1]", '"[NaN]"'))),
    Case("field-metrics-not-object", RECORD_SLOTS["report-metrics"][0], clean_error("metrics.json", "JSON object"),
         slot_setup("report-metrics", lambda t: "[1, 2]\n")),
    Case("field-metrics-damaged", RECORD_SLOTS["report-metrics"][0], clean_error("metrics.json", "not valid JSON"),
         slot_setup("report-metrics", lambda t: t[: len(t) // 2])),
    Case("field-images-info-not-object", RECORD_SLOTS["convert-images-info"][0], clean_error("info.json"),
         slot_setup("convert-images-info", lambda t: "[]\n")),
    Case("field-lat-box-huge-int", RECORD_SLOTS["convert-input"][0], value(lambda c, r: None, "a box of a 5,000-digit"
         " number is an unparsed box, not a crash"),
         slot_setup("convert-input", lambda t: t.replace("Shenzhen", 'Shenzhen {\\"bbox_2d\\": [' + "1" * 5000
                                                          + ', 2, 3, 4], \\"Image_index\\": 1}'))),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------- options
SHOW = ["data_prep", "show", "{key}", "--cache-dir", "{cache}", "--out", "{tmp}/s.png"]
REPORT = ["eval", "report", "--score-dir", "{score_copy}"]
COMPARE = ["eval", "compare", "{score}", "{score}"]
CONVERT = ["eval", "convert", "--from", "lat", "--input", "{lat}", "--gold", "{gold}", "--cache-dir", "{cache}",
           "--out", "{tmp}/c.jsonl"]  # fmt: skip
LDU = ["data_prep", "longdocurl", "--jsonl", "{ldu}", "--pdf-dir", "{tmp}", "--out", "{tmp}/ld", "--encoder", "none"]
CVQA = ["data_prep", "citevqa", "--citevqa", "{cvqa}", "--pdf-dir", "{tmp}", "--out", "{tmp}/g.jsonl",
        "--no-byte-check"]  # fmt: skip


def opt_setup(c) -> None:
    use_env(c)
    c.vars["key"] = c.env.doc_key
    c.vars["lat"] = c.write("lat.jsonl", LAT_LINE)
    c.vars["ldu"] = c.write("LongDocURL.jsonl", LDU_LINE)
    c.vars["cvqa"] = c.write("CiteVQA.json", CVQA_DOC)
    sd = c.tmp / "sd"
    sd.mkdir()
    for f in c.env.score_dir.iterdir():
        if f.is_file():
            (sd / f.name).write_bytes(f.read_bytes())
    c.vars["score_copy"] = sd


# (command, flag, kind, lo, hi): kind "int" or "float"; lo_open for "> lo"
FLAGS = [
    ("show", SHOW, "--dpi", "float", 0, 1200, True),
    ("show", SHOW, "--page", "int", 1, 2**62, False),
    ("report", REPORT, "--limit", "int", 0, 2**62, False),
    ("compare", COMPARE, "--seed", "int", 0, 2**32 - 1, False),
    ("compare", COMPARE, "--resamples", "int", 1, 10**7, False),
    ("convert", CONVERT, "--render-pixels", "float", 0, float("inf"), True),
    ("convert", CONVERT, "--max-pixels-per-page", "float", 0, float("inf"), True),
    ("longdocurl", LDU, "--max-pixels-per-page", "float", 784, 1e9, False),
    ("longdocurl", LDU, "--total-pixels", "float", 0, float("inf"), True),
    ("longdocurl", LDU, "--seed", "int", 0, 2**32 - 1, False),
    ("longdocurl", LDU, "--val", "int", 0, 2**62, False),
    ("longdocurl", LDU, "--max-window", "int", 1, 2**62, False),
    ("longdocurl", LDU, "--max-prompt-length", "int", 1, 2**62, False),
    ("longdocurl", LDU, "--headroom", "int", 0, 2**62, False),
    ("longdocurl", LDU, "--jpeg-quality", "int", 1, 100, False),
    ("longdocurl", LDU, "--near-dup-threshold", "float", 0, 1, False),
    ("citevqa", CVQA, "--min-text-recall", "float", 0, 1, False),
]
BAD_WORDS = ["nan", "NaN", "inf", "-inf", "Infinity", "abc", "", "1e999", "9" * 5000]


def bad_values(kind: str, lo, hi, lo_open: bool) -> list[str]:
    vals = list(BAD_WORDS)
    vals.append(str(lo - 1) if kind == "int" else str(lo - 0.5))
    if lo_open:
        vals.append(str(lo))
    if hi != float("inf") and hi < 1e12:
        vals.append(str(hi + 1))
    if kind == "int":
        vals.append("1.5")
    return vals


OPTION_CASES = [
    Case(f"option-{cmd}{flag}={v[:12] or 'empty'}{'-long' if len(v) > 12 else ''}", [*argv, f"{flag}={v}"],
         clean_error(flag), opt_setup)
    for cmd, argv, flag, kind, lo, hi, lo_open in FLAGS
    for v in bad_values(kind, lo, hi, lo_open)
]  # fmt: skip
OPTION_CASES.append(Case("option-report-limit-minus-2-the-issue", [*REPORT, "--limit", "-2"], clean_error("--limit"),
                         opt_setup))  # fmt: skip


# ---------------------------------------------------------------------------------------------- files
def _unblock_fifo(c, path: Path) -> None:
    """If a command ever opens the FIFO for reading and waits, a writer appears after HANG_S (the case then fails
    on its time instead of hanging the suite)."""
    stop = threading.Event()

    def run() -> None:
        if stop.wait(HANG_S):
            return
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            stop.wait(0.5)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    c.cleanups.append(stop.set)


def make_special(c, name: str, kind: str) -> Path:
    p = c.tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.exists():
        p.unlink()
    if kind == "fifo":
        os.mkfifo(p)
        _unblock_fifo(c, p)
    elif kind == "dir":
        p.mkdir()
    elif kind == "chardev":
        try:
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a private /dev/null
        except (PermissionError, OSError):
            os.mkfifo(p)
            _unblock_fifo(c, p)
    elif kind == "binary":
        p.write_bytes(b"\xff\xfe\x00\x89PNG\r\n\x1a\n" + bytes(range(256)))
    elif kind == "missing":
        pass
    return p


FILE_KINDS = {"fifo": "FIFO", "dir": "", "chardev": "", "binary": "UTF-8", "missing": ""}


def file_setup(slot: str, kind: str):
    argv, var, name, _ = RECORD_SLOTS[slot]

    def setup(c) -> None:
        slot_setup(slot, lambda t: t)(c)
        if slot == "report-metrics":
            sd = c.vars["sd"]
            (sd / name).unlink()
            make_special(c, f"sd/{name}", kind)
            c.protected.pop(sd / "per_question.jsonl", None)
            return
        target = f"{var}/{name}" if slot == "compare-b" else name
        c.protected.clear()
        make_special(c, target, kind)

    return setup


FILE_SLOTS = [s for s in RECORD_SLOTS if s not in ("compare-b",)]
FILE_CASES = [
    Case(f"file-{slot}-{kind}", RECORD_SLOTS[slot][0],
         clean_error(*([phrase] if phrase else []), *([RECORD_SLOTS[slot][2]] if kind == "missing" else [])),
         file_setup(slot, kind))
    for slot in FILE_SLOTS
    for kind, phrase in FILE_KINDS.items()
]  # fmt: skip


# recipes, through reward check / score --recipe: the one YAML loader
def recipe_text(kind: str) -> bytes:
    if kind == "binary":
        return b"\x89PNG\r\n\x1a\n\x00\xff" * 8
    if kind == "deep":
        return ("a: " + "[" * 3000 + "]" * 3000 + "\n").encode()
    if kind == "deep-block":
        return "".join("  " * i + f"k{i}:\n" for i in range(200)).encode() + b"  " * 200 + b"v\n"
    if kind == "bomb":
        lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
        for i, n in enumerate("bcdefghi"):
            prev = "abcdefghi"[i]
            lines.append(f"{n}: &{n} [" + ",".join([f"*{prev}"] * 9) + "]")
        return ("\n".join(lines) + "\n").encode()
    if kind == "recursive":
        return b"a: &a [*a]\n"
    if kind == "not-yaml":
        return b"a: [\n"
    raise ValueError(kind)


RECIPE_KINDS = {"binary": "UTF-8", "deep": "nested", "deep-block": "nested", "bomb": "alias", "recursive": "nested",
                "not-yaml": "YAML"}  # fmt: skip


def load_recipe_cmd(kind: str):
    def cmd(c):
        from recipes.reader import RecipeError, load_recipe

        p = c.tmp / "recipe.yaml"
        if kind in ("fifo", "dir", "chardev"):
            p = make_special(c, "recipe.yaml", kind)
        else:
            p.write_bytes(recipe_text(kind))
        try:
            return load_recipe(p, resolve=True)
        except RecipeError as e:
            raise InputError(str(e)) from None

    return cmd


RECIPE_CASES = [Case(f"recipe-{k}", load_recipe_cmd(k), clean_error(ph)) for k, ph in RECIPE_KINDS.items()] + [
    Case(f"recipe-{k}", load_recipe_cmd(k), clean_error("not a regular file")) for k in ("fifo", "dir", "chardev")
]


def yaml_io_cmd(kind: str):
    def cmd(c):
        from core.io import read_yaml

        p = c.tmp / "x.yaml"
        p.write_bytes(recipe_text(kind))
        return read_yaml(p)

    return cmd


YAML_CASES = [Case(f"yaml-io-{k}", yaml_io_cmd(k), clean_error(ph)) for k, ph in RECIPE_KINDS.items()]


# ---------------------------------------------------------------------------------------------- outputs
OUT_SLOTS = {
    "show": (SHOW, "s.png"),
    "compare": ([*COMPARE, "--resamples", "50", "--out", "{outp}"], "o.json"),
    "convert": (CONVERT[:-1] + ["{outp}"], "c.jsonl"),
    "resolve": (["eval", "resolve", "--pred", "{raw}", "--gold", "{gold}", "--cache-dir", "{cache}", "--out",
                 "{outp}", "--resolver", "lexical"], "p.jsonl"),
    "reward-score": (["reward", "score", "--inputs", "{inputs}", "--cache-dir", "{cache}", "--out", "{outp}",
                      "--judge", "lexical", "--resolver", "lexical"], "out.jsonl"),
    "citevqa": ([*CVQA[:-3], "--out", "{outp}", "--no-byte-check"], "g.jsonl"),
}  # fmt: skip


def out_setup(slot: str, kind: str):
    argv, name = OUT_SLOTS[slot]

    def setup(c) -> None:
        opt_setup(c)
        p = make_special(c, f"o/{name}", kind)
        c.vars["outp"] = p
        if slot == "show":
            c.vars["tmp_out"] = p

    return setup


def _out_argv(slot: str) -> list[str]:
    argv, _ = OUT_SLOTS[slot]
    return [("{outp}" if a == "{tmp}/s.png" else a) for a in argv]


OUT_KINDS = {"chardev": "not a regular file", "fifo": "not a regular file"}
OUTPUT_CASES = [
    Case(f"out-{slot}-{kind}", _out_argv(slot), clean_error(phrase), out_setup(slot, kind))
    for slot in OUT_SLOTS
    for kind, phrase in OUT_KINDS.items()
]  # fmt: skip


def inside_cache_setup(rel: str):
    def setup(c) -> None:
        opt_setup(c)
        cache = c.env.copy_cache(c.tmp / "cache")
        c.vars["cache"] = cache
        c.vars["outp"] = cache / rel.format(key=c.env.doc_key)
        c.protect(cache)

    return setup


INSIDE_CACHE = {"manifest": "{key}/manifest.json", "blocks": "{key}/blocks.jsonl", "new": "{key}/new.png",
                "top": "x.json"}  # fmt: skip
OUTPUT_CASES += [
    Case(f"out-inside-cache-{slot}-{name}", _out_argv(slot), clean_error("inside", "cache"), inside_cache_setup(rel))
    for slot in ("show", "convert")
    for name, rel in INSIDE_CACHE.items()
]  # fmt: skip
OUTPUT_CASES += [
    Case(f"out-report-runs-inside-cache-{name}",
         ["eval", "report", "--runs", "{score}", "--cache-dir", "{cache}", "--out", "{outp}"],
         clean_error("inside", "cache"), inside_cache_setup(rel))
    for name, rel in (("entry", "{key}"), ("top", "report"))
]  # fmt: skip


# Any writer, whatever --cache-dir it was given: a path inside a cache entry is refused (the one writer's guard).
ENTRY_WRITERS = {
    "resolve": OUT_SLOTS["resolve"][0],
    "reward-score": OUT_SLOTS["reward-score"][0],
    "compare": OUT_SLOTS["compare"][0],
    "citevqa": OUT_SLOTS["citevqa"][0],
    "score-dir": ["eval", "score", "--gold", "{gold}", "--pred", "{pred}", "--out", "{outp}", "--no-report"],
}


def entry_setup(rel: str, own_cache: bool):
    def setup(c) -> None:
        opt_setup(c)
        cache = c.env.copy_cache(c.tmp / "cache")
        if own_cache:
            c.vars["cache"] = cache
        c.vars["outp"] = cache / rel.format(key=c.env.doc_key)
        c.protect(cache)

    return setup


OUTPUT_CASES += [
    Case(f"out-entry-{w}-{name}-{'same' if own else 'other'}-cache", argv, clean_error("cache"),
         entry_setup(rel, own))
    for w, argv in ENTRY_WRITERS.items()
    for name, rel in (("manifest", "{key}/manifest.json"), ("blocks", "{key}/blocks.jsonl"), ("new", "{key}/x.out"))
    for own in (True, False)
    if not (w == "score-dir" and name != "new")
]  # fmt: skip


def runlog_cmd(argv_fn):
    """A launch.runlog command as a library call: its exit status and error line become the harness's."""

    def cmd(c):
        from launch.runlog import main

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv_fn(c)])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 2
        if rc:
            lines = [ln for ln in err.getvalue().splitlines() if "error:" in ln]
            raise InputError(lines[-1].split("error:", 1)[1].strip() if lines else f"exit {rc}")
        return rc

    return cmd


def run_dir_setup(steps: list, extra: str = ""):
    """Set-up: a run folder with one segment whose experiment log holds ``steps`` (and ``extra`` lines), and a
    merged ``run_log.jsonl`` that cases must not replace."""

    def setup(c) -> None:
        from launch.segments import new_segment, save_segment, segments_dir

        run = c.tmp / "run"
        run.mkdir()
        seg = new_segment(run, "1", 0)
        save_segment(run, seg)
        d = segments_dir(run) / seg.name
        d.mkdir(parents=True, exist_ok=True)
        rows = "".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in steps)
        (d / "experiment_log.jsonl").write_text(rows + extra)
        (run / "run_log.jsonl").write_text('{"step": 1, "segment": "1-1"}\n')
        (run / "manifest.json").write_text("{}\n")
        c.vars["run"] = run

    return setup


def protect_run_log(setup):
    def both(c) -> None:
        setup(c)
        c.protect(c.vars["run"] / "run_log.jsonl", c.vars["run"] / "manifest.json")

    return both


def merged(total: int):
    def check(c, res) -> None:
        s = json.loads((c.vars["run"] / "run_summary.json").read_text())
        assert s["missing_total"] == total, s["missing_total"]
        assert len(s["missing"]) <= 1000, len(s["missing"])

    return check


RUNLOG_CASES = [
    Case("runlog-plot-over-run-log", runlog_cmd(lambda c: ["plot", c.vars["run"], "--out",
                                                           c.vars["run"] / "run_log.jsonl"]),
         clean_error("run_log.jsonl"), protect_run_log(run_dir_setup([1]))),
    Case("runlog-plot-over-manifest", runlog_cmd(lambda c: ["plot", c.vars["run"], "--out",
                                                            c.vars["run"] / "manifest.json"]),
         clean_error("run folder"), protect_run_log(run_dir_setup([1]))),
    Case("runlog-merge-step-1e12", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"]]),
         value(merged(10**12 - 2), "missing steps counted, at most 1000 listed"), run_dir_setup([1, 10**12])),
    Case("runlog-merge-step-5000-digits", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"]]),
         value(merged(1), "the line with a 5,000-digit step is a torn line"),
         run_dir_setup([1, 3], '{"step": ' + "9" * 5000 + "}\n")),
    Case("runlog-merge-step-true", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"]]),
         value(merged(1), "a step of true is not step 1"), run_dir_setup([2], '{"step": true}\n')),
    Case("runlog-merge-step-nan", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"]]),
         value(merged(0), "a NaN line is torn"), run_dir_setup([1], '{"step": NaN}\n')),
    Case("runlog-merge-max-steps-negative", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"],
                                                                  "--max-steps=-3"]),
         clean_error("--max-steps"), run_dir_setup([1])),
    Case("runlog-merge-max-steps-huge", runlog_cmd(lambda c: ["merge", "--run-dir", c.vars["run"],
                                                              "--max-steps", "1" + "0" * 15]),
         clean_error("--max-steps"), run_dir_setup([1])),
]  # fmt: skip


# ---------------------------------------------------------------------------------------------- work
def lat_parse_cmd(unit: str, n: int):
    def cmd(c):
        from reward.lat import parse_coe

        t0 = time.perf_counter()
        parse_coe(unit * n)
        return time.perf_counter() - t0

    return cmd


def convert_parse_cmd(unit: str, n: int):
    def cmd(c):
        from eval.convert import parse_lat_response

        t0 = time.perf_counter()
        parse_lat_response(unit * n)
        return time.perf_counter() - t0

    return cmd


def fast(limit: float):
    def check(c, res) -> None:
        assert res.value < limit, f"{res.value:.2f} s"

    return check


TAGS = ["<think></think><answer></answer>", "<think>", "<answer>", "</think> <answer>", "<think>x</think>",
        "<ANSWER>", "<think><answer>", "{\"bbox_2d\": [", "Bounding box: {"]  # fmt: skip
WORK_CASES = [
    Case(f"work-lat-parse-{i}", lat_parse_cmd(u, 750_000 // len(u)), value(fast(2.0), "linear LAT parsing"))
    for i, u in enumerate(TAGS)
] + [
    Case(f"work-convert-parse-{i}", convert_parse_cmd(u, 750_000 // len(u)), value(fast(2.0), "linear tag scan"))
    for i, u in enumerate(TAGS)
]  # fmt: skip


def overlap_cmd(n: int):
    def cmd(c):
        from reward.lat import LatSettings, Region, step_reward

        regions = [Region(1, (float(i % 50), 0.0, float(i % 50) + 1.0, 1.0), "t") for i in range(n)]
        t0 = time.perf_counter()
        step_reward([0.9] * n, regions, 1.0, LatSettings())
        return time.perf_counter() - t0

    return cmd


WORK_CASES += [Case(f"work-lat-overlap-{n}", overlap_cmd(n), value(fast(3.0), "capped overlap check"))
               for n in (1_000, 20_000, 100_000)]  # fmt: skip


def missing_cmd(top: int):
    def cmd(c):
        from launch.merge import missing_steps

        t0 = time.perf_counter()
        listed, total = missing_steps([1, top], top)
        assert total == top - 2 and len(listed) <= 1000, (total, len(listed))
        return time.perf_counter() - t0

    return cmd


WORK_CASES += [Case(f"work-missing-steps-{top}", missing_cmd(top), value(fast(1.0), "capped missing steps"))
               for top in (10, 10**6, 10**12, 10**18)]  # fmt: skip


# ---------------------------------------------------------------------------------------------- text
INVISIBLES = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u202e", "\u2066", "\u00ad", "\u200e"]


def lat_accuracy_cmd(ch: str):
    def cmd(c):
        from reward.lat import accuracy

        return accuracy("Shenzhen" + ch, "Shenzhen"), accuracy(ch.join("Shenzhen"), "Shenzhen")

    return cmd


def mae_cmd(ch: str):
    def cmd(c):
        from eval.multattreval import score_item

        clean = score_item(["revenue grew by 12%"], ["revenue grew by 12%"])
        dirty = score_item(["revenue grew" + ch + " by 12%", ch * 3], ["revenue grew by 12%"])
        return clean.f1, dirty.f1

    return cmd


def equal_pair(c, res) -> None:
    a, b = res.value
    assert a == b or a == 1.0 and b == 1.0, res.value


def all_one(c, res) -> None:
    assert all(v == 1.0 for v in res.value), res.value


TEXT_CASES = [Case(f"text-lat-accuracy-U+{ord(ch):04X}", lat_accuracy_cmd(ch), value(all_one, "accuracy 1"))
              for ch in INVISIBLES] + [
    Case(f"text-multattreval-U+{ord(ch):04X}", mae_cmd(ch), value(equal_pair, "same F1")) for ch in INVISIBLES
]  # fmt: skip


ALL = (
    [("boundary records", c) for c in RECORD_CASES + FIELD_CASES]
    + [("boundary options", c) for c in OPTION_CASES]
    + [("boundary files", c) for c in FILE_CASES + RECIPE_CASES + YAML_CASES]
    + [("boundary outputs", c) for c in OUTPUT_CASES + RUNLOG_CASES]
    + [("boundary work", c) for c in WORK_CASES]
    + [("boundary text", c) for c in TEXT_CASES]
)


@pytest.mark.parametrize("suite, case", ALL, ids=ids([c for _, c in ALL]))
def test_boundary(suite, case, hostile_env, tmp_path, monkeypatch):
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    run_ok(case, tmp_path, hostile_env, suite)


# ---------------------------------------------------------------------------------------------- generators
hostile_number = st.one_of(
    st.integers(min_value=301, max_value=6000).map(lambda n: "7" * n),
    st.integers(min_value=301, max_value=6000).map(lambda n: "-" + "3" * n),
    st.integers(min_value=309, max_value=100_000).map(lambda e: f"1e{e}"),
    st.integers(min_value=309, max_value=100_000).map(lambda e: f"-2.5E+{e}"),
    st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    st.integers(min_value=201, max_value=4000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=201, max_value=4000).map(lambda n: '{"a":' * n + "1" + "}" * n),
)
"""A JSON value no record reader may pass on: an integer past the digit bound, a float that overflows, NaN and
infinities, nesting past the depth bound."""


@pytest.mark.parametrize("slot", list(RECORD_SLOTS))
@HYP
@given(token=hostile_number, key=st.sampled_from(["zz", "index", "page", "answer", "score"]))
def test_generated_records(slot, token, key, hostile_env, tmp_path_factory, monkeypatch):
    """Every record reader refuses a generated hostile number, wherever in the first record it stands."""
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    case = Case(f"gen-record-{slot}", RECORD_SLOTS[slot][0], clean_error(RECORD_SLOTS[slot][2]),
                slot_setup(slot, inject(token, key)))  # fmt: skip
    run_ok(case, fresh(tmp_path_factory), hostile_env, "boundary generated")


def invalid_option(kind: str, lo, hi, lo_open: bool):
    parts = [
        st.sampled_from(["nan", "-nan", "inf", "+inf", "-Infinity", "abc", "1,5", "0x10", "1e99999", " "]),
        st.integers(min_value=65, max_value=5000).map(lambda n: "8" * n),
        st.integers(max_value=int(lo) - 1).map(str),
    ]
    if hi != float("inf") and hi < 1e12:
        parts.append(st.integers(min_value=int(hi) + 1).map(str))
    if lo_open:
        parts.append(st.just(str(lo)))
    if kind == "int":
        parts.append(st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != int(f)).map(repr))
    return st.one_of(*parts)


@pytest.mark.parametrize("cmd, argv, flag, kind, lo, hi, lo_open", FLAGS, ids=[f"{f[0]}{f[2]}" for f in FLAGS])
@HYP
@given(data=st.data())
def test_generated_options(cmd, argv, flag, kind, lo, hi, lo_open, data, hostile_env, tmp_path_factory):
    """Every numeric flag refuses a generated out-of-domain value with one error line naming the flag."""
    v = data.draw(invalid_option(kind, lo, hi, lo_open))
    case = Case(f"gen-option-{cmd}{flag}", [*argv, f"{flag}={v}"], clean_error(flag), opt_setup)
    run_ok(case, fresh(tmp_path_factory), hostile_env, "boundary generated")


hostile_file = st.one_of(
    st.sampled_from(["fifo", "dir", "chardev", "missing"]),
    st.binary(min_size=0, max_size=300).map(lambda b: b"\xc3\x28" + b),  # never UTF-8
)


def file_setup_any(slot: str, kind):
    argv, var, name, _ = RECORD_SLOTS[slot]

    def setup(c) -> None:
        slot_setup(slot, lambda t: t)(c)
        c.protected.clear()
        target = f"sd/{name}" if slot == "report-metrics" else name
        p = c.tmp / target
        p.unlink()
        if isinstance(kind, bytes):
            p.write_bytes(kind)
        else:
            make_special(c, target, kind)

    return setup


@pytest.mark.parametrize("slot", FILE_SLOTS)
@HYP
@given(kind=hostile_file)
def test_generated_files(slot, kind, hostile_env, tmp_path_factory, monkeypatch):
    """Every file input refuses a generated non-regular or non-UTF-8 file without waiting or a traceback."""
    monkeypatch.delenv("QUOTECITE_JUDGE_URL", raising=False)
    case = Case(f"gen-file-{slot}", RECORD_SLOTS[slot][0], clean_error(), file_setup_any(slot, kind))
    run_ok(case, fresh(tmp_path_factory), hostile_env, "boundary generated")


@pytest.mark.parametrize("slot", list(OUT_SLOTS))
@HYP
@given(kind=st.sampled_from(["chardev", "fifo"]), depth=st.integers(0, 2))
def test_generated_outputs(slot, kind, depth, hostile_env, tmp_path_factory):
    """Every file output refuses a special file (never replaced: it is still the special file afterwards)."""
    argv, name = OUT_SLOTS[slot]

    def setup(c) -> None:
        opt_setup(c)
        c.vars["outp"] = make_special(c, "/".join(["o"] * (depth + 1)) + f"/{name}", kind)

    case = Case(f"gen-out-{slot}", _out_argv(slot), clean_error("not a regular file"), setup)
    tmp = fresh(tmp_path_factory)
    run_ok(case, tmp, hostile_env, "boundary generated")
    p = tmp / ("/".join(["o"] * (depth + 1)) + f"/{name}")
    assert not p.is_file() or p.stat().st_size == 0, f"{p} was replaced by a regular file"
    assert stat.S_ISCHR(p.stat().st_mode) or stat.S_ISFIFO(p.stat().st_mode), f"{p} replaced"


invisible = st.sampled_from(INVISIBLES + ["\u2061", "\u2062", "\u2063", "\u2064", "\u206a", "\ufe0f", "\u180e"])


@settings(HYP, max_examples=60)
@given(words=st.lists(st.text(alphabet=st.characters(categories=["L", "N"]), min_size=1, max_size=8), min_size=1,
                      max_size=6), junk=st.lists(st.tuples(st.integers(0, 10**6), invisible), max_size=6))  # fmt: skip
def test_generated_text(words, junk):
    """Inserting invisible or bidi characters anywhere never changes the normalised text, LAT accuracy or the
    MultAttrEval similarity (one normalisation for every comparison)."""
    from data_prep.text import normalize_for_compare
    from eval.multattreval import similarity
    from reward.lat import accuracy
    from tests.hostile import harness

    text = " ".join(words)
    dirty = text
    for pos, ch in junk:
        i = pos % (len(dirty) + 1)
        dirty = dirty[:i] + ch + dirty[i:]
    ok = (
        normalize_for_compare(dirty) == normalize_for_compare(text)
        and accuracy(dirty, text) == accuracy(text, text)
        and similarity(dirty, text) == similarity(text, text)
    )
    harness.RESULTS.append(("boundary generated", "gen-text-normalisation", "success" if ok else "silent_wrong"))
    assert ok, (text, dirty)
