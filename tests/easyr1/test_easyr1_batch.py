"""One training step's data path through EasyR1 b44b311's own trainer, on our parquet and our reward.

The builder (``python -m data_prep longdocurl``) makes the parquet and the block cache from the LongDocURL fixture
records (PDFs generated with each record's page count, as in tests/data_prep/test_longdocurl.py). The judge is a real
OpenAI-compatible HTTP server on 127.0.0.1 (tests/support/openai_server.py) whose answer score is the digit after
"ZQV" in the response it judges. tests/easyr1/drive_batch.py then runs, in .venv-easyr1: the config loader on the
recipe plus the launch's exact overrides, RLHFDataset/create_dataloader with a Qwen3-VL-style processor,
AutoRewardManager as Ray actors loading reward/quote_reward.py, RayPPOTrainer._make_batch_data with online
filtering, _balance_batch, compute_advantage, _validate and the recipe's loggers (file, and wandb offline). Only
generation is scripted (tests/easyr1/harness.py: ScriptedRollout).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.easyr1.conftest import EASYR1_READY, REPO, easyr1_env, run_driver
from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion, held_port

BUILD_PIXELS = 120_000  # per page: small images keep the tier fast; >= the recipe's data.min_pixels (65,536)
N = 5  # the recipe's worker.rollout.n


def _scored_judge(path: str, body: dict, n: int):
    """Answer score = the digit after ZQV in the judged response; relevance and coverage 4."""
    if path != "/v1/chat/completions":
        return None
    import re

    text = json.dumps(body.get("messages", ""))
    m = re.search(r"ZQV(\d)", text)
    a = int(m.group(1)) if m else 1
    return Reply(json=chat_completion(json.dumps({"answer": a, "relevance": 4, "coverage": 4})))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The builder's parquet + cache, and a response script: one group whose answers differ, one whose five
    responses are identical, one response for the validation question."""
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311 + slurm/trainer.lock)")
    from tests.data_prep.test_longdocurl import longdocurl_records, write_jsonl, write_pdf

    root = tmp_path_factory.mktemp("e1data")
    records = longdocurl_records()
    for r in records:
        write_pdf(root / "pdfs" / f"{r['doc_no']}.pdf", r["total_pages"], r["doc_no"])
    jsonl = write_jsonl(root / "LongDocURL.jsonl", records)
    out = root / "out"
    cmd = [sys.executable, "-m", "data_prep", "longdocurl", "--jsonl", str(jsonl), "--pdf-dir", str(root / "pdfs"),
           "--out", str(out), "--val", "1", "--seed", "3", "--max-window", "3",
           "--max-pixels-per-page", str(BUILD_PIXELS)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]

    import pyarrow.parquet as pq

    from data_prep.cache import load_cache
    from data_prep.groundtruth import unpack_ground_truth

    rows = {name: pq.read_table(out / f"{name}.parquet").to_pylist() for name in ("train", "val")}
    assert len(rows["train"]) == 2 and len(rows["val"]) == 1
    script = []
    for split, row_list in rows.items():
        for i, row in enumerate(row_list):
            gt = unpack_ground_truth(row["answer"])
            blocks = [b for b in load_cache(out / "cache", row["doc_key"]).blocks if b.text.strip()]
            quote = blocks[0].text[:80]
            if split == "train" and i == 0:  # answers differ: a group that teaches
                answers = [f"{gt.answer} ZQV{k}" for k in (1, 2, 3, 4, 5)]
            else:  # five identical responses: identical rewards
                answers = [f"{gt.answer} ZQV4"] * N
            responses = [json.dumps({"answer": a, "quotes": [quote]}) for a in answers]
            script.append({"question": gt.question[:60], "responses": responses, "qid": gt.qid, "split": split})
    return {"out": out, "cache": out / "cache", "rows": rows, "script": script}


