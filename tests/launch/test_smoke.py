"""``bash launch/grpo_8b.sh --smoke``: the first GPU day's two steps (launch/smoke.py), its dry run, a local run with
the stand-ins, and the summary table on fixture files."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from launch import smoke
from launch.smoke import HOST, RESERVED, SERVING, STEP, TRAINER, measured, summary_table
from tests.launch.test_launch_dryrun import GRPO, REPO, base_env, dry_run, standin_env, step, steps

PY = sys.executable


def smoke_steps(tmp: Path, args: tuple[str, ...] = (), **env: str) -> list[dict]:
    return steps(tmp, args=("--smoke", *args), **env)


def test_smoke_dry_run_trains_two_steps_in_its_own_folder_then_infers_with_the_step_2_adapter(tmp_path):
    run = tmp_path / "run"
    own = run / "smoke" / "JOBID"
    st = smoke_steps(tmp_path, args=("worker.rollout.n=4",))
    names = [s["name"] for s in st]
    # the sampler for the whole job, the job's own steps, then inference and the summary; no next job
    assert names == ["sstat", "prepare", "disk", "judge", "health-judge", "embed", "health-embed", "check",
                     "trainer", "finish", "samples-page", "infer", "smoke-summary"]  # fmt: skip
    trainer = step(st, "trainer")
    over = trainer["argv"][3:]
    assert "trainer.max_steps=2" in over and "trainer.save_freq=1" in over and "trainer.val_freq=1" in over
    assert over.index("worker.rollout.n=4") < over.index("trainer.save_freq=1")  # the user's, then the smoke's
    assert f"trainer.save_checkpoint_path={own}/checkpoints" in over
    assert trainer["env"]["QUOTECITE_CKPT_DIR"] == f"{own}/checkpoints"
    sampler = step(st, "sstat")["argv"]
    assert sampler[1:4] == ["-m", "launch.smoke", "sample"]
    assert sampler[sampler.index("--job") + 1] == "JOBID" and sampler[sampler.index("--every") + 1] == "30"
    assert sampler[sampler.index("--out") + 1] == f"{own}/smoke_memory.json"
    infer = step(st, "infer")
    a = infer["argv"]
    assert a[a.index("-m") + 1 : a.index("-m") + 3] == ["eval", "infer"]
    assert a[a.index("--lora") + 1] == f"{own}/checkpoints/global_step_2/actor/lora_adapter"
    assert a[a.index("--limit") + 1] == "2" and a[a.index("--model") + 1] == "Qwen/Qwen3-VL-8B-Instruct"
    assert infer["gpus"] == "0"  # the first trainer GPU, free once the job has ended
    assert "smoke_summary.txt" in step(st, "smoke-summary")["text"]
    assert not run.exists()  # a dry run creates nothing


def test_smoke_dry_run_prints_what_it_changes(tmp_path):
    r = subprocess.run(["bash", GRPO, "--smoke", "--dry-run"], env=base_env(tmp_path), capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    own = tmp_path / "run" / "smoke" / "JOBID"
    assert f"# run folder      {own}" in r.stdout and "# max_steps       2 (QUOTECITE_MAX_STEPS)" in r.stdout
    assert f"# smoke run: 2 steps in {own}" in r.stdout and "trainer.save_freq=1 trainer.val_freq=1" in r.stdout
    assert "sbatch" not in r.stdout


def test_smoke_dry_run_names_the_budgets_it_will_compare_with(tmp_path):
    # the same numbers as python -m launch.budget memory / gpu for the recipe with the smoke's overrides on 2 GPUs
    from launch import budget, budget_gpu

    out = dry_run(tmp_path, args=("--smoke",), SLURM_GPUS_PER_NODE="h200:3")
    recipe = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
    over = ["trainer.max_steps=2", "trainer.save_freq=1", "trainer.val_freq=1", "data.val_batch_size=32"]
    mem = budget.plan_from_recipe(recipe, over, n_gpus_per_node=2).estimate.sbatch_mem
    b = budget_gpu.budget_from_recipe(recipe, over, budget_gpu.find_gpu("h200"), 2)
    worst = max((p for p in b.phases if p.gpu == "trainer"), key=lambda p: p.need_gib)
    line = next(x for x in out.splitlines() if x.startswith("# smoke: estimates to compare with:"))
    assert f"(--mem={mem})" in line and f"trainer GPU {worst.need_gib:.1f} GiB ({worst.phase}, H200" in line, line
    assert mem in (REPO / "launch" / "grpo_8b.sh").read_text()  # the job's own --mem


def test_smoke_refuses_a_user_override_of_what_it_sets(tmp_path):
    r = subprocess.run(["bash", GRPO, "--smoke", "--dry-run", "trainer.save_freq=4"], env=base_env(tmp_path),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("error: EasyR1 override trainer.save_freq=4: --smoke sets trainer.save_freq=1 itself "
                                "(a checkpoint and a validation at each of its two steps); leave it out")  # fmt: skip


def test_smoke_without_the_gold_file_stops_before_anything_starts(tmp_path):
    env = standin_env(tmp_path, max_steps=2)
    r = subprocess.run(["bash", GRPO, "--smoke"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error: --smoke: QUOTECITE_EVAL_GOLD must name the gold JSONL" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_local_smoke_run_trains_two_steps_infers_with_the_saved_adapter_and_prints_the_table(tmp_path):
    # The stand-in trainer (EasyR1's checkpoint layout and file logger) and servers; the inference program records
    # its command line. No Slurm here: the sampler says so and the run goes on.
    gold, cache, seen = tmp_path / "gold.jsonl", tmp_path / "cache", tmp_path / "infer_argv.json"
    gold.write_text("")
    cache.mkdir()
    record = f"import json,sys; open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))"
    env = standin_env(tmp_path, max_steps=40, save_freq=8, QUOTECITE_EVAL_GOLD=str(gold),
                      QUOTECITE_EVAL_CACHE_DIR=str(cache), QUOTECITE_INFER_CMD=f"{PY} -c {json.dumps(record)}")  # fmt: skip
    env.pop("SLURM_JOB_ID", None)
    r = subprocess.run(["bash", GRPO, "--smoke"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    (own,) = (tmp_path / "run" / "smoke").iterdir()
    assert own.name.startswith("local-")
    tracker = json.loads((own / "checkpoints" / "checkpoint_tracker.json").read_text())
    assert tracker["last_global_step"] == 2
    # save_freq=1: both steps saved (the recipe's 8 is overridden); the real run folder holds no checkpoint
    assert sorted(p.name for p in (own / "checkpoints").glob("global_step_*")) == ["global_step_1", "global_step_2"]
    assert not (tmp_path / "run" / "checkpoints").exists()
    argv = json.loads(seen.read_text())
    adapter = own / "checkpoints" / "global_step_2" / "actor" / "lora_adapter"
    assert argv[argv.index("--lora") + 1] == str(adapter) and (adapter / "adapter_config.json").is_file()
    assert argv[argv.index("--limit") + 1] == "2" and argv[argv.index("--gold") + 1] == str(gold)
    samples = json.loads((own / "smoke_memory.json").read_text())
    assert any("not a Slurm job" in n or "no sstat" in n for n in samples["notes"]) and samples["samples"]
    table = (own / "smoke_summary.txt").read_text()
    assert table in r.stderr
    assert "step time" in table and "0.5 s (steps: 0.5, 0.5)" in table  # two stand-in steps of 0.5 s
    assert "sbatch" not in r.stderr


# --------------------------------------------------------------------------------------------- the summary
def write_fixtures(run: Path) -> None:
    seg = run / "segments" / "123-1"
    seg.mkdir(parents=True)
    rows = [  # EasyR1's file logger: {"step": N, **unflatten_dict(metrics)}; step 2 logged twice (a rerun), one torn
        {"step": 1, "timing_s": {"step": 912.4, "gen": 400.0}, "perf": {"max_memory_reserved_gb": 61.25}},
        {"step": 2, "timing_s": {"step": 2000.0}, "perf": {"max_memory_reserved_gb": 60.0}},
        {"step": 2, "timing_s": {"step": 1388.6}, "perf": {"max_memory_reserved_gb": 63.5}},
    ]
    (seg / "experiment_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "tim')
    (run / "smoke_memory.json").write_text(json.dumps({"job": "123", "every_s": 30, "notes": [], "samples": [
        {"elapsed_s": 0, "max_rss_kib": {"123.batch": 50 * 2**20, "123.extern": 1024},
         "gpus": [{"index": 0, "memory_used_mib": 70 * 1024}, {"index": 2, "memory_used_mib": 100 * 1024}]},
        {"elapsed_s": 30, "max_rss_kib": {"123.batch": 98 * 2**20},
         "gpus": [{"index": 0, "memory_used_mib": 90 * 1024}, {"index": 1, "memory_used_mib": 95 * 1024},
                  {"index": 2, "memory_used_mib": 101 * 1024}]},
    ]}))  # fmt: skip


def test_the_summary_reads_easyr1s_log_and_the_sstat_samples(tmp_path):
    write_fixtures(tmp_path)
    got, notes = measured(tmp_path, [0, 1])
    assert got[STEP] == "1150 s (steps: 912, 1389)"  # the median; the rerun step's last record, the torn line left out
    assert got[RESERVED] == "63.5 GiB"  # the largest perf/max_memory_reserved_gb of any step
    assert got[HOST] == "98.0 GiB (123.batch 98.0; 123.extern 0.0)"  # each step's largest MaxRSS, KiB -> GiB, summed
    assert (got[TRAINER], got[SERVING]) == ("95.0 GiB", "101.0 GiB")  # GPUs 0 and 1 train, 2 serves
    assert any("1 torn line" in n for n in notes)
    assert measured(tmp_path, [])[0][TRAINER] == "101.0 GiB"  # the trainer's GPUs unknown: every GPU counts


def test_the_summary_table_puts_each_measurement_next_to_its_estimate(tmp_path):
    write_fixtures(tmp_path)
    est = {HOST: "122.6 GiB (--mem=141G)", TRAINER: "96.0 GiB (rollout, H200 140 GiB)", RESERVED: "75.5 GiB (update)"}
    got, _ = measured(tmp_path, [0, 1])
    lines = summary_table(got, est, ["a note"]).splitlines()
    assert lines[0].startswith("smoke run ") and lines[0].endswith("estimate (python -m launch.budget memory, gpu)")
    rows = {line.split("  ")[0]: line.split("  ")[1:] for line in lines[2:-1]}
    assert [c.strip() for c in rows[TRAINER] if c] == ["95.0 GiB", "96.0 GiB (rollout, H200 140 GiB)"]
    assert [c.strip() for c in rows[SERVING] if c] == ["101.0 GiB", "-"]  # no estimate: "-"
    assert len({line.index("GiB") for line in lines[3:6]}) == 1  # the measured column aligned
    assert lines[-1] == "note: a note"


def test_the_summary_says_what_it_could_not_measure(tmp_path):
    got, notes = measured(tmp_path, [])
    table = summary_table(got, {}, [*notes, "launch.budget gpu: no GPU kind known"])
    assert "- (no timing_s/step logged)" in table
    assert f"note: no memory samples ({tmp_path}/smoke_memory.json does not exist)" in table
    assert "note: launch.budget gpu: no GPU kind known" in table


def test_the_estimates_are_launch_budgets_for_the_smoke_jobs_recipe_and_layout(tmp_path):
    from launch import budget, budget_gpu, settings
    from launch.executor import PrintingExecutor
    from launch.job import Job

    env = base_env(tmp_path, SLURM_GPUS_PER_NODE="h200:3")
    env.update(smoke.environment(env, tmp_path / "run", "JOBID"))
    job = Job(settings.resolve(env, REPO), smoke.overrides([]), PrintingExecutor(out=io.StringIO()), env)
    cells, notes = smoke.estimates(job)
    recipe = REPO / "recipes" / "qwen3vl_8b_grpo.yaml"
    over = ["trainer.max_steps=2", "trainer.save_freq=1", "trainer.val_freq=1", "data.val_batch_size=32"]
    mem = budget.plan_from_recipe(recipe, over, n_gpus_per_node=2).estimate
    h200 = budget_gpu.find_gpu("h200")
    b = budget_gpu.budget_from_recipe(recipe, over, h200, 2, budget_gpu.ServerPlan())
    need = {(p.gpu, p.phase): p.need_gib for p in b.phases}
    worst = max((g, ph) for (on, ph), g in need.items() if on == "trainer")
    assert cells == {
        HOST: f"{mem.peak_gib:.1f} GiB (--mem={mem.sbatch_mem})",
        TRAINER: f"{worst[0]:.1f} GiB ({worst[1]}, H200 {h200.gib:.0f} GiB)",
        RESERVED: f"{need['trainer', 'update']:.1f} GiB (update)",
        SERVING: f"{need['server 1', 'serving']:.1f} GiB",
    }
    assert notes == []


# --------------------------------------------------------------------------------------------- the sampler
def fake_tools(tmp: Path, sstat: str, smi: str) -> dict[str, str]:
    """``sstat`` and ``nvidia-smi`` wrappers on PATH printing what the real ones print for these options (Slurm
    22.05's ``--parsable2 --noheader``, ``nvidia-smi --format=csv,noheader,nounits``): the local Slurm gathers no
    accounting (``JobAcctGatherType=jobacct_gather/none``) and this machine has no GPU."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, body in (("sstat", sstat), ("nvidia-smi", smi)):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "$@" >> {tmp}/{name}.args\n{body}\n')
        (bin_dir / name).chmod(0o755)
    env = base_env(tmp)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return env


def test_the_sampler_records_each_steps_maxrss_and_each_gpus_memory(tmp_path):
    env = fake_tools(tmp_path, "printf '77.extern|1024K\\n77.batch|52428800K\\n77.0|1.5G\\n'",
                     "printf '0, 81559, 143771\\n1, 1024, 143771\\n'")  # fmt: skip
    out = tmp_path / "smoke_memory.json"
    r = subprocess.run([PY, "-m", "launch.smoke", "sample", "--job", "77", "--out", str(out), "--every", "0.05",
                        "--count", "2"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert d["notes"] == [] and len(d["samples"]) == 2
    assert d["samples"][0]["max_rss_kib"] == {"77.extern": 1024.0, "77.batch": 52428800.0, "77.0": 1.5 * 2**20}
    assert d["samples"][0]["gpus"][0] == {"index": 0, "memory_used_mib": 81559.0, "memory_total_mib": 143771.0}
    args = (tmp_path / "sstat.args").read_text().splitlines()[0].split()
    assert args[-2:] == ["-j", "77"] and "--allsteps" in args and "--format=JobID,MaxRSS" in args
    got = measured(tmp_path, [0])[0]  # the summary reads the sampler's file
    assert got[HOST] == "51.5 GiB (77.0 1.5; 77.batch 50.0; 77.extern 0.0)" and got[TRAINER] == "79.6 GiB"


def test_the_sampler_keeps_going_when_sstat_fails_and_says_so(tmp_path):
    env = fake_tools(tmp_path, "echo 'sstat: error: no steps running for job 78' >&2; exit 1", "exit 9")
    out = tmp_path / "mem.json"
    r = subprocess.run([PY, "-m", "launch.smoke", "sample", "--job", "78", "--out", str(out), "--every", "0.05",
                        "--count", "1"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (smp,) = json.loads(out.read_text())["samples"]
    assert smp["max_rss_kib"] == {} and smp["note"] == "sstat exit 1: sstat: error: no steps running for job 78"
    assert smp["gpus"] == []
