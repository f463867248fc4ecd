"""Repository-wide collection rule for ``--doctest-modules`` (set in pyproject.toml).

The option imports every ``.py`` file it is given to look for docstring examples. Over the packages that is the
point; under ``tests/`` and ``benchmarks/`` only test modules, bench modules and conftest files are meant to be
collected. The other files there are helpers that must not be imported into the test process as top-level
modules: ``tests/easyr1/vllm_standin/vllm`` is a stand-in ``vllm`` package that tests put on a *subprocess's*
path (imported here it would shadow ``vllm`` for every later test), and stand-in servers are scripts. So they are
left out by this rule, not by a list.
"""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parent
_HELPER_TREES = (_ROOT / "tests", _ROOT / "benchmarks")


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    p = Path(collection_path)
    if p.suffix != ".py" or p.name == "conftest.py" or p.name.startswith(("test_", "bench_")):
        return None
    if any(p.is_relative_to(tree) for tree in _HELPER_TREES):
        return True  # a helper module: imported by the tests that use it, never collected
    return None
