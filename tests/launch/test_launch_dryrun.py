"""launch/grpo_8b.sh and launch/eval_8b.sh without Slurm: `--dry-run` output, and the job logic run directly with
the stand-in programs (signals delivered to the script as Slurm would deliver them)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.preflight import node_addresses

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
GRPO = str(REPO / "launch" / "grpo_8b.sh")
EVAL = str(REPO / "launch" / "eval_8b.sh")
STANDIN_RECIPE = """\
worker: {actor: {model: {model_path: standin/policy, lora: {rank: 8}}}}
trainer: {max_steps: null, logger: [console], n_gpus_per_node: 2, save_freq: %d, save_limit: -1,
          val_before_train: false, load_checkpoint_path: null}
"""


def base_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "QUOTECITE_", "CUDA_VISIBLE"))}
    env.update(
        QUOTECITE_ENV_SETUP="0",
        QUOTECITE_PYTHON=PY,
        QUOTECITE_RUN_DIR=str(tmp / "run"),
        QUOTECITE_JUDGE_PORT="0",  # any free port: tests may run next to a real server on 8000
        QUOTECITE_EMBED_PORT="0",
    )
    env.update(extra)
    return env


def dry_run(tmp: Path, script: str = GRPO, args: tuple[str, ...] = (), **env: str) -> str:
    r = subprocess.run(
        ["bash", script, "--dry-run", *args], env=base_env(tmp, **env), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def plus_lines(out: str) -> list[list[str]]:
    """The printed commands ("+ ..." lines), split like the shell would."""
    cmds = []
    for line in out.splitlines():
        if line.startswith("+ "):
            cmd = line[2:].split(" > ")[0].split("   #")[0]
            cmds.append(shlex.split(cmd))
    return cmds


PINNED = [
    f"data.format_prompt={REPO}/recipes/prompts/language_interface.jinja",
    f"worker.reward.reward_function={REPO}/reward/quote_reward.py:compute_score",
    "worker.reward.reward_function_kwargs.batch_groups=32",
    "worker.reward.reward_function_kwargs.keep_band=[0.01,0.99]",
]
"""What the launch appends after every other override: the recipe's relative paths made absolute (EasyR1 would
silently drop a format prompt it cannot find from its working directory) and the reward's batch shape."""


# --------------------------------------------------------------------------------------------- dry run
def steps(tmp: Path, args: tuple[str, ...] = (), **env: str) -> list[dict]:
    """The dry run's steps (``--steps-json``): the job's own code path with the printing executor."""
    r = subprocess.run(["bash", GRPO, "--dry-run", "--steps-json", *args], env=base_env(tmp, **env),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def step(all_steps: list[dict], name: str) -> dict:
    (one,) = [s for s in all_steps if s["name"] == name]
    return one


def program(s: dict) -> list[str]:
    """The program a step runs, inside ``srun ...`` and ``launch/layout.py run ... --``."""
    argv = s["argv"]
    if "launch/layout.py" in " ".join(argv[:12]):
        return argv[argv.index("--") + 1 :]
    return argv


def wrapper_flag(s: dict, flag: str) -> str:
    argv = s["argv"][: s["argv"].index("--")]
    return argv[argv.index(flag) + 1]


def test_dry_run_shows_the_gpu_split_trainer_on_0_1_servers_on_2(tmp_path):
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="144")
    assert "# GPU split       trainer CUDA_VISIBLE_DEVICES=0,1 (trainer.n_gpus_per_node=2); judge + embedder " \
           "CUDA_VISIBLE_DEVICES=2" in out  # fmt: skip
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="144")
    judge, embed, trainer = step(st, "judge"), step(st, "embed"), step(st, "trainer")
    # servers through launch/layout.py run on GPU position 2 (mapped through CUDA_VISIBLE_DEVICES there)
    assert [wrapper_flag(judge, "--gpus"), wrapper_flag(embed, "--gpus")] == ["2", "2"]
    assert program(judge)[:2] == ["vllm", "serve"] and program(embed)[:2] == ["vllm", "serve"]
    assert trainer["gpus"] == "0,1"
    j, e = program(judge), program(embed)
    assert j[j.index("--gpu-memory-utilization") + 1] == "0.55"
    assert e[e.index("--gpu-memory-utilization") + 1] == "0.25"
    assert e[e.index("--runner") + 1] == "pooling"
    # the port is chosen where and when the server binds: {port} in the command, the wrapper writes it to a file
    assert j[j.index("--port") + 1] == "{port}" and wrapper_flag(judge, "--port-file").endswith("/judge.port")
    names = [s["name"] for s in st]
    assert names == ["prepare", "disk", "judge", "health-judge", "embed", "health-embed", "check", "trainer", "finish",
                     "samples-page", "requeue"]  # fmt: skip


