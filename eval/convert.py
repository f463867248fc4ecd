"""``python -m eval convert``: a rival system's per-question outputs -> our prediction JSONL.

Two systems, whose formats were read from their papers (docs/METHOD.md, "Sources") and, for LAT, from its released
code (github.com/PolarisLiu1/LAT, ``src/evaluation.py``); MultAttnAttrib has no released code, so its format is
the paper's (Section 3.4, Appendix 10 and 20.3).

**LAT** (Chain-of-Evidence, ``--from lat``) writes reasoning steps and an answer, each backed by
``Bounding box: {"bbox_2d": [x1, y1, x2, y2], "Image_index": k}``: ``Image_index`` is 1-based into the images
the model saw (its multi-image prompt says "image_index_starting_from_1"), and the box is in pixels of that
image as it was handed to the model (the prompt states ``ImageSize: (w, h)``; LAT's own evaluation crops the
original image with these numbers, so they are not on Qwen's resized grid). One JSON line per question:

* the record of LAT's ``evaluation.py`` (``{"idx", "result": {"model_output": [text], "extracted_answer", ...}}``,
  where ``idx`` is the 0-based row of the test set, here the gold file), or ``{"index", "response"}`` (also
  ``model_output``) joined on the gold ``index``; without any text, ``extracted_answer`` (``[{"bbox",
  "image_id"}]``) is used;
* optional ``pages``: the 1-based PDF page of each image shown, in order (default: every page, in order, as
  ``eval infer`` shows them), and ``image_sizes``: ``[width, height]`` in pixels of each image shown.

Pixels -> points: ``x_pt = x_px * page_width_pt / image_width_px`` (same for y with heights), with the displayed
page size (after ``/Rotate``) from the cache manifest (``--cache-dir``) or the PDF (``--pdf-dir``). The image size
comes from the record's ``image_sizes``, else ``--page-images-info`` (``{doc_key: [[w, h] per page]}``), else
``--render-pixels N``: the image ``eval infer --total-pixels N`` renders (per page ``min(1e6, N / images shown)``
pixels, aspect ratio kept, the renderer's rounding; :func:`page_image_size`). With none of them a box cannot be
placed and the command stops. ``--lat-boxes answer`` (default) cites only the boxes inside ``<answer>`` (LAT's
own IoU@0.5 reads those: the answer's source, so the run is scored as LAT scores itself; a response without an
``<answer>`` block cites nothing); ``all`` cites every box of the response (the chain's step evidence and the
answer's source, exact duplicates once; our earlier default, which adds the steps' boxes to recall and
precision). Boxes are kept as written: the scorer counts a reversed box malformed and it
matches nothing (raw-output semantics); nothing is clipped. The prediction is ``interface: "coordinate"`` with its citations in points.

**MultAttnAttrib** (``--from multattnattrib``) attributes the *given* answer to text spans of the document's
text and to whole embedded images (labels ``[Image 0]``, ``[Image 1]``, ... in document order, 0-based). One
JSON line per question, joined on ``index`` (or ``idx`` = gold row): ``text_quote`` (a string; ``""`` = none,
the baseline prompt's field) and/or ``text_quotes`` / ``text_spans`` (lists of strings), ``image_indices``
(integers), and optionally ``answer`` / ``reference_answer`` (else the gold answer, which is what the method
attributes: judge Ans of such a run is not a measurement). The prediction is ``interface: "language"`` with
``response = {"answer", "quotes": spans}``, so ``eval resolve`` turns the spans into citations with the reward's
resolvers. An image index becomes a citation of that image's placement box on its page (points, clipped to the
page) when the cache (``--cache-dir``, required for image citations) has a ``figure`` block overlapping it on
that page; otherwise it is dropped and counted ``image_no_figure_block``. The image list of a document is the
record's ``images`` (``[[page, x0, y0, x1, y1], ...]`` in points), else ``--image-list`` (``{doc_key: [...]}``),
else every image object of the PDF in page order, then drawing order (an assumption: the paper does not say
how images were enumerated; give the list when you have it). Image citations are in ``citations`` and, since
``eval resolve`` rewrites ``citations`` from the quotes, also in ``fixed_citations``.

Records that are malformed (not an object, no ``index``/``idx``, an index not in the gold file or seen twice,
fields of the wrong type) stop the command with ``FILE:LINE: what is wrong``; single citations that cannot be
used are dropped and counted by reason (:data:`DROP_REASONS`), printed in the summary and stored per record
under ``convert``.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.geometry import BBox, clip_bbox, intersection
from core.io import loads_record, read_json
from data_prep.document import Document, render_size
from data_prep.types import Block
from eval.schemas import Gold, iter_jsonl, read_gold, write_jsonl

SYSTEMS: tuple[str, ...] = ("lat", "multattnattrib")
"""Rival systems ``--from`` accepts."""

LAT_BOX_MODES: tuple[str, ...] = ("answer", "all")
"""Which LAT boxes are citations: every box of the response, or only those of its ``<answer>``."""

DROP_REASONS: tuple[str, ...] = (
    "unparsed_box",
    "no_image_index",
    "image_index_out_of_range",
    "page_out_of_range",
    "duplicate",
    "image_no_figure_block",
)
"""Why a citation of a rival's output was not converted: ``unparsed_box`` a box object whose JSON or four numbers
cannot be read; ``no_image_index`` a LAT box without ``Image_index`` when several images were shown;
``image_index_out_of_range`` an image index outside the images shown (LAT) or the document's image list
(MultAttnAttrib; also LAT's ``image_id: 0`` placeholder for "no box"); ``page_out_of_range`` a page the document
does not have; ``duplicate`` the same page and box cited again; ``image_no_figure_block`` an embedded image that
no cached ``figure`` block overlaps (unresolvable)."""

LAT_IMAGE_INDEX_BASE = 1
"""LAT numbers the images it was shown from 1."""
MULTATTNATTRIB_IMAGE_INDEX_BASE = 0
"""MultAttnAttrib labels embedded images ``[Image 0]``, ``[Image 1]``, ..."""


# ---------------------------------------------------------------------------------------------- pixels -> points
def page_image_size(page_size: tuple[float, float], max_pixels: float) -> tuple[int, int]:
    """Pixel ``(width, height)`` of the image ``eval infer`` sends for a page of ``page_size`` points under a
    per-page budget of ``max_pixels``: the scale of :meth:`Document.render_page` (shaved until the rounded-up
    bitmap fits), pdfium's ``ceil`` of the bitmap size, and the trim of :func:`eval.infer.page_images`.

    >>> page_image_size((612.0, 792.0), 1_000_000)
    (879, 1137)
    """
    return render_size(page_size, max_pixels)


def pixels_to_points(box: Sequence[float], image_size: tuple[float, float], page_size: tuple[float, float]) -> BBox:
    """``[x1, y1, x2, y2]`` in pixels of a whole-page image of ``image_size`` -> points of a ``page_size`` page.

    >>> pixels_to_points([100, 50, 300, 150], (1000, 500), (500.0, 250.0))
    (50.0, 25.0, 150.0, 75.0)
    """
    iw, ih = image_size
    w, h = page_size
    x1, y1, x2, y2 = (float(v) for v in box)
    return (x1 * w / iw, y1 * h / ih, x2 * w / iw, y2 * h / ih)


# ---------------------------------------------------------------------------------------------- LAT parsing
@dataclass(frozen=True)
class LatBox:
    """One LAT box as written: ``image`` (1-based into the images shown, None when absent), pixel ``box``."""

    image: int | None
    box: BBox
    in_answer: bool


_OBJ_RE = re.compile(r"\{[^{}]*\}")
_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_BOXLINE_RE = re.compile(r"\s*Bounding box:\s*\{[^{}]*\}\s*", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ANSWER_OPEN, _ANSWER_CLOSE = re.compile("<answer>", re.I), re.compile("</answer>", re.I)
_THINK_OPEN, _THINK_CLOSE = re.compile("<think>", re.I), re.compile("</think>", re.I)


def _tag_spans(text: str, open_re: re.Pattern, close_re: re.Pattern, outer: bool = False) -> list[tuple[int, int]]:
    """The spans ``finditer`` of ``open(.*?)close`` would give (the inner text; with ``outer`` the whole match), in
    linear time: the lazy regex rescans to the end of the text from every opening tag that has no closing one.

    >>> _tag_spans("a<answer>x</ANSWER>b<answer>y", _ANSWER_OPEN, _ANSWER_CLOSE)
    [(9, 10)]
    """
    opens = [m.span() for m in open_re.finditer(text)]
    closes = [m.span() for m in close_re.finditer(text)]
    out: list[tuple[int, int]] = []
    pos, c = 0, 0
    for o_start, o_end in opens:
        if o_start < pos:
            continue
        while c < len(closes) and closes[c][0] < o_end:
            c += 1
        if c == len(closes):
            break
        out.append((o_start, closes[c][1]) if outer else (o_end, closes[c][0]))
        pos = closes[c][1]
    return out


def _read_box_object(span: str) -> LatBox | None | str:
    """A ``{...}`` span -> LatBox, None when it is not a box object, or ``"unparsed"``."""
    if "bbox" not in span.lower():
        return None
    try:
        obj = loads_record(span.replace("'", '"'), "box")  # LAT's own extractor does the same replacement
    except InputError:  # not JSON, or a number no box can hold (a 5,000-digit integer, NaN)
        return "unparsed"
    if not isinstance(obj, dict):
        return "unparsed"
    keys = {str(k).lower(): v for k, v in obj.items()}
    box = keys.get("bbox_2d", keys.get("bbox"))
    if (
        not isinstance(box, list)
        or len(box) != 4
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in box)
    ):
        return "unparsed"
    image = keys.get("image_index", keys.get("image_id"))
    if image is not None:
        try:
            image_f = float(image)
        except (TypeError, ValueError):
            return "unparsed"
        if not math.isfinite(image_f) or image_f != int(image_f):
            return "unparsed"
        image = int(image_f)
    return LatBox(image, (float(box[0]), float(box[1]), float(box[2]), float(box[3])), False)


def parse_lat_response(text: str) -> tuple[list[LatBox], int, str]:
    """Every box object of a LAT response, in order, with whether it lies in ``<answer>``; the number of box
    objects that do not parse; and the answer (``<answer>`` text without its box lines, else the text without
    ``<think>``).

    >>> boxes, bad, ans = parse_lat_response('<think>X {"bbox_2d": [1, 2, 3, 4], "Image_index": 2}</think>'
    ...     '<answer>7\\nBounding box: {"bbox_2d": [5, 6, 7, 8], "Image_index": 1}</answer>')
    >>> [(b.image, b.box, b.in_answer) for b in boxes], bad, ans
    ([(2, (1.0, 2.0, 3.0, 4.0), False), (1, (5.0, 6.0, 7.0, 8.0), True)], 0, '7')
    """
    answer_spans = _tag_spans(text, _ANSWER_OPEN, _ANSWER_CLOSE)
    answer_starts = [a for a, _ in answer_spans]
    boxes: list[LatBox] = []
    unparsed = 0
    for m in _OBJ_RE.finditer(text):
        got = _read_box_object(m.group(0))
        if got is None:
            continue
        if got == "unparsed":
            unparsed += 1
            continue
        k = bisect.bisect_right(answer_starts, m.start()) - 1
        inside = k >= 0 and m.end() <= answer_spans[k][1]
        boxes.append(LatBox(got.image, got.box, inside))
    if answer_spans:
        answer = text[answer_spans[0][0] : answer_spans[0][1]]
    else:
        think = _tag_spans(text, _THINK_OPEN, _THINK_CLOSE, outer=True)
        cuts = [0, *(x for span in think for x in span), len(text)]
        answer = "".join(text[cuts[i] : cuts[i + 1]] for i in range(0, len(cuts), 2))
    answer = _OBJ_RE.sub(" ", _BOXLINE_RE.sub(" ", answer))
    return boxes, unparsed, re.sub(r"\s+", " ", answer).strip()


# ---------------------------------------------------------------------------------------------- documents
@dataclass
class DocInfo:
    """What conversion needs of one gold document: page sizes in points (displayed, index = page - 1), the
    cached blocks (None without a cache) and a way to open the PDF."""

    doc_key: str
    page_sizes: list[tuple[float, float]]
    blocks: list[Block] | None
    open_pdf: Callable[[], Document]

    @property
    def n_pages(self) -> int:
        return len(self.page_sizes)


class Documents:
    """Looks up gold documents in a block cache (``eval resolve``'s :class:`~eval.cmd_resolve.DocCache`: cache key,
    PDF stem or sha256 prefix) or as ``<pdf_dir>/<doc_key>.pdf``; keeps what it loaded."""

    def __init__(self, cache_dir: Path | None = None, pdf_dir: Path | None = None, parser: str | None = None) -> None:
        if cache_dir is None and pdf_dir is None:
            raise InputError("give --cache-dir or --pdf-dir: page sizes in points come from the gold's documents")
        self.cache = None
        if cache_dir is not None:
            from data_prep.cache import DocCache

            self.cache = DocCache(cache_dir, parser=parser)
        self.pdf_dir = pdf_dir
        if pdf_dir is not None and not pdf_dir.is_dir():
            raise InputError(f"{pdf_dir}: PDF directory not found")
        self._docs: dict[str, DocInfo] = {}
        self._images: dict[str, list[tuple[int, BBox]]] = {}

    def get(self, doc_key: str) -> DocInfo:
        if doc_key not in self._docs:
            if self.cache is not None:
                cached = self.cache.get(doc_key)
                self._docs[doc_key] = DocInfo(doc_key, cached.page_sizes, cached.blocks, cached.open_pdf)
            else:
                path = self.pdf_dir / f"{doc_key}.pdf"
                with Document.open(path) as d:
                    sizes = list(d.page_sizes)
                self._docs[doc_key] = DocInfo(doc_key, sizes, None, lambda p=path: Document.open(p))
        return self._docs[doc_key]

    def pdf_images(self, doc: DocInfo) -> list[tuple[int, BBox]]:
        """Every image object of the PDF as ``(page, display bbox in points)``, page order then drawing order."""
        if doc.doc_key not in self._images:
            with doc.open_pdf() as d:
                self._images[doc.doc_key] = [
                    (p, bbox) for p in range(1, d.n_pages + 1) for bbox, is_image in d.drawing_boxes(p) if is_image
                ]
        return self._images[doc.doc_key]


# ---------------------------------------------------------------------------------------------- conversion
@dataclass
class Converter:
    """Converts one system's records; ``stats`` counts records, citations and drops by reason."""

    system: str
    docs: Documents
    render_pixels: float | None = None
    """Document pixel budget of ``eval infer --total-pixels`` (per page ``min(max_pixels_per_page, N / images)``)."""
    max_pixels_per_page: float = 1_000_000
    """Per-page pixel cap of the rendering (``eval infer``'s one megapixel)."""
    page_images_info: dict | None = None
    """``{doc_key: [[width_px, height_px] per PDF page]}``: the pixel size of each page image the model saw."""
    image_list: dict | None = None
    """MultAttnAttrib: ``{doc_key: [[page, x0, y0, x1, y1], ...]}`` in ``[Image k]`` order (points)."""
    lat_boxes: str = "answer"
    """One of :data:`LAT_BOX_MODES` (default ``answer``: LAT's own evaluation reads only ``<answer>`` boxes)."""
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        if self.system not in SYSTEMS:
            raise InputError(f"unknown system {self.system!r}; expected one of {SYSTEMS}")
        if self.lat_boxes not in LAT_BOX_MODES:
            raise InputError(f"--lat-boxes {self.lat_boxes!r}: expected one of {LAT_BOX_MODES}")
        if self.render_pixels is not None and self.render_pixels <= 0:
            raise InputError(f"--render-pixels must be positive, got {self.render_pixels}")

    def convert(self, rec: dict, gold: Gold, where: str) -> dict:
        doc = self.docs.get(gold.doc_key)
        self.stats["records"] += 1
        convert = {"lat": self._lat, "multattnattrib": self._multattnattrib}[self.system]  # one per SYSTEMS
        return convert(rec, gold, doc, where)

    def _drop(self, dropped: Counter, reason: str) -> None:
        dropped[reason] += 1
        self.stats[f"dropped:{reason}"] += 1

    # ------------------------------------------------------------------ LAT
    def _image_sizes(self, rec: dict, doc: DocInfo, pages: list[int], where: str) -> list[tuple[float, float]]:
        sizes = rec.get("image_sizes")
        if sizes is not None:
            if not isinstance(sizes, list) or len(sizes) != len(pages):
                raise InputError(f"{where}: image_sizes must be one [width, height] per image shown ({len(pages)})")
            return [_pixel_size(s, where, f"image_sizes[{i}]") for i, s in enumerate(sizes)]
        if self.page_images_info is not None:
            per_page = self.page_images_info.get(doc.doc_key)
            if not isinstance(per_page, list) or len(per_page) != doc.n_pages:
                raise InputError(
                    f"{where}: --page-images-info has no list of {doc.n_pages} [width, height] for doc_key "
                    f"{doc.doc_key!r}"
                )
            return [_pixel_size(per_page[p - 1], where, f"page-images-info[{doc.doc_key!r}][{p - 1}]") for p in pages]
        if self.render_pixels is not None:
            budget = Document.page_pixel_budget(len(pages), self.render_pixels, self.max_pixels_per_page)
            return [page_image_size(doc.page_sizes[p - 1], budget) for p in pages]
        raise InputError(
            f"{where}: the pixel size of the page images is unknown; give --render-pixels N (eval infer's "
            "--total-pixels), --page-images-info JSON, or image_sizes in the record"
        )

    def _lat(self, rec: dict, gold: Gold, doc: DocInfo, where: str) -> dict:
        text = _lat_text(rec, where)
        pages = _shown_pages(rec, doc, where)
        dropped: Counter = Counter()
        if text is not None:
            boxes, unparsed, answer = parse_lat_response(text)
            for _ in range(unparsed):
                self._drop(dropped, "unparsed_box")
        else:
            boxes, answer = _lat_extracted(rec, where), ""
        if self.lat_boxes == "answer":
            boxes = [b for b in boxes if b.in_answer or text is None]
        sizes = self._image_sizes(rec, doc, pages, where) if boxes else []
        citations: list[dict] = []
        seen: set = set()
        for b in boxes:
            image = b.image
            if image is None:
                if len(pages) != 1:
                    self._drop(dropped, "no_image_index")
                    continue
                image = LAT_IMAGE_INDEX_BASE
            k = image - LAT_IMAGE_INDEX_BASE
            if not 0 <= k < len(pages):
                self._drop(dropped, "image_index_out_of_range")
                continue
            page = pages[k]
            bbox = [round(v, 3) for v in pixels_to_points(b.box, sizes[k], doc.page_sizes[page - 1])]
            key = (page, tuple(bbox))
            if key in seen:
                self._drop(dropped, "duplicate")
                continue
            seen.add(key)
            citations.append({"page": page, "bbox": bbox})
        self.stats["citations"] += len(citations)
        self.stats["with_citation" if citations else "without_citation"] += 1
        info = {"from": "lat", "lat_boxes": self.lat_boxes, "n_boxes": len(boxes), "dropped": dict(dropped)}
        return {
            "index": gold.index,
            "interface": "coordinate",
            "response": text if text is not None else json.dumps(rec.get("extracted_answer")),
            "answer": answer,
            "citations": citations,
            "convert": info,
        }

    # ------------------------------------------------------------------ MultAttnAttrib
    def _doc_images(self, rec: dict, doc: DocInfo, where: str) -> list[tuple[int, BBox]]:
        given = rec.get("images")
        source = "record images"
        if given is None and self.image_list is not None and doc.doc_key in self.image_list:
            given, source = self.image_list[doc.doc_key], f"--image-list[{doc.doc_key!r}]"
        if given is None:
            return self.docs.pdf_images(doc)
        if not isinstance(given, list):
            raise InputError(f"{where}: {source} must be a list of [page, x0, y0, x1, y1]")
        out = []
        for i, e in enumerate(given):
            if (
                not isinstance(e, list)
                or len(e) != 5
                or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in e)
                or e[0] != int(e[0])
            ):
                raise InputError(f"{where}: {source}[{i}] must be [page, x0, y0, x1, y1] (points), got {e!r}")
            out.append((int(e[0]), (float(e[1]), float(e[2]), float(e[3]), float(e[4]))))
        return out

    def _multattnattrib(self, rec: dict, gold: Gold, doc: DocInfo, where: str) -> dict:
        quotes = _spans(rec, where)
        indices = rec.get("image_indices", [])
        if indices is None:
            indices = []
        if not isinstance(indices, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in indices):
            raise InputError(f"{where}: image_indices must be a list of integers, got {indices!r}")
        answer = rec.get("answer", rec.get("reference_answer"))
        if answer is not None and not isinstance(answer, str):
            raise InputError(f"{where}: answer must be a string, got {answer!r}")
        answer_source = "record" if answer else "gold"
        answer = answer or gold.answer
        dropped: Counter = Counter()
        citations: list[dict] = []
        if indices:
            if doc.blocks is None:
                raise InputError(f"{where}: image citations need --cache-dir (its figure blocks place the images)")
            images = self._doc_images(rec, doc, where)
            seen: set = set()
            for k in dict.fromkeys(indices):
                i = k - MULTATTNATTRIB_IMAGE_INDEX_BASE
                if not 0 <= i < len(images):
                    self._drop(dropped, "image_index_out_of_range")
                    continue
                page, box = images[i]
                if not 1 <= page <= doc.n_pages:
                    self._drop(dropped, "page_out_of_range")
                    continue
                w, h = doc.page_sizes[page - 1]
                box = clip_bbox(box, w, h)
                figures = [b for b in doc.blocks if b.page == page and b.type == "figure"]
                if not any(intersection(box, f.bbox) > 0 for f in figures):
                    self._drop(dropped, "image_no_figure_block")
                    continue
                bbox = [round(v, 3) for v in box]
                if (page, tuple(bbox)) in seen:
                    self._drop(dropped, "duplicate")
                    continue
                seen.add((page, tuple(bbox)))
                citations.append({"page": page, "bbox": bbox, "image_index": k})
        self.stats["quotes"] += len(quotes)
        self.stats["image_citations"] += len(citations)
        self.stats["with_evidence" if quotes or citations else "without_evidence"] += 1
        info = {
            "from": "multattnattrib",
            "n_quotes": len(quotes),
            "n_images": len(indices),
            "answer_source": answer_source,
            "dropped": dict(dropped),
        }
        return {
            "index": gold.index,
            "interface": "language",
            "response": json.dumps({"answer": answer, "quotes": quotes}, ensure_ascii=False),
            "answer": answer,
            "citations": citations,
            "fixed_citations": citations,
            "convert": info,
        }


