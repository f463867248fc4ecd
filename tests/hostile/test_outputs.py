"""Outputs of the reward and eval commands: an output that is an input is refused for every command that reads
and writes files, a full disk or a directory in the way gives one line and keeps the previous output, and an
``eval score`` folder is replaced as one unit (no stale file, nothing half-new after a kill).

The commands run in-process through the real dispatcher (:func:`tests.hostile.harness.run_cli`)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from core import io as qio
from tests.hostile.harness import run_cli


def one_error_line(res, *phrases: str) -> str:
    assert res.exc is None, res.tb
    assert res.rc == 2, (res.rc, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(lines) == 1, res.stderr
    for p in phrases:
        assert p.lower() in lines[0].lower(), lines[0]
    return lines[0]


def rows(p: Path) -> list[dict]:
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


def reward_args(env, out) -> list:
    return ["reward", "score", "--inputs", env.inputs, "--cache-dir", env.cache_dir, "--out", out,
            "--judge", "lexical", "--resolver", "lexical"]  # fmt: skip


# ---------------------------------------------------------------------------------------------- output = input
def test_reward_score_refuses_an_output_that_is_its_inputs_by_a_hard_link(hostile_env, tmp_path):
    """Today `reward score --out X --inputs X` exits 0 and replaces the rollouts with scores."""
    inputs = tmp_path / "rollouts.jsonl"
    inputs.write_bytes(hostile_env.inputs.read_bytes())
    os.link(inputs, tmp_path / "same.jsonl")  # another name for the same file
    before = inputs.read_bytes()
    for out in (inputs, tmp_path / "same.jsonl", tmp_path / "sub" / ".." / "rollouts.jsonl"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        args = reward_args(hostile_env, out)
        args[3] = inputs
        one_error_line(run_cli(args), "is the input", str(inputs))
    assert inputs.read_bytes() == before


def _cmd_cases():
    """(name, set-up(env, tmp) -> (argv, the input that must survive))."""

    def resolve(env, tmp):
        pred = tmp / "raw.jsonl"
        pred.write_bytes(env.raw.read_bytes())
        return ["eval", "resolve", "--pred", pred, "--gold", env.gold, "--cache-dir", env.cache_dir,
                "--out", pred], pred  # fmt: skip

    def resolve_gold(env, tmp):
        gold = tmp / "gold.jsonl"
        gold.write_bytes(env.gold.read_bytes())
        return ["eval", "resolve", "--pred", env.raw, "--gold", gold, "--cache-dir", env.cache_dir,
                "--out", gold], gold  # fmt: skip

    def score(env, tmp):
        pred = tmp / "run" / "pred.jsonl"
        pred.parent.mkdir()
        pred.write_bytes(env.pred.read_bytes())
        return ["eval", "score", "--gold", env.gold, "--pred", pred, "--out", tmp / "run"], pred

    def compare(env, tmp):
        b = tmp / "b"
        b.mkdir()
        (b / "per_question.jsonl").write_bytes((env.score_dir / "per_question.jsonl").read_bytes())
        return ["eval", "compare", env.score_dir, b, "--out", b / "per_question.jsonl"], b / "per_question.jsonl"

    def convert(env, tmp):
        inp = tmp / "lat.jsonl"
        inp.write_text('{"index": 0}\n')
        return ["eval", "convert", "--from", "lat", "--input", inp, "--gold", env.gold, "--cache-dir",
                env.cache_dir, "--out", inp], inp  # fmt: skip

    def infer(env, tmp):
        gold = tmp / "gold.jsonl"
        gold.write_bytes(env.gold.read_bytes())
        return ["eval", "infer", "--model", "m", "--gold", gold, "--interface", "language", "--out", gold,
                "--cache-dir", env.cache_dir], gold  # fmt: skip

    def report(env, tmp):
        run = tmp / "run"
        run.mkdir()
        for f in env.score_dir.iterdir():
            if f.is_file():
                (run / f.name).write_bytes(f.read_bytes())
        return ["eval", "report", "--runs", run, env.score_dir, "--out", run], run / "metrics.json"

    def citevqa(env, tmp):
        src = tmp / "CiteVQA.json"
        src.write_text("[]")
        return ["data_prep", "citevqa", "--citevqa", src, "--pdf-dir", tmp, "--out", src], src

    return [("eval resolve --pred", resolve), ("eval resolve --gold", resolve_gold), ("eval score", score),
            ("eval compare", compare), ("eval convert", convert), ("eval infer", infer), ("eval report", report),
            ("data_prep citevqa", citevqa)]  # fmt: skip


@pytest.mark.parametrize("make", [m for _, m in _cmd_cases()], ids=[n for n, _ in _cmd_cases()])
def test_every_command_that_writes_refuses_an_output_that_is_an_input(hostile_env, tmp_path, make):
    argv, kept = make(hostile_env, tmp_path)
    before = kept.read_bytes()
    line = one_error_line(run_cli(argv))
    assert "input" in line
    assert kept.read_bytes() == before


# ---------------------------------------------------------------------------------------------- full disk
@pytest.fixture
def full_disk(monkeypatch):
    """Every fsync fails with ENOSPC, as on a full disk (a write's data reaches the disk at fsync)."""

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", fsync)


def test_reward_score_on_a_full_disk_gives_one_line_and_keeps_the_previous_output(hostile_env, tmp_path, full_disk):
    out = tmp_path / "scores.jsonl"
    out.write_text("previous scores\n")
    line = one_error_line(run_cli(reward_args(hostile_env, out)), "no space left", str(out))
    assert "Traceback" not in line
    assert out.read_text() == "previous scores\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.jsonl"]  # no temp file left behind