def test_dry_run_trainer_command_resumes_in_the_run_folder_and_reaches_the_servers(tmp_path):
    run = tmp_path / "run"
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="144", QUOTECITE_TRAIN_FILES="/d/train.parquet")
    trainer = step(st, "trainer")
    argv, env = trainer["argv"], trainer["env"]
    assert argv[:3] == ["python3", "-m", "reward.train"]  # EasyR1's verl.trainer.main with the samples' wandb hook
    assert argv[3:] == [
        f"config={REPO}/recipes/qwen3vl_8b_grpo.yaml",
        "trainer.nnodes=1",
        "trainer.n_gpus_per_node=2",
        f"trainer.save_checkpoint_path={run}/checkpoints",
        "trainer.find_last_checkpoint=true",
        "trainer.max_steps=144",
        "data.train_files=/d/train.parquet",
        "trainer.save_freq=2",  # the stop grace (launch.budget.plan_save_freq; tests/launch/test_preflight.py)
        "data.val_batch_size=32",  # validation's host memory (launch.budget.plan_val_batch)
        *PINNED,
    ]
    assert all(Path(o.split("=", 1)[1].split(":")[0]).is_file() for o in PINNED[:2])
    assert env["QUOTECITE_JUDGE_URL"] == "http://127.0.0.1:{port}/v1" == env["QUOTECITE_EMBED_URL"]
    assert (env["QUOTECITE_JUDGE_MODEL"], env["QUOTECITE_EMBED_MODEL"]) == (
        "Qwen/Qwen3.5-9B",
        "Qwen/Qwen3-VL-Embedding-2B",
    )
    assert env["QUOTECITE_CKPT_DIR"] == f"{run}/checkpoints"
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)
    # one trainer node: EasyR1's ray.init() starts a Ray of its own, in this job's own temp dir
    assert env["RAY_ADDRESS"] == "local" and env["RAY_TMPDIR"] == "/tmp/qcray-JOBID"
    # the chain goes on in this same job: its last step requeues it (same id, options and arguments)
    assert st[-1]["name"] == "requeue" and st[-1]["argv"] == ["scontrol", "requeue", "JOBID"]
    assert not run.exists()  # a dry run creates nothing


def test_dry_run_maps_the_split_onto_the_gpus_slurm_assigned(tmp_path):
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="8", CUDA_VISIBLE_DEVICES="4,5,6")
    assert (
        "trainer CUDA_VISIBLE_DEVICES=4,5 (trainer.n_gpus_per_node=2); judge + embedder CUDA_VISIBLE_DEVICES=6" in out
    )


