from vllm import _refuse


def get_tensor_model_parallel_world_size():
    _refuse("vllm.distributed.parallel_state.get_tensor_model_parallel_world_size")


def get_tensor_model_parallel_rank():
    _refuse("vllm.distributed.parallel_state.get_tensor_model_parallel_rank")


def get_tensor_model_parallel_group():
    _refuse("vllm.distributed.parallel_state.get_tensor_model_parallel_group")
