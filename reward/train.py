"""``python -m reward.train config=RECIPE key=value ...``: EasyR1's trainer, ``python -m verl.trainer.main`` with the
same arguments, whose wandb run also gets the reward's samples (:mod:`reward.samples`) as a table with the crops.

The reward runs in Ray actors of its own and writes the samples of each training batch to
``$QUOTECITE_METRICS_DIR/samples/``; the wandb run belongs to EasyR1's ``Runner`` actor (its ``Tracker`` logs each
step). So the samples are logged from there: this entry point adds the ``worker_process_setup_hook``
:data:`reward.samples.WANDB_HOOK` to the ``runtime_env`` that EasyR1's ``main`` passes to ``ray.init`` (its
``env_vars`` and everything else unchanged), and the hook swaps EasyR1's ``wandb`` logger for one that logs the
newest samples after each step's metrics. On a cluster started with ``ray start`` (the launch), ``ray.init``
attaches to it and the hook still applies to every worker of this job. Nothing else of EasyR1 changes: its
``main`` runs as ``python -m verl.trainer.main`` would run it.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m reward.train")

import os
import runpy
import sys
from collections.abc import Mapping
from typing import Any

from core.errors import InputError
from reward.samples import WANDB_HOOK

EASYR1_MAIN = "verl.trainer.main"


def with_samples_hook(runtime_env: Mapping[str, Any] | None) -> dict[str, Any]:
    """``runtime_env`` (EasyR1's) with :data:`~reward.samples.WANDB_HOOK` as its worker set-up hook.

    >>> with_samples_hook({"env_vars": {"NCCL_DEBUG": "WARN"}})["worker_process_setup_hook"]
    'reward.samples.install_wandb_samples'
    """
    env = dict(runtime_env or {})
    hook = env.get("worker_process_setup_hook")
    if hook not in (None, WANDB_HOOK):
        raise InputError(f"ray.init's runtime_env already has a worker_process_setup_hook ({hook!r}); "
                         f"{__name__} cannot add {WANDB_HOOK}")  # fmt: skip
    env["worker_process_setup_hook"] = WANDB_HOOK
    return env


def slurm_cpus(env: Mapping[str, str]) -> int | None:
    """The CPUs Slurm gave this job on this node (``SLURM_CPUS_PER_TASK``, else ``SLURM_CPUS_ON_NODE``), None outside
    a job. Ray sizes its worker pool by the node's cores unless told: on a shared node that is more workers than
    the job has CPUs (and memory), the known "Failed to register worker to Raylet" hang.

    >>> slurm_cpus({"SLURM_CPUS_PER_TASK": "16", "SLURM_CPUS_ON_NODE": "64"}), slurm_cpus({})
    (16, None)
    """
    for var in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        raw = (env.get(var) or "").strip()
        if raw.isdigit() and 0 < int(raw) < 100_000:
            return int(raw)
    return None


def patch_ray_init() -> None:
    """Make ``ray.init`` pass :func:`with_samples_hook` of the ``runtime_env`` it is given, and, when it starts a
    Ray of its own inside a Slurm job, ``num_cpus`` of the job's CPUs (:func:`slurm_cpus`; a Ray it joins was
    started with them by the launch). Idempotent."""
    import ray

    if getattr(ray.init, "adds_samples_hook", False):
        return
    init = ray.init

    def init_with_samples_hook(*args, **kwargs):
        kwargs["runtime_env"] = with_samples_hook(kwargs.get("runtime_env"))
        address = kwargs.get("address") or (args[0] if args else None) or os.environ.get("RAY_ADDRESS") or "local"
        cpus = slurm_cpus(os.environ)
        if address == "local" and cpus and "num_cpus" not in kwargs:
            kwargs["num_cpus"] = cpus
        return init(*args, **kwargs)

    init_with_samples_hook.adds_samples_hook = True
    ray.init = init_with_samples_hook


def main(argv: list[str] | None = None) -> None:
    patch_ray_init()
    sys.argv = [sys.argv[0], *(sys.argv[1:] if argv is None else argv)]
    runpy.run_module(EASYR1_MAIN, run_name="__main__", alter_sys=True)  # argv[0] becomes main.py, as with -m


if __name__ == "__main__":
    main()
