"""Import-only stand-in for vLLM, for the `easyr1` test tier (tests/easyr1/). NOT vLLM.

vLLM does not install on a machine without a GPU, but EasyR1 b44b311 imports it at module level
(``verl.workers.rollout.vllm_rollout_spmd``, ``verl.workers.sharding_manager.fsdp_vllm``,
``verl.utils.vllm_utils``), and ``verl.trainer.ray_trainer`` imports those through ``verl.workers.fsdp_workers``.
This package defines exactly the names those imports bind, so EasyR1's trainer, dataset, reward and config code
can be imported and run on a CPU. Nothing here generates: every callable raises :class:`StandInError`. The tier
replaces generation with a scripted rollout (tests/easyr1/harness.py), never with this module.

Defines:
  vllm.LLM, vllm.RequestOutput, vllm.SamplingParams                       (classes; constructing one raises)
  vllm.lora.models.LoRAModel, vllm.lora.request.LoRARequest,
  vllm.lora.worker_manager.LRUCacheWorkerLoRAManager                      (classes; LoRARequest can be subclassed,
                                                                           as verl.utils.vllm_utils does)
  vllm.lora.utils.get_adapter_absolute_path                              (raises)
  vllm.distributed.parallel_state.get_tensor_model_parallel_world_size,
  get_tensor_model_parallel_rank, get_tensor_model_parallel_group        (raise)
It has no distribution metadata, so ``importlib.metadata.version("vllm")`` still fails, as it would without vLLM.
"""

__stand_in__ = True


class StandInError(RuntimeError):
    """Raised by every callable of the stand-in: generation needs the real vLLM on a GPU."""


def _refuse(what: str):
    raise StandInError(f"{what}: the tests' import-only vllm stand-in cannot run vLLM (it needs a GPU)")


class _ImportOnly:
    def __init__(self, *args, **kwargs):
        _refuse(f"vllm.{type(self).__name__}()")


class LLM(_ImportOnly):
    pass


class RequestOutput(_ImportOnly):
    pass


class SamplingParams(_ImportOnly):
    pass
