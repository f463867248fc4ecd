"""launch/budget.py: host memory, checkpoint disk, pruning ``incomplete/`` and the save_freq check. The 8B recipe's numbers are worked out here by hand from the assumptions the module documents."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from core.errors import InputError
from launch import budget
from launch.budget import (
    GIB,
    check_disk,
    checkpoint_bytes,
    kept_checkpoints,
    measured_step_seconds,
    model_params,
    params_b_from_id,
    plan_from_recipe,
    prune_incomplete,
    save_freq_check,
)
from launch.checkpoints import find_resume_point, repair_checkpoints
from launch.merge import merge_run_log
from launch.segments import new_segment

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"

# Qwen3-VL-8B-Instruct (tests/support/tiny_qwen3vl.py QWEN3_VL_8B): 8,767,123,696 parameters; language model of 36
# layers, hidden 4096, MLP 12288, 32 query heads and 8 KV heads of 128.
P = 8_767_123_696
# LoRA rank 64 on q, k, v, o, gate, up, down of every layer: rank x (in + out) each.
PER_LAYER = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 2 * (4096 + 12288) + (12288 + 4096)
L = 36 * 64 * PER_LAYER


def test_lora_size_by_hand():
    assert PER_LAYER == 75776 and L == 174_587_904
    plan = plan_from_recipe(RECIPE)
    assert (plan.params, plan.lora_params, plan.n_gpus_per_node, plan.nnodes) == (P, L, 2, 1)


def test_checkpoint_of_the_8b_recipe():
    """bf16 base + fp32 adapter in the model shards, AdamW's two fp32 moments for the adapter, per-rank extra
    state, the adapter again as safetensors, the small files."""
    c = plan_from_recipe(RECIPE).ckpt
    assert c.model == P * 2 + L * 4
    assert c.optim == L * 8
    assert c.extra == 2 * 64 * 1024
    assert c.lora_adapter == L * 4
    assert c.small == 20_000_000 + 1_000_000
    assert c.total == P * 2 + L * (4 + 8 + 4) + 131_072 + 21_000_000
    assert round(c.total / GIB, 1) == 19.0  # the "about 19 GB" per checkpoint
    # the recipe keeps save_limit=5 folders
    assert kept_checkpoints(5, None, 4) == 5


def test_checkpoint_without_lora_and_model_only():
    c = checkpoint_bytes(10**9, 0, world_size=4)
    assert (c.model, c.optim, c.extra, c.lora_adapter) == (4 * 10**9, 8 * 10**9, 4 * 64 * 1024, 0)
    m = checkpoint_bytes(10**9, 0, world_size=4, save_model_only=True)
    assert (m.model, m.optim, m.extra) == (4 * 10**9, 0, 0)


@pytest.mark.parametrize(
    ("save_limit", "max_steps", "save_freq", "want"),
    [(5, None, 4, 5), (1, None, 4, 2), (-1, 100, 4, 25), (None, 101, 4, 26), (-1, 3, 0, 1)],
)
def test_kept_checkpoints(save_limit, max_steps, save_freq, want):
    assert kept_checkpoints(save_limit, max_steps, save_freq) == want


def test_kept_checkpoints_needs_max_steps_when_all_are_kept():
    with pytest.raises(InputError, match="max-steps"):
        kept_checkpoints(-1, None, 4)


def test_memory_of_the_8b_recipe_by_hand():
    """Two trainer GPUs and both servers on one node, rank-0 init in fp32, bf16 vLLM engines of TP 1, 32 prompts of
    up to 30 pages of 1e6 pixels (the recipe's values); validation of the recipe's ``val_batch_size: -1`` queues the
    whole held-out set (83 questions), the job's bound (``data.val_batch_size=32``) no more than a rollout."""
    policy = P * 4 / GIB  # start: rank 0's fp32 copy
    vllm = 2 * P * 2 / GIB  # 2 engines' bf16 weights in sleep mode
    staging = (P * 2 + L * 4 + L * 8) / GIB  # one node holds all (2 of 2 GPUs) of model + optimizer state
    prompt = 30 * 1_000_000 * 24 / GIB  # one prompt's float32 pixel values: 30 pages x 1e6 px x 24 B (0.67 GiB)
    images = 2 * 16 * prompt  # 2 workers x 32/2 prompts
    rollout_queue = 2 * 16 * prompt  # 2 engines x 32/2 queued requests (11.5 GB an engine, as issue 31 says)
    val_queue = 2 * 42 * prompt  # 2 engines x ceil(83/2) queued requests (about 30 GB an engine)
    loader = 8 * (prompt + 1)  # 8 workers x (one prompt's pixel values + 1 GiB)
    always = 4 + (2 + 2) * 4 + 8 + 8  # Ray base, 2 GPU workers + 2 reward actors, judge, embedder
    assert 16 * prompt * GIB / 1e9 == pytest.approx(11.52) and 42 * prompt * GIB / 1e9 == pytest.approx(30.24)
    for overrides, queue, want_gib in (([], val_queue, 205), (["data.val_batch_size=32"], rollout_queue, 165)):
        training = vllm + staging + images + queue + loader
        peak = always + max(policy, training)
        want = math.ceil(peak * 1.15)
        est = plan_from_recipe(RECIPE, overrides).estimate
        assert est.total_gib == want == want_gib and est.sbatch_mem == f"{want_gib}G"
        assert est.peak_gib == pytest.approx(peak)
        parts = {name: gib for name, gib, _ in est.parts}
        assert parts["policy load (rank 0)"] == pytest.approx(policy)
        assert parts["vLLM sleep-mode weights"] == pytest.approx(vllm)
        assert parts["checkpoint staging"] == pytest.approx(staging)
        assert parts["actor image cache"] == pytest.approx(images)
        assert parts["vLLM queued images"] == pytest.approx(queue)
        assert parts["data loader"] == pytest.approx(loader)
        assert dict(zip([p[0] for p in est.parts], est.phases, strict=True))["policy load (rank 0)"] == "start"
    # a validation set of another size: --val-size (the budget's --val-size)
    small = {n: g for n, g, _ in plan_from_recipe(RECIPE, val_size=20).estimate.parts}["vLLM queued images"]
    assert small == pytest.approx(rollout_queue)  # 10 a engine: the rollout's 16 are the larger


def test_memory_parts_follow_their_settings():
    def parts(*overrides: str, **kw) -> tuple[budget.Estimate, dict[str, float]]:
        est = plan_from_recipe(RECIPE, ["data.val_batch_size=32", *overrides], **kw).estimate
        return est, {p[0]: p[1] for p in est.parts}

    base, _ = parts()
    no_init, got = parts("worker.actor.fsdp.enable_rank0_init=false")
    assert "policy load (rank 0)" not in got
    # the fp32 load is a start-up part, smaller here than the training parts: the total does not change
    assert no_init.total_gib == base.total_gib
    _, tp2 = parts("worker.rollout.tensor_parallel_size=2")
    assert tp2["vLLM sleep-mode weights"] == pytest.approx(2 * P * 2 / 2 / GIB)
    _, three_nodes = parts(n_gpus_per_node=1, nnodes=3)
    # one GPU of three holds a third of the state
    assert three_nodes["checkpoint staging"] == pytest.approx((P * 2 + L * 12) / 3 / GIB)
    with pytest.raises(InputError, match="at least 1"):
        parts("trainer.n_gpus_per_node=0")


def test_params_from_the_model():
    assert params_b_from_id("Qwen/Qwen3-VL-8B-Instruct") == 8.0
    assert params_b_from_id("Qwen/Qwen3-30B-A3B") == 30.0 and params_b_from_id("org/tiny") is None
    assert model_params("Qwen/Qwen3-VL-8B-Instruct") == (P, "published count of Qwen/Qwen3-VL-8B-Instruct")
    assert model_params("org/Other-13B")[0] == 13 * 10**9
    assert model_params("org/tiny", 0.5)[0] == 500_000_000
    with pytest.raises(InputError, match="--params-b"):
        model_params("org/tiny")


def test_local_model_config_gives_the_shapes(tmp_path):
    d = tmp_path / "Qwen3-VL-8B-Instruct"
    d.mkdir()
    text = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, vocab_size=100)  # fmt: skip
    (d / "config.json").write_text(json.dumps({"text_config": text}))
    recipe = RECIPE.read_text().replace("model_path: Qwen/Qwen3-VL-8B-Instruct", f"model_path: {d}")
    (tmp_path / "r.yaml").write_text(recipe)
    plan = plan_from_recipe(tmp_path / "r.yaml")
    per_layer = (64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 128) + (128 + 64)
    assert plan.lora_params == 2 * 64 * per_layer
    assert plan.params == P  # the folder's name is a known model


