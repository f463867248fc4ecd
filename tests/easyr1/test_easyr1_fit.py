"""EasyR1 b44b311's own training loop, ``RayPPOTrainer.fit``, on the recipe scaled down, on CPU.

tests/easyr1/drive_fit.py runs ``verl/trainer/main.py``'s config path and its ``Runner.run`` with
tests/easyr1/cpu_worker.py's ``CPUWorker`` in ``FSDPWorker``'s place (a tiny random Qwen3-VL with the recipe's
LoRA; EasyR1's ``DataParallelPPOActor`` for log-probs and the update). Everything else is EasyR1's code: the
resource pool and worker group, ``RLHFDataset``, the reward manager with reward/quote_reward.py (lexical judge and
resolver: no server), online filtering with our ``keep``, GRPO advantages, the KL loss, validation, the file
logger, ``_save_checkpoint`` / ``_load_checkpoint`` with the tracker and the dataloader state.

Scale: the builder's LongDocURL fixture set (2 training questions, 1 validation question, 3-page windows), group
size 4, 2 questions per step. The tiny policy's sampling is constrained to four scripted responses per question
(cpu_worker.py: a random policy writes nothing parseable), so groups differ and train.

No group kept. EasyR1 b44b311's ``_make_batch_data`` raises ``RuntimeError: No sample is kept after filtering`` at
the first attempt whose groups are all outside the band (EasyR1 issue 497), not after ``max_try_make_batch``
attempts; when attempts keep some groups but too few, it raises ``num_try_make_batch=K >= max_try_make_batch=K.
Generated too many`` after K. Either way the trainer process ends with a Ray-side Python error and no checkpoint
of the step. What a run should do (proposed, not yet in reward/ or launch/): stop, not requeue. A whole batch with
no group whose rewards differ means a collapsed policy (every response unparseable or identical) or a judge that
scores nothing; a requeue would resume from the last checkpoint and meet it again. The reward, which replays the
filter (reward.pipeline.TrainBatchTracker), knows before EasyR1 raises: it would write
``$QUOTECITE_METRICS_DIR/no_group_kept.json`` (attempt, groups, dropped by reason) as it writes
``server_outage.json``, and the launch would end the job with one line naming the step and the reasons, without
requeueing. test_no_group_kept_stops_fit_at_the_first_attempt_with_easyr1s_error pins EasyR1's side of it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.easyr1.conftest import EASYR1_READY, REPO, easyr1_env, run_driver

BUILD_PIXELS = 120_000  # per page, as in test_easyr1_batch.py
N = 4  # group size here (the recipe: 5)

# the recipe scaled down to CPU: tiny prompts and responses, world size 1, no flash-attn (padding_free false)
SCALE = [
    "data.rollout_batch_size=2",
    f"data.format_prompt={Path(__file__).resolve().parent / 'fit_prompt.jinja'}",  # the recipe's is ~1,500 tokens
    "data.max_prompt_length=1400",
    "data.max_response_length=96",
    "data.filter_overlong_prompts=false",  # the builder fitted every prompt (test_easyr1_batch.py checks it)
    "data.shuffle=false",
    f"worker.rollout.n={N}",
    "worker.actor.global_batch_size=2",
    "worker.actor.micro_batch_size_per_device_for_update=4",
    "worker.actor.micro_batch_size_per_device_for_experience=8",
    "worker.actor.model.enable_gradient_checkpointing=false",
    "worker.actor.padding_free=false",
    "worker.actor.dynamic_batching=false",  # EasyR1's rearrange_micro_batches puts its count on "cuda"
    "worker.actor.model.lora.rank=4",
    "worker.actor.model.lora.alpha=8",
    "worker.actor.optim.lr=1.0e-2",
    "worker.reward.num_cpus=1",
    "worker.reward.reward_function_kwargs.judge=lexical",
    "worker.reward.reward_function_kwargs.resolver=lexical",
    "worker.reward.reward_function_kwargs.judge_url=null",  # the lexical judge takes no server
    # the fixture PDFs hold generated words: the lexical judge finds no evidence for most questions, so the gated
    # form would score every response 0; the answer alone separates the scripted responses
    "worker.reward.reward_function_kwargs.reward_form=answer_only",
    "worker.reward.reward_function_kwargs.batch_groups=2",
    "worker.reward.reward_function_kwargs.keep_band=[0.01,0.99]",
    "worker.reward.reward_function_kwargs.samples_groups=4",
    "trainer.n_gpus_per_node=1",
    "trainer.logger=[file]",
    "trainer.save_freq=1",
    "trainer.val_freq=-1",
    "trainer.max_try_make_batch=3",
]


def build_data(root: Path) -> Path:
    """The builder's parquet and block cache from the LongDocURL fixture records (as test_easyr1_batch.py builds
    them, without the quote encoder)."""
    from tests.data_prep.test_longdocurl import longdocurl_records, write_jsonl, write_pdf

    records = longdocurl_records()
    for r in records:
        write_pdf(root / "pdfs" / f"{r['doc_no']}.pdf", r["total_pages"], r["doc_no"])
    jsonl = write_jsonl(root / "LongDocURL.jsonl", records)
    out = root / "out"
    cmd = [sys.executable, "-m", "data_prep", "longdocurl", "--jsonl", str(jsonl), "--pdf-dir", str(root / "pdfs"),
           "--out", str(out), "--val", "1", "--seed", "3", "--max-window", "3",
           "--max-pixels-per-page", str(BUILD_PIXELS),
           "--encoder", "none"]  # blocks only: the lexical resolver embeds nothing (and minilm takes ~80 s here)  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def candidates(out: Path) -> list[dict]:
    """Four responses per question whose rewards differ: the gold answer quoting the document's block that shares most words with the question and answer, the gold
    answer quoting nothing of the document, a wrong answer quoting that block, and text that is no JSON."""
    import pyarrow.parquet as pq

    from data_prep.cache import load_cache
    from data_prep.groundtruth import unpack_ground_truth
    from data_prep.text import tokenize

    script = []
    for split in ("train", "val"):
        for row in pq.read_table(out / f"{split}.parquet").to_pylist():
            gt = unpack_ground_truth(row["answer"])
            words = set(tokenize(gt.question + " " + gt.answer))
            blocks = [b for b in load_cache(out / "cache", row["doc_key"]).blocks if b.text.strip()]
            block = max(blocks, key=lambda b: len(words & set(tokenize(b.text))))  # the judge reads its overlap
            quote = block.text[:30]
            responses = [
                json.dumps({"answer": gt.answer[:30], "quotes": [quote]}),
                json.dumps({"answer": gt.answer[:30], "quotes": ["zebra quartz"]}),
                json.dumps({"answer": "unknown", "quotes": [quote]}),
                "I cannot tell.",
            ]
            script.append({"question": gt.question[:60], "responses": responses, "qid": gt.qid, "split": split})
    return script


def fit(tmp: Path, out: Path, ckpt: Path, metrics: Path, model_dir: Path, *extra: str,
        script: list[dict] | None = None, timeout: float = 600, servable: bool = False):  # fmt: skip
    """One trainer process (drive_fit.py) on the launch's trainer arguments plus SCALE plus ``extra``; ``servable``:
    the tiny model (made when ``model_dir`` has none) has dimensions vLLM serves."""
    from tests.easyr1.test_easyr1_config import launch_trainer_command

    _, argv = launch_trainer_command(tmp)
    argv = [a for a in argv if not a.startswith("trainer.save_checkpoint_path=")]
    argv += [f"trainer.save_checkpoint_path={ckpt}", *SCALE, *extra]
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"argv": argv, "model_dir": str(model_dir), "servable": servable}))
    log = tmp / "worker.jsonl"
    env = easyr1_env(
        QUOTECITE_DATA_DIR=str(out),
        QUOTECITE_CACHE_DIR=str(out / "cache"),
        QUOTECITE_CKPT_DIR=str(ckpt),
        QUOTECITE_JUDGE_URL="http://127.0.0.1:9/v1",  # the recipe names it; the lexical judge never calls it
        QUOTECITE_EMBED_URL="http://127.0.0.1:9/v1",
        QUOTECITE_METRICS_DIR=str(metrics),
        CPU_WORKER_LOG=str(log),
        OMP_NUM_THREADS="1",  # a tiny model's matmuls: one thread is ~6x faster than two on a shared 2-core CPU
    )
    if script is not None:
        (tmp / "candidates.json").write_text(json.dumps(script))
        env["CPU_WORKER_CANDIDATES"] = str(tmp / "candidates.json")
    r, rep = run_driver("drive_fit.py", str(spec), env=env, timeout=timeout, check=False)
    assert rep is not None, f"no report\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    events = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return r, rep, events


def _log_lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _adapter(path: Path) -> dict:
    from safetensors.numpy import load_file

    return load_file(str(path / "actor" / "lora_adapter" / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311 + slurm/trainer.lock)")
    root = tmp_path_factory.mktemp("fitdata")
    out = build_data(root)
    return {"out": out, "script": candidates(out), "model": root / "tiny_qwen3vl"}


@pytest.fixture(scope="module")
def run(data, tmp_path_factory):
    """Two trainer processes on one run folder laid out as the launch lays it out (launch/segments.py): the first
    trains steps 1-2 (max_steps 2), the second (max_steps 3) resumes from EasyR1's tracker and trains step 3."""
    from launch.segments import new_segment, segments_dir

    tmp = tmp_path_factory.mktemp("fit")
    run_dir = tmp / "run"
    ckpt = run_dir / "checkpoints"
    jobs = []
    for job, (resume, steps) in enumerate(((0, 2), (2, 3))):
        seg = new_segment(run_dir, str(100 + job), resume)
        work = tmp / f"job{job}"
        work.mkdir()
        adapter_before = _adapter(ckpt / f"global_step_{resume}") if resume else None
        r, rep, events = fit(work, data["out"], ckpt, segments_dir(run_dir) / seg.name, data["model"],
                             f"trainer.max_steps={steps}", script=data["script"])  # fmt: skip
        assert rep["ok"], rep.get("error", "")[-3000:] + r.stderr[-3000:]
        jobs.append({"rep": rep, "events": events, "seg": segments_dir(run_dir) / seg.name,
                     "log": _log_lines(segments_dir(run_dir) / seg.name / "experiment_log.jsonl"),
                     "adapter_before": adapter_before})  # fmt: skip
    return {"run": run_dir, "ckpt": ckpt, "jobs": jobs}