def test_too_few_gpus_is_an_error_that_says_how_many_are_needed(tmp_path):
    r = subprocess.run(["bash", GRPO, "--dry-run"], env=base_env(tmp_path, QUOTECITE_MAX_STEPS="8",
                       CUDA_VISIBLE_DEVICES="0,1"), capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1
    assert "this job sees 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1), needs 3: 2 for the trainer, 1 for the judge" in r.stderr
    assert "Traceback" not in r.stderr


def test_dry_run_passes_extra_arguments_to_the_trainer_and_requeues_itself(tmp_path):
    st = steps(tmp_path, args=("worker.rollout.n=8",), QUOTECITE_MAX_STEPS="8")
    assert step(st, "trainer")["argv"][-5:] == ["worker.rollout.n=8", *PINNED]
    # Slurm reruns the same script with the same arguments: nothing to repeat
    assert step(st, "requeue")["argv"] == ["scontrol", "requeue", "JOBID"]
    out = dry_run(tmp_path, args=("worker.rollout.n=8",), QUOTECITE_MAX_STEPS="8")
    assert "# if the run is not complete and the job made progress: requeue this same job" in out
    assert "+ scontrol requeue JOBID" in out and "chain: scontrol requeue of this job" in out
    assert "\n# on SIGTERM      stop everything (by process group) and record the segment;" in out


HINT = """
import sys
from launch import job
job.Job.run = lambda self: print(self.resubmit_hint()) or 0
sys.exit(job.main(sys.argv[1:]))
"""


def test_the_command_that_resumes_by_hand_keeps_the_jobs_config_and_set_options(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("run:\n  max_steps: 40\n")
    args = ["--dry-run", "--config", str(cfg), "--set", "run.trainer_stop=signal", "worker.rollout.n=4"]
    r = subprocess.run([PY, "-c", HINT, *args], env=base_env(tmp_path), capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr
    hint = r.stdout.strip().splitlines()[-1]
    tail = f"launch/grpo_8b.sh --config {cfg} --set=run.trainer_stop=signal worker.rollout.n=4"
    assert hint.endswith(f"sbatch [your sbatch options] {tail}"), hint


@pytest.mark.parametrize(
    ("arg", "phrase"),
    [
        ("config=/tmp/other.yaml", "use QUOTECITE_RECIPE"),
        ("trainer.save_checkpoint_path=/tmp/ck", "use QUOTECITE_RUN_DIR"),
        ("trainer.nnodes=4", "the allocation"),
        ("trainer.n_gpus_per_node=8", "QUOTECITE_TRAIN_GPUS_PER_NODE"),
        ("trainer.find_last_checkpoint=false", "always resumes"),
        ("trainer.max_steps=5", "use QUOTECITE_MAX_STEPS"),
        ("data.train_files=/x.parquet", "use QUOTECITE_TRAIN_FILES"),
        ("trainer.max_steps", "expected key=value"),
        ("=5", "expected key=value"),
        ("worker..rollout.n=5", "expected key=value"),
        ("worker.rollout.n=5 worker.rollout.n=6", "given twice"),
    ],
)
def test_an_override_of_what_the_launch_sets_or_a_malformed_one_is_refused_before_anything_runs(tmp_path, arg, phrase):
    r = subprocess.run(["bash", GRPO, "--dry-run", *arg.split(" ")], env=base_env(tmp_path, QUOTECITE_MAX_STEPS="8"),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 1 and r.stdout == "", r.stdout
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and phrase in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_every_printed_command_is_the_step_it_runs_whatever_the_paths_hold(tmp_path):
    # A run folder with a blank, quotes and $(...): each printed '+' line, split as the shell splits it, is exactly
    # the step's words (GPU variable, env assignments, argv, log), and printing ran nothing.
    odd = tmp_path / "my run $(touch pwned) 'q' \"d\""
    env = {"QUOTECITE_MAX_STEPS": "8", "QUOTECITE_RUN_DIR": str(odd)}
    text = dry_run(tmp_path, **env)
    records = steps(tmp_path, **env)
    printed = [shlex.split(line[2:]) for line in text.splitlines() if line.startswith("+ ") and "   # " in line
               or line.startswith("+ ") and " 2>&1" in line]  # fmt: skip
    runs = [r for r in records if r["kind"] in ("start", "run") and r.get("log")]
    assert len(printed) == len(runs) > 3
    for words, r in zip(printed, runs, strict=True):
        if "&" in words:
            words = words[: words.index("&")]
        if "gpus" in r:
            assert words.pop(0) == f"CUDA_VISIBLE_DEVICES={r['gpus']}"
        if r.get("env"):  # the JSON record's keys are sorted; the printed line keeps the step's order
            assert words.pop(0) == "env"
            assigned = [words.pop(0) for _ in r["env"]]
            assert sorted(assigned) == sorted(f"{k}={v}" for k, v in r["env"].items())
        assert words == [*r["argv"], ">", r["log"], "2>&1"]
    assert str(odd) in text and not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_eval_dry_run_infers_base_and_adapter_on_gpus_0_and_1_then_resolves_and_scores(tmp_path):
    out = dry_run(tmp_path, script=EVAL, QUOTECITE_EVAL_STEP="144", QUOTECITE_EVAL_GOLD="/g.jsonl",
                  QUOTECITE_EVAL_CACHE_DIR="/cache")  # fmt: skip
    cmds = plus_lines(out)
    adapter = f"{tmp_path}/run/checkpoints/global_step_144/actor/lora_adapter"
    infer = [c for c in cmds if "infer" in c]
    assert [c[0] for c in infer] == ["CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"]
    assert "--lora" not in infer[0] and infer[1][infer[1].index("--lora") + 1] == adapter
    assert all(c[c.index("--model") + 1] == "Qwen/Qwen3-VL-8B-Instruct" for c in infer)
    servers = [c for c in cmds if "serve" in c]
    assert [c[0] for c in servers] == ["CUDA_VISIBLE_DEVICES=2"] * 2
    steps = [c[c.index("eval") + 1] for c in cmds if "eval" in c and "-m" in c]
    assert steps == ["infer", "infer", "resolve", "score", "resolve", "score"]
    score = [c for c in cmds if "score" in c]
    assert [c[c.index("--label") + 1] for c in score] == ["base", "grpo-step144"]
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------- local runs
def standin_env(tmp: Path, max_steps: int, save_freq: int = 1, **extra: str) -> dict[str, str]:
    recipe = tmp / "recipe.yaml"
    recipe.write_text(STANDIN_RECIPE % save_freq)
    settings = {
        "QUOTECITE_RECIPE": str(recipe),
        "QUOTECITE_MAX_STEPS": str(max_steps),
        "QUOTECITE_TRAINER_CMD": f"{PY} -m tests.standins.trainer",
        "QUOTECITE_JUDGE_CMD": f"{PY} -m tests.standins.vllm_serve serve",
        "QUOTECITE_EMBED_CMD": f"{PY} -m tests.standins.vllm_serve serve",
        "QUOTECITE_STANDIN_STEP_SECONDS": "0.5",
        "QUOTECITE_POLL_SECONDS": "0.2",
        "QUOTECITE_HEALTH_POLL": "0.1",
        "QUOTECITE_HEALTH_TIMEOUT": "20",
        "QUOTECITE_STOP_GRACE": "20",
    }
    return base_env(tmp, **{**settings, **extra})


def tracker_step(run: Path) -> int:
    p = run / "checkpoints" / "checkpoint_tracker.json"
    try:
        return json.loads(p.read_text())["last_global_step"]
    except (OSError, ValueError):
        return 0


def segment(run: Path) -> dict:
    (s,) = [json.loads(p.read_text()) for p in (run / "segments").glob("*/segment.json")]
    return s


@pytest.mark.parametrize("mode", ["checkpoint", "signal"])
def test_usr1_stops_the_trainer_at_a_checkpoint_and_keeps_every_step(tmp_path, mode):
    # checkpoint: EasyR1 has no handler, so the script waits for the next checkpoint and stops it; signal: the
    # trainer saves on SIGUSR1 itself. Saves every 2 steps, so in checkpoint mode the stop waits for one.
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=40, save_freq=2, QUOTECITE_TRAINER_STOP=mode)
    p = subprocess.Popen(["bash", GRPO], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while tracker_step(run) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    p.send_signal(signal.SIGUSR1)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    s = segment(run)
    assert s["status"] == "stopped" and 2 < s["end_step"] < 40, out
    assert (s["trainer_exit"] == 0) == (mode == "signal")  # signal mode exits by itself; else it is stopped
    log = [json.loads(x) for x in (run / "run_log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in log]
    # every step once up to the checkpoint; on a loaded machine the trainer may log one more step before it is
    # stopped (the next job supersedes it when it resumes from end_step)
    assert steps == list(range(1, len(steps) + 1)) and s["end_step"] <= steps[-1] <= s["end_step"] + 1
    assert "not under Slurm: run this script again to resume" in out


def test_second_local_run_resumes_and_a_finished_run_does_nothing(tmp_path):
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=2)
    for _ in range(2):
        r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    assert "run complete: checkpoint global_step_2 reaches max_steps=2; nothing to do" in r.stderr
    assert len(list((run / "segments").iterdir())) == 1
    man = json.loads((run / "manifest.json").read_text())
    assert [j.get("status") for j in man["jobs"]] == ["finished", "done"]


def test_a_cluster_proxy_in_the_environment_does_not_stand_between_the_job_and_its_servers(tmp_path):
    # httpx sends every request to HTTP(S)_PROXY unless NO_PROXY lists the host; a proxy that answers nothing (a
    # closed loopback port held by this test) would make every health wait time out. The job lists loopback and its
    # nodes in NO_PROXY for itself and every process it starts, so the run trains to the end.
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: a proxy that refuses every connection
        proxy = f"http://127.0.0.1:{held.getsockname()[1]}"
        env = standin_env(tmp_path, max_steps=1, HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy,
                          https_proxy=proxy, ALL_PROXY=proxy, NO_PROXY="", no_proxy="")  # fmt: skip
        r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert tracker_step(tmp_path / "run") == 1


def test_an_attempt_that_keeps_no_group_stops_the_run_with_one_line_and_no_requeue(tmp_path):
    # EasyR1 raises "No sample is kept after filtering" at the first attempt of its online filter that keeps no
    # group; a requeue would resume at the same checkpoint and meet the same batch. The reward writes why (its
    # no_group_kept.json) and the job ends the run there, saying so, instead of submitting the next job.
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=4, QUOTECITE_STANDIN_NO_GROUP_AT="3")
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "training stopped at step 3: attempt" in r.stderr and "2 with equal rewards" in r.stderr
    assert "the run continues" not in r.stderr and "by requeueing job" not in r.stderr
    (seg,) = [json.loads(p.read_text()) for p in (run / "segments").glob("*/segment.json")]
    assert seg["status"] == "no_group_kept" and seg["end_step"] == 2  # the checkpoint before is intact
    assert tracker_step(run) == 2


def test_a_judge_that_exits_at_start_is_named_with_its_log(tmp_path):
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=2, QUOTECITE_JUDGE_CMD=f"{PY} -c exit(3)")
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    seg = segment(run)
    log = run / "segments" / seg["name"] / "judge.log"
    port = (run / "segments" / seg["name"] / "judge.port").read_text().strip()
    assert f"error: judge server (Qwen/Qwen3.5-9B on GPU 2) exited (code 3) before answering http://127.0.0.1:{port}/health; " \
           f"see its log: {log}. The chain stops here (no job submitted)." in r.stderr  # fmt: skip
    assert seg["status"] == "server_failed"


def test_local_run_starts_both_servers_with_vllm_flags_and_memory_shares_that_fit_one_gpu(tmp_path):
    # The stand-in parses the servers' command lines like vLLM 0.32.0 (unknown flags fail), so this checks the
    # flags the launch really passes: vLLM sizes each instance as its share of the whole GPU, so the two shares
    # must leave room for both on GPU 2.
    run = tmp_path / "run"
    r = subprocess.run(
        ["bash", GRPO], env=standin_env(tmp_path, max_steps=1), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    seg_dir = run / "segments" / segment(run)["name"]
    judge = json.loads((seg_dir / "judge.log").read_text().splitlines()[0])
    embed = json.loads((seg_dir / "embed.log").read_text().splitlines()[0])
    got = {
        k: (judge[k], embed[k])
        for k in (
            "model",
            "runner",
            "gpu_memory_utilization",
            "max_model_len",
            "limit_mm_per_prompt",
            "cuda_visible_devices",
        )
    }
    assert got == {
        "model": ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-VL-Embedding-2B"),
        "runner": ("auto", "pooling"),  # the embedder on vLLM's pooling runner (last token, normalised)
        "gpu_memory_utilization": (0.55, 0.25),
        "max_model_len": (32768, 8192),
        "limit_mm_per_prompt": ({"image": 8}, None),  # the judge sees up to 6 crops (recipe max_crops)
        "cuda_visible_devices": ("2", "2"),
    }
    assert judge["gpu_memory_utilization"] + embed["gpu_memory_utilization"] <= 0.9


def test_a_settings_file_and_set_options_reach_the_servers_the_job_starts(tmp_path):
    # the layers over the environment (--config FILE, then --set) are what every step and child sees
    conf = tmp_path / "settings.yaml"
    conf.write_text("servers:\n  judge_gpu_util: 0.5\n  embed_max_model_len: 2048\n")
    env = standin_env(tmp_path, max_steps=1, QUOTECITE_EMBED_MAX_MODEL_LEN="1024")
    r = subprocess.run(["bash", GRPO, "--config", str(conf), "--set", "servers.judge_max_model_len=16384"], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    seg_dir = tmp_path / "run" / "segments" / segment(tmp_path / "run")["name"]
    judge = json.loads((seg_dir / "judge.log").read_text().splitlines()[0])
    embed = json.loads((seg_dir / "embed.log").read_text().splitlines()[0])
    assert (judge["gpu_memory_utilization"], judge["max_model_len"]) == (0.5, 16384)  # file, --set
    assert embed["max_model_len"] == 1024  # the environment over the file


def test_eval_settings_from_a_file_and_set_options(tmp_path):
    conf = tmp_path / "eval.yaml"
    conf.write_text("eval:\n  eval_gold: /g.jsonl\n  eval_cache_dir: /cache\n")
    out = dry_run(tmp_path, script=EVAL, args=("--config", str(conf), "--set", "eval.eval_step=7"))
    infer = [c for c in plus_lines(out) if "infer" in c]
    assert infer and all(c[c.index("--gold") + 1] == "/g.jsonl" for c in infer)
    assert infer[1][infer[1].index("--lora") + 1] == f"{tmp_path}/run/checkpoints/global_step_7/actor/lora_adapter"
    bad = subprocess.run(["bash", EVAL, "--dry-run", "--set", "eval.eval_stp=7"], env=base_env(tmp_path),
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 1 and "--set eval.eval_stp: not a setting (did you mean eval.eval_step?)" in bad.stderr


@pytest.mark.parametrize(
    "flags,error",
    [
        (["--gpu-memory-fraction", "0.5"], "unrecognized arguments"),  # no such flag: vLLM refuses it too
        (["--gpu-memory-utilization", "1.5"], "must be in (0, 1]"),  # a share above the whole GPU
        (["--limit-mm-per-prompt", "image=8"], "not JSON"),  # the pre-0.10 syntax vLLM 0.18 no longer parses
        (["--limit-mm-per-prompt", '{"image": "8"}'], "modality -> count"),  # a count must be an int
        (["--runner", "embed"], "invalid choice"),  # "embed" is a --convert value, not a runner
        (["--max-model-len", "32k"], "invalid int value"),  # vLLM 0.18's parser wants an int here
    ],
)
def test_vllm_standin_rejects_the_flags_vllm_rejects(flags, error, capsys, monkeypatch):
    from tests.standins import vllm_serve

    def no_server(**_):
        raise AssertionError(f"the stand-in accepted {flags} and started serving")

    monkeypatch.setattr(vllm_serve, "ScriptedOpenAIServer", no_server)
    with pytest.raises(SystemExit) as e:
        vllm_serve.main(["serve", "some/model", *flags])
    assert e.value.code == 2
    assert error in capsys.readouterr().err


# --------------------------------------------------------------------------------------------- reward check
def test_dry_run_prints_the_reward_check_between_the_servers_and_the_trainer(tmp_path):
    st = steps(tmp_path, args=("worker.rollout.n=8",), QUOTECITE_MAX_STEPS="8", QUOTECITE_TRAIN_FILES="/d/t.parquet")
    names = [s["name"] for s in st]
    assert names.index("health-embed") < names.index("check") < names.index("trainer")
    check, trainer = step(st, "check"), step(st, "trainer")
    c = check["argv"]
    assert c[:4] == [PY, "-m", "reward", "check"]  # the trainer's python (here QUOTECITE_PYTHON)
    assert check["gpus"] == ""  # no GPU, like EasyR1's reward actor
    assert check["env"] == trainer["env"]  # as the reward will run
    flags = dict(zip(c[4:12:2], c[5:12:2], strict=True))
    assert flags == {
        "--recipe": f"{REPO}/recipes/qwen3vl_8b_grpo.yaml",
        "--judge-url": trainer["env"]["QUOTECITE_JUDGE_URL"],
        "--judge-model": "Qwen/Qwen3.5-9B",
        "--embed-url": trainer["env"]["QUOTECITE_EMBED_URL"],
    }
    # the trainer's overrides, so the check reads the data files and settings the trainer will use
    t_over = trainer["argv"][4:]
    assert c[12] == "--" and c[13:] == t_over
    assert "data.train_files=/d/t.parquet" in t_over and t_over[-5:] == ["worker.rollout.n=8", *PINNED]


def test_dry_run_with_preflight_off_prints_no_check(tmp_path):
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="8", QUOTECITE_PREFLIGHT="0")
    assert "# reward check skipped (QUOTECITE_PREFLIGHT=0)" in out
    assert "check" not in [s["name"] for s in steps(tmp_path, QUOTECITE_MAX_STEPS="8", QUOTECITE_PREFLIGHT="0")]


def checked_recipe(data: Path) -> str:
    """The stand-in recipe with the quote reward and a data set at ``data``, so the launch's reward check has work."""
    return (STANDIN_RECIPE % 1).replace(
        "worker: {actor:",
        f"data: {{train_files: {data}/train.parquet}}\n"
        "worker: {reward: {reward_function: ./reward/quote_reward.py:compute_score,\n"
        f"                  reward_function_kwargs: {{cache_dir: {data}/cache, judge: http}}}},\n"
        "         actor:",
    )


def test_a_failing_reward_check_stops_the_job_before_the_trainer_starts(tmp_path):
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=2)
    recipe = tmp_path / "checked.yaml"
    recipe.write_text(checked_recipe(tmp_path / "nodata"))
    env["QUOTECITE_RECIPE"] = str(recipe)
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    seg = segment(run)
    seg_dir = run / "segments" / seg["name"]
    first = (
        f"reward check failed (exit 1): config: 1 problem: reward setting cache_dir: {tmp_path}/nodata/cache is not a "
        f"directory; data: 1 problem: {tmp_path}/nodata/train.parquet: no such file"
    )
    assert f"error: {first}. The chain stops here (no job submitted)." in r.stderr
    assert (seg["status"], seg["message"]) == ("check_failed", first)
    assert not (seg_dir / "trainer.log").exists()  # never started
    assert (seg_dir / "judge.log").exists() and (seg_dir / "embed.log").exists()  # the check ran after both
    assert "judge probe: not run (the reward settings do not build: see config)" in (seg_dir / "check.log").read_text()
    man = json.loads((run / "manifest.json").read_text())
    assert man["jobs"][0]["next"] == "stop"
    assert "stopping judge server" in r.stderr and "stopping embedding server" in r.stderr


def test_preflight_off_starts_the_trainer_despite_a_broken_data_set(tmp_path):
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=1, QUOTECITE_PREFLIGHT="0")
    recipe = tmp_path / "checked.yaml"
    recipe.write_text(checked_recipe(tmp_path / "nodata"))
    env["QUOTECITE_RECIPE"] = str(recipe)
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "reward check skipped (QUOTECITE_PREFLIGHT=0)" in r.stderr
    assert segment(run)["status"] == "finished"


# --------------------------------------------------------------------------------------------- several nodes
def slurm_alloc(nodes: int, nodelist: str, gpus: int) -> dict[str, str]:
    return {"SLURM_JOB_NUM_NODES": str(nodes), "SLURM_JOB_NODELIST": nodelist, "SLURM_GPUS_ON_NODE": str(gpus)}


def test_dry_run_1x3_from_slurm_variables_is_todays_plan_without_ray(tmp_path):
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="8", **slurm_alloc(1, "vm", 3))
    assert "# GPU split       trainer CUDA_VISIBLE_DEVICES=0,1 (trainer.n_gpus_per_node=2); judge + embedder " \
           "CUDA_VISIBLE_DEVICES=2" in out  # fmt: skip
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="8", **slurm_alloc(1, "vm", 3))
    assert not [s for s in st if s["name"].startswith("ray") or s.get("argv", [""])[0] == "srun"]
    trainer = step(st, "trainer")
    assert trainer["gpus"] == "0,1" and trainer["env"]["RAY_ADDRESS"] == "local"
    assert trainer["argv"][4:6] == ["trainer.nnodes=1", "trainer.n_gpus_per_node=2"]
    assert trainer["env"]["QUOTECITE_JUDGE_URL"].startswith("http://127.0.0.1:")


def test_dry_run_3x1_ray_head_worker_servers_on_the_third_node(tmp_path):
    alloc = slurm_alloc(3, "gpu[01-03]", 1)
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="8", **alloc)
    assert "# nodes           3: gpu01 gpu02 gpu03 (GPUs per node: 1 1 1; SLURM_GPUS_ON_NODE=1)" in out
    assert "# trainer         2 node(s) x 1 GPU(s): gpu01 gpu02, GPU(s) 0 on each (trainer.nnodes=2 " \
           "trainer.n_gpus_per_node=1)" in out  # fmt: skip
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="8", SLURM_CPUS_PER_TASK="16", **alloc)
    head, worker = step(st, "ray_0"), step(st, "ray_1")
    h = program(head)
    gpu01 = node_addresses(["gpu01", "gpu02", "gpu03"], "")["gpu01"].address  # its address, or the name on a laptop
    assert h[:3] == ["ray", "start", "--head"] and wrapper_flag(head, "--gpus") == "0"
    assert h[h.index("--num-gpus") + 1] == "1" and h[h.index("--port") + 1] == "{port}"
    assert h[h.index("--node-ip-address") + 1] == gpu01
    assert h[h.index("--temp-dir") + 1] == "/tmp/qcray-JOBID"  # this job's own Ray
    # every srun step asks for the job's CPUs (srun does not inherit --cpus-per-task since Slurm 22.05)
    assert worker["argv"][:6] == ["srun", "--nodes=1", "--ntasks=1", "-w", "gpu02", "--overlap"]
    assert "--cpus-per-task=16" in worker["argv"][: worker["argv"].index("--")]
    w = program(worker)
    assert w[:4] == ["ray", "start", "--address", f"{gpu01}:{{port}}"]
    assert "--block" in w and w[w.index("--num-gpus") + 1] == "1" and wrapper_flag(worker, "--gpus") == "0"
    # Ray's worker pool is the job's CPUs on each node, never the node's cores (the "register worker" hang)
    assert h[h.index("--num-cpus") + 1] == w[w.index("--num-cpus") + 1] == "16"
    # the Ray nodes carry the trainer's environment, so a reward actor on any node sees the servers and the run folder
    trainer = step(st, "trainer")
    for k in ("QUOTECITE_JUDGE_URL", "QUOTECITE_EMBED_URL", "QUOTECITE_METRICS_DIR", "QUOTECITE_SEGMENT", "WANDB_MODE",
              "WANDB_DIR", "PYTHONPATH"):  # fmt: skip
        assert head["env"][k] == worker["env"][k] == trainer["env"][k], k
    for name in ("judge", "embed"):
        srv = step(st, name)
        assert srv["argv"][:5] == ["srun", "--nodes=1", "--ntasks=1", "-w", "gpu03"]
        assert "--cpus-per-task=16" in srv["argv"]
        assert program(srv)[program(srv).index("--host") + 1] == "gpu03"  # listens on, reached by, its node's name
    assert "lists 2 active nodes" in step(st, "ray-nodes")["text"]
    assert trainer["gpus"] == "0" and trainer["env"]["RAY_ADDRESS"] == w[3]
    assert trainer["env"]["QUOTECITE_JUDGE_URL"] == "http://gpu03:{port}/v1"
    assert trainer["argv"][4:6] == ["trainer.nnodes=2", "trainer.n_gpus_per_node=1"]
    names = [s["name"] for s in st]
    # the servers first (their URLs are part of the Ray nodes' environment), then Ray, the check, the trainer
    assert names.index("embed") < names.index("ray_0") < names.index("ray_1") < names.index("check") < \
           names.index("trainer")  # fmt: skip