# --------------------------------------------------------------------------------------------- disk
Usage = namedtuple("Usage", "total used free")


@pytest.mark.parametrize(
    ("free", "level"),
    [(50 * GIB, "refuse"), (100 * GIB, "warn"), (109 * GIB, "warn"), (111 * GIB, "ok")],
)
def test_check_disk_levels(tmp_path, monkeypatch, free, level):
    monkeypatch.setattr(budget.shutil, "disk_usage", lambda p: Usage(1000 * GIB, 0, free))
    got, msg = check_disk(tmp_path / "run", 100 * GIB, 0.1, "5 checkpoints x 20.0 GiB")
    assert got == level
    assert "need 100.0 GiB (5 checkpoints x 20.0 GiB)" in msg and f"free {free / GIB:.1f} GiB on " in msg


def test_check_disk_on_the_real_filesystem(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    mount = (
        subprocess.run(["df", "-P", str(tmp_path)], capture_output=True, text=True).stdout.splitlines()[-1].split()[-1]
    )
    level, msg = check_disk(tmp_path / "not" / "yet", 1024)
    assert level == "ok" and f" on {mount} " in msg
    level, msg = check_disk(tmp_path, free * 2)
    assert level == "refuse" and msg.startswith("not enough disk: need ")


def test_disk_cli(tmp_path, monkeypatch, capsys):
    per = plan_from_recipe(RECIPE).ckpt.total
    monkeypatch.setattr(budget.shutil, "disk_usage", lambda p: Usage(10**15, 0, 3 * per))
    rc = budget.main(["disk", "--recipe", str(RECIPE), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 3 and err.startswith(
        f"error: not enough disk: need {5 * per / GIB:.1f} GiB (5 checkpoints x 19.0 GiB)"
    )
    assert f"free {3 * per / GIB:.1f} GiB on " in err and err.count("\n") == 1
    # step folders already on disk count against the need: 5 x per - what they hold
    step = tmp_path / "run" / "checkpoints" / "global_step_4"
    step.mkdir(parents=True)
    (step / "model.pt").write_bytes(b"x" * 4096)
    monkeypatch.setattr(budget.shutil, "disk_usage", lambda p: Usage(10**15, 0, 10 * per))
    rc = budget.main(["disk", "--recipe", str(RECIPE), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith("ok: need ") and "already in 1 step folder(s)" in out
    # --prune clears incomplete/ first (keeping the newest) and says what it freed
    inc = tmp_path / "run" / "checkpoints" / "incomplete"
    for i, name in enumerate(["global_step_8.5-0", "global_step_12.6-0"]):
        (inc / name).mkdir(parents=True)
        (inc / name / "model.pt").write_bytes(b"m" * 2**20)
        os.utime(inc / name, (1_000_000 + i, 1_000_000 + i))
    rc = budget.main(["disk", "--recipe", str(RECIPE), "--run-dir", str(tmp_path / "run"), "--prune"])
    out = capsys.readouterr().out
    assert rc == 0 and out.startswith(f"pruned 1 entry of {inc}: {2**20} bytes freed\n")
    assert [p.name for p in inc.iterdir()] == ["global_step_12.6-0"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.budget", *args], capture_output=True, text=True, cwd=REPO)


def test_memory_cli():
    r = _cli("memory", "--recipe", str(RECIPE), "data.val_batch_size=32")  # what the job passes
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "165G"
    assert any(line.startswith("vLLM sleep-mode weights") for line in lines)
    assert any(line.startswith("vLLM queued images") and "a rollout batch of 32" in line for line in lines)
    assert lines[-1].endswith("-> --mem=165G")
    # the recipe as it is: val_batch_size -1 queues the 83 held-out questions at once; --val-size another set
    whole = _cli("memory", "--recipe", str(RECIPE))
    assert whole.stdout.splitlines()[0] == "205G" and "a validation batch of 83 / 2 engine group(s)" in whole.stdout
    assert "a validation batch of 60 /" in _cli("memory", "--recipe", str(RECIPE), "--val-size", "60").stdout
    # an override reaches the estimate: one trainer GPU per node
    one = _cli("memory", "--recipe", str(RECIPE), "--train-gpus-per-node", "1", "data.val_batch_size=32")
    assert one.returncode == 0 and int(one.stdout.splitlines()[0].rstrip("G")) < 165
    # so does an EasyR1 override: fewer pages per prompt, a smaller image cache
    fewer = _cli("memory", "--recipe", str(RECIPE), "worker.rollout.limit_images=10", "data.val_batch_size=32")
    assert fewer.returncode == 0 and int(fewer.stdout.splitlines()[0].rstrip("G")) < 165
    assert "x 10 pages x" in fewer.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("memory", "--recipe", "no/such/recipe.yaml"),
        ("disk", "--recipe", "no/such/recipe.yaml", "--run-dir", "/tmp"),
        ("save-freq", "--run-dir", "/tmp", "--recipe", "no/such/recipe.yaml"),
    ],
)
def test_bad_recipe_is_one_error_line(args):
    r = _cli(*args)
    assert r.returncode == 1
    assert r.stderr.splitlines() == [r.stderr.strip()] and r.stderr.startswith("error: recipe no/such/recipe.yaml")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("what", ["memory", "disk"])
def test_a_recipe_number_the_host_budget_divides_by_is_refused_naming_its_key(what, tmp_path):
    extra = ("--run-dir", str(tmp_path)) if what == "disk" else ()
    r = _cli(what, "--recipe", str(RECIPE), *extra, "worker.rollout.tensor_parallel_size=0", "trainer.nnodes=0")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr == (
        f"error: recipe {RECIPE}: trainer.nnodes=0, worker.rollout.tensor_parallel_size=0: expected at least 1\n"
    )


# --------------------------------------------------------------------------------------------- incomplete/
def _step(ckpt: Path, step: int, torn: bool = False) -> None:
    actor = ckpt / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for kind in ("model", "optim", "extra_state"):
        (actor / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"w" * 1000)
    if torn:
        return
    (actor / "lora_adapter").mkdir()
    (actor / "lora_adapter" / "adapter_model.safetensors").write_bytes(b"a" * 500)
    (actor / "lora_adapter" / "adapter_config.json").write_text("{}")
    (ckpt / f"global_step_{step}" / "dataloader.pt").write_bytes(b"d" * 10)
    (ckpt / "checkpoint_tracker.json").write_text(json.dumps({"last_global_step": step}))


def test_prune_incomplete_on_what_repair_moved_aside(tmp_path):
    ckpt = tmp_path / "checkpoints"
    _step(ckpt, 2)
    _step(ckpt, 4, torn=True)
    (ckpt / "checkpoint_tracker.json").write_text(json.dumps({"last_global_step": 4}))
    assert repair_checkpoints(ckpt, "100-0").step == 2  # moves global_step_4 to incomplete/global_step_4.100-0
    _step(ckpt, 6, torn=True)
    (ckpt / "checkpoint_tracker.json").write_text(json.dumps({"last_global_step": 6}))
    assert repair_checkpoints(ckpt, "101-0").step == 2
    inc = ckpt / "incomplete"
    old, new = inc / "global_step_4.100-0", inc / "global_step_6.101-0"
    assert old.is_dir() and new.is_dir()
    os.utime(old, (1_000_000, 1_000_000))  # moved aside first
    (inc / "notes.txt").write_text("the user's own file")
    leftover = inc / ".pruning-global_step_1.99-0"  # a prune interrupted after its rename
    leftover.mkdir()
    (leftover / "model.pt").write_bytes(b"z" * 300)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.pt").write_bytes(b"k" * 50)
    (inc / "global_step_9.102-0").symlink_to(outside)

    got = prune_incomplete(ckpt, keep=1)

    assert sorted(got.removed) == ["global_step_1.99-0", "global_step_4.100-0", "global_step_9.102-0"]
    assert got.kept == ["global_step_6.101-0"]
    assert got.freed_bytes == 3 * 1000 + 300  # the torn step's three shards, the leftover's file; a link frees 0
    assert sorted(p.name for p in inc.iterdir()) == ["global_step_6.101-0", "notes.txt"]
    assert (outside / "keep.pt").read_bytes() == b"k" * 50  # the link was removed, not followed
    assert find_resume_point(ckpt).step == 2  # the run's own checkpoints are untouched
    all_gone = prune_incomplete(ckpt, keep=0)
    assert all_gone.removed == ["global_step_6.101-0"] and all_gone.freed_bytes == 3000
    assert [p.name for p in inc.iterdir()] == ["notes.txt"]
    assert prune_incomplete(tmp_path / "none").removed == []


# --------------------------------------------------------------------------------------------- step time
def _log(seg_dir: Path, rows: list[dict], torn: str = "") -> None:
    with open(seg_dir / "experiment_log.jsonl", "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.write(torn)


def _row(step: int, t: float) -> dict:
    # the stand-in trainer's metrics (tests/standins/trainer.py) with EasyR1's timing_s (unflattened)
    return {"step": step, "actor": {"pg_loss": round(1.0 / step, 6), "lr": 1e-5}, "reward": {"overall": step / 100},
            "timing_s": {"step": t, "gen": t / 2}}  # fmt: skip


def test_measured_step_seconds_from_a_run_folder(tmp_path):
    run = tmp_path / "run"
    assert measured_step_seconds(run) is None
    s1 = new_segment(run, "100", 0)
    seg1 = run / "segments" / s1.name
    _log(seg1, [{"step": 0, "val": {"overall": 0.5}}, _row(1, 100.0), _row(2, 110.0), _row(3, 900.0)],
         torn='{"step": 4, "timing_s": {"st')  # fmt: skip
    # before a merge: from the segments
    assert measured_step_seconds(run) == 110.0
    s2 = new_segment(run, "101", 2)  # resumed from step 2: its step 3 replaces the first segment's
    _log(run / "segments" / s2.name, [_row(3, 120.0), _row(4, 130.0), {"step": 5, "timing_s/step": 140.0}])
    merge_run_log(run, 5)
    assert (run / "run_log.jsonl").is_file()
    assert measured_step_seconds(run) == 120.0  # median of 100, 110, 120, 130, 140


def test_save_freq_check():
    assert save_freq_check(4, 100.0, 3000) is None
    w = save_freq_check(4, 1000.0, 3000)
    assert w and "trainer.save_freq=4 x 1000 s per step = 4000 s exceeds the stop grace of 3000 s" in w
    assert w.endswith("trainer.save_freq=3 fits")
    assert save_freq_check(40, 100.0, 3000).endswith("trainer.save_freq=30 fits")
    assert "even one step" in save_freq_check(4, 5000.0, 3000)
    assert "trainer.save_freq=30 fits" in save_freq_check(-1, 100.0, 3000)
    with pytest.raises(InputError):
        save_freq_check(4, 0.0, 3000)


def test_save_freq_cli(tmp_path):
    run = tmp_path / "run"
    seg = new_segment(run, "100", 0)
    _log(run / "segments" / seg.name, [_row(s, 1000.0) for s in range(1, 4)])
    r = _cli("save-freq", "--run-dir", str(run), "--recipe", str(RECIPE))  # the recipe's save_freq: 4
    assert r.returncode == 0 and r.stderr.startswith("warning: trainer.save_freq=4 x 1000 s") and "=3 fits" in r.stderr
    ok = _cli("save-freq", "--run-dir", str(run), "--save-freq", "2")
    assert ok.returncode == 0 and ok.stdout.startswith("ok: save_freq=2") and not ok.stderr
    none = _cli("save-freq", "--run-dir", str(tmp_path / "empty"), "--save-freq", "2")
    assert none.returncode == 0 and none.stdout.startswith("no step time measured yet")


# --------------------------------------------------------------------------------------------- quota (issue 31, finding 6)
def _tool(bin_dir: Path, name: str, output: str, rc: int = 0) -> Path:
    """A program ``name`` on ``bin_dir`` that records its arguments next to itself and prints ``output``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / name
    tool.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" > "{bin_dir}/{name}.args"\ncat <<\'EOF\'\n{output}EOF\nexit {rc}\n'
    )
    tool.chmod(0o755)
    return tool


QUOTA_W = """Disk quotas for user alice (uid 1000):
     Filesystem  blocks   quota   limit   grace   files   quota   limit   grace
      /dev/vda  1048576  2097152  2621440              12       0       0
"""
"""``quota -w``: 1 GiB used of a 2 GiB soft quota (KiB blocks)."""
LFS = """Disk quotas for usr alice (uid 1000):
     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace
/lustre/scratch/very/long/mount
                3145728*      0 3145728       -    1021       0       0       -
"""
"""``lfs quota -u``: at its 3 GiB hard limit (``*``), the file-system name wrapped onto its own line."""
MMLSQUOTA = """                         Block Limits                                    |     File Limits
Filesystem type             KB      quota      limit   in_doubt    grace |    files   quota    limit in_doubt
gpfs1      USR         524288    1048576    2097152          0     none |       10       0        0        0
"""


def test_parse_quota_of_each_tool():
    assert budget.parse_quota(QUOTA_W) == (1048576, 2097152, 2621440)
    assert budget.parse_quota(LFS) == (3145728, 0, 3145728)
    assert budget.parse_quota(MMLSQUOTA) == (524288, 1048576, 2097152)
    assert budget.parse_quota("Disk quotas for user alice (uid 1000): none\n") is None
    two = QUOTA_W + "   server:/home   100   200   300   1 0 0\n"
    assert budget.parse_quota(two, "/home", "server:/home") == (100, 200, 300)  # the row of the run folder's mount
    assert budget.parse_quota(two, "/elsewhere") == (1048576, 2097152, 2621440)


def test_read_quota_through_the_tools_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    mount = budget.mount_of(tmp_path)[0]
    _tool(bin_dir, "quota", QUOTA_W)
    q = budget.read_quota(tmp_path / "run", user="alice", fstype="ext4")
    assert q.left == 1 * GIB and (bin_dir / "quota.args").read_text().split() == ["-w", "-f", str(mount)]
    assert q.note == f"quota 2.0 GiB, 1.0 GiB used, 1.0 GiB left for alice on {mount} (`quota -w -f {mount}`)"
    _tool(bin_dir, "lfs", LFS)
    q = budget.read_quota(tmp_path, user="alice", fstype="lustre")
    assert q.left == 0 and (bin_dir / "lfs.args").read_text().split() == ["quota", "-u", "alice", str(mount)]
    _tool(bin_dir, "quota", "Disk quotas for user alice (uid 1000): none\n")
    assert budget.read_quota(tmp_path, user="alice", fstype="nfs").note.startswith("no quota for alice on ")
    _tool(bin_dir, "quota", "", rc=1)
    assert budget.read_quota(tmp_path, user="alice", fstype="nfs").note.startswith("quota unknown: `quota -w -f ")
    q = budget.read_quota(tmp_path, user="alice", fstype="gpfs", which=lambda name: None)  # no mmlsquota here
    assert q.left is None and q.note.startswith("quota unknown: no mmlsquota command on this node (gpfs")


def test_check_disk_takes_the_smaller_of_free_space_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(budget.shutil, "disk_usage", lambda p: Usage(1000 * GIB, 0, 500 * GIB))
    tight = budget.Quota(50 * GIB, "quota 60.0 GiB, 10.0 GiB used, 50.0 GiB left for alice on / (`quota -w -f /`)")
    level, msg = check_disk(tmp_path, 100 * GIB, 0.1, "5 checkpoints x 20.0 GiB", quota=tight)
    assert level == "refuse" and "free 500.0 GiB on " in msg and "50.0 GiB left for alice" in msg
    assert "the quota is the limit" in msg
    assert check_disk(tmp_path, 48 * GIB, 0.1, quota=tight)[0] == "warn"
    unknown = budget.Quota(None, "quota unknown: no quota command on this node")
    level, msg = check_disk(tmp_path, 100 * GIB, 0.1, quota=unknown)
    assert level == "ok" and msg.endswith("; quota unknown: no quota command on this node")


def test_disk_cli_refuses_by_the_quota_a_quota_command_reports(tmp_path):
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "quota", QUOTA_W)  # 1 GiB left: far below one checkpoint of the recipe (19 GiB)
    _tool(bin_dir, "lfs", LFS)  # used instead where the run folder is on Lustre: at its limit
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "USER": "alice"}
    r = subprocess.run([sys.executable, "-m", "launch.budget", "disk", "--recipe", str(RECIPE), "--run-dir",
                        str(tmp_path / "run")], capture_output=True, text=True, cwd=REPO, env=env)  # fmt: skip
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stderr.startswith("error: not enough disk: need ") and r.stderr.count("\n") == 1
    assert "GiB left for alice on " in r.stderr and "the quota is the limit" in r.stderr


# --------------------------------------------------------------------------------------------- save_freq (finding 5)
def test_plan_save_freq_lowers_keeps_or_refuses():
    got = budget.plan_save_freq(4, 1400.0, "estimated", 3000, user_set=False)
    assert got.override == "trainer.save_freq=2" and not got.warning
    assert "trainer.save_freq=4 x 1400 s = 5600 s is past the 3000 s stop grace" in got.note
    assert "the job passes trainer.save_freq=2 (2800 s between checkpoints)" in got.note
    fits = budget.plan_save_freq(4, 700.0, "measured", 3000, user_set=False)
    assert fits.override == "" and "= 2800 s fits the 3000 s stop grace" in fits.note
    mine = budget.plan_save_freq(4, 1400.0, "estimated", 3000, user_set=True)
    assert mine.override == "" and mine.warning and "your trainer.save_freq=4 is kept" in mine.note
    assert "trainer.save_freq=2 fits" in mine.note
    assert budget.plan_save_freq(-1, 1000.0, "measured", 3000, False).override == "trainer.save_freq=3"
    assert budget.plan_save_freq(4, None, "no step measured yet", 3000, False).override == ""
    with pytest.raises(InputError, match="one training step .* is longer than the stop grace of 3000 s"):
        budget.plan_save_freq(1, 3500.0, "measured", 3000, user_set=False)
    assert budget.plan_save_freq(1, 3500.0, "measured", 3000, user_set=True).warning


def test_step_seconds_measured_else_the_models_estimate(tmp_path):
    run = tmp_path / "run"
    t, source = budget.step_seconds(run, "Qwen/Qwen3-VL-8B-Instruct")
    assert t == budget.STEP_SECONDS_ESTIMATES["qwen3-vl-8b-instruct"] == 1400.0 and source.startswith("estimated")
    assert budget.step_seconds(run, "standin/policy") == (None, "no step measured yet and no estimate for "
                                                                "standin/policy")  # fmt: skip
    seg = new_segment(run, "100", 0)
    _log(run / "segments" / seg.name, [_row(s, 600.0) for s in range(1, 4)])
    t, source = budget.step_seconds(run, "Qwen/Qwen3-VL-8B-Instruct")
    assert t == 600.0 and source.startswith("measured")


# --------------------------------------------------------------------------------------------- host memory (finding 2)
def test_plan_val_batch_bounds_the_whole_set_to_the_rollout_batch():
    over, note = budget.plan_val_batch(-1, 32, user_set=False)
    assert over == "data.val_batch_size=32" and "data.val_batch_size=-1 (the whole validation set" in note
    assert budget.plan_val_batch(64, 32, False)[0] == "data.val_batch_size=32"
    assert budget.plan_val_batch(32, 32, False) == ("", "")
    over, note = budget.plan_val_batch(-1, 32, user_set=True)
    assert over == "" and "is yours: kept" in note
    with pytest.raises(InputError, match="data.val_batch_size='all'"):
        budget.plan_val_batch("all", 32, False)


def test_host_memory_against_the_jobs_memory():
    est = plan_from_recipe(RECIPE, ["data.val_batch_size=32"]).estimate  # peak 143.2 GiB, --mem=165G
    assert budget.job_memory_mib({"SLURM_MEM_PER_NODE": "144384"}) == 141 * 1024
    assert budget.job_memory_mib({"SLURM_MEM_PER_NODE": "0"}) is None and budget.job_memory_mib({}) is None
    level, msg = budget.check_host_memory(est, 141 * 1024)  # the header's old --mem=141G
    assert level == "refuse" and "143.2 GiB at peak" in msg and "past the job's 141 GiB" in msg
    assert "sbatch --mem=165G" in msg
    assert budget.check_host_memory(est, 150 * 1024)[0] == "warn"  # the peak fits, the margin does not
    assert budget.check_host_memory(est, 165 * 1024)[0] == "ok"
    level, msg = budget.check_host_memory(est, None)
    assert level == "ok" and "not known here" in msg
