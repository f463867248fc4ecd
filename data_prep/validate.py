"""The one validator of options and record fields: typed checks (finite, positive, bounded, one of, integer and
not bool) shared by every command.

Two faces of the same checks:

* **options** (argparse ``type=``): :func:`finite`, :func:`positive_float`, :func:`positive_int`,
  :func:`nonneg_int`, :func:`bounded_float`, :func:`bounded_int`, :func:`one_of` raise
  ``argparse.ArgumentTypeError``, so a bad flag is argparse's usual one-line ``error:``; :func:`check_option`
  applies the same check to a value that came from elsewhere (a recipe, ``reward_function_kwargs``, a setting)
  and raises :class:`~core.errors.InputError` naming it;
* **record fields**: :func:`field_int`, :func:`field_float`, :func:`field_str` read one field of a parsed record
  (``core.io.loads_record`` already bounded its numbers) and raise :class:`~core.errors.InputError`
  naming ``file:line``, the field and what is wrong. ``True`` is never an integer here.

>>> bounded_int(1, 10)("3"), finite("2.5"), one_of("a", "b")("b")
(3, 2.5, 'b')
>>> field_int({"page": 2}, "page", "gold.jsonl:4", lo=1)
2
>>> field_int({"page": True}, "page", "gold.jsonl:4")
Traceback (most recent call last):
...
core.errors.InputError: gold.jsonl:4: field 'page' must be an integer, got a bool (True)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from typing import Any

from core.errors import InputError

MAX_OPTION_CHARS = 64
"""A numeric option longer than this is refused before conversion (no 5,000-digit ``int()``)."""


def _number(text: str) -> float:
    if not isinstance(text, str):
        text = str(text)
    if len(text.strip()) > MAX_OPTION_CHARS:
        raise argparse.ArgumentTypeError(f"expected a number, got {len(text)} characters")
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _integer(text: str) -> int:
    if not isinstance(text, str):
        text = str(text)
    if len(text.strip()) > MAX_OPTION_CHARS:
        raise argparse.ArgumentTypeError(f"expected an integer, got {len(text)} characters")
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = name
    return fn


def finite(text: str) -> float:
    """argparse type: a finite number (``nan``, ``inf`` and overlong numbers refused)."""
    return _number(text)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def bounded_float(lo: float, hi: float, lo_open: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def parse(text: str) -> float:
        value = _number(text)
        if not (lo < value if lo_open else lo <= value) or value > hi:
            raise argparse.ArgumentTypeError(
                f"expected a number {'>' if lo_open else 'from'} {lo} to {hi}, got {text!r}"
            )
        return value

    return _named(parse, f"number {lo}..{hi}")


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """argparse type: an integer in ``[lo, hi]``."""

    def parse(text: str) -> int:
        value = _integer(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected an integer from {lo} to {hi}, got {value}")
        return value

    return _named(parse, f"integer {lo}..{hi}")


positive_int = _named(bounded_int(1, 2**62), "positive integer")
"""argparse type: an integer >= 1."""
nonneg_int = _named(bounded_int(0, 2**62), "non-negative integer")
"""argparse type: an integer >= 0 (a seed, a count that may be zero)."""
seed = _named(bounded_int(0, 2**32 - 1), "seed")
"""argparse type: a random seed, 0 .. 2**32 - 1 (what numpy accepts)."""


def one_of(*choices: str) -> Callable[[str], str]:
    """argparse type: one of ``choices``."""

    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return _named(parse, "one of " + "/".join(choices))


def check_option(check: Callable[[str], Any], value: Any, name: str) -> Any:
    """Apply an option check to a value from a recipe or a settings mapping: :class:`InputError` naming ``name``."""
    if isinstance(value, bool):
        raise InputError(f"{name}: expected a number, got {value!r}")
    try:
        return check(str(value))
    except argparse.ArgumentTypeError as e:
        raise InputError(f"{name}: {e}") from None


# ---------------------------------------------------------------------------------------------- record fields
_MISSING = object()


def _get(row: Mapping, key: str, where: str, default: Any) -> Any:
    if not isinstance(row, Mapping):
        raise InputError(f"{where}: expected a JSON object, got {type(row).__name__}")
    value = row.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is _MISSING:
            raise InputError(f"{where}: field {key!r} is missing")
        return default
    return value


def field_int(row: Mapping, key: str, where: str, lo: int | None = None, hi: int | None = None,
              default: Any = _MISSING) -> int:  # fmt: skip
    """``row[key]`` as an integer (a float with no fraction is accepted; a bool, a string, NaN are not), within
    ``[lo, hi]``."""
    value = _get(row, key, where, default)
    if value is default and default is not _MISSING:
        return value
    if isinstance(value, bool):
        raise InputError(f"{where}: field {key!r} must be an integer, got a bool ({value})")
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise InputError(f"{where}: field {key!r} must be an integer, got {value!r}")
        value = int(value)
    if not isinstance(value, int):
        raise InputError(f"{where}: field {key!r} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(f"{where}: field {key!r} = {value} is out of range [{lo}, {hi}]")
    return value


def field_float(row: Mapping, key: str, where: str, lo: float | None = None, hi: float | None = None,
                default: Any = _MISSING) -> float:  # fmt: skip
    """``row[key]`` as a finite float within ``[lo, hi]`` (a bool or a string is refused)."""
    value = _get(row, key, where, default)
    if value is default and default is not _MISSING:
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: field {key!r} must be a number, got {type(value).__name__} {str(value)[:40]!r}")
    try:
        value = float(value)
    except OverflowError:
        raise InputError(f"{where}: field {key!r} is too large to be a number") from None
    if not math.isfinite(value):
        raise InputError(f"{where}: field {key!r} must be a finite number, got {value!r}")
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise InputError(f"{where}: field {key!r} = {value} is out of range [{lo}, {hi}]")
    return value


def field_str(row: Mapping, key: str, where: str, default: Any = _MISSING, max_len: int | None = None) -> str:
    """``row[key]`` as a string (a number or a list is refused)."""
    value = _get(row, key, where, default)
    if value is default and default is not _MISSING:
        return value
    if not isinstance(value, str):
        raise InputError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if max_len is not None and len(value) > max_len:
        raise InputError(f"{where}: field {key!r} is {len(value)} characters (more than {max_len})")
    return value


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (not a bool) that converts to a finite float (no ``OverflowError``).

    >>> finite_number(3), finite_number(True), finite_number(10**400), finite_number(float("nan"))
    (True, False, False, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False