def test_the_cpu_worker_registers_what_the_fsdp_worker_registers(run):
    rep = run["jobs"][0]["rep"]
    assert rep["registered"] == rep["fsdp_registered"]
    assert {"init_model", "generate_sequences", "compute_log_probs", "compute_ref_log_probs", "update_actor",
            "save_checkpoint", "load_checkpoint"} <= set(rep["registered"])  # fmt: skip


def test_fit_trains_every_step_with_easyr1s_actor_loss_and_kl(run):
    first = run["jobs"][0]
    train = [x for x in first["log"] if "actor" in x]
    assert [x["step"] for x in train] == [1, 2]
    for x in train:
        actor = x["actor"]
        assert actor["kl_coef"] == 0.01 and actor["kl_loss"] >= 0 and actor["grad_norm"] > 0
        assert x["reward"]["keep"] > -1  # online filtering kept groups whose rewards differ
    assert train[-1]["actor"]["kl_loss"] > 0  # the adapter moved the policy away from the reference
    updates = [e for e in first["events"] if e["event"] == "update_actor"]
    assert len(updates) == 2 and all(e["responses"] == 2 * N for e in updates)


def test_validation_runs_before_training_and_after_the_last_step(run):
    steps = [x["step"] for x in run["jobs"][0]["log"] if "val" in x]
    assert steps == [0, 2]