def test_dry_run_2x8_trains_on_the_first_node_and_serves_on_the_last_gpu_of_the_second(tmp_path):
    out = dry_run(tmp_path, QUOTECITE_MAX_STEPS="8", **slurm_alloc(2, "gpu[01-02]", 8))
    assert "# Ray cluster     none (one trainer node: EasyR1 starts its own)" in out
    assert "# idle GPUs       gpu02 GPU 0-6" in out
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="8", **slurm_alloc(2, "gpu[01-02]", 8))
    assert not [s for s in st if s["name"].startswith("ray")]
    judge = step(st, "judge")
    assert (
        judge["argv"][:5] == ["srun", "--nodes=1", "--ntasks=1", "-w", "gpu02"]
        and wrapper_flag(judge, "--gpus") == "7"
    )
    trainer = step(st, "trainer")
    assert trainer["gpus"] == "0,1,2,3,4,5,6,7" and trainer["env"]["RAY_ADDRESS"] == "local"
    assert trainer["argv"][4:6] == ["trainer.nnodes=1", "trainer.n_gpus_per_node=8"]


def test_dry_run_2x8_two_judge_replicas_and_ray_across_both_nodes(tmp_path):
    st = steps(tmp_path, QUOTECITE_MAX_STEPS="8", QUOTECITE_JUDGE_REPLICAS="2", QUOTECITE_SERVE_GPUS="2",
               QUOTECITE_TRAIN_GPUS_PER_NODE="6", **slurm_alloc(2, "gpu[01-02]", 8))  # fmt: skip
    judges = [step(st, "judge"), step(st, "judge2")]
    assert [(j["argv"][4], wrapper_flag(j, "--gpus")) for j in judges] == [("gpu02", "6"), ("gpu02", "7")]
    assert [wrapper_flag(j, "--port-file").rsplit("/", 1)[1] for j in judges] == ["judge.port", "judge2.port"]
    embed = step(st, "embed")
    assert wrapper_flag(embed, "--gpus") == "7"
    trainer = step(st, "trainer")
    # the reward gets both replicas, comma-separated (reward/servers.py)
    assert trainer["env"]["QUOTECITE_JUDGE_URL"] == "http://gpu02:{port}/v1,http://gpu02:{port}/v1"
    assert trainer["gpus"] == "0,1,2,3,4,5" and trainer["env"]["RAY_ADDRESS"] != "local"
    assert trainer["argv"][4:6] == ["trainer.nnodes=2", "trainer.n_gpus_per_node=6"]
    worker = step(st, "ray_1")
    assert worker["argv"][4] == "gpu02" and wrapper_flag(worker, "--gpus") == "0,1,2,3,4,5"
    check = step(st, "check")
    assert check["argv"][check["argv"].index("--judge-url") + 1] == trainer["env"]["QUOTECITE_JUDGE_URL"]


