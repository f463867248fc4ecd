"""Layout parsers: PDF (+ optionally an existing parser output file) -> list of :class:`~data_prep.types.Block`.

Every parser returns blocks in display points (top-left origin, after ``/Rotate``) with 1-based pages, ids
0..N-1 in reading order, and types from :data:`~data_prep.types.BLOCK_TYPES`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from core.registry import Registry
from data_prep.document import Document
from data_prep.types import Block


class Parser(Protocol):
    name: str

    def version(self) -> str:
        """Version string that goes into the cache key (changes when the parser's output may change)."""

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        """Blocks of ``doc``. ``output``: an existing output file of the underlying tool to convert instead of
        running the tool. Raises :class:`~core.errors.InputError` when ``output`` belongs to another PDF."""


PARSERS: Registry[Parser] = Registry("parser", base=Parser, needs=("pdf", "output"))
# One line per parser: name, "module:class" (imported on first use, then checked against ``Parser``), what it is,
# what it needs (``pdf``: it reads the PDF itself; ``output``: it can convert an existing output file of its tool,
# ``--parser-output``).
PARSERS.add_lazy(
    "pdftext",
    "data_prep.parsers.pdftext:PdfTextParser",
    summary="the PDF's own text layer, grouped into blocks (CPU, no model)",
    needs=("pdf",),
)
PARSERS.add_lazy(
    "mineru",
    "data_prep.parsers.mineru:MinerUParser",
    summary="MinerU's layout model (its own venv; or its middle.json / content list)",
    needs=("pdf", "output"),
)
PARSERS.add_lazy("docling", "data_prep.parsers.docling:DoclingParser",
                 summary="Docling's layout model (optional extra; or its JSON export)", needs=("pdf", "output"))  # fmt: skip


def get_parser(name: str, **kwargs) -> Parser:
    """Instantiate a registered parser by name (``python -m quotecite plugins`` lists them)."""
    return PARSERS.create(name, **kwargs)


def parser_names() -> list[str]:
    return PARSERS.names()
