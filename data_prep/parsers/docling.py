"""``docling``: convert a DoclingDocument (JSON) into blocks, or run Docling when it is installed.

DoclingDocument facts this module relies on (checked against the fixtures' schema 1.10):

* items live in ``texts``, ``tables``, ``pictures`` and ``groups``; the reading order is the tree under
  ``body`` (then ``furniture``), whose ``children`` are ``{"$ref": "#/texts/3"}`` pointers;
* each item has ``prov[]`` with a 1-based ``page_no``, a ``bbox`` ``{l, t, r, b}`` in PDF points and its
  ``coord_origin`` (``BOTTOMLEFT`` for items; ``TOPLEFT`` also occurs, e.g. in table cells), and a ``charspan``
  into the item's text; an item split over pages or columns has one prov per part;
* ``pages["n"].size`` is ``{width, height}`` in points;
* tables and pictures link their captions and footnotes with ``captions`` / ``footnotes`` lists of ``$ref``.

Output bboxes are ``(x0, y0, x1, y1)`` in PDF points, origin top-left of the displayed page (after ``/Rotate``),
pages 1-based. Docling's ``prov`` boxes and page sizes are taken to be in that displayed page's space (``BOTTOMLEFT``
origin flipped with the displayed height); on pages with ``/Rotate`` this is checked against the PDF's text layer
and an output whose boxes are in the unrotated frame is rejected (see :func:`_check_rotated_pages`).
Label mapping: title, section_header -> title; text, paragraph, reference -> text; list_item -> list;
caption -> table_caption / figure_caption (by the item that links it, else by its text); footnote -> table_footnote
when a table links it, else text; picture, chart -> figure; table, document_index -> table; formula -> equation;
page_header -> header; page_footer -> footer; anything else -> other. Text items that sit inside a picture
(chart labels) are folded into the figure's text instead of becoming blocks of their own.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import re
from pathlib import Path

from core.errors import InputError
from core.geometry import BBox, finite_box, page_box
from core.io import read_text
from data_prep.document import Document
from data_prep.text import token_f1, tokenize
from data_prep.types import Block, renumber

log = logging.getLogger(__name__)

_CHECKED_TYPES = ("title", "text", "list", "table_caption", "figure_caption", "table_footnote", "header", "footer")

DOCLING_JSON_VERSION = 1
"""Bumped when the conversion rules change (part of the cache key)."""

PAGE_SIZE_TOLERANCE = 1.0
"""Points by which a page size in the JSON may differ from the PDF's before the JSON is rejected."""

_LABELS = {
    "title": "title",
    "section_header": "title",
    "text": "text",
    "paragraph": "text",
    "reference": "text",
    "list_item": "list",
    "caption": "figure_caption",  # refined by the linking item
    "footnote": "text",  # refined by the linking item
    "picture": "figure",
    "chart": "figure",
    "table": "table",
    "document_index": "table",
    "formula": "equation",
    "page_header": "header",
    "page_footer": "footer",
}

_TABLE_CAPTION_RE = re.compile(r"^\s*(table|tab\.|表)", re.IGNORECASE)


def _docling_version() -> str | None:
    try:
        return importlib.metadata.version("docling")
    except importlib.metadata.PackageNotFoundError:
        return None


def _resolve(doc: dict, ref: str, source: str) -> tuple[str, int, dict]:
    """``"#/texts/3"`` -> ("texts", 3, item)."""
    m = re.fullmatch(r"#/(\w+)/(\d+)", ref or "")
    if not m:
        raise InputError(f"{source}: bad $ref {ref!r}")
    kind, idx = m.group(1), int(m.group(2))
    items = doc.get(kind)
    if not isinstance(items, list) or not 0 <= idx < len(items):
        raise InputError(f"{source}: $ref {ref!r} points at nothing")
    return kind, idx, items[idx]