def _pixel_size(value: Any, where: str, name: str) -> tuple[float, float]:
    if (
        not isinstance(value, list | tuple)
        or len(value) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        raise InputError(f"{where}: {name} must be [width, height] in pixels (positive), got {value!r}")
    return float(value[0]), float(value[1])


def _lat_text(rec: dict, where: str) -> str | None:
    """The raw LAT response of a record (``response``, ``model_output`` or ``result.model_output``)."""
    result = rec.get("result")
    if result is not None and not isinstance(result, dict):
        raise InputError(f"{where}: result must be an object (LAT's evaluation.py record)")
    for holder, name in ((rec, "response"), (rec, "model_output"), (result or {}, "model_output")):
        value = holder.get(name)
        if value is None:
            continue
        if isinstance(value, list):  # evaluation.py stores batch_decode's list of one text
            if len(value) != 1 or not isinstance(value[0], str):
                raise InputError(f"{where}: {name} must be a string or a list of one string, got {value!r:.80}")
            value = value[0]
        if not isinstance(value, str):
            raise InputError(f"{where}: {name} must be a string, got {type(value).__name__}")
        return value
    if "extracted_answer" in rec or "extracted_answer" in (result or {}):
        return None
    raise InputError(f"{where}: LAT record has no response, model_output or result.model_output")


def _lat_extracted(rec: dict, where: str) -> list[LatBox]:
    """LAT's ``extracted_answer`` (``[{"bbox", "image_id"}]``, answer boxes only) when no text is stored."""
    value = rec.get("extracted_answer", (rec.get("result") or {}).get("extracted_answer"))
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: extracted_answer must be a list of {{bbox, image_id}}")
    out = []
    for i, e in enumerate(value):
        got = _read_box_object(json.dumps(e)) if isinstance(e, dict) else "unparsed"
        if not isinstance(got, LatBox):
            raise InputError(f"{where}: extracted_answer[{i}] must be {{'bbox': [4 numbers], 'image_id'}}, got {e!r}")
        out.append(LatBox(got.image, got.box, True))
    return out


def _shown_pages(rec: dict, doc: DocInfo, where: str) -> list[int]:
    pages = rec.get("pages")
    if pages is None:
        return list(range(1, doc.n_pages + 1))
    if (
        not isinstance(pages, list)
        or not pages
        or not all(isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= doc.n_pages for p in pages)
    ):
        raise InputError(f"{where}: pages must be a non-empty list of 1-based pages within 1..{doc.n_pages}")
    return pages


def _spans(rec: dict, where: str) -> list[str]:
    out: list[str] = []
    if "text_quote" in rec:
        q = rec["text_quote"]
        if q is not None and not isinstance(q, str):
            raise InputError(f"{where}: text_quote must be a string, got {type(q).__name__}")
        if q and q.strip():
            out.append(q)
    for name in ("text_quotes", "text_spans"):
        if name in rec:
            qs = rec[name]
            if not isinstance(qs, list) or not all(isinstance(q, str) for q in qs):
                raise InputError(f"{where}: {name} must be a list of strings")
            out.extend(q for q in qs if q.strip())
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------- files
def _gold_for(rec: dict, golds: list[Gold], by_key: dict[str, Gold], where: str) -> Gold:
    if "index" in rec:
        g = by_key.get(str(rec["index"]))
        if g is None:
            raise InputError(f"{where}: index {rec['index']!r} is not in the gold file")
        return g
    if "idx" in rec:
        i = rec["idx"]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(golds):
            raise InputError(f"{where}: idx {i!r} is not a 0-based row of the gold file (0..{len(golds) - 1})")
        return golds[i]
    raise InputError(f"{where}: record has neither index (gold index) nor idx (0-based gold row)")


def convert_file(input_path: Path, gold_path: Path, out_path: Path, converter: Converter) -> Counter:
    """Convert every record of ``input_path`` and write ``out_path`` atomically; returns the counters
    (``missing`` = gold questions without a record, scored as giving no citation)."""
    golds = read_gold(gold_path)
    by_key = {g.key: g for g in golds}
    rows: list[dict] = []
    seen: dict[str, int] = {}
    for lineno, rec in iter_jsonl(input_path):
        where = f"{input_path}:{lineno}"
        gold = _gold_for(rec, golds, by_key, where)
        if gold.key in seen:
            raise InputError(f"{where}: gold index {gold.index!r} already converted from line {seen[gold.key]}")
        seen[gold.key] = lineno
        rows.append(converter.convert(rec, gold, where))
    if not rows:
        raise InputError(f"{input_path}: no records")
    converter.stats["missing"] = len(golds) - len(rows)
    write_jsonl(out_path, rows)
    return converter.stats


def _read_json(path: Path | None, what: str) -> dict | None:
    if path is None:
        return None
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: {what} must be a JSON object keyed by doc_key")
    return data


def format_summary(stats: Counter, out: Path) -> str:
    """One line: records converted, citations, and drops by reason."""
    drops = ", ".join(f"{k.split(':', 1)[1]}: {v}" for k, v in sorted(stats.items()) if k.startswith("dropped:"))
    if "quotes" in stats:
        made = f"{stats['quotes']} quotes (run eval resolve), {stats['image_citations']} image citations"
        empty = stats["without_evidence"]
    else:
        made, empty = f"{stats['citations']} citations", stats["without_citation"]
    return (
        f"converted {stats['records']} records -> {out}: {made}; {empty} without any; "
        f"{stats['missing']} gold questions without a record; dropped: {drops or 'none'}"
    )