def test_the_checkpoints_are_in_easyr1s_layout_and_the_launch_finds_the_last(run):
    from launch import checkpoints

    ckpt = run["ckpt"]
    tracker = json.loads((ckpt / "checkpoint_tracker.json").read_text())
    assert tracker["last_global_step"] == 3 and tracker["last_actor_path"] == str(ckpt / "global_step_3" / "actor")
    # EasyR1's "best" step: a save whose latest validation score beats the best so far. The saves of steps 1 and 2
    # follow the validation at step 0 (the one after step 2 comes after its save); step 3's follows the validation
    # at the resume (the tracker's best score was restored)
    s0 = run["jobs"][0]["log"][0]["val"]["reward_score"]
    s_resume = run["jobs"][1]["log"][0]["val"]["reward_score"]
    best = (3, s_resume) if s_resume > s0 else (1, s0)
    assert (tracker["best_global_step"], tracker["best_val_reward_score"]) == (best[0], round(best[1], 4))
    for step in (1, 2, 3):
        actor = ckpt / f"global_step_{step}" / "actor"
        assert (ckpt / f"global_step_{step}" / "dataloader.pt").is_file()
        assert {p.name for p in actor.glob("*.pt")} == {f"{k}_world_size_1_rank_0.pt" for k in ("model", "optim",
                                                                                                  "extra_state")}  # fmt: skip
        config = json.loads((actor / "lora_adapter" / "adapter_config.json").read_text())
        assert config["peft_type"] == "LORA" and config["r"] == 4 and config["exclude_modules"] == ".*visual.*"
        assert checkpoints.check_step_dir(ckpt / f"global_step_{step}") == ""
    assert checkpoints.find_resume_point(ckpt).step == 3
    a1, a2 = _adapter(ckpt / "global_step_1"), _adapter(ckpt / "global_step_2")
    lora_b = [k for k in a1 if "lora_B" in k]
    assert lora_b and all(abs(a2[k]).sum() > 0 for k in lora_b)  # trained: peft initialises lora_B to zeros
    assert any((a1[k] != a2[k]).any() for k in a1)


