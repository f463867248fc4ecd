"""Types produced by the document stage and read by every later stage.

Coordinate convention (used everywhere in this project unless a name says otherwise):
``bbox = (x0, y0, x1, y1)`` in PDF points (1/72 inch), origin at the top-left of the page *as displayed*,
i.e. after the page's ``/Rotate`` entry has been applied (the same space as a rendered page image, scaled
by ``dpi / 72``). Pages are 1-based.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from core.geometry import BBox

BLOCK_TYPES: tuple[str, ...] = (
    "title",
    "text",
    "list",
    "table",
    "table_caption",
    "table_footnote",
    "figure",
    "figure_caption",
    "equation",
    "header",
    "footer",
    "other",
)
"""The closed vocabulary of block types. Parsers map their own labels onto it."""


@dataclass(frozen=True)
class Block:
    """One layout region of a document.

    Attributes:
        block_id: index of the block in its document, 0..N-1 (row of ``embeddings.npy``).
        page: 1-based page number.
        bbox: ``(x0, y0, x1, y1)`` in PDF points, origin top-left of the displayed (rotated) page.
        type: one of :data:`BLOCK_TYPES`.
        text: the block's text ("" for a figure without text).
        parent: ``block_id`` of the enclosing table/figure block, or None.
    """

    block_id: int
    page: int
    bbox: BBox
    type: str
    text: str
    parent: int | None = None

    def __post_init__(self) -> None:
        if self.type not in BLOCK_TYPES:
            raise ValueError(f"block {self.block_id}: unknown type {self.type!r}; expected one of {BLOCK_TYPES}")
        if self.page < 1:
            raise ValueError(f"block {self.block_id}: page must be 1-based, got {self.page}")
        if len(self.bbox) != 4 or not all(math.isfinite(v) for v in self.bbox):
            raise ValueError(f"block {self.block_id}: bbox must be 4 finite numbers, got {self.bbox}")
        x0, y0, x1, y1 = self.bbox
        if x1 < x0 or y1 < y0:
            raise ValueError(f"block {self.block_id}: bbox {self.bbox} has x1 < x0 or y1 < y0")

    def to_json(self) -> dict:
        d = asdict(self)
        d["bbox"] = [round(float(v), 3) for v in self.bbox]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Block:
        return cls(
            block_id=int(d["block_id"]),
            page=int(d["page"]),
            bbox=tuple(float(v) for v in d["bbox"]),
            type=str(d["type"]),
            text=str(d["text"]),
            parent=None if d.get("parent") is None else int(d["parent"]),
        )


def renumber(blocks: list[Block]) -> list[Block]:
    """Give blocks consecutive ids 0..N-1 in list order, remapping ``parent`` references.

    Parsers build blocks with provisional ids; this makes the ids the row index of the embedding matrix.
    """
    mapping = {b.block_id: i for i, b in enumerate(blocks)}
    out = []
    for i, b in enumerate(blocks):
        parent = mapping.get(b.parent) if b.parent is not None else None
        out.append(Block(i, b.page, b.bbox, b.type, b.text, parent))
    return out
