"""The training recipe and the prompts, shipped as package data.

Every stage finds a prompt through this module (``importlib.resources``), never through a path relative to its own
source file, so a wheel install reads the same files as a checkout. The recipe YAML still names its format prompt
as a file path (``data.format_prompt``), because EasyR1 opens it itself.

>>> {"judge.txt", "language_interface.jinja", "coordinate_interface.jinja"} <= set(prompt_names())
True
>>> prompt_path("judge.txt").name
'judge.txt'
>>> "=== system ===" in read_prompt("judge.txt")
True
>>> (prompts_dir() / "language_interface.jinja").is_file(), recipe_path().suffix
(True, '.yaml')
>>> prompt_path("judge.text")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
FileNotFoundError: no prompt 'judge.text' in the recipes package; did you mean 'judge.txt'? (known: ..., judge.txt, ...)
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import tempfile
from importlib.resources import as_file, files
from importlib.resources.abc import Traversable
from pathlib import Path

__all__ = ["prompt_names", "prompt_path", "prompts_dir", "read_prompt", "recipe_path"]

_PROMPTS = "prompts"
_extracted = contextlib.ExitStack()  # holds prompts extracted from a zipped install until the interpreter exits
atexit.register(_extracted.close)


def _on_disk(res: Traversable) -> Path:
    """``res`` as a real file system path: itself for a normal install, a temporary copy for a zipped one."""
    if isinstance(res, Path):
        return res
    return _extracted.enter_context(as_file(res))


def prompt_names() -> list[str]:
    """The prompt files the package holds."""
    return sorted(p.name for p in files(__name__).joinpath(_PROMPTS).iterdir() if p.is_file())


def _prompt(name: str) -> Traversable:
    res = files(__name__).joinpath(_PROMPTS, name)
    if not res.is_file():
        known = prompt_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise FileNotFoundError(f"no prompt {name!r} in the recipes package{hint} (known: {', '.join(known)})")
    return res


def prompt_path(name: str) -> Path:
    """The file system path of the prompt ``name`` (e.g. ``"judge.txt"``), for code and tools that open a path."""
    return _on_disk(_prompt(name))


def read_prompt(name: str) -> str:
    """The text of the prompt ``name``."""
    return _prompt(name).read_text(encoding="utf-8")


def prompts_dir() -> Path:
    """The folder holding every prompt (for options that take a folder, such as ``eval infer --prompts-dir``)."""
    res = files(__name__).joinpath(_PROMPTS)
    if isinstance(res, Path):
        return res
    tmp = Path(_extracted.enter_context(tempfile.TemporaryDirectory(prefix="quotecite-prompts-")))
    for name in prompt_names():  # a zipped install: copy the folder out (as_file takes folders only from 3.12)
        (tmp / name).write_bytes(res.joinpath(name).read_bytes())
    return tmp


def recipe_path(name: str = "qwen3vl_8b_grpo.yaml") -> Path:
    """The file system path of a recipe YAML shipped with the package."""
    res = files(__name__).joinpath(name)
    if not res.is_file():
        raise FileNotFoundError(f"no recipe {name!r} in the recipes package")
    return _on_disk(res)
