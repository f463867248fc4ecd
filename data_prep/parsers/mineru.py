"""MinerU layout parser: convert MinerU's output files to blocks, or run MinerU itself.

Supported output files (the schema is detected from the content, not the file name):

* MinerU 0.10 ``*_middle.json``: ``pdf_info[].page_idx`` (0-based), ``page_size`` ``[w, h]`` floats in points,
  ``para_blocks`` with bboxes in points (top-left origin). Paragraphs that continue across columns or pages are
  *merged*: the surviving block gathers every line but keeps only its first part's bbox, and each merged-away
  block is left with ``lines: []``, ``lines_deleted: true`` and a fractional ``index``.
* MinerU 2.x ``*_middle.json`` (``_backend`` ``pipeline``/``vlm``): the same layout with ``page_size`` truncated to
  ints; image/table blocks nest ``image_body``/``image_caption``/``image_footnote``/``table_body``/
  ``table_caption``/``table_footnote`` children, each with its own bbox; table spans carry ``html``; tables merged
  across pages leave an empty ``table_body`` behind as well.
* MinerU 4.x ``docvortex.middle`` schema 2.0 (``mineru-kit parse -f middle_json``): ``metadata.producer``,
  ``pages[].page_idx`` (0-based), ``pages[].blocks[]`` with ``type``, ``index``, ``bbox`` normalised 0-1 of the
  displayed page, ``content`` (a list of inline spans, a string, or a list of child blocks); ``table``/``image``/
  ``chart``/``code`` nest ``*_body``/``*_caption``/``*_footnote`` children; page sizes in points, when present,
  are in ``extensions.docvortex_layout.pages[]``. Paragraphs continued elsewhere stay separate blocks
  (``continues_prev``), so 4.x has no merge trap.
* MinerU 2.x ``*_content_list.json``: a flat list with ``bbox`` ints on a 0-1000 scale of the page. It has no
  per-line boxes and no caption boxes, so it is lossy: captions and footnotes are folded into their figure/table
  block's text, and a paragraph MinerU merged across columns keeps its first part's box (prefer middle.json).
  The 0.10 content_list has no boxes at all and is rejected.

Every converted bbox is in PDF points, origin top-left of the displayed page (after ``/Rotate``), clipped to the
page; pages are 1-based; ``parent`` is the block id of the enclosing table/figure body for captions and
footnotes. The merge trap (a crop of the surviving bbox shows half the text) is undone for middle.json: the
surviving block's lines are split back over the merged-away blocks' own boxes (see :func:`_split_merged`), so
each region carries the text of its own lines.

Running MinerU (``parse(doc, None)``): ``mineru-kit parse PDF --tier TIER -f middle_json -o OUT`` in a
subprocess with ``HOME`` set to a scratch directory; MinerU 4.0.12's ``flash`` tier runs on a CPU offline.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from core.errors import InputError
from core.geometry import BBox, finite_box, page_box
from core.io import read_text
from data_prep.document import Document
from data_prep.parsers.mineru_run import installed_version, run_mineru
from data_prep.parsers.mineru_text import _inline_text, _lines_text, _markdown_math, _math, html_table_text
from data_prep.types import Block, renumber

log = logging.getLogger(__name__)

CONVERTER_REVISION = 1
"""Bump when the conversion's output may change: it is part of :meth:`MinerUParser.version` (the cache key)."""

TIERS = ("flash", "basic", "standard", "advanced")
"""``mineru-kit parse --tier`` values. Only ``flash`` runs without models; the others need a GPU cluster."""

_REPO = Path(__file__).resolve().parents[2]

