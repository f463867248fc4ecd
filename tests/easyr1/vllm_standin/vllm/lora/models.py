from vllm import _ImportOnly


class LoRAModel(_ImportOnly):
    pass
