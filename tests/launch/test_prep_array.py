"""The data-prep job array: ``--shard I/N`` / ``--finalize`` of ``data_prep longdocurl`` and launch/prep_array.sh.

Without Slurm: the shard assignment (stable, disjoint, covering), bad ``--shard`` values, shards plus a finalize run
in one process against the one-process build, and the script's ``--dry-run`` / ``--help``. On the local Slurm
(marker ``slurm``, ``QUOTECITE_SLURM=1``, started by .ci/slurm_up.sh): ``prep_array.sh`` with one task made to fail
(the documented test hook QUOTECITE_PREP_FAIL_TASK), then rerun, gives the same cache and parquet as the
one-process build, and the rerun rebuilds only the failed shard's documents.

The data set: the three real LongDocURL records with generated PDFs of their page counts, generated documents with
one question each, and the two real MMLongBench-Doc PDFs of the fixtures (read in place through symlinks; left out
when the fixtures are absent). Blocks only (``--encoder none``): four array tasks each loading MiniLM would cost
more than the build on this machine's two cores; the cache entries are content-addressed either way.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.shards import Shard, shard_of
from tests.conftest import FIXTURES, REPO
from tests.data_prep.test_longdocurl import longdocurl_records, write_jsonl, write_pdf
from tests.support.slurm import slurm_reason, wait_for

PY = sys.executable
SCRIPT = str(REPO / "launch" / "prep_array.sh")
PIXELS = 20_000
COMMANDS = {"longdocurl": ("data_prep.cmd_longdocurl", "build the GRPO training set")}
T = float(os.environ.get("QUOTECITE_SLURM_TEST_TIMEOUT", "180"))
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
SBATCH_ARGS = "--cpus-per-task=1 --time=00:10:00"


# --------------------------------------------------------------------------------------------- Slurm helpers
needs_slurm = [pytest.mark.slurm, pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-")]


def job_states(job: str) -> dict[str, str]:
    """``{JobId (with _task for array tasks): JobState}`` of a job or of every task of an array job."""
    r = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        f = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
        task = f.get("ArrayTaskId")
        out[f"{f['ArrayJobId']}_{task}" if task else f["JobId"]] = f.get("JobState", "")
    return out


def wait_done(job: str, timeout: float = T) -> dict[str, str]:
    """Wait until the job (every task of it) is in a final state; returns the states."""
    return wait_for(
        lambda: (s := job_states(job)) and all(v in FINAL for v in s.values()) and s,
        timeout,
        f"job {job} to end",
        poll=0.5,
    )


# --------------------------------------------------------------------------------------------- data set
def make_dataset(root: Path, n_generated: int = 6) -> tuple[Path, Path]:
    """A LongDocURL-like JSONL and PDF folder (see the module docstring); returns (jsonl, pdf_dir)."""
    pdf_dir = root / "pdfs"
    records = longdocurl_records()
    for r in records:
        write_pdf(pdf_dir / "4000-4999" / f"{r['doc_no']}.pdf", r["total_pages"], r["doc_no"])
    for i in range(n_generated):
        doc = f"gen{i:02d}"
        write_pdf(pdf_dir / "gen" / f"{doc}.pdf", 3 + i % 3, doc)
        records.append({"question_id": f"q-{doc}", "doc_no": doc, "question": f"What is on page 2 of {doc}?",
                        "answer": f"words of {doc}", "evidence_pages": [2], "total_pages": 3 + i % 3})  # fmt: skip
    mmlb = FIXTURES / "mayubo2333_MMLongBench-Doc"
    for pdf in sorted(mmlb.glob("*.pdf")) if mmlb.is_dir() else []:
        (pdf_dir / "real").mkdir(parents=True, exist_ok=True)
        (pdf_dir / "real" / pdf.name).symlink_to(pdf)  # read in place
        records.append({"question_id": f"q-{pdf.stem}", "doc_no": pdf.stem, "question": "What is the title?",
                        "answer": "a title", "evidence_pages": [1]})  # fmt: skip
    return write_jsonl(root / "LongDocURL.jsonl", records), pdf_dir


def cli_args(jsonl: Path, pdf_dir: Path, out: Path, cache: Path) -> list[str]:
    return ["--jsonl", str(jsonl), "--pdf-dir", str(pdf_dir), "--out", str(out), "--cache-dir", str(cache),
            "--encoder", "none", "--val", "1", "--seed", "3", "--max-pixels-per-page", str(PIXELS)]  # fmt: skip


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main("python -m data_prep", "", COMMANDS, ["longdocurl", *argv])
    return rc, out.getvalue(), err.getvalue()


def cache_digest(cache: Path) -> dict[str, dict[str, str]]:
    """Per cache entry: the sha256 of every data file and the manifest's content_sha256 (the manifest's own bytes
    hold its creation time)."""
    out = {}
    for entry in sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")):
        files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(entry.iterdir())}
        files["manifest.json"] = json.loads((entry / "manifest.json").read_text())["content_sha256"]
        out[entry.name] = files
    return out


def outputs(out: Path) -> dict:
    """The build's outputs, comparable across builds: parquet tables, skipped lines, summary without run counts."""
    import pyarrow.parquet as pq

    summary = json.loads((out / "summary.json").read_text())
    for k in ("seconds", "rendered_images", "reused_images", "documents_from_state"):
        summary.pop(k)
    return {
        "train": pq.read_table(out / "train.parquet").to_pylist(),
        "val": pq.read_table(out / "val.parquet").to_pylist(),
        "skipped": (out / "skipped.jsonl").read_text(),
        "summary": summary,
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("prep")
    jsonl, pdf_dir = make_dataset(root)
    docs = sorted({json.loads(x)["doc_no"] for x in jsonl.read_text().splitlines()})
    return {"root": root, "jsonl": jsonl, "pdf_dir": pdf_dir, "docs": docs}


@pytest.fixture(scope="module")
def one_process(dataset, tmp_path_factory) -> dict:
    """The reference: the ordinary one-process build."""
    root = tmp_path_factory.mktemp("one")
    rc, _, err = run_cli(cli_args(dataset["jsonl"], dataset["pdf_dir"], root / "out", root / "cache"))
    assert rc == 0, err
    return {"out": root / "out", "cache": root / "cache"}


# --------------------------------------------------------------------------------------------- shards, no Slurm
def test_shard_assignment_is_disjoint_covering_balanced_and_independent_of_the_other_items():
    keys = [f"{4000000 + i}" for i in range(600)]
    for n in (1, 2, 3, 4, 7):
        parts = [Shard(i, n).select(keys, key=str) for i in range(1, n + 1)]
        assert sorted(k for p in parts for k in p) == sorted(keys)  # covering, and disjoint (no key twice)
        assert min(len(p) for p in parts) > 0.7 * len(keys) / n  # a hash, not a skewed split
        # Stable: a key's shard depends on the key alone, not on the list it is in or its position in it.
        more = ["new-doc", *reversed(keys), "another"]
        assert [[k for k in Shard(i, n).select(more, key=str) if k in set(keys)] for i in range(1, n + 1)] == [
            sorted(p, key=more.index) for p in parts
        ]
    # Pinned: a changed hash would move documents between the shards of a half-done build.
    assert [shard_of(f"k{i}", 5) for i in range(10)] == [5, 3, 3, 1, 1, 3, 2, 2, 5, 5]
    assert (shard_of("4055915", 4), shard_of("a", 3), shard_of("", 2)) == (4, 2, 1)


@pytest.mark.parametrize(
    "value,message",
    [
        ("0/3", "shards are numbered 1..3 (1-based), got 0"),
        ("4/3", "shards are numbered 1..3 (1-based), got 4"),
        ("x", "expected I/N"),
        ("1/0", "the number of shards must be at least 1"),
        ("-1/3", "expected I/N"),
        ("1/3/4", "expected I/N"),
        ("", "expected I/N"),
    ],
)
def test_bad_shard_values_are_clear_errors(value, message, tmp_path):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        Shard.parse(value)
    jsonl = write_jsonl(tmp_path / "x.jsonl", longdocurl_records())
    (tmp_path / "pdfs").mkdir()
    rc, _, err = run_cli(["--jsonl", str(jsonl), "--pdf-dir", str(tmp_path / "pdfs"), "--out", str(tmp_path / "o"),
                          "--encoder", "none", f"--shard={value}"])  # fmt: skip
    assert rc == 2 and f"error: --shard {value!r}" in err and message in err
    assert not (tmp_path / "o").exists()


def test_shard_and_finalize_cannot_be_combined(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main("python -m data_prep", "", COMMANDS, ["longdocurl", "--jsonl", "j", "--pdf-dir", "p", "--out",
                                                       str(tmp_path), "--shard", "1/2", "--finalize"])  # fmt: skip
    assert "not allowed with argument" in capsys.readouterr().err


def test_shards_then_finalize_equal_the_one_process_build_and_finalize_names_missing_documents(
    dataset, one_process, tmp_path
):
    args = cli_args(dataset["jsonl"], dataset["pdf_dir"], tmp_path / "out", tmp_path / "cache")
    n = 4
    by_shard = {i: [d for d in dataset["docs"] if shard_of(d, n) == i] for i in range(1, n + 1)}
    late = max(i for i in by_shard if by_shard[i])  # the shard run last
    early = [i for i in by_shard if i != late]
    for i in early:
        rc, stdout, err = run_cli([*args, "--shard", f"{i}/{n}"])
        assert rc == 0, err
        assert f"shard {i}/{n}: {len(by_shard[i])} documents (0 already done)" in " ".join(stdout.split())
        assert not list((tmp_path / "out").glob("*.parquet")) and not (tmp_path / "out" / "summary.json").exists()
    markers = {p.stem for p in (tmp_path / "out" / ".state" / "docs").glob("*.json")}
    assert markers == {d for i in early for d in by_shard[i]}  # a shard processes its documents and no other

    rc, _, err = run_cli([*args, "--finalize"])
    assert rc == 2
    assert f"--finalize: {len(by_shard[late])} of {len(dataset['docs'])} documents have no finished entry" in err
    assert all(f"{d} (" in err for d in by_shard[late])
    assert not any(f"{d} (" in err for i in early for d in by_shard[i])
    assert not (tmp_path / "out" / "train.parquet").exists() and not (tmp_path / "out" / "summary.json").exists()

    rc, _, err = run_cli([*args, "--shard", f"{late}/{n}"])
    assert rc == 0, err
    rc, _, err = run_cli([*args, "--finalize"])
    assert rc == 0, err
    assert outputs(tmp_path / "out") == outputs(one_process["out"])
    assert cache_digest(tmp_path / "cache") == cache_digest(one_process["cache"])
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["documents_from_state"] == sum(
        1 for p in (tmp_path / "out" / ".state" / "docs").glob("*.json")
    )


def test_finalize_fails_when_a_documents_cache_entry_was_removed(dataset, one_process, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    shutil.copytree(one_process["out"], out)
    shutil.copytree(one_process["cache"], cache)
    args = cli_args(dataset["jsonl"], dataset["pdf_dir"], out, cache)
    rc, _, err = run_cli([*args, "--shard", "1/1"])  # the markers name the other cache folder: rebuilt here
    assert rc == 0, err
    victim = sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))[0]
    doc = json.loads((victim / "manifest.json").read_text())["pdf_path"]
    shutil.rmtree(victim)
    rc, _, err = run_cli([*args, "--finalize"])
    assert rc == 2 and "1 of" in err and f"({doc})" in err


def test_a_shard_whose_cache_build_fails_exits_1_naming_the_documents_and_leaves_them_to_the_rerun(
    dataset, tmp_path, monkeypatch
):
    from data_prep import longdocurl

    def embedder_down(self, pdf):
        raise ConnectionError("embedding server refused the connection")

    args = cli_args(dataset["jsonl"], dataset["pdf_dir"], tmp_path / "out", tmp_path / "cache")
    docs = [d for d in dataset["docs"] if shard_of(d, 2) == 1]
    with monkeypatch.context() as m:
        m.setattr(longdocurl._Builder, "_build_cache", embedder_down)
        rc, stdout, _ = run_cli([*args, "--shard", "1/2"])
    assert rc == 1 and f"shard 1/2: cache build failed for {', '.join(sorted(docs))}" in " ".join(stdout.split())
    assert not (tmp_path / "out" / ".state" / "docs").exists()
    rc, stdout, err = run_cli([*args, "--shard", "1/2"])  # the embedder is back: the rerun builds them
    assert rc == 0, err
    assert {p.stem for p in (tmp_path / "out" / ".state" / "docs").glob("*.json")} == set(docs)


# --------------------------------------------------------------------------------------------- the script, no Slurm
def script_env(dataset: dict, out: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUOTECITE_PREP_"))}
    env.update(
        QUOTECITE_REPO=str(REPO),
        QUOTECITE_PYTHON=PY,
        QUOTECITE_PREP_JSONL=str(dataset["jsonl"]),
        QUOTECITE_PREP_PDF_DIR=str(dataset["pdf_dir"]),
        QUOTECITE_PREP_OUT=str(out),
        QUOTECITE_PREP_ARGS=" ".join(cli_args(dataset["jsonl"], dataset["pdf_dir"], out, out.parent / "cache")[6:]),
    )
    env.update(extra)
    return env


def test_dry_run_prints_shards_commands_and_the_dependency(dataset, tmp_path):
    env = script_env(dataset, tmp_path / "out", QUOTECITE_PREP_SHARDS="3")
    r = subprocess.run(["bash", SCRIPT, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    counts = [sum(1 for d in dataset["docs"] if shard_of(d, 3) == i) for i in (1, 2, 3)]
    for i, c in enumerate(counts, 1):
        assert f"#   shard {i}/3: {c} of {len(dataset['docs'])} documents" in lines
        assert sum(1 for x in lines if x.startswith(f"#   task {i}: ") and x.endswith(f"--shard {i}/3")) == 1
    array = next(x for x in lines if x.startswith("+ sbatch") and "--array=1-3" in x)
    final = next(x for x in lines if x.startswith("+ sbatch") and "--dependency=afterok:ARRAYJOB" in x)
    assert "QUOTECITE_PREP_PHASE=shard" in array and "QUOTECITE_PREP_PHASE=final" in final
    assert "--kill-on-invalid-dep=yes" in final
    assert any(x.startswith("#   runs: ") and x.endswith("--finalize") for x in lines)
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize(
    "env,message",
    [
        ({"QUOTECITE_PREP_SHARDS": "x"}, "QUOTECITE_PREP_SHARDS='x': expected an integer"),
        ({"QUOTECITE_PREP_SHARDS": "0"}, "QUOTECITE_PREP_SHARDS='0': expected an integer from 1"),
        ({"QUOTECITE_PREP_TASKS": "1;3"}, "QUOTECITE_PREP_TASKS='1;3': expected array ids"),
        ({"QUOTECITE_PREP_JSONL": "/nonexistent.jsonl"}, "QUOTECITE_PREP_JSONL must name LongDocURL.jsonl"),
    ],
)
def test_bad_settings_are_named(dataset, tmp_path, env, message):
    r = subprocess.run(["bash", SCRIPT], env=script_env(dataset, tmp_path / "out", **env), capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and message in r.stderr


def test_help_is_the_marked_header():
    r = subprocess.run(["bash", SCRIPT, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("Build the LongDocURL block cache") and "QUOTECITE_PREP_JSONL" in r.stdout
    assert "QUOTECITE_PREP_FAIL_TASK" not in r.stdout  # a test knob: python -m launch.settings table --test
    assert "#SBATCH" not in r.stdout and "set -uo" not in r.stdout


# --------------------------------------------------------------------------------------------- on Slurm
@pytest.mark.slurm
@pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-")
def test_array_with_a_failed_task_then_rerun_gives_the_one_process_cache_and_parquet(
    dataset, one_process, tmp_path, cleanup_jobs
):
    n = 4
    out = tmp_path / "out"
    docs_of = {i: [d for d in dataset["docs"] if shard_of(d, n) == i] for i in range(1, n + 1)}
    failing = next(i for i in range(1, n + 1) if docs_of[i])
    name = f"qc-prep-{uuid.uuid4().hex[:8]}"
    cleanup_jobs.append(name)
    sbatch = f"{SBATCH_ARGS} --job-name={name}"
    env = script_env(dataset, out, QUOTECITE_PREP_SHARDS=str(n), QUOTECITE_PREP_SBATCH_ARGS=sbatch)

    def submit(**extra: str) -> tuple[str, str]:
        r = subprocess.run(["bash", SCRIPT], env={**env, **extra}, cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        array_job = lines[0].split()[2].rstrip(":")
        final_job = lines[1].split()[2].rstrip(":")
        assert f"after afterok:{array_job}" in lines[1]
        return array_job, final_job

    # 1. One task fails (the test hook): the final step never runs and writes nothing.
    array_job, final_job = submit(QUOTECITE_PREP_FAIL_TASK=str(failing))
    states = wait_done(array_job)
    assert states == {f"{array_job}_{i}": "FAILED" if i == failing else "COMPLETED" for i in range(1, n + 1)}
    assert wait_done(final_job) == {final_job: "CANCELLED"}  # --kill-on-invalid-dep: not left pending
    assert not (out / "train.parquet").exists() and not (out / "summary.json").exists()
    log = (out / "logs" / f"shard-{array_job}_{failing}.out").read_text()
    assert f"test hook QUOTECITE_PREP_FAIL_TASK: task {failing} fails" in log
    markers = {p.stem for p in (out / ".state" / "docs").glob("*.json")}
    assert markers == {d for i in range(1, n + 1) if i != failing for d in docs_of[i]}
    built_first = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache").glob("*/manifest.json")}

    # The final step on its own names the documents of the failed shard.
    r = subprocess.run(["bash", SCRIPT], env={**env, "QUOTECITE_PREP_PHASE": "final"}, capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 1 and f"{len(docs_of[failing])} of {len(dataset['docs'])} documents" in r.stderr
    assert all(f"{d} (" in r.stderr for d in docs_of[failing])

    # 2. The rerun: every task runs, only the failed shard's documents are built, and the final step writes.
    array_job, final_job = submit()
    assert set(wait_done(array_job).values()) == {"COMPLETED"}
    assert wait_done(final_job) == {final_job: "COMPLETED"}, (out / "logs" / f"final-{final_job}.out").read_text()
    assert {p: p.stat().st_mtime_ns for p in built_first} == built_first  # no entry of the good shards rebuilt
    for i in range(1, n + 1):
        log = (out / "logs" / f"shard-{array_job}_{i}.out").read_text()
        done = 0 if i == failing else len(docs_of[i])
        assert f"shard {i}/{n}: {len(docs_of[i])} documents ({done} already done)" in " ".join(log.split()), log
    assert outputs(out) == outputs(one_process["out"])
    assert cache_digest(tmp_path / "cache") == cache_digest(one_process["cache"])


def test_flag_settings_are_split_as_the_shell_splits_a_command_line_never_globbed(dataset, tmp_path):
    # QUOTECITE_PREP_ARGS with a quoted word and a '*': one word each (the unquoted bash expansion made 'my run' two
    # words and '*' the names of the files in the working folder)
    (tmp_path / "a-file-here").write_text("x")
    env = script_env(dataset, tmp_path / "out", QUOTECITE_PREP_SHARDS="2",
                     QUOTECITE_PREP_ARGS="--note 'my run' --pattern '*' --glob *")  # fmt: skip
    r = subprocess.run(
        ["bash", SCRIPT, "--dry-run"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    task = next(x for x in r.stdout.splitlines() if x.startswith("#   task 1: "))
    words = shlex.split(task.removeprefix("#   task 1: "))
    i = words.index("--note")
    assert words[i : i + 6] == ["--note", "my run", "--pattern", "*", "--glob", "*"], words
    assert "a-file-here" not in task