# MinerU label -> our vocabulary (data_prep.types.BLOCK_TYPES). Footnotes of figures have no type of their own in
# the vocabulary and become figure captions; code listings have none either and become "other".
_TYPE_MAP = {
    "text": "text",
    "ref_text": "text",
    "title": "title",
    "doc_title": "title",
    "paragraph_title": "title",
    "list": "list",
    "index": "list",  # a table of contents is a list of entries
    "interline_equation": "equation",
    "equation": "equation",
    "table_body": "table",
    "table_caption": "table_caption",
    "table_footnote": "table_footnote",
    "image_body": "figure",
    "image_caption": "figure_caption",
    "image_footnote": "figure_caption",
    "chart_body": "figure",
    "chart_caption": "figure_caption",
    "chart_footnote": "figure_caption",
    "code_body": "other",
    "algorithm_body": "other",
    "code_caption": "other",
    "code_footnote": "other",
    "header": "header",
    "footer": "footer",
    "page_footnote": "other",
    "aside_text": "other",
}
_BODY_TYPES = {"table_body", "image_body", "chart_body", "code_body", "algorithm_body"}
_BY_POSITION = {"discarded", "page_number"}  # header or footer depending on where the block sits
_FILL_TYPES = {"table", "equation", "header", "footer"}  # missing text may come from the PDF text layer
_MAX_CHAIN = 8  # merged-away parts considered per surviving block (a paragraph spans a few columns at most)
_FURNITURE = {"discarded", "page_number", "aside_text", "page_footnote"}  # sorted after the page body
_V4_CHILD_TYPES = {t for t in _TYPE_MAP if t.endswith(("_body", "_caption", "_footnote")) and t != "page_footnote"}


# ---------------------------------------------------------------------------------------------------- geometry
def _center(b: list[float]) -> tuple[float, float]:
    return (b[0] + b[2]) / 2, (b[1] + b[3]) / 2


def _inside(pt: tuple[float, float], b: list[float], tol: float) -> bool:
    return b[0] - tol <= pt[0] <= b[2] + tol and b[1] - tol <= pt[1] <= b[3] + tol


# ---------------------------------------------------------------------------------------------------- conversion
@dataclass
class _Unit:
    """A leaf region of a 0.10/2.x middle.json before conversion. ``bbox`` in points (top-left), ``page`` 1-based."""

    seq: int
    page: int
    kind: str  # MinerU label
    bbox: list[float]
    lines: list[dict]
    deleted: bool  # merged away: its lines now live in an earlier unit
    group: int | None = None  # seq of the body unit of its image/table group, for captions and footnotes
    text: str | None = None
    claimed: bool = False
    continued: bool = False  # a table body whose continuation on a later page was merged into it


def _split_merged(units: list[_Unit], tol: float, plain: bool) -> None:
    """Undo MinerU's paragraph merging in place: give each merged-away unit the lines that came from it.

    MinerU appends the lines of a continuation (next column or next page) to the first part and empties the
    continuation, which keeps its own bbox. The surviving unit's lines are walked in order; a line moves on to the
    next unclaimed empty unit of the same label when its centre lies in that unit's bbox and it is outside the
    current region, or it jumps back up the page (a new column or page), or it is marked ``cross_page``."""
    orphans = [u for u in units if u.deleted]
    orphan_seqs = [o.seq for o in orphans]
    for u in units:
        if u.deleted or not u.lines:
            continue
        # A chain of continuations is short: look at the next few unclaimed empty units of the same label only.
        start = bisect.bisect_right(orphan_seqs, u.seq)
        candidates = (orphans[k] for k in range(start, len(orphans)))
        after = list(itertools.islice((o for o in candidates if not o.claimed and o.kind == u.kind), _MAX_CHAIN))
        if not after:
            u.text = _lines_text(u.lines, plain)
            continue
        current, i = u, 0
        parts: dict[int, list[dict]] = {u.seq: []}
        prev_y: float | None = None
        for line in u.lines:
            lb = line.get("bbox") or current.bbox
            c = _center(lb)
            nxt = after[i] if i < len(after) else None
            if nxt is not None and _inside(c, nxt.bbox, tol):
                height = max(2.0, lb[3] - lb[1])
                jumped = prev_y is not None and c[1] < prev_y - height
                # cross_page marks lines that came from the page after the *first* part's page.
                cross = current is u and nxt.page != u.page and any(s.get("cross_page") for s in line.get("spans", []))
                near = nxt.page in (current.page, current.page + 1)
                if near and (not _inside(c, current.bbox, tol) or jumped or cross):
                    current, i = nxt, i + 1
                    nxt.claimed = True
                    parts[current.seq] = []
            parts[current.seq].append(line)
            prev_y = c[1]
        by_seq = {o.seq: o for o in after}
        for seq, lines in parts.items():
            (u if seq == u.seq else by_seq[seq]).text = _lines_text(lines, plain)
    # Table bodies merged across pages: the HTML of both parts sits in the first; neither can be split by rows.
    last_body: _Unit | None = None
    for u in units:
        if u.kind != "table_body":
            continue
        if u.deleted and not u.claimed and last_body is not None:
            last_body.continued = True
        elif not u.deleted:
            last_body = u


