"""``python -m reward.train`` (reward/train.py): EasyR1's ``verl.trainer.main`` with the same arguments and the
samples' worker set-up hook added to the runtime_env it gives ``ray.init``.

EasyR1 is not installed in ``.venv``, so here a module named ``verl.trainer.main`` written to a temporary folder
plays its part (it calls ``ray.init`` as b44b311's ``main`` does and records what it got); the easyr1 tier
(tests/easyr1/test_easyr1_batch.py) runs the hook in EasyR1's own Ray actors and reads the table back from wandb."""

from __future__ import annotations

import json
import sys

import pytest

from core.errors import InputError
from reward import train
from reward.samples import WANDB_HOOK

MAIN = """
import json, sys, ray
ray.init(runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}})
print(json.dumps({"argv": sys.argv, "name": __name__}))
"""


@pytest.fixture
def fake_easyr1(tmp_path, monkeypatch):
    pkg = tmp_path / "verl" / "trainer"
    pkg.mkdir(parents=True)
    for d in (tmp_path / "verl", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "main.py").write_text(MAIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, name)
    import ray

    calls = []
    monkeypatch.setattr(ray, "init", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    return calls


def test_main_runs_easyr1s_main_with_the_same_arguments_and_the_hook_added(fake_easyr1, capsys):
    train.main(["config=recipes/qwen3vl_8b_grpo.yaml", "trainer.max_steps=8"])
    got = json.loads(capsys.readouterr().out)
    assert got["name"] == "__main__" and got["argv"][0].endswith("verl/trainer/main.py")  # as `python -m` runs it
    assert got["argv"][1:] == ["config=recipes/qwen3vl_8b_grpo.yaml", "trainer.max_steps=8"]
    (kw,) = fake_easyr1
    assert kw["runtime_env"] == {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"},
                                 "worker_process_setup_hook": WANDB_HOOK}  # EasyR1's env vars kept  # fmt: skip
    train.patch_ray_init()  # a second patch wraps nothing twice
    import ray

    ray.init(runtime_env=None)
    assert fake_easyr1[-1]["runtime_env"] == {"worker_process_setup_hook": WANDB_HOOK}


def test_a_runtime_env_with_another_hook_is_refused_naming_it():
    assert (
        train.with_samples_hook({"worker_process_setup_hook": WANDB_HOOK})["worker_process_setup_hook"] == WANDB_HOOK
    )
    with pytest.raises(InputError, match="already has a worker_process_setup_hook .'mine.setup'."):
        train.with_samples_hook({"worker_process_setup_hook": "mine.setup"})


def test_the_hook_changes_nothing_where_easyr1_is_absent(monkeypatch):
    from reward.samples import install_wandb_samples

    monkeypatch.setitem(sys.modules, "verl", None)  # `import verl...` raises ImportError
    assert install_wandb_samples() is False  # a worker without EasyR1 starts as before


def test_a_ray_started_inside_a_slurm_job_gets_the_jobs_cpus_and_one_it_joins_does_not(fake_easyr1, monkeypatch):
    import ray

    train.patch_ray_init()
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "12")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray.init(runtime_env=None)
    assert fake_easyr1[-1]["num_cpus"] == 12  # a local Ray of this job: sized by the job, not the node
    monkeypatch.setenv("RAY_ADDRESS", "gpu01:6379")
    ray.init(runtime_env=None)
    assert "num_cpus" not in fake_easyr1[-1]  # joining the launch's cluster (started with --num-cpus): no resources
    monkeypatch.setenv("RAY_ADDRESS", "local")
    ray.init(runtime_env=None, num_cpus=3)
    assert fake_easyr1[-1]["num_cpus"] == 3  # the caller's own value wins
