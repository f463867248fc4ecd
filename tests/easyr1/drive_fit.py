"""EasyR1 b44b311's own training loop on CPU: ``Runner.run`` -> ``RayPPOTrainer.init_workers`` -> ``fit``.

    drive_fit.py SPEC_JSON

SPEC: {"argv": trainer arguments (config=..., overrides), "model_dir": folder for the tiny Qwen3-VL (made with
random weights when absent), "servable" (optional): make it with dimensions vLLM serves (harness.write_tiny_qwen3vl)}. Runs ``verl/trainer/main.py``'s config path (harness.load_config), then the body of
its ``Runner.run`` (tokenizer, processor, worker mapping, resource pool, the two reward actors, dataloaders,
``RayPPOTrainer``, ``init_workers``, ``fit``) unchanged, in this process, with one substitution: the module's
``FSDPWorker`` name is bound to tests/easyr1/cpu_worker.py's ``CPUWorker``. Ray is started here with ``num_gpus``
equal to the trainer's GPUs (``n_gpus_per_node * nnodes``), so EasyR1's GPU bundles and GPU count check hold; the
reward plug-in's worker set-up hook is added as ``python -m reward.train`` adds it. Reports ok or the error.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import load_config, report, write_tiny_qwen3vl  # noqa: E402


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    write_tiny_qwen3vl(spec["model_dir"], with_weights=True, servable=spec.get("servable", False))
    config = load_config(spec["argv"] + [f"worker.actor.model.model_path={spec['model_dir']}"])

    import ray
    import verl.trainer.main as easyr1_main

    from reward.train import patch_ray_init
    from tests.easyr1.cpu_worker import CPUWorker, registered_methods

    out: dict = {"ok": True, "registered": registered_methods(CPUWorker),
                 "fsdp_registered": registered_methods(easyr1_main.FSDPWorker)}  # fmt: skip
    patch_ray_init()  # what `python -m reward.train` does before EasyR1's main calls ray.init
    ray.init(
        address="local",  # a new cluster, never the one a stale /tmp/ray/ray_current_cluster names
        num_cpus=4,
        num_gpus=config.trainer.n_gpus_per_node * config.trainer.nnodes,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=True,
        runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0"}},
    )
    easyr1_main.FSDPWorker = CPUWorker  # the one substitution: Runner.run maps both roles to this name
    runner = easyr1_main.Runner.__ray_actor_class__()  # Runner.run's own code, in this process
    started = time.perf_counter()
    try:
        runner.run(config)
    except Exception as e:
        text = str(e)
        out.update(ok=False, error_type=type(e).__name__, error_last_line=text.strip().splitlines()[-1], error=text)
        traceback.print_exc()
    out["seconds"] = round(time.perf_counter() - started, 2)
    ray.shutdown()
    report(out)


if __name__ == "__main__":
    main()