def _page_band_type(bbox: BBox, height: float, band: float) -> str:
    cy = (bbox[1] + bbox[3]) / 2
    if cy < band * height:
        return "header"
    if cy > (1 - band) * height:
        return "footer"
    return "other"


@dataclass
class _Out:
    """A converted block before ids are final: ``bbox`` in display points, ``page`` 1-based."""

    key: int
    page: int
    bbox: BBox
    type: str
    text: str
    parent_key: int | None = None
    mineru_type: str = ""


@dataclass
class MinerUParser:
    """MinerU as a :class:`~data_prep.parsers.Parser`: converts MinerU output files (0.10/2.x ``middle.json``,
    4.x ``docvortex.middle`` 2.0, 2.x ``content_list.json``) or runs ``mineru-kit`` when it is installed."""

    name: ClassVar[str] = "mineru"

    tier: str = "flash"
    """MinerU 4 parse tier: ``flash`` (CPU, no models, the default) or ``basic``/``standard``/``advanced`` (models
    from a hub; use on a GPU cluster)."""
    binary: str | None = None
    """Path of ``mineru-kit``; default: env ``QUOTECITE_MINERU_BIN``, else ``<repo>/.venv-mineru/bin/mineru-kit``,
    else ``mineru-kit`` on ``PATH``."""
    timeout_s: float = 1800.0
    """Seconds one MinerU run may take before it is killed (flash runs ~1-3 s a page on 2 cores)."""
    home: str | None = None
    """``HOME`` for the MinerU process (it writes ``~/.mineru`` and model caches there); None: a fresh scratch
    directory per run. Set a persistent directory on a cluster so that model downloads are reused."""
    math_text: str = "plain"
    """How formulas enter block text: ``plain`` (LaTeX commands dropped, symbols as Unicode: what a reader quoting
    the rendered page types, and what the text layer holds) or ``latex`` (MinerU's LaTeX, ``$...$`` inline)."""
    fill_from_text_layer: bool = True
    """Give table, equation, header and footer regions that MinerU left without text (0.10 table images and
    discarded blocks, ``flash``-tier equations, tables merged across pages) the PDF text layer inside their bbox."""
    margin_band: float = 0.2
    """Share of the page height at the top/bottom where a discarded block counts as header/footer (else other)."""
    page_size_tolerance_pt: float = 1.5
    """Points a page size in the output may differ from the PDF's (2.x truncates sizes to ints)."""
    merge_tolerance_pt: float = 3.0
    """Points by which a line's centre may lie outside a region's bbox and still belong to it (merge undoing)."""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"mineru tier must be one of {TIERS}, got {self.tier!r}")
        if self.math_text not in ("plain", "latex"):
            raise ValueError(f"mineru math_text must be 'plain' or 'latex', got {self.math_text!r}")

    # ------------------------------------------------------------------ protocol
    def resolved_binary(self) -> str | None:
        """The ``mineru-kit`` executable that runs would use, or None when none is installed."""
        explicit = self.binary or os.environ.get("QUOTECITE_MINERU_BIN")
        if explicit:
            return explicit if Path(explicit).is_file() else None
        local = _REPO / ".venv-mineru" / "bin" / "mineru-kit"
        if local.is_file():
            return str(local)
        return shutil.which("mineru-kit")

    def version(self) -> str:
        """``mineru-<installed version>-<tier>`` or ``mineru-convert`` when MinerU is not installed, plus the
        converter revision (``-c<N>``) so that a change of this module invalidates caches."""
        binary = self.resolved_binary()
        ver = installed_version(binary) if binary else None
        base = f"mineru-{ver}-{self.tier}" if ver else "mineru-convert"
        return f"{base}-c{CONVERTER_REVISION}"

    def parse(self, doc: Document, output: Path | None = None) -> list[Block]:
        """Blocks of ``doc`` from an existing MinerU output file, or from running MinerU when ``output`` is None.

        Raises :class:`InputError` (one line, naming the file) when the output is not a MinerU output, belongs to
        another PDF (page count or page size mismatch), or when MinerU is missing, fails or times out."""
        if output is None:
            return self.run(doc)
        return self.convert(doc, Path(output))

    # ------------------------------------------------------------------ running
    def run(self, doc: Document) -> list[Block]:
        """Run MinerU on ``doc.path`` and convert its middle JSON. Raises :class:`InputError` on failure."""
        binary = self.resolved_binary()
        if binary is None:
            wanted = self.binary or os.environ.get("QUOTECITE_MINERU_BIN")
            where = f"{wanted} does not exist" if wanted else "no mineru-kit in .venv-mineru or on PATH"
            raise InputError(f"{doc.path}: cannot run MinerU ({where}); run `make mineru` or set QUOTECITE_MINERU_BIN")
        t0 = time.monotonic()
        with run_mineru(binary, Path(doc.path), self.tier, self.timeout_s, self.home, _is_middle) as found:
            seconds = time.monotonic() - t0
            blocks = self.convert(doc, found)
        log.info("mineru %s: %d pages -> %d blocks in %.1f s", doc.path, doc.n_pages, len(blocks), seconds)
        return blocks

    # ------------------------------------------------------------------ conversion
    def convert(self, doc: Document, output: Path) -> list[Block]:
        """Convert a MinerU output file (schema detected from its content) into blocks of ``doc``."""
        output = Path(output)
        if not output.is_file():
            raise InputError(f"{output}: MinerU output file not found")
        try:  # a regular file (never a FIFO waited on); NaN and infinities are allowed: MinerU writes them in
            # boxes, and the converter's finite_box rule deals with each one
            data = json.loads(read_text(output, "MinerU output"))
        except json.JSONDecodeError as e:
            raise InputError(f"{output}: not a JSON file ({e.__class__.__name__}: {e})") from None
        except InputError as e:  # not a regular file, or not UTF-8 text
            raise InputError(f"{output}: not a JSON file ({e})") from None
        except RecursionError:
            raise InputError(f"{output}: JSON nested too deeply to be a MinerU output") from None
        schema = detect_schema(data)
        converters = {
            "legacy_middle": self._convert_legacy,
            "docvortex_middle": self._convert_v4,
            "content_list": self._convert_content_list,
        }
        if schema in converters:
            try:
                return self._finish(doc, converters[schema](doc, output, data), output)
            except InputError:
                raise
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, RecursionError) as e:
                raise InputError(f"{output}: malformed MinerU {schema} file ({e.__class__.__name__}: {e})") from None
        if schema == "content_list_v0":
            raise InputError(f"{output}: a MinerU 0.10 content_list.json has no boxes; give its middle.json instead")
        elif schema == "docvortex_other":
            found = f"{data.get('schema')} {data.get('schema_version', '?')}"
            raise InputError(
                f"{output}: a {found} file; expected docvortex.middle 2.0 (mineru-kit ... -f middle_json)"
            )
        elif schema == "model_json":
            raise InputError(f"{output}: a MinerU model.json (raw layout detections); give the middle.json instead")
        else:
            raise InputError(
                f"{output}: unknown schema; expected a MinerU middle.json (pdf_info), a docvortex.middle 2.0 file "
                "or a content_list.json"
            )

    def _finish(self, doc: Document, outs: list[_Out], source: Path | str) -> list[Block]:
        """Check boxes against their page by the shared rule (:func:`core.geometry.page_box`: a NaN or
        infinite coordinate or a box off the page is an error, a small overshoot is clipped, a region without area
        is dropped), fill empty table/equation text, number 0..N-1."""
        blocks: list[Block] = []
        dropped = 0
        for o in outs:
            bbox = page_box(o.bbox, o.page, doc.page_sizes[o.page - 1], str(source), f"{o.mineru_type or 'region'}")
            if bbox is None:
                dropped += 1
                continue
            text = o.text.strip()
            if not text and self.fill_from_text_layer and o.type in _FILL_TYPES:
                text = _clean_layer_text(doc.text_in_bbox(o.page, bbox))
            blocks.append(Block(o.key, o.page, bbox, o.type, text, o.parent_key))
        if dropped:
            log.warning("%s: %d MinerU regions had no area on their page and were dropped", doc.path, dropped)
        return renumber(blocks)

    # 0.10 / 2.x middle.json ----------------------------------------------------------------------------------
    def _convert_legacy(self, doc: Document, path: Path, data: dict) -> list[_Out]:
        plain = self.math_text == "plain"
        pages = data.get("pdf_info")
        if not isinstance(pages, list) or not all(isinstance(p, dict) and "page_idx" in p for p in pages):
            raise InputError(f"{path}: pdf_info is not a list of pages with page_idx")
        if len(pages) != doc.n_pages:
            raise InputError(
                f"{path}: has {len(pages)} pages but {doc.path} has {doc.n_pages} (belongs to another PDF?)"
            )
        for p in pages:
            idx = p["page_idx"]
            if not isinstance(idx, int) or not 0 <= idx < doc.n_pages:
                raise InputError(f"{path}: page_idx {idx!r} out of range for {doc.path} ({doc.n_pages} pages)")
            size = p.get("page_size")
            if size:
                self._check_size(path, doc, idx + 1, float(size[0]), float(size[1]))

        units: list[_Unit] = []
        discarded: list[_Unit] = []
        seq = 0
        for p in sorted(pages, key=lambda p: p["page_idx"]):
            page = p["page_idx"] + 1
            for b in p.get("para_blocks") or []:
                children = b.get("blocks")
                if children:  # image / table group: a body plus captions and footnotes
                    kids = sorted(children, key=lambda c: _num(c.get("index")))
                    body_seq = None
                    start = len(units)
                    for c in kids:
                        units.append(_legacy_unit(seq, page, c))
                        if c.get("type") in _BODY_TYPES and body_seq is None:
                            body_seq = seq
                        seq += 1
                    for u in units[start:]:
                        if u.seq != body_seq:
                            u.group = body_seq
                else:
                    units.append(_legacy_unit(seq, page, b))
                    seq += 1
            for b in p.get("discarded_blocks") or []:
                discarded.append(_legacy_unit(seq, page, b))
                seq += 1
        _split_merged(units, self.merge_tolerance_pt, plain)

        outs: list[_Out] = []
        by_page: dict[int, list[_Out]] = {}
        for u in units:
            if u.deleted and not u.claimed and u.kind not in _BODY_TYPES:
                continue  # merged away and none of its lines could be placed: its text lives in its first part
            text = u.text if u.text is not None else _lines_text(u.lines, plain)
            if u.continued and self.fill_from_text_layer:
                # The HTML holds the rows of both parts; the crop shows one part: take what the crop shows.
                layer = _clean_layer_text(doc.text_in_bbox(u.page, tuple(u.bbox)))
                text = layer or text
            kind = _TYPE_MAP.get(u.kind, "other")
            by_page.setdefault(u.page, []).append(_Out(u.seq, u.page, tuple(u.bbox), kind, text, u.group, u.kind))
        for u in discarded:
            h = doc.page_sizes[u.page - 1][1]
            if u.kind in _BY_POSITION or u.kind not in _TYPE_MAP:
                kind = _page_band_type(tuple(u.bbox), h, self.margin_band)
            else:
                kind = _TYPE_MAP[u.kind]
            text = _lines_text(u.lines, plain)
            by_page.setdefault(u.page, []).append(_Out(u.seq, u.page, tuple(u.bbox), kind, text, None, u.kind))
        for page in sorted(by_page):
            outs.extend(_reading_order(by_page[page]))
        return outs

    def _check_size(self, path: Path, doc: Document, page: int, w: float, h: float) -> None:
        pw, ph = doc.page_sizes[page - 1]
        tol = self.page_size_tolerance_pt
        if abs(w - pw) > tol or abs(h - ph) > tol:
            raise InputError(
                f"{path}: page {page} is {w:g}x{h:g} pt but in {doc.path} it is {pw:g}x{ph:g} pt "
                "(belongs to another PDF?)"
            )

    # 4.x docvortex.middle 2.0 --------------------------------------------------------------------------------
    def _convert_v4(self, doc: Document, path: Path, data: dict) -> list[_Out]:
        plain = self.math_text == "plain"
        pages = data.get("pages")
        if not isinstance(pages, list) or not all(isinstance(p, dict) and "page_idx" in p for p in pages):
            raise InputError(f"{path}: docvortex.middle without a pages[] list of pages with page_idx")
        meta_doc = (data.get("metadata") or {}).get("document") or {}
        declared = meta_doc.get("page_count")
        if isinstance(declared, int) and declared != doc.n_pages:
            raise InputError(
                f"{path}: has {declared} pages but {doc.path} has {doc.n_pages} (belongs to another PDF?)"
            )
        if data.get("is_full_document", True) and declared is None and len(pages) != doc.n_pages:
            raise InputError(
                f"{path}: has {len(pages)} pages but {doc.path} has {doc.n_pages} (belongs to another PDF?)"
            )
        layout = ((data.get("extensions") or {}).get("docvortex_layout") or {}).get("pages") or []
        for lp in layout:
            if isinstance(lp, dict) and "width_pt" in lp and isinstance(lp.get("page_idx"), int):
                if not 0 <= lp["page_idx"] < doc.n_pages:
                    raise InputError(f"{path}: page_idx {lp['page_idx']} out of range for {doc.path}")
                self._check_size(path, doc, lp["page_idx"] + 1, float(lp["width_pt"]), float(lp["height_pt"]))

        outs: list[_Out] = []
        key = 0
        for p in sorted(pages, key=lambda p: p["page_idx"]):
            idx = p["page_idx"]
            if not isinstance(idx, int) or not 0 <= idx < doc.n_pages:
                raise InputError(f"{path}: page_idx {idx!r} out of range for {doc.path} ({doc.n_pages} pages)")
            page = idx + 1
            w, h = doc.page_sizes[idx]
            page_outs: list[_Out] = []
            for b in p.get("blocks") or []:
                if not isinstance(b, dict) or "type" not in b:
                    raise InputError(f"{path}: page {page}: a block without a type")
                bbox = _v4_bbox(path, page, b.get("bbox"), None, w, h)
                kind = b["type"]
                content = b.get("content")
                is_group = (
                    isinstance(content, list)
                    and content
                    and all(isinstance(c, dict) and c.get("type") in _V4_CHILD_TYPES for c in content)
                )
                if is_group:
                    kids = sorted(content, key=lambda c: _num(c.get("index")))
                    body_key = None
                    start = len(page_outs)
                    for c in kids:
                        cb = _v4_bbox(path, page, c.get("bbox"), bbox, w, h)
                        ctype = c["type"]
                        text = _inline_text(c.get("content"), plain)
                        if ctype == "table_body" or (ctype == "chart_body" and "<table" in text):
                            text = html_table_text(text) if "<" in text else text
                        page_outs.append(_Out(key, page, cb, _TYPE_MAP.get(ctype, "other"), text, None, ctype))
                        if ctype in _BODY_TYPES and body_key is None:
                            body_key = key
                        key += 1
                    for o in page_outs[start:]:
                        if o.key != body_key:
                            o.parent_key = body_key
                    continue
                text = _inline_text(content, plain)
                if kind == "equation" and isinstance(content, str):
                    text = _math(content, plain, inline=False)
                if kind in _BY_POSITION:
                    ours = _page_band_type(bbox, h, self.margin_band)
                else:
                    ours = _TYPE_MAP.get(kind, "other")
                page_outs.append(_Out(key, page, bbox, ours, text, None, kind))
                key += 1
            outs.extend(_reading_order(page_outs))
        return outs

    # 2.x content_list.json -------------------------------------------------------------------------------------
    def _convert_content_list(self, doc: Document, path: Path, data: list) -> list[_Out]:
        plain = self.math_text == "plain"
        top = max((int(x.get("page_idx", 0)) for x in data), default=-1)
        if top >= doc.n_pages:
            raise InputError(
                f"{path}: refers to page {top + 1} but {doc.path} has {doc.n_pages} pages (belongs to another PDF?)"
            )
        log.warning("%s: content_list.json has no caption or line boxes; middle.json converts more exactly", path)
        by_page: dict[int, list[_Out]] = {}
        for key, x in enumerate(data):
            page = int(x.get("page_idx", 0)) + 1
            w, h = doc.page_sizes[page - 1]
            b = x.get("bbox")
            if not (isinstance(b, list) and len(b) == 4):
                continue
            bbox = (b[0] / 1000 * w, b[1] / 1000 * h, b[2] / 1000 * w, b[3] / 1000 * h)
            kind = x.get("type", "")
            if kind == "text" and x.get("text_level"):
                ours, text = "title", x.get("text", "")
            elif kind == "table":
                ours = "table"
                cells = html_table_text(x["table_body"]) if x.get("table_body") else ""
                text = "\n".join(t for t in [*x.get("table_caption", []), cells, *x.get("table_footnote", [])] if t)
            elif kind in ("image", "chart"):
                ours = "figure"
                caps = x.get("image_caption") or x.get("img_caption") or x.get("chart_caption") or []
                notes = x.get("image_footnote") or x.get("img_footnote") or x.get("chart_footnote") or []
                text = "\n".join(t for t in [*caps, *notes] if t)
            elif kind == "list":
                ours, text = "list", "\n".join(x.get("list_items") or []) or x.get("text", "")
            elif kind == "code":
                ours, text = "other", x.get("code_body", "") or x.get("text", "")
            elif kind in _BY_POSITION:
                ours, text = _page_band_type(bbox, h, self.margin_band), x.get("text", "")
            else:
                ours, text = _TYPE_MAP.get(kind, "other"), x.get("text", "")
            text = _markdown_math(text, plain)
            by_page.setdefault(page, []).append(_Out(key, page, bbox, ours, text, None, kind))
        outs: list[_Out] = []
        for page in sorted(by_page):
            outs.extend(_reading_order(by_page[page]))
        return outs


