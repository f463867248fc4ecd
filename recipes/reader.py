"""The one reader of EasyR1 recipes: the YAML, EasyR1's command-line overrides and OmegaConf's ``${oc.env:...}``.

Used by the reward's check (``reward.preflight``), ``reward score --recipe``, the launch's run log
(``launch/runlog.py``) and both launch scripts (``python -m recipes value RECIPE KEY [OVERRIDE ...]``). It sits
above :mod:`core` (its YAML loader and error types) and imports no stage; its errors are :class:`RecipeError` (an
:class:`~core.errors.InputError`).

>>> r = apply_overrides({"data": {"val_files": "v"}}, ["data.train_files=/d/t.parquet", "trainer.max_steps=8"])
>>> dig(r, "trainer.max_steps"), dig(r, "trainer.nnodes", 1)
(8, 1)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from core.errors import InputError
from core.io import read_text, safe_yaml

_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


class RecipeError(InputError):
    """A recipe that cannot be read: missing, not YAML, not a mapping."""


def _yaml(text: str, where: str):
    """:func:`core.io.safe_yaml` (the one YAML loader), its refusals as :class:`RecipeError`."""
    try:
        return safe_yaml(text, where)
    except InputError as e:
        raise RecipeError(str(e)) from None


class Unset:
    """A ``${oc.env:NAME}`` whose variable is not set (and has no default)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"${{oc.env:{self.name}}}"


def resolve_env(value, env: dict[str, str] | None = None):
    """Resolve OmegaConf's ``${oc.env:NAME}`` / ``${oc.env:NAME,default}`` in a recipe value, recursively, as EasyR1
    does when it builds its config. A string naming an unset variable without a default becomes an :class:`Unset`.

    >>> resolve_env({"a": "${oc.env:QC_X,7}/train.parquet", "b": ["${oc.env:QC_Y}"]}, {"QC_Y": "y"})
    {'a': '7/train.parquet', 'b': ['y']}
    """
    env = os.environ if env is None else env
    if isinstance(value, dict):
        return {k: resolve_env(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_env(v, env) for v in value]
    if not isinstance(value, str) or "${oc.env:" not in value:
        return value
    unset: list[str] = []

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if env.get(name) is not None:
            return env[name]
        if default is not None:
            return default.strip().strip("'\"")
        unset.append(name)
        return ""

    out = _ENV.sub(sub, value)
    return Unset(unset[0]) if unset else out


def dig(d, dotted: str, default=None):
    for k in dotted.split("."):
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def apply_overrides(recipe: dict, overrides: list[str]) -> dict:
    """EasyR1's command-line ``key.path=value`` overrides applied to a recipe dict (values parsed as YAML scalars,
    as OmegaConf does); arguments without ``=`` are ignored.

    >>> apply_overrides({"data": {"val_files": "v"}}, ["data.train_files=/d/t.parquet", "trainer.max_steps=8"])
    {'data': {'val_files': 'v', 'train_files': '/d/t.parquet'}, 'trainer': {'max_steps': 8}}
    """

    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            continue
        try:
            parsed = _yaml(value, f"override {key}") if value.strip() else None
        except RecipeError:
            parsed = value
        node = recipe
        *parents, last = key.strip().split(".")
        for k in parents:
            if not isinstance(node.get(k), dict):
                node[k] = {}
            node = node[k]
        node[last] = parsed
    return recipe


def load_recipe(
    path: str | Path, overrides: list[str] | None = None, env: dict[str, str] | None = None, resolve: bool = False
) -> dict:
    """The recipe YAML at ``path`` as a dict, with EasyR1's ``key=value`` ``overrides`` applied and, with
    ``resolve``, ``${oc.env:...}`` resolved from ``env`` (default: the environment). Raises :class:`RecipeError`."""

    path = Path(path)
    try:
        text = read_text(path)  # the one file reader: a FIFO, a folder or bytes that are not UTF-8 are refused
    except InputError as e:
        raise RecipeError(f"recipe {e}") from None
    raw = _yaml(text, f"recipe {path}") or {}
    if not isinstance(raw, dict):
        raise RecipeError(f"recipe {path}: not a YAML mapping")
    recipe = apply_overrides(raw, list(overrides or []))
    return resolve_env(recipe, env) if resolve else recipe


def main(argv: list[str] | None = None) -> int:
    """``python -m recipes value RECIPE KEY [OVERRIDE ...]``: print one value of the recipe (env resolved; empty
    when absent), for shell scripts."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 3 or argv[0] != "value":
        print("usage: python -m recipes value RECIPE KEY [KEY=VALUE ...]", file=sys.stderr)
        return 2
    try:
        recipe = load_recipe(argv[1], argv[3:], resolve=True)
    except RecipeError as e:
        print(f"python -m recipes value: error: {e}", file=sys.stderr)
        return 2
    value = dig(recipe, argv[2])
    print("" if value is None or isinstance(value, Unset) else value)
    return 0
