"""vLLM's CPU kernels are chosen by vLLM, on whatever x86-64 CPU runs the tests: the venv's check and this tier load
the build vLLM's own start-up picks (``tests/vllm/kernels.py``), for this machine and for the AVX2 branch an
AVX2-only machine takes; nothing imports a kernel build by hand."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.vllm.conftest import REPO, VLLM_PY, require_vllm

EXPECTED = {(True, True): "_C.abi3.so", (True, False): "_C_AVX512.abi3.so", (False, False): "_C_AVX2.abi3.so"}
"""The build vLLM 0.32 loads for (AVX-512, AVX-512 BF16) as torch reports them."""


def kernels(*without: str) -> dict:
    require_vllm()
    argv = [str(VLLM_PY), str(REPO / "tests" / "vllm" / "kernels.py")]
    for feature in without:
        argv += ["--without", feature]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_vllm_loads_the_build_for_this_cpu():
    got = kernels()
    cpu = (got["cpu"]["avx512"], got["cpu"]["avx512"] and got["cpu"]["avx512_bf16"])
    assert got["builds"] == [EXPECTED[cpu]] and got["missing_ops"] == []


@pytest.mark.parametrize("without", [("avx512",), ("avx512_bf16",)])
def test_vllm_loads_the_lower_build_when_the_cpu_lacks_a_feature(without):
    # Each lower branch of vLLM's choice, as an AVX2-only (or AVX-512 without BF16) CPU takes it: its build is a
    # subset of this CPU's instructions only when this CPU has the feature answered False; else it is this CPU's own.
    base = kernels()["cpu"]
    got = kernels(*without)
    avx512 = base["avx512"] and "avx512" not in without
    assert got["builds"] == [EXPECTED[(avx512, avx512 and base["avx512_bf16"] and "avx512_bf16" not in without)]]
    assert got["missing_ops"] == []


def test_nothing_imports_a_kernel_build_by_hand():
    # `import vllm._C` loads the AVX-512 BF16 build on every CPU (SIGILL on AVX2-only machines): only vLLM chooses.
    pattern = re.compile(r"import\s+vllm\._C|vllm\._C(_AVX\w*)?\b(?!\.abi3)|from\s+vllm\s+import\s+_C")
    files = ["Makefile", *(str(p.relative_to(REPO)) for d in ("launch", "slurm", "tests", "reward", "eval", ".ci")
                           for p in (REPO / d).rglob("*") if p.is_file() and p.suffix in {".py", ".sh", ""})]  # fmt: skip
    here = {"tests/vllm/kernels.py", "tests/vllm/test_vllm_kernels.py"}  # this check and vLLM's own choice
    hits = [f for f in files if f not in here and pattern.search((REPO / f).read_text(errors="replace"))]
    assert hits == []


def test_the_servers_run_the_build_vllm_chose(judge_server, embed_server):
    # Every process of each server (the API server and the engine core it spawns) maps the build that vLLM's start-up
    # chose for this CPU: with QCTEST_VLLM_WITHOUT=avx512 in the environment, the whole tier runs on the AVX2 build.
    import os

    without = [f for f in os.environ.get("QCTEST_VLLM_WITHOUT", "").split(",") if f]
    expected = kernels(*without)["builds"]
    for server in (judge_server, embed_server):
        sid = os.getsid(server.proc.pid)
        pids = subprocess.run(["ps", "-o", "pid=", "-s", str(sid)], capture_output=True, text=True).stdout.split()
        builds = set()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/maps") as f:
                    builds |= {os.path.basename(line.split()[-1]) for line in f if "/vllm/_C" in line}
            except OSError:
                continue  # a process that ended meanwhile
        assert sorted(builds) == expected, (server.name, pids)
