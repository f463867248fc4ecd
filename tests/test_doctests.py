"""The runnable examples in docstrings run with the tests, all of them, with no hand-kept list of modules.

pytest runs them itself (``--doctest-modules`` over the packages: ``[tool.pytest.ini_options]`` in pyproject.toml).
These tests guard the two ways an example could silently stop running: a shipped package missing from that
configuration, and an example written where doctest never looks (a comment, or the string after an assignment,
which Python does not keep as a docstring).
"""

from __future__ import annotations

import doctest
import importlib
import re
import tomllib

import pytest

from tests.conftest import REPO

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())
PACKAGES = sorted(p.rstrip("*") for p in CONFIG["tool"]["setuptools"]["packages"]["find"]["include"])
"""The top-level packages the wheel ships (``data_prep``, ``eval``, ``recipes``, ``reward``)."""


def _modules_with_examples() -> list[tuple[str, int]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            if path.name == "__main__.py":  # pytest never imports a __main__ for its examples: keep none there
                continue
            n = len(re.findall(r"(?m)^\s*>>> ", path.read_text(encoding="utf-8")))
            if n:
                rel = path.relative_to(REPO).with_suffix("")
                out.append((".".join(rel.parts).removesuffix(".__init__"), n))
    return out


def test_pytest_runs_the_examples_of_every_shipped_package():
    ini = CONFIG["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in ini["addopts"].split()
    assert set(PACKAGES) <= set(ini["testpaths"]), "a shipped package whose examples never run"
    assert set(PACKAGES) >= {"data_prep", "reward", "eval", "recipes"}


MODULES = _modules_with_examples()


def test_modules_with_examples_are_found():
    assert len(MODULES) >= 20  # the walk itself works (the packages hold examples in over twenty modules)


@pytest.mark.parametrize("module, written", MODULES, ids=[m for m, _ in MODULES])
def test_every_written_example_is_one_doctest_finds(module, written):
    found = doctest.DocTestFinder().find(importlib.import_module(module))
    assert sum(len(t.examples) for t in found) == written, (
        f"{module}: {written} '>>>' lines in the source but doctest finds "
        f"{sum(len(t.examples) for t in found)}: an example sits where doctest does not look"
    )