def _drive(tmp: Path, built: dict, judge_url: str, *extra: str, validate: bool = True, timeout: float = 420,
           metrics_dir: Path | None = None):  # fmt: skip
    from tests.easyr1.test_easyr1_config import launch_trainer_command

    launch_env, argv = launch_trainer_command(tmp)
    argv = [a for a in argv if not a.startswith("trainer.save_checkpoint_path=")]
    ckpt = tmp / "ckpt"
    argv += [
        f"trainer.save_checkpoint_path={ckpt}",
        "data.rollout_batch_size=2",  # two training questions in the fixture set
        "worker.actor.global_batch_size=2",
        "worker.actor.micro_batch_size_per_device_for_experience=2",
        "data.filter_overlong_prompts_workers=1",
        "worker.reward.reward_function_kwargs.batch_groups=2",
        "worker.reward.reward_function_kwargs.keep_band=[0.01,0.99]",
        "worker.reward.reward_function_kwargs.samples_groups=4",  # every group of the batch's two attempts
        *extra,
    ]
    spec = {"argv": argv, "processor_dir": str(tmp.parent / "tiny_qwen3vl"), "script": built["script"],
            "validate": validate}  # fmt: skip
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps(spec))
    metrics_dir = metrics_dir or tmp / "metrics"
    env = easyr1_env(
        QUOTECITE_DATA_DIR=str(built["out"]),
        QUOTECITE_CACHE_DIR=str(built["cache"]),
        QUOTECITE_CKPT_DIR=str(ckpt),
        QUOTECITE_JUDGE_URL=judge_url,
        QUOTECITE_EMBED_URL=judge_url,
        QUOTECITE_METRICS_DIR=str(metrics_dir),
        WANDB_MODE="offline",
        WANDB_DIR=str(tmp),
        WANDB_DATA_DIR=str(tmp / "wandb-data"),  # where an offline run stages its artifacts (a table's images)
        WANDB_SILENT="true",
    )
    del launch_env
    r, rep = run_driver("drive_batch.py", str(spec_path), env=env, timeout=timeout, check=False)
    assert rep is not None, f"no report\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r, rep, ckpt, metrics_dir


def _qid(built, split, i):
    return [s for s in built["script"] if s["split"] == split][i]["qid"]