def test_the_second_job_resumes_at_the_tracker_step_with_the_saved_adapter(run):
    second = run["jobs"][1]
    (load,) = [e for e in second["events"] if e["event"] == "load_checkpoint"]
    assert load["path"] == str(run["ckpt"] / "global_step_2" / "actor")
    assert load["adapter_equal"] and load["adapter_nonzero_B"] > 0
    assert second["adapter_before"].keys() == _adapter(run["ckpt"] / "global_step_2").keys()
    # the file logger truncated the log at the job's start (EasyR1's FileLogger); validation ran again at resume
    assert [(x["step"], "val" in x, "actor" in x) for x in second["log"]] == [(2, True, False), (3, False, True),
                                                                             (3, True, False)]  # fmt: skip


def test_the_rewards_records_and_samples_of_every_step_arrive_once(run):
    from launch.samples_page import collect_steps

    records = [_log_lines(job["seg"] / "reward_batches.jsonl") for job in run["jobs"]]
    assert [[r["batch"] for r in recs] for recs in records] == [[1, 2], [1]]
    for recs in records:
        for r in recs:
            assert r["groups_trained"] == 2 and r["responses"] == 2 * N
    got = collect_steps(run["run"])
    assert [s for s, _, _ in got] == [1, 2, 3]
    assert [folder.parent.name for _, folder, _ in got] == ["100-0", "100-0", "101-0"]
    logged = {x["step"]: x["reward"]["overall"] for job in run["jobs"] for x in job["log"] if "reward" in x}
    assert sorted(logged) == [1, 2, 3]


def test_no_group_kept_stops_fit_at_the_first_attempt_with_easyr1s_error(data, tmp_path):
    """The zero-kept case on EasyR1's own loop: the random policy, sampling freely, writes nothing parseable, so every
    response scores 0, every group's ``keep`` is -1 and no group is kept. EasyR1 b44b311 raises at the first such
    attempt (``_make_batch_data``: ``len(kept_sample_idxs) == 0``), before ``max_try_make_batch`` (3 here) is
    reached (EasyR1 issue 497): the job ends with that error and no checkpoint (module docstring: "No group
    kept")."""
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "metrics"
    r, rep, events = fit(tmp_path, data["out"], ckpt, metrics, data["model"], "trainer.max_steps=2",
                         "trainer.val_before_train=false")  # fmt: skip
    assert not rep["ok"] and rep["error_type"] == "RuntimeError"
    assert rep["error_last_line"] == "No sample is kept after filtering. Please check your data."
    gens = [e for e in events if e["event"] == "generate"]
    assert [(e["prompts"], e["n"], e["constrained"]) for e in gens] == [(2, N, 0)]  # one attempt, not three
    assert not (ckpt / "checkpoint_tracker.json").exists() and not list(ckpt.glob("global_step_*"))
    # the reward scored the attempt, then EasyR1 stopped
    assert len(_log_lines(metrics / "reward_counters.jsonl")) == 1
    assert not (metrics / "reward_batches.jsonl").exists()  # no training batch was completed
