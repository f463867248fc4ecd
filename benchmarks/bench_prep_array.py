"""Data-prep job array benchmark (``make bench``): the block-cache build of the fixture PDFs as a 1-task array
against a 4-task array (launch/prep_array.sh) on the local Slurm, speed-up measured in the same run. Figures only,
no timed assertions.

Every PDF under ../shared/fixtures (read in place through symlinks) is one LongDocURL-like document with one
question on page 1 and a one-page window, so the work is the cache build (``pdftext`` layout parsing; blocks
only, ``--encoder none``, unless QUOTECITE_BENCH_ENCODER names one) and not page rendering. Each arm starts from an
empty output and cache folder and is timed from the submission until the final (``--finalize``) job has
completed, so it includes Slurm's scheduling and each task's Python start. The speed-up is bounded by the CPUs the
partition's node really has (the local `ci` node: this machine's cores, shared with whatever else runs).

Needs the local Slurm (QUOTECITE_SLURM=1, .ci/slurm_up.sh); skipped otherwise. Settings: QUOTECITE_BENCH_PARTITION
(default: the default partition), QUOTECITE_BENCH_ENCODER (default none).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from benchmarks.report import print_table
from data_prep.shards import shard_of
from tests.conftest import FIXTURES, REPO
from tests.launch.test_prep_array import slurm_reason, wait_done

PY = sys.executable
SCRIPT = str(REPO / "launch" / "prep_array.sh")
TIMEOUT = float(os.environ.get("QUOTECITE_SLURM_TEST_TIMEOUT", "900"))

pytestmark = pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-")


def _dataset(root: Path) -> tuple[Path, Path, int]:
    pdfs = sorted(FIXTURES.rglob("*.pdf")) if FIXTURES.is_dir() else []
    if not pdfs:
        pytest.skip(f"no fixture PDFs under {FIXTURES}")
    pdf_dir = root / "pdfs"
    pdf_dir.mkdir()
    records = []
    for pdf in pdfs:
        (pdf_dir / pdf.name).symlink_to(pdf)
        records.append({"question_id": f"q-{pdf.stem}", "doc_no": pdf.stem, "question": "What is on page 1?",
                        "answer": "text", "evidence_pages": [1]})  # fmt: skip
    jsonl = root / "records.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    return jsonl, pdf_dir, len(pdfs)


def _arm(root: Path, jsonl: Path, pdf_dir: Path, shards: int) -> dict:
    out, cache = root / f"out{shards}", root / f"cache{shards}"
    name = f"qc-bench-prep-{uuid.uuid4().hex[:8]}"
    sbatch = f"--cpus-per-task=1 --time=00:30:00 --job-name={name}"
    if os.environ.get("QUOTECITE_BENCH_PARTITION"):
        sbatch += f" --partition={os.environ['QUOTECITE_BENCH_PARTITION']}"
    encoder = os.environ.get("QUOTECITE_BENCH_ENCODER", "none")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUOTECITE_PREP_"))}
    env.update(QUOTECITE_REPO=str(REPO), QUOTECITE_PYTHON=PY, QUOTECITE_PREP_JSONL=str(jsonl),
               QUOTECITE_PREP_PDF_DIR=str(pdf_dir), QUOTECITE_PREP_OUT=str(out), QUOTECITE_PREP_SHARDS=str(shards),
               QUOTECITE_PREP_SBATCH_ARGS=sbatch,
               QUOTECITE_PREP_ARGS=f"--cache-dir {cache} --encoder {encoder} --val 0 --max-window 1 "
               "--max-pixels-per-page 20000")  # fmt: skip
    try:
        t0 = time.perf_counter()
        r = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        array_job, final_job = (line.split()[2].rstrip(":") for line in r.stdout.splitlines()[:2])
        states = wait_done(array_job, TIMEOUT)
        t_array = time.perf_counter() - t0
        final = wait_done(final_job, TIMEOUT)
        t_total = time.perf_counter() - t0
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True)
    assert set(states.values()) == {"COMPLETED"} and final == {final_job: "COMPLETED"}, (states, final)
    summary = json.loads((out / "summary.json").read_text())
    entries = sorted(p.name for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {"array": t_array, "total": t_total, "kept": summary["questions_kept"], "entries": entries}


def test_cache_build_of_the_fixture_pdfs_as_a_1_task_vs_a_4_task_array(tmp_path):
    jsonl, pdf_dir, n_pdfs = _dataset(tmp_path)
    per_task = [sum(1 for p in pdf_dir.iterdir() if shard_of(p.stem, 4) == i) for i in range(1, 5)]
    one = _arm(tmp_path, jsonl, pdf_dir, 1)
    four = _arm(tmp_path, jsonl, pdf_dir, 4)
    assert one["entries"] == four["entries"] and one["kept"] == four["kept"]  # the same cache either way

    def row(label: str, docs: str, arm: dict) -> list[str]:
        return [label, docs, f"{arm['array']:.1f}", f"{arm['total'] - arm['array']:.1f}", f"{arm['total']:.1f}",
                f"{one['total'] / arm['total']:.2f}x"]  # fmt: skip

    print_table(
        f"prep_array.sh: block cache of {n_pdfs} fixture PDFs ({len(one['entries'])} entries, encoder "
        f"{os.environ.get('QUOTECITE_BENCH_ENCODER', 'none')}), submission to final job done",
        ["array", "documents per task", "tasks s", "final s", "total s", "speed-up vs 1 task"],
        [row("1 task", str(n_pdfs), one), row("4 tasks", "/".join(map(str, per_task)), four)],
    )
    print(f"speed-up, 4-task vs 1-task array: {one['total'] / four['total']:.2f}x (tasks only: "
          f"{one['array'] / four['array']:.2f}x)")  # fmt: skip