@pytest.fixture(scope="module")
def step(built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("step")
    with ScriptedOpenAIServer(handler=_scored_judge) as srv:
        r, rep, ckpt, metrics_dir = _drive(tmp, built, srv.url)
    assert rep["ok"], rep.get("error", "")[-3000:] + r.stderr[-3000:]
    return {"rep": rep, "ckpt": ckpt, "metrics": metrics_dir, "tmp": tmp, "stdout": r.stdout + r.stderr}


def test_rlhf_dataset_sees_the_image_tokens_the_builder_counted(step, built):
    """RLHFDataset (EasyR1's processing, Qwen3-VL's processor settings, the recipe's pixel bounds) expands each page
    image to exactly the tokens data_prep.qwen_tokens counted when it fitted the window into the prompt budget."""
    from PIL import Image

    from data_prep.groundtruth import unpack_ground_truth
    from data_prep.qwen_tokens import image_tokens

    seen = {(d["split"], d["qid"]): d for d in step["rep"]["dataset"]}
    assert len(seen) == len(built["rows"]["train"]) + len(built["rows"]["val"])  # no row filtered as overlong
    for split, rows in built["rows"].items():
        for row in rows:
            d = seen[(split, unpack_ground_truth(row["answer"]).qid)]
            sizes = [Image.open(built["out"] / p).size for p in row["images"]]
            assert d["n_images"] == d["vision_start"] == row["n_images"] == len(sizes) > 0
            assert d["image_pad"] + 2 * d["n_images"] == sum(image_tokens(w, h) for w, h in sizes)
            assert d["position_ids_shape"][0] == 4  # text + Qwen3-VL's 3-axis mrope positions
            assert d["prompt_tokens"] <= 48_000


def test_a_group_of_identical_rewards_is_not_in_the_training_batch(step, built):
    rows = step["rep"]["rows"]
    teaching, flat = _qid(built, "train", 0), _qid(built, "train", 1)
    assert len(rows) == 2 * N  # rollout_batch_size groups of n
    assert {r["qid"] for r in rows} == {teaching}  # the zero-variance group never trains
    assert flat not in {r["qid"] for r in rows}
    assert step["rep"]["generate_calls"] == [2, 2]  # a second attempt replaced the dropped group
    # real scores: R = (a/5) * (r + c)/10 with r = c = 4 and a = 1..5
    by_uid: dict = {}
    for r in rows:
        by_uid.setdefault(r["uid"], []).append(r)
    assert len(by_uid) == 2
    for members in by_uid.values():
        assert sorted(round(m["score"], 4) for m in members) == [0.16, 0.32, 0.48, 0.64, 0.8]
        # GRPO: advantages standardised within the group, constant over each response's tokens
        assert all(m["advantage_constant"] for m in members)
        assert abs(sum(m["advantage"] for m in members)) < 1e-4
        best = max(members, key=lambda m: m["score"])
        assert best["advantage"] > 1.0 and "ZQV5" in best["response"]


def test_the_responses_reach_the_reward_exactly_as_scripted(step, built):
    scripted = next(s for s in built["script"] if s["split"] == "train" and "ZQV1" in s["responses"][0])
    assert sorted(r["response"] for r in step["rep"]["rows"]) == sorted(scripted["responses"] * 2)


def test_validation_runs_through_the_val_reward_actor(step):
    val = step["rep"]["val_metrics"]
    assert val["val/reward_score"] == pytest.approx(0.64)  # the validation question's one response: a = 4
    assert val["val/unscorable_reward"] == 0.0


def test_the_file_logger_gets_the_reward_counters_of_the_step(step):
    lines = [json.loads(x) for x in (step["ckpt"] / "experiment_log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1]
    reward = lines[0]["reward"]
    assert {"overall", "unscorable", "keep", "format_ok", "n_citations"} <= set(reward)
    assert reward["unscorable"] == 0.0 and reward["format_ok"] == 1.0
    assert "val" in lines[0] and "global_seqlen" in lines[0]  # _validate and _balance_batch metrics


def test_the_wandb_logger_records_the_step_offline(step):
    """The recipe's `wandb` logger under WANDB_MODE=offline: the run holds the step's reward counters, and its
    offline log (what `wandb sync` uploads later) is written."""
    runs = sorted((step["tmp"] / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1  # read back once the trainer's process has ended, as `wandb sync` would
    _, read = run_driver("harness.py", "wandb-history", str(runs[0]))
    rows = [r for r in read["history"] if "reward/unscorable" in r]
    assert len(rows) == 1 and rows[0]["_step"] == 1
    assert rows[0]["reward/unscorable"] == 0
    assert rows[0]["reward/overall"] == pytest.approx(step["rep"]["metrics"]["reward/overall"])
    assert "val/reward_score" in rows[0]


def test_the_reward_records_which_responses_trained(step, built):
    records = [json.loads(x) for x in (step["metrics"] / "reward_batches.jsonl").read_text().splitlines()]
    assert len(records) == 1
    rec = records[0]
    assert rec["qids"] == [_qid(built, "train", 0)] * 2 and rec["calls"] == 2
    assert rec["dropped"]["zero_variance"] == 2 and rec["reward"]["overall"] == pytest.approx(0.48)


def _answers_and_advantages(members) -> list[tuple[str, float]]:
    return sorted((m["answer"], round(m["advantage"], 4)) for m in members)


def test_the_samples_hold_a_kept_and_a_dropped_group_with_easyr1s_advantages(step, built):
    """The reward's samples of the batch (reward/samples.py, written by the reward actors): the two attempts'
    groups, the kept ones with the advantages compute_advantage gave their responses, the dropped ones marked."""
    from reward.samples import load_steps

    (rec,) = load_steps(step["metrics"])
    teaching, flat = _qid(built, "train", 0), _qid(built, "train", 1)
    groups = rec["groups"]
    assert sorted((g["attempt"], g["qid"]) for g in groups) == sorted((a, q) for a in (1, 2) for q in (teaching, flat))
    kept = [g for g in groups if g["trained"]]
    assert {g["qid"] for g in kept} == {teaching} and len(kept) == 2
    for g in (g for g in groups if not g["trained"]):
        assert g["qid"] == flat and not 0.01 < g["keep"] < 0.99  # identical rewards: the keep band drops it
        assert all(r["advantage"] == 0 for r in g["responses"])
    by_uid: dict = {}
    for r in step["rep"]["rows"]:
        by_uid.setdefault(r["uid"], []).append({"answer": json.loads(r["response"])["answer"], **r})
    easyr1 = sorted(_answers_and_advantages(m) for m in by_uid.values())
    assert sorted(_answers_and_advantages(g["responses"]) for g in kept) == easyr1
    for g in groups:  # the crops the http judge was sent, stored once by content hash
        for r in g["responses"]:
            assert r["judge_saw_crops"] and r["crops"]
            assert all((step["metrics"] / "samples" / c).is_file() for c in r["crops"])


def test_the_wandb_run_gets_the_samples_as_a_table_with_the_crops(step):
    """`python -m reward.train`'s worker set-up hook reached EasyR1's own Ray actors; in the process that owns the
    wandb run it made the recipe's wandb logger log the step's samples, one row per response, the crops as images
    (staged, as an offline run keeps them for `wandb sync`)."""
    from reward.samples import WANDB_COLUMNS, load_steps

    assert step["rep"]["wandb_logger_in_reward_actor"] == "WandbLoggerWithSamples"
    assert step["rep"]["hook_installed_here"] is True
    (rec,) = load_steps(step["metrics"])
    responses = [r for g in rec["groups"] for r in g["responses"]]
    runs = sorted((step["tmp"] / "wandb").glob("offline-run-*/run-*.wandb"))
    _, read = run_driver("harness.py", "wandb-history", str(runs[0]))
    (row,) = [r for r in read["history"] if "samples/_type" in r]  # the reader flattens nested keys with "/"
    assert row["_step"] == 1 and row["samples/_type"] == "table-file" and row["samples/nrows"] == len(responses)
    staged = [json.loads(p.read_text()) for p in (step["tmp"] / "wandb-data").rglob("*") if p.is_file()
              and p.read_bytes()[:1] == b"{"]  # fmt: skip
    tables = [s for s in staged if s.get("_type") == "table" and s["columns"][: len(WANDB_COLUMNS)] == WANDB_COLUMNS]
    assert tables and all(s == tables[0] for s in tables)  # wandb stages the run table's copy once per reference
    table = tables[0]
    k = max(len(r["crops"]) for r in responses)
    assert table["columns"] == [*WANDB_COLUMNS, *(f"crop_{i}" for i in range(1, k + 1))]
    assert len(table["data"]) == len(responses)
    images = [c for row in table["data"] for c in row[len(WANDB_COLUMNS) :] if c is not None]
    assert len(images) == sum(len(r["crops"]) for r in responses)
    assert {c["_type"] for c in images} == {"image-file"} and all(c["width"] > 0 for c in images)
    assert sorted(row[5] for row in table["data"]) == pytest.approx(sorted(r["advantage"] for r in responses))


def test_a_requeued_segments_samples_merge_without_gaps_or_duplicates(step, built, tmp_path):
    """A run of three segments: the first made step 1 (the step above, its samples as segment 100-0); a requeued job
    resumed from step 1's checkpoint runs EasyR1 again, its batch 1 being step 2 (segment 101-0); a third job resumed
    from step 1 again (the second died before its checkpoint) redoes step 2. The run's samples: steps 1 and 2, each
    once, step 2 from the segment that made it last; the page shows exactly those."""
    import shutil

    from launch.samples_page import collect_steps, write_samples_page
    from launch.segments import new_segment, segments_dir

    run = tmp_path / "run"
    first = new_segment(run, "100", 0)
    shutil.copytree(step["metrics"] / "samples", segments_dir(run) / first.name / "samples")
    second = new_segment(run, "101", 1)
    (tmp_path / "d2").mkdir()
    with ScriptedOpenAIServer(handler=_scored_judge) as srv:
        r, rep, *_ = _drive(tmp_path / "d2", built, srv.url, validate=False,
                            metrics_dir=segments_dir(run) / second.name)  # fmt: skip
    assert rep["ok"], rep.get("error", "")[-3000:]
    got = collect_steps(run)
    assert [(s, folder.parent.name) for s, folder, _ in got] == [(1, first.name), (2, second.name)]
    third = new_segment(run, "102", 1)
    shutil.copytree(segments_dir(run) / second.name / "samples", segments_dir(run) / third.name / "samples")
    got = collect_steps(run)
    assert [(s, folder.parent.name) for s, folder, _ in got] == [(1, first.name), (2, third.name)]
    page = write_samples_page(run).read_text()
    assert [page.count(f'{{"step": {s}, "groups": [') for s in (1, 2, 3)] == [1, 1, 0]


def test_a_judge_down_for_20_s_then_answering_gives_a_batch_with_real_scores(built, tmp_path):
    srv = ScriptedOpenAIServer(handler=_scored_judge, refuse_until_start=True)  # its port is held from now on
    port = int(srv.base.rsplit(":", 1)[1])
    timer = threading.Timer(20.0, srv.start)  # refused connections for 20 s, then a judge that answers
    timer.start()
    try:
        r, rep, *_ = _drive(
            tmp_path, built, f"http://127.0.0.1:{port}/v1",
            "worker.reward.reward_function_kwargs.judge_outage_s=90", validate=False,
        )  # fmt: skip
    finally:
        timer.cancel()
        srv.stop()
    assert rep["ok"], rep.get("error", "")[-3000:]
    scores = sorted(round(x["score"], 4) for x in rep["rows"])
    assert scores == sorted([0.16, 0.32, 0.48, 0.64, 0.8] * 2)
    assert "No sample is kept after filtering" not in r.stdout + r.stderr


def test_a_judge_that_never_answers_ends_with_one_clear_error(built, tmp_path):
    with held_port() as port:  # bound, never listening: every connection is refused, and no one else takes it
        r, rep, _, metrics_dir = _drive(
            tmp_path, built, f"http://127.0.0.1:{port}/v1",
            "worker.reward.reward_function_kwargs.judge_outage_s=5", validate=False,
        )  # fmt: skip
    assert not rep["ok"]
    line = rep["error_last_line"]
    assert f"http://127.0.0.1:{port}" in line and "is down" in line and "judge_outage_s=5" in line, line
    assert "No sample is kept after filtering" not in r.stdout + r.stderr + rep["error"]
    assert rep["generate_calls"] == [2]  # stopped on the first batch, no generation attempts burnt
    assert (metrics_dir / "server_outage.json").exists()  # how the launch knows to restart the servers
