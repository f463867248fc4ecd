"""``python -m tests.easyr1.launch_entry ARGS``: the launch's trainer command, ``python -m reward.train ARGS``, with
tests/easyr1/cpu_worker.py's ``CPUWorker`` in EasyR1's ``FSDPWorker``'s place. For the local-Slurm chain tests only
(tests/launch/test_launch_easyr1.py sets ``QUOTECITE_TRAINER_CMD`` to ``.venv-easyr1/bin/python -m
tests.easyr1.launch_entry``); never part of the product.

What it does before it calls :func:`reward.train.main` (from there on everything is the product's path:
``reward.train``'s ``ray.init`` patch, ``runpy`` of ``verl.trainer.main``, main's config path, ``Runner.run``,
``RayPPOTrainer.init_workers`` and ``fit``):

- puts the import-only ``vllm`` stand-in (tests/easyr1/vllm_standin) first on ``sys.path`` and ``PYTHONPATH`` (the
  Ray workers inherit the variable), as tests/easyr1/conftest.py's ``easyr1_env`` does for the drivers;
- binds ``verl.workers.fsdp_workers.FSDPWorker`` to ``CPUWorker``: ``verl/trainer/main.py``, run by ``runpy``, imports
  that name when it starts, so its ``Runner`` (pickled by value to its Ray actor, as with ``python -m
  verl.trainer.main``) maps both roles to the CPU worker;
- wraps ``ray.init`` (under reward.train's own wrapper, which still adds the samples hook and the job's CPUs) to add
  ``num_gpus`` = the GPUs the launch gave the trainer (``CUDA_VISIBLE_DEVICES``), so EasyR1's ``{"GPU": 1}`` bundles
  and GPU count check hold on a CPU machine, without the dashboard and bound to 127.0.0.1.

``python -m tests.easyr1.launch_entry --write-tiny-model DIR`` writes the tiny random Qwen3-VL (harness.py) there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDIN = HERE / "vllm_standin"


def install() -> None:
    """The three substitutions of the module docstring (idempotent enough: called once per process)."""
    sys.path.insert(0, str(STANDIN))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)
    import ray
    import verl.workers.fsdp_workers as fsdp_workers

    from tests.easyr1.cpu_worker import CPUWorker

    fsdp_workers.FSDPWorker = CPUWorker
    init = ray.init

    def init_on_cpu(*args, **kwargs):
        gpus = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
        kwargs.setdefault("num_gpus", len(gpus))
        kwargs.setdefault("include_dashboard", False)
        kwargs.setdefault("_node_ip_address", "127.0.0.1")
        return init(*args, **kwargs)

    ray.init = init_on_cpu


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--write-tiny-model"]:
        sys.path.insert(0, str(HERE))
        from harness import write_tiny_qwen3vl

        write_tiny_qwen3vl(argv[1], with_weights=True)
        return
    install()
    from reward.train import main as train_main

    train_main(argv)


if __name__ == "__main__":
    main()