def test_eval_score_on_a_full_disk_keeps_the_previous_folder(hostile_env, tmp_path, monkeypatch):
    out = tmp_path / "score"
    args = ["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", out, "--no-report"]
    assert run_cli(args).rc == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left")))
    one_error_line(run_cli(args), "no space left", str(out))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["score"]


def test_a_full_disk_met_by_a_library_is_one_line_not_a_traceback(hostile_env, tmp_path, monkeypatch):
    """An ENOSPC raised outside our atomic writers (here: matplotlib saving the plot) and a missing file are
    reported by the dispatcher as one line each; any other OSError (here EBADF, a bug) is a traceback."""
    import eval.report as report

    def savefig(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "x.png"))

    monkeypatch.setattr(report, "plot_recall_vs_iou", savefig)
    args = ["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", tmp_path / "s"]
    one_error_line(run_cli([*args, "--no-report"]), "no space left")
    assert not (tmp_path / "s").exists()

    def missing(*a, **k):
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/nonexistent/input")

    monkeypatch.setattr(report, "plot_recall_vs_iou", missing)
    one_error_line(run_cli([*args, "--no-report"]), "no such file", "/nonexistent/input")

    def bug(*a, **k):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    monkeypatch.setattr(report, "plot_recall_vs_iou", bug)
    res = run_cli([*args, "--no-report"])
    assert isinstance(res.exc, OSError) and res.exc.errno == errno.EBADF, (res.rc, res.stderr)


@pytest.mark.parametrize("kind", ["dir", "parent-file"])
def test_reward_score_out_in_the_way_gives_one_line(hostile_env, tmp_path, kind):
    if kind == "dir":
        out = tmp_path / "d"
        out.mkdir()
        one_error_line(run_cli(reward_args(hostile_env, out)), "is a directory", str(out))
    else:
        (tmp_path / "f").write_text("x")
        one_error_line(run_cli(reward_args(hostile_env, tmp_path / "f" / "out.jsonl")), "f")


# ---------------------------------------------------------------------------------------------- eval score as one unit
def test_reusing_an_eval_score_folder_leaves_no_stale_report_image(hostile_env, tmp_path):
    out = tmp_path / "score"
    base = ["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", out]
    assert run_cli([*base, "--cache-dir", hostile_env.cache_dir]).rc == 0
    images = sorted(p.name for p in (out / "report_files").iterdir())
    assert images
    stale = out / "report_files" / "q999_p9.jpg"
    stale.write_bytes(b"an image of a question this run does not have")
    assert run_cli([*base, "--cache-dir", hostile_env.cache_dir, "--report-limit", "1"]).rc == 0
    assert not stale.exists()
    assert len(list((out / "report_files").iterdir())) < len(images) + 1
    assert run_cli([*base, "--no-report"]).rc == 0
    assert not (out / "report.html").exists() and not (out / "report_files").exists()