def test_dry_run_allocation_too_small_is_an_error_naming_the_variables(tmp_path):
    r = subprocess.run(["bash", GRPO, "--dry-run"], env=base_env(tmp_path, QUOTECITE_MAX_STEPS="8",
                       QUOTECITE_SERVE_GPUS="2", **slurm_alloc(2, "n[1-2]", 1)), capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode == 1
    assert "this job sees 2 GPU(s) (SLURM_GPUS_ON_NODE=1), needs 3: 1 for the trainer, 2 for the judge" in r.stderr


# --------------------------------------------------------------------------------------------- settings, set-up
def test_an_unknown_or_bad_setting_stops_the_job_before_anything_starts(tmp_path):
    env = standin_env(tmp_path, max_steps=2, **{"QUOTECITE_" + "HEALT_TIMEOUT": "5"}, QUOTECITE_STOP_GRACE="soon")
    for args in ([], ["--dry-run"]):
        r = subprocess.run(["bash", GRPO, *args], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert "QUOTECITE_" + "HEALT_TIMEOUT is not a setting (did you mean QUOTECITE_HEALTH_TIMEOUT?)" in r.stderr
        assert "QUOTECITE_STOP_GRACE='soon'" in r.stderr or "QUOTECITE_STOP_GRACE=soon" in r.stderr
    assert not (tmp_path / "run").exists()


def test_settings_prints_every_resolved_value(tmp_path):
    r = subprocess.run(["bash", GRPO, "--settings"], env=base_env(tmp_path, QUOTECITE_HEALTH_TIMEOUT="90"),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if "QUOTECITE_HEALTH_TIMEOUT" in x)
    assert "90" in line and "environment" in line
    assert "Qwen/Qwen3.5-9B" in next(x for x in r.stdout.splitlines() if "QUOTECITE_JUDGE_MODEL" in x)


def test_a_job_without_its_software_stops_naming_the_set_up_command(tmp_path):
    env = standin_env(tmp_path, max_steps=2, QUOTECITE_ENV_SETUP="1", QUOTECITE_ENV_ROOT=str(tmp_path / "envs"),
                      QUOTECITE_HF_HOME=str(tmp_path / "hf"))  # fmt: skip
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "python -m launch.setup setup" in r.stderr and "python -m launch.setup fetch-models" in r.stderr
    # no install, no download, no segment: it only looks
    assert not (tmp_path / "run" / "segments").exists() and not (tmp_path / "envs").exists()
    assert not (tmp_path / "hf").exists()


def test_a_one_node_trainer_starts_its_own_ray_even_with_a_stale_cluster_file(tmp_path):
    # EasyR1's plain ray.init() joins the cluster /tmp/ray/ray_current_cluster names (a killed `ray start` never
    # clears it). The launch gives the trainer RAY_ADDRESS=local and a temp dir of the job's own.
    stale = Path("/tmp/ray/ray_current_cluster")
    made = not stale.exists()
    if made:
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_text("192.0.2.1:6379")  # TEST-NET: nothing answers there
    ray_tmp = Path(f"/tmp/qcr-{os.getpid()}")  # Ray's unix sockets live below it: paths are limited to 107 bytes
    try:
        env = standin_env(tmp_path, max_steps=1, QUOTECITE_STANDIN_RAY_INIT="1", QUOTECITE_PREFLIGHT="0",
                          QUOTECITE_RAY_TMPDIR=str(ray_tmp))  # fmt: skip
        r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=180)
    finally:
        if made:
            stale.unlink(missing_ok=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "run" / "segments" / segment(tmp_path / "run")["name"] / "trainer.log").read_text()
    got = json.loads(next(x for x in log.splitlines() if x.startswith('{"standin": "ray-local"')))
    assert got["session_dir"].startswith(str(ray_tmp)), got  # its own cluster, in the job's temp dir
    assert not got["address"].startswith("192.0.2.1")


def test_a_run_whose_checkpoints_cannot_fit_the_disk_is_refused_with_the_numbers(tmp_path):
    # The 8B policy's checkpoints (about 19 GiB each, every one kept: save_limit -1) for 100000 steps at save_freq 1
    # fit no disk: the job refuses before any server starts, naming the need and the free space.
    run = tmp_path / "run"
    env = standin_env(tmp_path, max_steps=100000)
    recipe = tmp_path / "big.yaml"
    recipe.write_text(
        (STANDIN_RECIPE % 1).replace("model_path: standin/policy", "model_path: Qwen/Qwen3-VL-8B-Instruct")
    )
    env["QUOTECITE_RECIPE"] = str(recipe)
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert re.search(r"not enough disk for the run's checkpoints: .*100000 checkpoints x 1\d\.\d GiB", r.stderr)
    assert "free" in r.stderr and "The chain stops here (no job submitted)." in r.stderr
    seg = segment(run)
    assert seg["status"] == "crashed" and not (run / "segments" / seg["name"] / "judge.log").exists()


def test_the_next_job_warns_when_save_freq_steps_outlast_the_stop_grace(tmp_path):
    # Steps of 0.5 s, a checkpoint every 8 steps, a stop grace of 2 s: after SIGUSR1 the launch could wait 4 s for
    # the next checkpoint, past the grace, losing steps at every requeue. The first job measures the step time.
    env = standin_env(tmp_path, max_steps=2, save_freq=8, QUOTECITE_STOP_GRACE="2", QUOTECITE_PREFLIGHT="0")
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "save_freq" not in r.stderr  # nothing measured before the first job
    env["QUOTECITE_MAX_STEPS"] = "4"
    r = subprocess.run(["bash", GRPO], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # issue 31, finding 5: the second job lowers save_freq itself (an override it passes and says), before training
    line = next(x for x in r.stderr.splitlines() if "save_freq" in x and "stop grace" in x)
    assert "trainer.save_freq=8 x " in line and "the job passes trainer.save_freq=4" in line, line
    assert "measured: the median timing_s/step" in line, line


@pytest.mark.parametrize(
    "script,env,needle",
    [
        (GRPO, {"QUOTECITE_MAX_STEPS": "abc"}, "QUOTECITE_MAX_STEPS='abc'"),
        (GRPO, {"QUOTECITE_MAX_STEPS": "-3"}, "QUOTECITE_MAX_STEPS='-3'"),
        (GRPO, {"QUOTECITE_HEALTH_TIMEOUT": "soon"}, "QUOTECITE_HEALTH_TIMEOUT='soon'"),
        (GRPO, {"QUOTECITE_RECIPE": "/nonexistent/recipe.yaml"}, "cannot plan the run from /nonexistent/recipe.yaml"),
        (EVAL, {"QUOTECITE_HEALTH_TIMEOUT": "soon"}, "QUOTECITE_HEALTH_TIMEOUT='soon'"),
        (
            EVAL,
            {"QUOTECITE_EVAL_SHARDS": "2", "QUOTECITE_EVAL_TASKS": "1-3"},
            "task 3 is past QUOTECITE_EVAL_SHARDS=2",
        ),
        (
            str(REPO / "launch" / "prep_array.sh"),
            {"QUOTECITE_PREP_SHARDS": "4", "QUOTECITE_PREP_TASKS": "2,6"},
            "task 6 is past QUOTECITE_PREP_SHARDS=4",
        ),
    ],
)
def test_a_bad_launch_setting_fails_the_dry_run_naming_it(tmp_path, script, env, needle):
    r = subprocess.run(["bash", script, "--dry-run"], env=base_env(tmp_path, **env), capture_output=True, text=True,
                       timeout=60)  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert "error: " in r.stderr and needle in r.stderr, r.stderr
