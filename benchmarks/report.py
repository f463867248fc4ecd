"""Printing helpers shared by the benchmarks (``make bench``)."""

from __future__ import annotations


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """A right-aligned plain-text table on stdout."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    line = "  ".join(f"{{:>{w}}}" for w in widths)
    print(f"\n{title}")
    print(line.format(*header))
    print(line.format(*["-" * w for w in widths]))
    for row in rows:
        print(line.format(*row))