def test_a_kill_mid_eval_score_leaves_the_previous_complete_folder(hostile_env, tmp_path, monkeypatch):
    """The new metrics are written, then the run dies while drawing the report: the folder must still be the
    previous run's whole set, never new metrics beside an old report.html."""
    import eval.report as report

    out = tmp_path / "score"
    args = ["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", out]
    assert run_cli(args).rc == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    other = tmp_path / "pred2.jsonl"
    other.write_text(hostile_env.pred.read_text().splitlines()[0] + "\n")

    def killed(*a, **k):
        raise KeyboardInterrupt  # what SIGINT raises; SIGKILL leaves the same state without the clean-up

    monkeypatch.setattr(report, "write_report", killed)
    with pytest.raises(KeyboardInterrupt):
        from core.cli import main
        from eval.__main__ import COMMANDS

        main("eval", "", COMMANDS, ["score", "--gold", str(hostile_env.gold), "--pred", str(other), "--out", str(out)])
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred2.jsonl", "score"]


def test_atomic_dir_refuses_a_folder_of_other_files_and_restores_on_error(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    (d / "mine.txt").write_text("keep")
    with pytest.raises(qio.OutputError, match="mine.txt"), qio.atomic_dir(d, ["a.json"]):
        pass
    assert (d / "mine.txt").read_text() == "keep"
    (d / "mine.txt").unlink()
    (d / "a.json").write_text("old")
    with pytest.raises(RuntimeError), qio.atomic_dir(d, ["a.json"]) as tmp:
        (tmp / "a.json").write_text("new")
        raise RuntimeError("boom")
    assert (d / "a.json").read_text() == "old"
    with qio.atomic_dir(d, ["a.json"]) as tmp:
        (tmp / "a.json").write_text("new")
    assert (d / "a.json").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_eval_score_writes_only_the_names_it_declares(hostile_env, tmp_path):
    """``atomic_dir`` refuses a reused folder holding undeclared names: every output must be in SCORE_OUTPUTS."""
    from eval.cmd_score import SCORE_OUTPUTS

    out = tmp_path / "s"
    res = run_cli(["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", out,
                   "--cache-dir", hostile_env.cache_dir, "--judge", "lexical"])  # fmt: skip
    assert res.rc == 0, res.stderr + res.tb
    assert {p.name for p in out.iterdir()} <= set(SCORE_OUTPUTS)
    assert run_cli(["eval", "score", "--gold", hostile_env.gold, "--pred", hostile_env.pred, "--out", out]).rc == 0


# ---------------------------------------------------------------------------------------------- the JSONL reader
@pytest.mark.parametrize(
    "data, phrase",
    [
        (b'{"a": 1}\n{"b": "caf\xe9"}\n', "x.jsonl:2: not UTF-8 text (byte 0xe9"),
        (b"\xef\xbb\xbf" + b'{"a": 1}\n', None),
        (b'{"a": 1}\n[2]\n', "x.jsonl:2: expected a JSON object"),
        (b"[" * 100_000 + b"\n", "x.jsonl:1:"),
    ],
    ids=["latin1", "bom", "array", "deep"],
)
def test_read_jsonl_names_file_and_line(tmp_path, data, phrase):
    p = tmp_path / "x.jsonl"
    p.write_bytes(data)
    if phrase is None:
        assert list(qio.read_jsonl(p)) == [(1, {"a": 1})]
    else:
        with pytest.raises(qio.InputError, match=None) as e:
            list(qio.read_jsonl(p))
        assert phrase in str(e.value)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "NaN"])
def test_finite_refuses_non_finite(text):
    import argparse

    from data_prep.validate import finite

    with pytest.raises(argparse.ArgumentTypeError):
        finite(text)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_atomic_outputs_have_the_modes_the_umask_gives(tmp_path, umask):
    # tempfile makes 0600 files and 0700 folders; an output renamed from one must have the mode a plain write gives
    # under the user's umask, so a group on a shared cluster can read a run's results when the umask says so
    import subprocess
    import sys

    code = ("import os, sys; os.umask(int(sys.argv[2], 8)); from core.io import atomic_write_text, atomic_dir\n"
            "atomic_write_text(sys.argv[1] + '/f.txt', 'x')\n"
            "with atomic_dir(sys.argv[1] + '/d') as t: open(os.path.join(t, 'a'), 'w').write('y')\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, str(tmp_path), oct(umask)[2:]], check=True,
                   cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o777 & ~umask
