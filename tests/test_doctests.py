"""The runnable examples in docstrings stay true."""

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "module", ["data_prep.registry", "data_prep.text", "data_prep.io", "data_prep.document", "eval.convert"]
)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
