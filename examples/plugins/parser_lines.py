"""A parser plug-in: one ``text`` block per line of the PDF's text layer.

No layout model: every run of text on one line (``Document.text_lines``: its display box in points, top-left
origin, after ``/Rotate``) becomes a block, pages 1-based, ids 0..N-1 in reading order, as every parser must
return. Finer than ``pdftext`` (which groups lines into paragraphs), so a quote of one line resolves to exactly it.

Use it: ``PYTHONPATH=examples/plugins python -m quotecite plugins --import parser_lines`` lists it; in your own code,
``import parser_lines`` and then ``data_prep.parsers.get_parser("lines")``.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.document import Document
from data_prep.parsers import PARSERS
from data_prep.types import Block


@PARSERS.register("lines", summary="one text block per line of the PDF's text layer (CPU, no model)", needs=("pdf",))
class LinesParser:
    """One ``text`` block per line of the text layer."""

    name = "lines"

    def version(self) -> str:
        return "1"  # goes into the cache key: change it whenever the blocks it returns may change

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        blocks: list[Block] = []
        for page in range(1, doc.n_pages + 1):
            for line in doc.text_lines(page):
                text = line.text.replace("\u00ad", "").strip()
                if text:
                    blocks.append(Block(len(blocks), page, tuple(line.bbox), "text", text))
        return blocks
