from vllm import _refuse


def get_adapter_absolute_path(*args, **kwargs):
    _refuse("vllm.lora.utils.get_adapter_absolute_path")