# ---------------------------------------------------------------------------------------------------- helpers
def _is_middle(data: Any) -> bool:
    """A middle JSON (what :meth:`MinerUParser.run` converts) of either MinerU generation."""
    return detect_schema(data) in ("docvortex_middle", "legacy_middle")


def detect_schema(data: Any) -> str:
    """Which MinerU output ``data`` (parsed JSON) is: ``legacy_middle`` (0.10/2.x middle.json),
    ``docvortex_middle`` (4.x), ``docvortex_other`` (another docvortex file), ``content_list`` (2.x),
    ``content_list_v0`` (0.10, no boxes), ``model_json``, or ``unknown``."""
    if isinstance(data, dict):
        if isinstance(data.get("pdf_info"), list):
            return "legacy_middle"
        schema = data.get("schema")
        if isinstance(schema, str) and schema.startswith("docvortex."):
            if schema == "docvortex.middle" and str(data.get("schema_version", "")).startswith("2."):
                return "docvortex_middle"
            return "docvortex_other"
        return "unknown"
    if isinstance(data, list) and data and all(isinstance(x, dict) for x in data):
        if all("layout_dets" in x for x in data):
            return "model_json"
        if all("type" in x and "page_idx" in x for x in data):
            return "content_list" if any("bbox" in x for x in data) else "content_list_v0"
    return "unknown"


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("inf")


