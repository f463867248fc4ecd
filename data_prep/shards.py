"""Stable shards for job arrays: ``--shard I/N`` takes the I-th of N parts of a set of items.

Shards are 1-based (``1/4`` .. ``4/4``, "part I of N"), so a Slurm array submitted as ``--array=1-N`` hands each
task its shard as ``SLURM_ARRAY_TASK_ID/N`` unchanged. An item's shard is decided by a hash of its key alone (the
LongDocURL ``doc_no``, a gold question's index), never by its position in a list, so adding or removing an item
moves no other item to another shard, and a rerun of one task redoes exactly the same items.

>>> Shard.parse("2/4")
Shard(index=2, count=4)
>>> sorted({shard_of(f"doc{i}", 3) for i in range(30)})
[1, 2, 3]
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from core.errors import InputError

T = TypeVar("T")


def shard_of(key: str, count: int) -> int:
    """The 1-based shard (``1..count``) of ``key``: the first 8 bytes of its sha256, modulo ``count``, plus one."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count + 1


def shard_plan(keys: Iterable[str], count: int, noun: str) -> list[str]:
    """One line per shard saying how many of ``keys`` it holds (the launch scripts' dry-run plans).

    >>> shard_plan([f"doc{i}" for i in range(10)], 2, "documents")
    ['#   shard 1/2: 2 of 10 documents', '#   shard 2/2: 8 of 10 documents']
    """
    keys = list(keys)
    by_shard = Counter(shard_of(k, count) for k in keys)
    return [f"#   shard {i}/{count}: {by_shard[i]} of {len(keys)} {noun}" for i in range(1, count + 1)]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``1 <= index <= count``)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str, flag: str = "--shard") -> Shard:
        """``"I/N"`` with ``1 <= I <= N``; InputError naming ``flag`` and the value otherwise."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m:
            raise InputError(f"{flag} {text!r}: expected I/N, the I-th of N shards (1-based, e.g. 1/4)")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1:
            raise InputError(f"{flag} {text!r}: the number of shards must be at least 1")
        if not 1 <= index <= count:
            raise InputError(f"{flag} {text!r}: shards are numbered 1..{count} (1-based), got {index}")
        return cls(index, count)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def holds(self, key: str) -> bool:
        """Whether ``key`` falls into this shard."""
        return shard_of(key, self.count) == self.index

    def select(self, items: Iterable[T], key: Callable[[T], str]) -> list[T]:
        """The items whose ``key`` falls into this shard, in their order."""
        return [x for x in items if self.holds(key(x))]