def _table_text(item: dict) -> str:
    """Rows of cells joined with " | ", rows with newlines (a spanning cell is written once per row)."""
    data = item.get("data") or {}
    grid = data.get("grid")
    rows: list[list[str]] = []
    if grid:
        for row in grid:
            cells, seen = [], set()
            for cell in row:
                key = (cell.get("start_row_offset_idx"), cell.get("start_col_offset_idx"), cell.get("text", ""))
                if key in seen:
                    continue
                seen.add(key)
                cells.append(str(cell.get("text", "")).strip())
            if any(cells):
                rows.append(cells)
    else:
        by_row: dict[int, list[tuple[int, str]]] = {}
        for cell in data.get("table_cells", []):
            by_row.setdefault(int(cell.get("start_row_offset_idx", 0)), []).append(
                (int(cell.get("start_col_offset_idx", 0)), str(cell.get("text", "")).strip())
            )
        rows = [[t for _, t in sorted(cells)] for _, cells in sorted(by_row.items())]
    return "\n".join(" | ".join(r) for r in rows)


def _bbox(prov: dict, page_height: float, source: str) -> BBox:
    """A prov's box in display points, top-left origin; not yet checked against the page (see
    :func:`core.geometry.page_box`), so a NaN or infinite coordinate passes through to be reported there."""
    b = prov.get("bbox") or {}
    try:
        left, top, right, bottom = float(b["l"]), float(b["t"]), float(b["r"]), float(b["b"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{source}: a prov bbox lacks l/t/r/b: {b}") from None
    origin = str(b.get("coord_origin", "BOTTOMLEFT")).upper()
    if origin == "BOTTOMLEFT":
        y0, y1 = page_height - top, page_height - bottom
    elif origin == "TOPLEFT":
        y0, y1 = top, bottom
    else:
        raise InputError(f"{source}: unknown coord_origin {origin!r}")
    return (left, y0, right, y1)  # corners put in order by page_box (min/max would hide a NaN)


def convert_docling_dict(doc_json: dict, doc: Document, source: str) -> list[Block]:
    """Blocks of a DoclingDocument dict, checked against ``doc`` (page count and sizes).

    Raises :class:`InputError` naming ``source`` when the JSON is not a DoclingDocument or belongs to another PDF.
    """
    if not isinstance(doc_json, dict) or not isinstance(doc_json.get("pages"), dict) or "body" not in doc_json:
        raise InputError(f"{source}: not a DoclingDocument JSON (no 'pages'/'body')")
    pages: dict[int, tuple[float, float]] = {}
    for key, page in doc_json["pages"].items():
        try:
            no = int(page.get("page_no", key))
            pages[no] = (float(page["size"]["width"]), float(page["size"]["height"]))
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{source}: page {key!r} has no size") from None
    if len(pages) != doc.n_pages or sorted(pages) != list(range(1, doc.n_pages + 1)):
        raise InputError(
            f"{source}: describes {len(pages)} pages but {doc.path} has {doc.n_pages}; is it the output of another PDF?"
        )
    for no, (w, h) in pages.items():
        pw, ph = doc.page_sizes[no - 1]
        if abs(w - pw) > PAGE_SIZE_TOLERANCE or abs(h - ph) > PAGE_SIZE_TOLERANCE:
            raise InputError(
                f"{source}: page {no} is {w:.1f} x {h:.1f} pt but page {no} of {doc.path} is {pw:.1f} x {ph:.1f} pt; "
                "is it the output of another PDF?"
            )

    # Reading order: depth-first through body, then furniture, then anything the trees did not reach.
    order: list[tuple[str, int, dict]] = []
    seen: set[tuple[str, int]] = set()

    def walk(node: dict) -> None:
        for child in node.get("children", []) or []:
            kind, idx, item = _resolve(doc_json, child.get("$ref", ""), source)
            if (kind, idx) in seen:
                continue
            seen.add((kind, idx))
            order.append((kind, idx, item))
            walk(item)

    for root in ("body", "furniture"):
        if isinstance(doc_json.get(root), dict):
            walk(doc_json[root])
    for kind in ("texts", "tables", "pictures"):
        for idx, item in enumerate(doc_json.get(kind, []) or []):
            if (kind, idx) not in seen:
                seen.add((kind, idx))
                order.append((kind, idx, item))

    # Roles given by links: caption/footnote of which table or picture.
    linked: dict[tuple[str, int], tuple[str, str, int]] = {}  # text -> (role, owner kind, owner idx)
    for kind in ("tables", "pictures"):
        for idx, item in enumerate(doc_json.get(kind, []) or []):
            for role in ("captions", "footnotes"):
                for ref in item.get(role, []) or []:
                    k, i, _ = _resolve(doc_json, ref.get("$ref", ""), source)
                    linked[(k, i)] = (role, kind, idx)

    blocks: list[Block] = []
    labels: list[str] = []  # per block: the item it comes from, for messages
    first_block: dict[tuple[str, int], list[int]] = {}  # item -> its block ids
    pending_parent: list[tuple[int, tuple[str, int]]] = []
    figure_labels: dict[tuple[str, int], list[str]] = {}

    for kind, idx, item in order:
        if kind not in ("texts", "tables", "pictures"):
            continue
        label = str(item.get("label", ""))
        link = linked.get((kind, idx))
        parent_ref = (item.get("parent") or {}).get("$ref", "")
        if kind == "texts" and link is None and parent_ref.startswith("#/pictures/"):
            pk, pi, _ = _resolve(doc_json, parent_ref, source)
            figure_labels.setdefault((pk, pi), []).append(str(item.get("text", "")))
            continue
        if kind == "tables":
            type_, text = "table", _table_text(item)
        elif kind == "pictures":
            type_, text = "figure", ""
        else:
            type_ = _LABELS.get(label, "other")
            text = str(item.get("text", ""))
            if link is not None:
                role, owner_kind, _ = link
                if role == "captions":
                    type_ = "table_caption" if owner_kind == "tables" else "figure_caption"
                else:
                    type_ = "table_footnote" if owner_kind == "tables" else "text"
            elif label == "caption":
                type_ = "table_caption" if _TABLE_CAPTION_RE.match(text) else "figure_caption"
        provs = item.get("prov", []) or []
        spans = [p.get("charspan") for p in provs]
        split = (
            len(provs) > 1
            and kind == "texts"
            and all(isinstance(s, list) and len(s) == 2 and 0 <= s[0] <= s[1] <= len(text) for s in spans)
        )
        for n, prov in enumerate(provs):
            try:
                page_no = int(prov["page_no"])
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{source}: {kind}/{idx} has a prov without page_no") from None
            if page_no not in pages:
                raise InputError(f"{source}: {kind}/{idx} is on page {page_no}, which the JSON does not describe")
            bbox = finite_box(_bbox(prov, pages[page_no][1], source), page_no, source, f"{kind}/{idx}")
            part = text[spans[n][0] : spans[n][1]] if split else text
            bid = len(blocks)
            labels.append(f"{kind}/{idx}")
            blocks.append(Block(bid, page_no, bbox, type_, part.strip(), None))
            first_block.setdefault((kind, idx), []).append(bid)
            if link is not None:
                pending_parent.append((bid, (link[1], link[2])))

    # Fold chart labels into figure text; link captions/footnotes to the owner's block on the same page.
    for (kind, idx), texts in figure_labels.items():
        for bid in first_block.get((kind, idx), []):
            b = blocks[bid]
            blocks[bid] = Block(b.block_id, b.page, b.bbox, b.type, " ".join(t.strip() for t in texts if t), None)
    for bid, owner in pending_parent:
        owner_ids = first_block.get(owner, [])
        if not owner_ids:
            continue
        same_page = [o for o in owner_ids if blocks[o].page == blocks[bid].page]
        b = blocks[bid]
        blocks[bid] = Block(b.block_id, b.page, b.bbox, b.type, b.text, (same_page or owner_ids)[0])
    # Boxes of rotated pages are checked first: boxes in the unrotated frame run off the page, and that check
    # names the cause. Then the shared rule (core.geometry): off the page is an error, a small overshoot is
    # clipped, a region without area is dropped, as MinerU's converter does.
    _check_rotated_pages(blocks, doc, source)
    kept: list[Block] = []
    for b, label in zip(blocks, labels, strict=True):
        bbox = page_box(b.bbox, b.page, doc.page_sizes[b.page - 1], source, label)
        if bbox is not None:
            kept.append(Block(b.block_id, b.page, bbox, b.type, b.text, b.parent))
    if len(kept) < len(blocks):
        log.warning(
            "%s: %d Docling regions had no area on their page and were dropped", source, len(blocks) - len(kept)
        )
    return renumber(kept)


ROTATED_MIN_AGREEMENT = 0.5
"""On a page with ``/Rotate``, at least this share of text blocks must match the PDF's text inside their bbox."""


def _check_rotated_pages(blocks: list[Block], doc: Document, source: str) -> None:
    """Reject boxes that are not in the displayed page's space on pages with ``/Rotate``.

    Docling reports page sizes of the displayed page, but one of its backends (pypdfium2) has put text boxes of
    rotated pages in the unrotated frame (docling issue #4007); such boxes still fit the page for 180 degrees and
    cannot be told apart by size. The PDF's own text inside each text block's bbox settles it: on a rotated page
    with text, most text blocks must find their text there."""
    by_page: dict[int, list[Block]] = {}
    for b in blocks:
        if b.type in _CHECKED_TYPES and len(tokenize(b.text)) >= 2:
            by_page.setdefault(b.page, []).append(b)
    for page, items in sorted(by_page.items()):
        rotation = doc.page_rotation(page)
        if rotation == 0 or not doc.has_text(page):
            continue
        w, h = doc.page_sizes[page - 1]
        agree = 0
        for b in items:
            x0, y0, x1, y1 = b.bbox
            box = (max(0.0, x0), max(0.0, y0), min(w, x1), min(h, y1))
            inside = doc.text_in_bbox(page, box) if box[2] > box[0] and box[3] > box[1] else ""
            agree += token_f1(b.text, inside) >= 0.5
        if agree < ROTATED_MIN_AGREEMENT * len(items):
            raise InputError(
                f"{source}: page {page} has /Rotate {rotation} and only {agree} of {len(items)} text boxes hold their "
                f"text in {doc.path}; the boxes are not in the displayed page's space (convert with Docling's "
                "docling-parse backend)"
            )


class DoclingParser:
    """The ``docling`` parser: converts a DoclingDocument JSON, or runs Docling's converter when installed."""

    name = "docling"

    def version(self) -> str:
        v = _docling_version()
        return f"docling-json-{DOCLING_JSON_VERSION}" + (f"+docling-{v}" if v else "")

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        """Blocks of ``doc`` from ``output`` (a DoclingDocument JSON file), or from running Docling on the PDF."""
        if output is not None:
            output = Path(output)
            if not output.is_file():
                raise InputError(f"{output}: Docling output file not found")
            try:  # a regular file (never a FIFO waited on); NaN and infinities are allowed in boxes: the
                # converter's finite_box rule deals with each one
                data = json.loads(read_text(output, "Docling output"))
            except (OSError, json.JSONDecodeError, InputError) as e:  # InputError: not a regular file or not UTF-8
                raise InputError(f"{output}: not readable as JSON ({e})") from None
            except RecursionError:
                raise InputError(f"{output}: JSON nested too deeply to be a DoclingDocument") from None
            try:
                return convert_docling_dict(data, doc, str(output))
            except RecursionError:
                raise InputError(f"{output}: its item tree is nested too deeply (a reference cycle?)") from None
            except (AttributeError, TypeError) as e:  # a field of the wrong JSON type where an object was due
                raise InputError(f"{output}: malformed DoclingDocument ({e.__class__.__name__}: {e})") from None
        try:
            from docling.document_converter import DocumentConverter  # type: ignore[import-not-found]
        except ImportError:
            raise InputError(
                "docling is not installed (pip install '.[docling]'; it needs hub models); "
                "or convert an existing DoclingDocument JSON: pass --parser-output FILE"
            ) from None
        result = DocumentConverter().convert(str(doc.path))
        return convert_docling_dict(result.document.export_to_dict(), doc, f"Docling output for {doc.path}")