def _legacy_unit(seq: int, page: int, b: dict) -> _Unit:
    bbox = [float(v) for v in (b.get("bbox") or [0, 0, 0, 0])]
    lines = b.get("lines") or []
    deleted = bool(b.get("lines_deleted")) and not lines
    return _Unit(seq, page, str(b.get("type", "")), bbox, lines, deleted)


def _v4_bbox(path: Path, page: int, bbox: Any, fallback, w: float, h: float) -> BBox:
    """A 4.x bbox (0-1 of the displayed page) in display points; children without a bbox take their parent's."""
    if bbox is None and fallback is not None:
        return fallback
    bbox = finite_box(bbox, page, str(path))  # the shared rule's first half: 4 finite numbers
    if any(v < -0.01 or v > 1.01 for v in bbox):
        raise InputError(f"{path}: page {page}: bbox {list(bbox)} is not normalised to 0-1 (not docvortex 2.0?)")
    x0, y0, x1, y1 = bbox
    return (x0 * w, y0 * h, x1 * w, y1 * h)


def _reading_order(outs: list[_Out]) -> list[_Out]:
    """Headers first, then the page body in MinerU's order, then footers and other page furniture."""
    head = [o for o in outs if o.type == "header"]
    tail = [o for o in outs if o.type == "footer" or (o.type == "other" and o.mineru_type in _FURNITURE)]
    rest = [o for o in outs if o not in head and o not in tail]
    return head + rest + tail


def _clean_layer_text(text: str) -> str:
    """Text from pdfium's text layer: its soft-hyphen marks (U+0002 at a line end) rejoined, CRs dropped."""
    text = re.sub(r"\x02\r?\n?", "", text.replace("\r\n", "\n"))
    return re.sub(r"[ \t]+", " ", text.replace("\r", "")).strip()
