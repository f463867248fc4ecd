"""launch/eval_8b.sh in array mode (QUOTECITE_EVAL_SHARDS) and ``eval infer --shard`` / :func:`eval.infer.merge_shards`.

Without Slurm: the dry-run plan (shards, every task's commands, the scoring job's dependency), ``--shard`` on the
command line, and the merge's checks. On the local Slurm (marker ``slurm``, ``QUOTECITE_SLURM=1``): a real array run
whose tasks run the real ``eval infer --shard I/N`` (with an in-test ``vllm`` package that answers from the question,
as the offline ``LLM`` would) and whose scoring job serves the stand-in judge and embedder (tests/standins), merges,
resolves (lexical) and scores (the rubric judge protocol against the stand-in judge); its merged predictions and scores equal a non-array run of the same
script on this machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.shards import Shard, shard_of
from eval.infer import merge_shards, shard_file
from eval.schemas import Element, Gold
from tests.conftest import REPO
from tests.data_prep.test_longdocurl import write_pdf
from tests.launch.test_prep_array import SBATCH_ARGS, slurm_reason, wait_done

PY = sys.executable
SCRIPT = str(REPO / "launch" / "eval_8b.sh")
N_QUESTIONS = 12
DOCS = ("alpha", "beta", "gamma")

FAKE_VLLM = '''
"""In-test stand-in for the vllm package: answers from the question (the user turn's last text part)."""
import json
from types import SimpleNamespace


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def chat(self, messages, params, lora_request=None, **kwargs):
        out = []
        for m in messages:
            q = m[-1]["content"][-1]["text"]
            who = "lora" if lora_request is not None else "base"
            text = json.dumps({"answer": f"{who}: {q}", "quotes": [q.split("?")[0].split()[-1] + "w"]})
            out.append(SimpleNamespace(outputs=[SimpleNamespace(text=text)]))
        return out
'''
FAKE_LORA = """
class LoRARequest:
    def __init__(self, name, lora_id, path):
        self.name, self.lora_id, self.path = name, lora_id, path
"""


# --------------------------------------------------------------------------------------------- set-up
@pytest.fixture(scope="module")
def evalset(tmp_path_factory) -> dict:
    """Gold questions over three generated PDFs, their block cache (pdftext, blocks only), a run folder with a LoRA
    adapter at step 2, and a ``vllm`` stand-in package."""
    root = tmp_path_factory.mktemp("evalarr")
    pdfs = [write_pdf(root / "pdfs" / f"{d}.pdf", 3, d) for d in DOCS]
    e = (Element(1, (0.0, 0.0, 100.0, 40.0)),)
    golds = [Gold(f"q{i:02d}", DOCS[i % 3], f"What is on page 1 of {DOCS[i % 3]} number {i}?", "a", "en", "t", e, e)
             for i in range(N_QUESTIONS)]  # fmt: skip
    gold = root / "gold.jsonl"
    gold.write_text("".join(json.dumps(g.to_json()) + "\n" for g in golds))
    cache = root / "cache"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = cli_main("python -m data_prep", "", {"blocks": ("data_prep.cmd_blocks", "")},
                      ["blocks", *map(str, pdfs), "--parser", "pdftext", "--encoder", "none", "--cache-dir", str(cache)])  # fmt: skip
    assert rc == 0
    run = root / "run"
    adapter = run / "checkpoints" / "global_step_2" / "actor" / "lora_adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 8}')
    fake = root / "fakevllm"
    (fake / "vllm" / "lora").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    (fake / "vllm" / "lora" / "__init__.py").write_text("")
    (fake / "vllm" / "lora" / "request.py").write_text(FAKE_LORA)
    return {"root": root, "gold": gold, "golds": golds, "cache": cache, "pdfs": root / "pdfs", "run": run,
            "fake": fake}  # fmt: skip


def eval_env(es: dict, out: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUOTECITE_", "CUDA_VISIBLE"))}
    if os.environ.get("QUOTECITE_SLURM"):
        env["QUOTECITE_SLURM"] = os.environ["QUOTECITE_SLURM"]
    env.update(
        QUOTECITE_REPO=str(REPO),
        QUOTECITE_ENV_SETUP="0",
        QUOTECITE_PYTHON=PY,
        QUOTECITE_RUN_DIR=str(es["run"]),
        QUOTECITE_EVAL_STEP="2",
        QUOTECITE_EVAL_GOLD=str(es["gold"]),
        QUOTECITE_EVAL_CACHE_DIR=str(es["cache"]),
        QUOTECITE_EVAL_PDF_DIR=str(es["pdfs"]),
        QUOTECITE_EVAL_OUT=str(out),
        QUOTECITE_POLICY_MODEL="standin/policy",
        QUOTECITE_INFER_CMD=f"env PYTHONPATH={es['fake']}:{REPO} {PY} -m eval infer",
        QUOTECITE_EVAL_INFER_ARGS="--total-pixels 200000 --batch-size 2",
        QUOTECITE_EVAL_RESOLVE_ARGS="--resolver lexical",
        QUOTECITE_EVAL_SCORE_ARGS="--judge-protocol rubric --no-report",
        QUOTECITE_JUDGE_CMD=f"{PY} -m tests.standins.vllm_serve serve",
        QUOTECITE_EMBED_CMD=f"{PY} -m tests.standins.vllm_serve serve",
        QUOTECITE_HEALTH_TIMEOUT="120",
        QUOTECITE_HEALTH_POLL="0.2",
        QUOTECITE_JUDGE_PORT="0",
        QUOTECITE_EMBED_PORT="0",
    )
    env.update(extra)
    return env


# --------------------------------------------------------------------------------------------- no Slurm
def test_array_dry_run_plans_shards_tasks_and_the_scoring_job(evalset, tmp_path):
    out = tmp_path / "out"
    env = eval_env(evalset, out, QUOTECITE_EVAL_SHARDS="3")
    r = subprocess.run(["bash", SCRIPT, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    keys = [g.key for g in evalset["golds"]]
    for i in (1, 2, 3):
        n = sum(1 for k in keys if shard_of(k, 3) == i)
        assert f"#   shard {i}/3: {n} of {N_QUESTIONS} questions" in lines
    infer = [x for x in lines if x.startswith("+ CUDA_VISIBLE_DEVICES=") and " eval infer " in x]
    assert len(infer) == 6  # base and LoRA for each of the 3 tasks
    for i in (1, 2, 3):
        base, lora = [x for x in infer if f"--shard {i}/3" in x]
        assert base.startswith("+ CUDA_VISIBLE_DEVICES=0 ") and lora.startswith("+ CUDA_VISIBLE_DEVICES=1 ")
        assert f"--out {out}/base/predictions.shard-{i}-of-3.jsonl" in base and "--lora" not in base
        assert f"--out {out}/lora/predictions.shard-{i}-of-3.jsonl" in lora and "--lora" in lora
        assert "QUOTECITE_JUDGE_URL" not in base  # inference tasks start no server
    array = next(x for x in lines if x.startswith("+ sbatch") and "--array=1-3" in x)
    score = next(x for x in lines if x.startswith("+ sbatch") and "--dependency=afterok:ARRAYJOB" in x)
    assert "--gpus-per-node=2" in array and "QUOTECITE_EVAL_PHASE=infer" in array and "QUOTECITE_EVAL_STEP=2" in array
    assert "--gpus-per-node=1" in score and "QUOTECITE_EVAL_PHASE=score" in score
    assert "--kill-on-invalid-dep=yes" in score
    after = lines[lines.index(score) :]
    serve = [x for x in after if "vllm_serve serve" in x]
    assert len(serve) == 2 and all(x.startswith("+ CUDA_VISIBLE_DEVICES=0 ") for x in serve)
    merges = [x for x in after if "merge_shards" in x]
    assert len(merges) == 2 and f"{out}/base/predictions.jsonl" in merges[0]
    steps = [w for x in after if x.startswith("+ env ") for w in ("resolve", "score") if f"-m eval {w} " in x]
    assert steps == ["resolve", "score", "resolve", "score"]
    assert not out.exists()


def test_non_array_dry_run_is_unchanged_by_the_array_settings_being_absent(evalset, tmp_path):
    r = subprocess.run(["bash", SCRIPT, "--dry-run"], env=eval_env(evalset, tmp_path / "o"), capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "--shard" not in r.stdout and "sbatch" not in r.stdout
    assert r.stdout.startswith("# quotecite evaluation, dry run (nothing is started)")


@pytest.mark.parametrize(
    "env,message",
    [
        ({"QUOTECITE_EVAL_SHARDS": "x"}, "QUOTECITE_EVAL_SHARDS='x': expected an integer"),
        (
            {"QUOTECITE_EVAL_SHARDS": "2", "QUOTECITE_EVAL_PHASE": "merge"},
            "QUOTECITE_EVAL_PHASE='merge': expected one of infer, score",
        ),
        ({"QUOTECITE_EVAL_PHASE": "infer"}, "QUOTECITE_EVAL_PHASE=infer needs QUOTECITE_EVAL_SHARDS"),
        ({"QUOTECITE_EVAL_SHARDS": "2", "QUOTECITE_EVAL_PHASE": "infer"}, "runs as array task 1..2"),
        ({"QUOTECITE_EVAL_SHARDS": "2", "QUOTECITE_EVAL_TASKS": "a"}, "QUOTECITE_EVAL_TASKS='a': expected array ids"),
    ],
)
def test_bad_array_settings_are_named(evalset, tmp_path, env, message):
    r = subprocess.run(["bash", SCRIPT], env=eval_env(evalset, tmp_path / "o", **env), capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and message in r.stderr


def _infer(es: dict, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{es['fake']}:{REPO}"}
    argv = [PY, "-m", "eval", "infer", "--model", "m", "--gold", str(es["gold"]), "--interface", "language",
            "--pdf-dir", str(es["pdfs"]), "--out", str(out), "--total-pixels", "200000", *flags]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def test_infer_shards_answer_disjoint_parts_and_merge_into_the_unsharded_file(evalset, tmp_path):
    whole = tmp_path / "whole.jsonl"
    assert _infer(evalset, whole).returncode == 0
    out = tmp_path / "merged.jsonl"
    for i in (1, 2, 3):
        r = _infer(evalset, shard_file(out, Shard(i, 3)), "--shard", f"{i}/3")
        assert r.returncode == 0, r.stderr
        n = sum(1 for g in evalset["golds"] if shard_of(g.key, 3) == i)
        assert f"{n} generated, 0 already done, {n} questions of shard {i}/3" in r.stdout
        got = [json.loads(x)["index"] for x in shard_file(out, Shard(i, 3)).read_text().splitlines()]
        assert sorted(got) == sorted(g.key for g in evalset["golds"] if shard_of(g.key, 3) == i)
    assert merge_shards(evalset["gold"], out, 3) == N_QUESTIONS
    assert out.read_text() == whole.read_text()


def test_merge_names_a_missing_shard_file_and_an_unanswered_question(evalset, tmp_path):
    out = tmp_path / "p.jsonl"
    rows = {i: [] for i in (1, 2)}
    for g in evalset["golds"]:
        rows[shard_of(g.key, 2)].append(json.dumps({"index": g.key, "interface": "language", "response": "r"}))
    shard_file(out, Shard(1, 2)).write_text("".join(x + "\n" for x in rows[1]))
    with pytest.raises(InputError, match=r"shard 2/2 has no predictions file"):
        merge_shards(evalset["gold"], out, 2)
    shard_file(out, Shard(2, 2)).write_text("".join(x + "\n" for x in rows[2][1:]))
    missing = json.loads(rows[2][0])["index"]
    with pytest.raises(InputError, match=rf"1 question\(s\) of shard 2/2 unanswered: {missing}$"):
        merge_shards(evalset["gold"], out, 2)
    shard_file(out, Shard(2, 2)).write_text("".join(x + "\n" for x in rows[2] + rows[1][:1]))
    with pytest.raises(InputError, match="is not a gold question of shard 2/2"):
        merge_shards(evalset["gold"], out, 2)
    assert not out.exists()


def test_bad_shard_value_is_a_clear_error_before_any_model_loads(evalset, tmp_path):
    r = _infer(evalset, tmp_path / "p.jsonl", "--shard", "0/3")
    assert r.returncode == 2 and "error: --shard '0/3': shards are numbered 1..3 (1-based), got 0" in r.stderr
    assert not (tmp_path / "p.jsonl").exists()


# --------------------------------------------------------------------------------------------- on Slurm
def _scores(out: Path) -> dict:
    """Every JSON file and per_question.jsonl of the score folders, by relative path, without wall times."""

    def drop_times(x):
        if isinstance(x, dict):
            return {k: drop_times(v) for k, v in x.items() if k != "wall_s"}
        return [drop_times(v) for v in x] if isinstance(x, list) else x

    got = {}
    for side in ("base", "lora"):
        for f in sorted((out / side / "score").rglob("*.json")):
            got[str(f.relative_to(out))] = drop_times(json.loads(f.read_text()))
        got[f"{side}/per_question"] = (out / side / "score" / "per_question.jsonl").read_text()
    return got


@pytest.mark.slurm
@pytest.mark.skipif(bool(slurm_reason()), reason=slurm_reason() or "-")
def test_array_run_on_slurm_merges_to_the_non_array_runs_predictions_and_scores(evalset, tmp_path):
    # The reference: today's one-job mode, run directly on this machine (stand-in servers on loopback).
    ref = tmp_path / "ref"
    r = subprocess.run(["bash", SCRIPT], env=eval_env(evalset, ref), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    out = tmp_path / "arr"
    name = f"qc-evalarr-{uuid.uuid4().hex[:8]}"
    env = eval_env(
        evalset,
        out,
        QUOTECITE_EVAL_SHARDS="3",
        QUOTECITE_EVAL_SBATCH_ARGS=f"{SBATCH_ARGS} --mem=500M --job-name={name}",
    )
    try:
        r = subprocess.run(["bash", SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        array_job, score_job = (line.split()[2].rstrip(":") for line in r.stdout.splitlines()[:2])
        assert set(wait_done(array_job).values()) == {"COMPLETED"}, sorted((out / "logs").iterdir())
        states = wait_done(score_job)
    finally:
        subprocess.run(["scancel", "--name", name], capture_output=True)
    log = (out / "logs" / f"score-{score_job}.out").read_text()
    assert states == {score_job: "COMPLETED"}, log[-3000:]
    for i in (1, 2, 3):
        for side in ("base", "lora"):
            part = shard_file(out / side / "predictions.jsonl", Shard(i, 3))
            keys = {json.loads(x)["index"] for x in part.read_text().splitlines()}
            assert keys == {g.key for g in evalset["golds"] if shard_of(g.key, 3) == i}
    for side in ("base", "lora"):
        assert (out / side / "predictions.jsonl").read_text() == (ref / side / "predictions.jsonl").read_text()
        assert f"{out}/{side}/predictions.jsonl: {N_QUESTIONS} predictions merged from 3 shards" in log
    scores = _scores(out)
    assert scores and scores == _scores(ref)
