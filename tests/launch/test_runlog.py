"""launch/runlog.py: which checkpoint is complete, repair, segments, the merged run log, chain decisions, manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launch.checkpoints import (
    check_step_dir,
    find_resume_point,
    repair_checkpoints,
)
from launch.merge import (
    merge_run_log,
)
from launch.run_files import (
    CHECKPOINT_TRACKER,
    RunError,
)
from launch.run_manifest import (
    check_recipe,
    plan_max_steps,
    update_manifest,
)
from launch.runlog import (
    Start,
    finish,
    last_step,
    main,
    plan_run,
    prepare,
    read_outage,
    record_restart,
)
from launch.segments import (
    Segment,
    decide_at_end,
    decide_at_start,
    load_segments,
    new_segment,
    save_segment,
    stalled_count,
)


# --------------------------------------------------------------------------------------------- fixtures
def write_step(ckpt: Path, step: int, world: int = 2, lora: bool = True, dataloader: bool = True) -> Path:
    """A step folder laid out as EasyR1 at b44b311 writes it."""
    actor = ckpt / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for r in range(world):
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_{world}_rank_{r}.pt").write_bytes(b"x")
    if lora:
        (actor / "lora_adapter").mkdir()
        (actor / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"x")
        (actor / "lora_adapter" / "adapter_config.json").write_text("{}")
    if dataloader:
        (actor.parent / "dataloader.pt").write_bytes(b"x")
    return actor.parent


def write_tracker(ckpt: Path, step: int | None, raw: str | None = None) -> None:
    text = raw if raw is not None else json.dumps({"best_global_step": step, "last_global_step": step})
    (ckpt / CHECKPOINT_TRACKER).write_text(text)


def break_step(folder: Path, how: str) -> None:
    if how == "no_dataloader":
        (folder / "dataloader.pt").unlink()
    elif how == "no_adapter":
        (folder / "actor" / "lora_adapter" / "adapter_model.safetensors").unlink()
    elif how == "empty_shard":
        (folder / "actor" / "optim_world_size_2_rank_1.pt").write_bytes(b"")
    elif how == "missing_rank":
        (folder / "actor" / "model_world_size_2_rank_1.pt").unlink()


# --------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize(
    ("how", "problem"),
    [
        (None, ""),  # everything EasyR1 writes is there
        ("no_dataloader", "dataloader.pt missing or empty"),  # killed between actor/ and dataloader.pt
        ("no_adapter", "actor/lora_adapter/adapter_model.safetensors missing or empty"),  # killed in the adapter save
        ("empty_shard", "empty shard actor/optim_world_size_2_rank_1.pt"),  # a file created but never written
        ("missing_rank", "actor/model shards missing for ranks [1] of world size 2"),  # rank 1 never got there
    ],
)
def test_check_step_dir_names_the_first_missing_piece(tmp_path, how, problem):
    folder = write_step(tmp_path, 4)
    if how:
        break_step(folder, how)
    assert check_step_dir(folder) == problem


def test_check_step_dir_without_lora_does_not_require_an_adapter(tmp_path):
    folder = write_step(tmp_path, 4, lora=False)
    assert check_step_dir(folder, require_lora=False) == ""
    assert check_step_dir(folder, require_lora=True) == "actor/lora_adapter/adapter_model.safetensors missing or empty"


# One row per situation a dead job can leave behind: (complete steps, broken steps {step: how}, tracker, expected
# resume step, expected folders that must not be resumed).
RESUME_CASES = [
    ([2, 4], {}, 4, 4, []),  # the normal case: the tracker's step
    ([2, 4], {6: "no_dataloader"}, 4, 4, [6]),  # killed while writing step 6, before the tracker update
    ([2, 4, 6], {}, 4, 4, [6]),  # step 6 finished but its tracker update never happened: not committed
    ([2], {4: "no_adapter"}, 4, 2, [4]),  # the tracker names a damaged folder: fall back to the previous one
    ([2], {}, 4, 2, []),  # the tracker names a deleted folder (save_limit pruning): EasyR1 would restart at 0
    ([2, 4], {}, "corrupt", 4, []),  # tracker cut off mid-write: its step folder was already complete
    ([2], {4: "no_dataloader"}, "corrupt", 2, [4]),  # ... unless that folder is itself torn
    ([2], {}, None, 0, [2]),  # no tracker at all: nothing was ever committed (EasyR1 starts at 0 too)
    ([], {}, None, 0, []),  # a fresh run
]


@pytest.mark.parametrize(("complete", "broken", "tracker", "step", "incomplete"), RESUME_CASES)
def test_find_resume_point_takes_the_last_complete_committed_checkpoint(
    tmp_path, complete, broken, tracker, step, incomplete
):
    for s in complete:
        write_step(tmp_path, s)
    for s, how in broken.items():
        break_step(write_step(tmp_path, s), how)
    if tracker == "corrupt":
        write_tracker(tmp_path, None, raw='{"best_global_step": 4, "last_glo')
    elif tracker is not None:
        write_tracker(tmp_path, tracker)
    rp = find_resume_point(tmp_path)
    assert (rp.step, list(rp.incomplete)) == (step, incomplete)
    assert rp.path == (tmp_path / f"global_step_{step}" if step else None)


def test_repair_moves_torn_folders_aside_and_rewrites_the_tracker_for_easyr1(tmp_path):
    write_step(tmp_path, 2)
    break_step(write_step(tmp_path, 4), "no_adapter")
    break_step(write_step(tmp_path, 6), "no_dataloader")
    write_tracker(tmp_path, 4)
    rp = repair_checkpoints(tmp_path, "77-0")
    assert rp.step == 2
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_2"]
    assert sorted(p.name for p in (tmp_path / "incomplete").iterdir()) == ["global_step_4.77-0", "global_step_6.77-0"]
    info = json.loads((tmp_path / CHECKPOINT_TRACKER).read_text())
    assert info["last_global_step"] == 2 and info["best_global_step"] == 2
    assert info["last_actor_path"] == str((tmp_path / "global_step_2" / "actor").resolve())
    # a second repair finds nothing left to do
    assert repair_checkpoints(tmp_path, "78-0") == find_resume_point(tmp_path)
    assert find_resume_point(tmp_path).incomplete == ()


def test_repair_without_any_complete_checkpoint_removes_the_tracker(tmp_path):
    break_step(write_step(tmp_path, 2), "no_dataloader")
    write_tracker(tmp_path, 2)
    assert repair_checkpoints(tmp_path, "5-0").step == 0
    assert not (tmp_path / CHECKPOINT_TRACKER).exists()
    assert (tmp_path / "incomplete" / f"{CHECKPOINT_TRACKER}.5-0").exists()


# --------------------------------------------------------------------------------------------- segments + merge
def seg_log(run: Path, seg: str, rows: list[dict], torn: str = "") -> None:
    path = run / "segments" / seg / "experiment_log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)


def test_new_segment_points_easyr1s_truncating_log_at_its_own_file(tmp_path):
    first = new_segment(tmp_path, "100", resume_step=0)
    log = tmp_path / "checkpoints" / "experiment_log.jsonl"
    with open(log, "w") as f:  # what EasyR1's FileLogger does at start
        f.write('{"step": 1}\n')
    second = new_segment(tmp_path, "100", resume_step=1)
    with open(log, "w") as f:  # the requeued job truncates "the" log again...
        f.write('{"step": 2}\n')
    assert (first.name, second.name, second.seq) == ("100-0", "100-1", 2)
    # ... but only its own segment's file
    assert (tmp_path / "segments" / "100-0" / "experiment_log.jsonl").read_text() == '{"step": 1}\n'
    assert (tmp_path / "segments" / "100-1" / "experiment_log.jsonl").read_text() == '{"step": 2}\n'
    assert os.readlink(log) == "../segments/100-1/experiment_log.jsonl"


def test_merge_keeps_each_step_once_and_supersedes_steps_after_the_resume_point(tmp_path):
    a = new_segment(tmp_path, "10", 0)
    seg_log(tmp_path, a.name, [{"step": 0, "val": {"s": 0.1}}] + [{"step": s, "loss": s} for s in (1, 2, 3, 4, 5)])
    b = new_segment(tmp_path, "11", 3)  # resumed from checkpoint 3: steps 4, 5 of job 10 are void
    seg_log(tmp_path, b.name, [{"step": 3, "val": {"s": 0.3}}, {"step": 4, "loss": 40}], torn='{"step": 5, "lo')
    c = new_segment(tmp_path, "12", 4)
    seg_log(tmp_path, c.name, [{"step": 5, "loss": 50}, {"step": 6, "loss": 60}, {"step": 6, "val": {"s": 0.6}}])
    (tmp_path / "segments" / c.name / "reward_counters.jsonl").write_text(
        '{"step": 6, "judge_failures": 1}\n{"judge_calls": 10}\n{"judge_calls": 5}\n'
    )
    s = merge_run_log(tmp_path, max_steps=6)
    log = [json.loads(x) for x in (tmp_path / "run_log.jsonl").read_text().splitlines()]
    assert log == [
        {"step": 0, "segment": "10-0", "val": {"s": 0.1}},
        {"step": 1, "segment": "10-0", "loss": 1},
        {"step": 2, "segment": "10-0", "loss": 2},
        {"step": 3, "segment": "10-0", "loss": 3, "val": {"s": 0.3}},  # validation at the resume step joins it
        {"step": 4, "segment": "11-0", "loss": 40},
        {"step": 5, "segment": "12-0", "loss": 50},
        {"step": 6, "segment": "12-0", "loss": 60, "val": {"s": 0.6}, "reward_counters": {"judge_failures": 1}},
    ]
    assert s.superseded == {"10-0": [4, 5]}
    assert s.torn_lines == {"11-0": 1}
    assert s.missing == []
    assert s.reward_counters == {"12-0": {"judge_calls": 15}}
    summary = json.loads((tmp_path / "run_summary.json").read_text())
    assert (summary["n_steps"], summary["last_step"], summary["superseded"]) == (7, 6, {"10-0": [4, 5]})


def test_merge_reports_steps_no_segment_logged(tmp_path):
    a = new_segment(tmp_path, "10", 0)
    seg_log(tmp_path, a.name, [{"step": 1}, {"step": 3}])
    assert merge_run_log(tmp_path, max_steps=4).missing == [2, 4]


# --------------------------------------------------------------------------------------------- decisions
def seg(status: str, resume: int, end: int | None, name: str = "1-0") -> Segment:
    return Segment(name=name, job_id="1", seq=1, started_at="", resume_step=resume, status=status, end_step=end)


@pytest.mark.parametrize(
    ("history", "expected"),
    [
        ([seg("stopped", 0, 4), seg("crashed", 4, 4)], 1),  # the last job made no progress
        ([seg("crashed", 4, 4), seg("crashed", 4, 4)], 2),  # two in a row
        ([seg("crashed", 0, 0), seg("stopped", 0, 4)], 0),  # progress resets the count
        ([seg("crashed", 0, 0), seg("running", 0, None)], 1),  # a running segment is not judged yet
    ],
)
def test_stalled_count_counts_the_latest_jobs_without_a_new_checkpoint(history, expected):
    assert stalled_count(history) == expected


@pytest.mark.parametrize(
    ("last", "action", "exit_code", "needle"),
    [
        (seg("stopped", 0, 4), "continue", 0, "trainer stopped at step 4 of 8; the run continues"),
        (seg("crashed", 0, 2), "continue", 1, "trainer crashed at step 2 of 8"),  # progress made: retry
        (seg("stopped", 4, 8), "done", 0, "run complete: global_step_8 reaches max_steps=8"),
        (seg("finished", 4, 8), "done", 0, "run complete"),
        (seg("finished", 4, 6), "stop", 1, "exited normally at step 6 < max_steps=8"),  # max_steps disagree
        (seg("terminated", 4, 6), "none", 143, "cancelled or requeued"),  # Slurm decides, never resubmit
        (seg("server_failed", 4, 4), "stop", 1, "not resubmitting: "),
        (seg("check_failed", 4, 4), "stop", 1, "not resubmitting: "),  # the reward check found misconfiguration
    ],
)
def test_decide_at_end(last, action, exit_code, needle):
    d = decide_at_end([last], max_steps=8, max_stalled=2)
    assert (d.action, d.exit_code) == (action, exit_code)
    assert needle in d.message


def test_decide_at_end_stops_after_max_stalled_jobs_without_progress():
    history = [seg("crashed", 2, 2, "1-0"), seg("crashed", 2, 2, "2-0")]
    d = decide_at_end(history, max_steps=8, max_stalled=2)
    assert (d.action, d.exit_code) == ("stop", 1)
    assert d.message.startswith("2 jobs in a row made no progress (stuck at step 2); not resubmitting")
    assert decide_at_end(history[:1], max_steps=8, max_stalled=2).action == "continue"


def test_decide_at_start():
    assert decide_at_start([], 8, max_steps=8, max_stalled=2).action == "done"
    assert decide_at_start([], 0, max_steps=8, max_stalled=2).message == "starting from step 0"
    assert decide_at_start([seg("stopped", 0, 4)], 4, max_steps=8, max_stalled=2).message == "resuming from step 4"
    stuck = [seg("crashed", 4, 4), seg("crashed", 4, 4)]
    d = decide_at_start(stuck, 4, max_steps=8, max_stalled=2)
    assert (d.action, d.exit_code) == ("stop", 1)
    assert decide_at_start(stuck, 4, max_steps=8, max_stalled=0).action == "run"  # 0 disables the limit


# --------------------------------------------------------------------------------------------- recipe, manifest
@pytest.mark.parametrize(
    ("trainer", "error"),
    [
        ({"save_freq": 4, "save_limit": 5, "load_checkpoint_path": None}, None),  # the project's recipe
        ({"save_freq": -1}, "trainer.save_freq must be > 0"),  # never saves: nothing to resume
        ({"save_freq": 4, "load_checkpoint_path": "/x/global_step_4"}, "trainer.load_checkpoint_path must be null"),
        ({"save_freq": 4, "save_limit": 1}, "trainer.save_limit=1 deletes the only complete checkpoint"),
    ],
)
def test_check_recipe_rejects_settings_that_break_chaining(trainer, error):
    errors = check_recipe({"trainer": trainer}, {})
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and errors[0].startswith(error)


def test_the_projects_recipe_passes_the_chaining_checks():
    from launch.run_manifest import load_recipe

    recipe = Path(__file__).resolve().parents[2] / "recipes" / "qwen3vl_8b_grpo.yaml"
    assert recipe.is_file(), f"{recipe}: the project's recipe is missing"
    assert check_recipe(load_recipe(recipe), {}) == []


def test_plan_max_steps_order_env_then_recipe_then_data(tmp_path):
    recipe = {"trainer": {"max_steps": None, "total_epochs": 3}, "data": {"rollout_batch_size": 32}}
    assert plan_max_steps(recipe, {}, "7", "") == (7, "QUOTECITE_MAX_STEPS")
    assert plan_max_steps({"trainer": {"max_steps": 5}}, {}, "", "") == (5, "recipe trainer.max_steps")
    assert plan_max_steps(recipe, {"trainer.max_steps": "9"}, "", "")[0] == 9  # a command-line override wins
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"q": list(range(1584))}), tmp_path / "train.parquet")
    # EasyR1's own formula (drop_last dataloader): 1584 // 32 * 3
    assert plan_max_steps(recipe, {}, "", str(tmp_path / "train.parquet")) == (
        147,
        "1584 rows // rollout_batch_size 32 * total_epochs 3",
    )
    with pytest.raises(RunError, match="cannot tell max_steps"):
        plan_max_steps(recipe, {}, "", "${oc.env:QUOTECITE_DATA_DIR}/train.parquet")


def test_manifest_records_jobs_and_refuses_a_changed_recipe(tmp_path):
    base = {"recipe": {"path": "r.yaml", "sha256": "aaa"}, "models": {"judge": "J"}, "max_steps": 8}
    update_manifest(tmp_path, base, {"job_id": "1", "segment": "1-0", "resume_step": 0})
    update_manifest(tmp_path, {}, {"job_id": "1", "segment": "1-0", "end_step": 4, "next": "continue"})
    man = update_manifest(tmp_path, base, {"job_id": "2", "segment": "2-0", "resume_step": 4})
    assert man["jobs"] == [
        {"job_id": "1", "segment": "1-0", "resume_step": 0, "end_step": 4, "next": "continue"},
        {"job_id": "2", "segment": "2-0", "resume_step": 4},
    ]
    changed = {**base, "recipe": {"path": "r.yaml", "sha256": "bbb"}}
    with pytest.raises(RunError, match="the recipe changed during the run"):
        update_manifest(tmp_path, changed, {"job_id": "3"})
    man = update_manifest(tmp_path, changed, {"job_id": "3"}, allow_recipe_change=True)
    assert man["jobs"][-1] == {"job_id": "3", "recipe_sha256": "bbb"}


# --------------------------------------------------------------------------------------------- the job's steps
def test_prepare_and_finish_return_what_the_job_needs(tmp_path):
    run = tmp_path / "run"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("trainer: {save_freq: 1}\n")
    common = {"max_steps": 4, "max_stalled": 2, "require_lora": True, "repo": REPO, "recipe": recipe}
    start = prepare(run, "50", **common, models={"judge": "J"}, job_extra={"nodes": ["n1"]})
    assert start == Start(action="run", message="starting from step 0", exit_code=0, resume_step=0, segment="50-0",
                          segment_dir=run.resolve() / "segments" / "50-0")  # fmt: skip
    man = json.loads((run / "manifest.json").read_text())
    assert man["models"] == {"judge": "J"} and man["jobs"][0]["nodes"] == ["n1"] and man["max_steps"] == 4
    write_step(run / "checkpoints", 2)
    write_tracker(run / "checkpoints", 2)
    end = finish(run, "50-0", status="stopped", trainer_exit=None, message="", max_steps=4, max_stalled=2)
    assert (end.action, end.exit_code, end.end_step) == ("continue", 0, 2)
    assert end.logged_steps == 0 and end.missing_steps == (1, 2)  # checkpointed, never logged
    # a job that is killed without cleanup is closed by the next one
    assert prepare(run, "51", **common).resume_step == 2
    segs = load_segments(run)
    segs[-1].status = "running"
    save_segment(run, segs[-1])
    assert prepare(run, "52", **common).segment == "52-0"
    assert [(s.name, s.status, s.end_step) for s in load_segments(run)] == [
        ("50-0", "stopped", 2),
        ("51-0", "died", 2),
        ("52-0", "running", None),
    ]
    assert last_step(run) == 2
    # a run that reached max_steps opens no segment, and the manifest records why
    done = prepare(run, "53", **{**common, "max_steps": 2})
    assert (done.action, done.segment, done.segment_dir, done.exit_code) == ("done", "", None, 0)
    assert json.loads((run / "manifest.json").read_text())["jobs"][-1]["status"] == "done"
    with pytest.raises(RunError, match="unknown segment status 'ok'"):
        finish(run, "52-0", status="ok", trainer_exit=0, message="", max_steps=4, max_stalled=2)
    with pytest.raises(RunError, match="no segment '9-0'"):
        finish(run, "9-0", status="stopped", trainer_exit=0, message="", max_steps=4, max_stalled=2)


def test_plan_errors_name_the_recipe_setting(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("trainer: {save_freq: -1, max_steps: 4}\n")
    with pytest.raises(RunError, match=r"r\.yaml: trainer\.save_freq must be > 0"):
        plan_run(recipe, "", "", REPO, [])


# --------------------------------------------------------------------------------------------- paths, batches
def test_plan_pins_the_recipes_relative_paths_and_tells_the_reward_its_batch_shape(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "data: {format_prompt: ./recipes/prompts/language_interface.jinja, rollout_batch_size: 8}\n"
        "algorithm: {online_filtering: true, filter_key: keep, filter_low: 0.05, filter_high: 0.95}\n"
        "worker: {reward: {reward_function: ./reward/quote_reward.py:compute_score}}\n"
        "trainer: {save_freq: 2, max_steps: 4}\n"
    )
    reward_fn = f"worker.reward.reward_function={REPO}/reward/quote_reward.py:compute_score"
    plan = plan_run(recipe, "", "", REPO, [])
    assert plan.path_overrides == (
        f"data.format_prompt={REPO}/recipes/prompts/language_interface.jinja",
        reward_fn,
        "worker.reward.reward_function_kwargs.batch_groups=8",
        "worker.reward.reward_function_kwargs.keep_band=[0.05,0.95]",
    )
    assert (plan.max_steps, plan.max_steps_from) == (4, "recipe trainer.max_steps")
    assert plan.require_lora is False and plan.logger_override == "trainer.logger=[console,file]"
    # a user's override is pinned too, and what the user sets for the reward is left alone
    plan = plan_run(recipe, "", "", REPO, ["data.format_prompt=recipes/prompts/other.jinja",
                                           "algorithm.online_filtering=false",
                                           "worker.reward.reward_function_kwargs.batch_groups=4",
                                           "worker.actor.model.lora.rank=8", "trainer.logger=[console,file]"])  # fmt: skip
    assert plan.path_overrides == (
        f"data.format_prompt={REPO}/recipes/prompts/other.jinja",
        reward_fn,
        "worker.reward.reward_function_kwargs.keep_band=null",  # every group trains
    )
    assert plan.require_lora is True and plan.logger_override == ""
    # another reward function gets no quote_reward settings; an absolute path stays as it is
    plan = plan_run(recipe, "7", "", REPO, ["worker.reward.reward_function=/opt/math.py:main"])
    assert plan.path_overrides[1:] == ("worker.reward.reward_function=/opt/math.py:main",)
    assert (plan.max_steps, plan.max_steps_from) == (7, "QUOTECITE_MAX_STEPS")


REPO = Path(__file__).resolve().parents[2]


def test_merge_puts_each_training_batch_record_on_its_step(tmp_path):
    a = new_segment(tmp_path, "10", 0)
    seg_log(tmp_path, a.name, [{"step": s, "reward": {"overall": 0.9}} for s in (1, 2, 3)])
    batches = [{"batch": n, "time": 1.0, "calls": 1, "groups_trained": 2, "reward": {"overall": n / 10},
                "qids": [f"q{n}"]} for n in (1, 2, 3)]  # fmt: skip
    (tmp_path / "segments" / a.name / "reward_batches.jsonl").write_text(
        "".join(json.dumps(b) + "\n" for b in batches) + '{"batch": 4, "ti'  # torn: killed mid-write
    )
    b = new_segment(tmp_path, "11", 2)  # resumed from checkpoint 2: its first batch is step 3
    seg_log(tmp_path, b.name, [{"step": 3, "reward": {"overall": 0.8}}])
    (tmp_path / "segments" / b.name / "reward_batches.jsonl").write_text(
        json.dumps({"batch": 1, "calls": 3, "reward": {"overall": 0.33}, "qids": ["q9"]}) + "\n"
        + json.dumps({"batch": 2, "calls": 1, "reward": {"overall": 0.44}, "qids": ["q8"]}) + "\n"  # no step 4 logged
    )  # fmt: skip
    s = merge_run_log(tmp_path)
    log = {r["step"]: r for r in (json.loads(x) for x in (tmp_path / "run_log.jsonl").read_text().splitlines())}
    assert sorted(log) == [1, 2, 3]
    assert log[1]["train_batch"] == {"calls": 1, "groups_trained": 2, "reward": {"overall": 0.1}, "qids": ["q1"]}
    assert log[2]["train_batch"]["reward"] == {"overall": 0.2}
    assert log[3]["segment"] == "11-0" and log[3]["train_batch"]["reward"] == {"overall": 0.33}  # the rerun's batch
    assert log[3]["train_batch"]["calls"] == 3 and log[3]["reward"] == {"overall": 0.8}
    assert s.torn_lines == {"10-0": 1}


def test_restarts_are_counted_in_the_segment_and_the_manifest(tmp_path):
    run = tmp_path / "run"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("trainer: {save_freq: 1}\n")
    prepare(run, "60", max_steps=4, max_stalled=3, require_lora=True, repo=REPO, recipe=recipe)
    for what in ("judge", "judge", "embed"):
        totals = record_restart(run, "60-0", what, "x")
    assert totals == {"judge": 2, "embed": 1}
    (seg,) = load_segments(run)
    assert seg.extra["restarts"] == {"judge": 2, "embed": 1} and len(seg.extra["restart_log"]) == 3
    man = json.loads((run / "manifest.json").read_text())
    assert man["restarts"] == {"judge": 2, "embed": 1} and man["jobs"][0]["restarts"] == {"judge": 2, "embed": 1}
    with pytest.raises(RunError, match="no segment '60-9'"):
        record_restart(run, "60-9", "judge")
    with pytest.raises(RunError, match="unknown restart kind 'reward'"):
        record_restart(run, "60-0", "reward")
    # a trainer that stopped on an outage: the segment's status says so and the chain restarts in the same job
    end = finish(run, "60-0", status="outage", trainer_exit=1, message="judge down", max_steps=4, max_stalled=3)
    assert end.action == "restart" and load_segments(run)[0].status == "outage"


def test_read_outage_reads_the_rewards_report(tmp_path):
    assert read_outage(tmp_path) is None
    (tmp_path / "server_outage.json").write_text(json.dumps({"message": "judge at http://h:1/v1\n is down"}))
    assert read_outage(tmp_path) == "judge at http://h:1/v1 is down"  # one line


def synthetic_run_log(path: Path, steps: int = 12) -> None:
    rows = []
    for s in range(1, steps + 1):
        trained = 0.2 + 0.5 * s / steps
        rows.append({
            "step": s, "segment": "7-0" if s <= 6 else "8-0",
            "reward": {"overall": trained - 0.1, "unscorable": 0.02, "format_ok": 0.9, "n_citations": 2.0},
            "critic": {"score": {"mean": trained}},
            "train_batch": {"calls": 1 + s % 3, "groups_seen": 40, "groups_trained": 32,
                            "dropped": {"zero_variance": 6, "all_unscorable": 1, "out_of_band": 1, "surplus": 0},
                            "reward": {"overall": trained, "answer": 5 * trained, "relevance": 3.0, "coverage": 2.5,
                                       "format_ok": 0.95, "n_quotes": 3.0, "n_citations": 2.5, "unscorable": 0.0}},
        })  # fmt: skip
        if s % 4 == 0:
            rows[-1]["val"] = {"reward_score": trained - 0.05}
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_plot_turns_the_run_log_into_one_self_contained_html_page(tmp_path, capsys):
    import base64
    import re

    run = tmp_path / "run"
    run.mkdir()
    synthetic_run_log(run / "run_log.jsonl")
    assert main(["plot", str(run)]) == 0
    page = (run / "curves.html").read_text()
    assert capsys.readouterr().out.strip() == f"training curves: {run / 'curves.html'}"
    pngs = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(pngs) == 5 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    for title in ("Reward", "Reward parts", "Unscorable and format rate", "Citations per response",
                  "Groups and the online filter"):  # fmt: skip
        assert f"<h2>{title}" in page
    assert "steps 1..12 (12 records, 2 job segment(s)" in page
    assert "<td style='text-align:left'>trained responses</td><td>12</td><td>0.7</td>" in page  # last value
    assert "http" not in page.replace("charset", "")  # nothing fetched: one file that opens offline
    # a run log without the reward's records still plots EasyR1's own reward keys; panels without data say so
    (run / "run_log.jsonl").write_text(json.dumps({"step": 1, "reward": {"overall": 0.3}}) + "\n")
    assert main(["plot", str(run), "--out", str(tmp_path / "c.html")]) == 0
    page = (tmp_path / "c.html").read_text()
    assert page.count("data:image/png") == 1 and page.count("no data in this run log") == 4
    assert main(["plot", str(tmp_path / "nope")]) == 2
    assert "run_log.jsonl: cannot read" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- hostile run files
@pytest.mark.parametrize("raw", ['{"last_global_step": -3}', '{"last_global_step": 2.5}',
                                 '{"last_global_step": 1e999}', '{"last_global_step": "7"}',
                                 '{"last_global_step": true}', "[3]", '{"last_global_step": 3',
                                 '{"last_global_step": NaN}', "\xff"])  # fmt: skip
def test_a_tracker_without_a_whole_step_is_corrupt_never_a_step(tmp_path, raw):
    ckpt = tmp_path / "run" / "checkpoints"
    ckpt.mkdir(parents=True)
    write_step(ckpt, 2)
    (ckpt / CHECKPOINT_TRACKER).write_bytes(raw.encode("utf-8", "surrogateescape") if raw != "\xff" else b"\xff")
    point = find_resume_point(ckpt)
    assert point.tracker_step is None and point.step == 2  # the folders decide; the tracker's value is not used
    assert last_step(tmp_path / "run") == 0


def test_merge_of_a_misspelt_run_folder_is_an_error_and_creates_nothing(tmp_path, capsys):
    assert main(["merge", "--run-dir", str(tmp_path / "nosuch")]) == 2
    assert "not a folder" in capsys.readouterr().err and not (tmp_path / "nosuch").exists()
    (tmp_path / "empty").mkdir()
    assert main(["merge", "--run-dir", str(tmp_path / "empty")]) == 2
    assert "is this a run folder" in capsys.readouterr().err and list((tmp_path / "empty").iterdir()) == []
    good = tmp_path / "good"  # a merged run whose segments folder is missing or misnamed: its log is kept
    (good / "segmnets").mkdir(parents=True)
    (good / "run_log.jsonl").write_text('{"step": 1}\n')
    assert main(["merge", "--run-dir", str(good)]) == 2
    assert "left as it is" in capsys.readouterr().err and (good / "run_log.jsonl").read_text() == '{"step": 1}\n'


@pytest.mark.parametrize(("text", "field"), [("[1, 2]", "JSON object"), ('{"name": "1-0"', "not valid JSON"),
                                              ('{"name": "1-0", "job_id": "1", "seq": "one"}', "'seq'"),
                                              ('{"name": "1-0", "job_id": "1", "seq": 1, "started_at": "t", '
                                               '"resume_step": -1, "status": "running"}', "'resume_step'"),
                                              ('{"name": "1-0", "job_id": "1", "seq": 1, "started_at": "t", '
                                               '"resume_step": 0, "status": "running", "end_step": 1.5}', "'end_step'")])  # fmt: skip
def test_a_damaged_segment_file_is_one_error_naming_it(tmp_path, capsys, text, field):
    run = tmp_path / "run"
    seg = run / "segments" / "1-0"
    seg.mkdir(parents=True)
    (seg / "segment.json").write_text(text)
    assert main(["merge", "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err
    assert "segment.json" in err and field in err and "Traceback" not in err, err


def test_a_zero_padded_step_folder_is_not_a_checkpoint_and_a_folder_is_not_a_shard(tmp_path):
    ckpt = tmp_path / "checkpoints"
    write_step(ckpt, 2)
    padded = write_step(ckpt, 3)
    padded.rename(ckpt / "global_step_003")  # EasyR1 looks for global_step_3: resuming here would start from 0
    write_tracker(ckpt, 3)
    assert find_resume_point(ckpt).step == 2
    folder = write_step(ckpt, 4)
    shard = folder / "actor" / "model_world_size_2_rank_1.pt"
    shard.unlink()
    shard.mkdir()
    assert "is not a file" in check_step_dir(folder)
