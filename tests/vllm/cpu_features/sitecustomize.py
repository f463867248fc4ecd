"""Put on a vLLM server's ``PYTHONPATH`` by ``tests/vllm/conftest.py:vllm_env`` when ``QCTEST_VLLM_WITHOUT`` names CPU
features (comma-separated keys of ``tests/vllm/kernels.py:PROBES``): every process of the server, the engine core
it spawns included, answers torch's probes for them False, so vLLM's own start-up loads the kernel build of a CPU
without them (``QCTEST_VLLM_WITHOUT=avx512``: the AVX2 build an AVX2-only machine gets). A measurement switch for
running this tier on another CPU's code path; unset, nothing happens."""

import os
import sys

_WITHOUT = [f for f in os.environ.get("QCTEST_VLLM_WITHOUT", "").split(",") if f]
if _WITHOUT:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        from kernels import answer_false

        answer_false(_WITHOUT)
    finally:
        sys.path.pop(0)
