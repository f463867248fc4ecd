from vllm import _ImportOnly


class LRUCacheWorkerLoRAManager(_ImportOnly):
    pass
