from vllm import _ImportOnly


class LoRARequest(_ImportOnly):
    pass
