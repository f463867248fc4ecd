"""Layout parsers: PDF (+ optionally an existing parser output file) -> list of :class:`~data_prep.types.Block`.

Every parser returns blocks in display points (top-left origin, after ``/Rotate``) with 1-based pages, ids
0..N-1 in reading order, and types from :data:`~data_prep.types.BLOCK_TYPES`.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from data_prep.document import Document
from data_prep.registry import Registry
from data_prep.types import Block


class Parser(Protocol):
    name: str

    def version(self) -> str:
        """Version string that goes into the cache key (changes when the parser's output may change)."""

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        """Blocks of ``doc``. ``output``: an existing output file of the underlying tool to convert instead of
        running the tool. Raises :class:`~data_prep.types.InputError` when ``output`` belongs to another PDF."""


PARSERS: Registry[Parser] = Registry("parser")

_MODULES = ("data_prep.parsers.pdftext", "data_prep.parsers.mineru", "data_prep.parsers.docling")


def _load_all() -> None:
    for mod in _MODULES:
        importlib.import_module(mod)


def get_parser(name: str, **kwargs) -> Parser:
    """Instantiate a registered parser by name (``pdftext``, ``mineru``, ``docling``)."""
    _load_all()
    return PARSERS.create(name, **kwargs)


def parser_names() -> list[str]:
    _load_all()
    return PARSERS.names()
