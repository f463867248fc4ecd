"""``python -m data_prep citevqa``: the CiteVQA evaluation subset as gold JSONL (``eval/schemas.py`` format).

Two ways in, one output (boxes ``[page, x0, y0, x1, y1]`` in PDF points, origin top-left of the displayed page,
pages 1-based):

1. **Rehydrate the verified release** (``--release verified_eval_set.jsonl``, fields in
   ``docs/METHOD.md``, "Evaluation set": ``index, pdf_stem, language, qtype, n_pdf_pages, alignment,
   gt_pages, gt_necessary, gt_all``) by joining it on ``index`` with a local CiteVQA download (``--citevqa``,
   for the question and answer, which the release does not redistribute) and the PDFs (``--pdf-dir``,
   ``<pdf_stem>.pdf``). The release's boxes are ``[page, x1, y1, x2, y2]`` in rendered-page pixels;
   ``--release-space`` says which render: ``max-pixels:1000000`` (default: the page rendered under a one-megapixel
   budget, aspect kept, as the paper's models saw it), ``dpi:N``, ``points`` or ``norm1000``. A box that lands
   outside its page is counted ("box outside page"): many of them mean the space is wrong.
2. **Convert and verify raw CiteVQA** (no ``--release``): each evidence box of the CiteVQA record is
   ``[y1, x1, y2, x2]`` on a 0-1000 scale of the page (docs/METHOD.md, "Box order trap"; the benchmark's own prompt says x-first, which is
   wrong) and becomes points with the page size. The **verification filter** then reads the PDF's text layer
   under each converted box and requires the annotated evidence text to be there (token recall of the annotation
   in the extracted text >= ``--min-text-recall``); a question with any contradicting element is dropped. An
   element whose page has no text layer, or whose annotation has no text (a figure), cannot be checked: a
   question with no checkable element is kept as ``unverifiable``. Reading the raw order as x-first puts the box
   elsewhere on the page, so the filter drops such records (tested).

**Byte verification** (paper Appendix B, both ways in): CiteVQA lists every source PDF in
``data/download/pdf_source.csv`` (``track_id, content_length, page_count, url, ...``) as it was when annotated. A
local PDF whose size in bytes differs from ``content_length``, whose page count differs from ``page_count``, or
whose ``track_id`` (file stem) the list lacks is another version of the document than the one annotated, and its
questions are dropped ("not byte-verified"; the paper drops 16). The list is ``--pdf-source CSV``, by default
``data/download/pdf_source.csv`` of the checkout holding ``--citevqa`` (``data/validation/CiteVQA.json``).
Without it the step cannot run and the command stops unless ``--no-byte-check`` is given (every question kept, none
byte-verified).

**Element types** (``gt_types``, paper Table 7: text incl. titles and lists, table incl. captions and footnotes,
figure incl. image captions): from each element's annotated type when the CiteVQA record has an evidence list
with types (way 1 matches a release element to the record's element on the same page with the highest IoU,
>= 0.5); otherwise, with ``--types-cache DIR`` (a block cache of these PDFs, ``python -m data_prep blocks``), the
type of the parsed block that overlaps the element most on its page. A question with an element neither source
types gets no ``gt_types`` (left out of Table 7, counted in the funnel as ``untyped``).

The funnel is printed (records -> unreadable PDF / pages out of range / box outside page / text mismatch /
not byte-verified / kept) and written next to the output as ``<out>.funnel.json``.

The field names of the raw CiteVQA records are read from :class:`CiteVQAFields` (several spellings are tried).
Checked against opendatalab/CiteVQA's own scripts (``infer/run.py``, ``eval/run.py``, ``eval/summarize.py``):
``index``, ``Question``, ``PDF_Source`` (a list of paths, ``data/pdf/<track_id>.pdf``; the first is the document
of a single-doc question) and ``dataset_type`` (``Single-Doc``, ``Multi (1-Gold)``, ``Multi (N-Gold)``) are real.
Its scorer takes both the gold evidence and the gold answer from ``answer_bboxes``: the answer text with
``<bbox page="N" x1=".." y1=".." x2=".." y2=".." />`` tags after each piece of evidence (the judge sees it with
the tags replaced). No released script names a structured evidence list, so its field names stay configurable;
when a record has none, the evidence is read from those tags, their four numbers in written order taken as the
released ``[y1, x1, y2, x2]`` (:attr:`CiteVQAFields.tag_order`; the benchmark prompt's own example
``x1="536" y1="65" x2="642" y2="656"`` is a wide, short box only when read y-first). Every tag counts as necessary
(the tags do not mark optional evidence) and has no annotated text, so such a question is ``unverifiable``. Bbox
tags are removed from the gold answer in every case.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.geometry import BBox, iou
from data_prep.document import Document
from data_prep.text import cjk_share, token_recall

FUNNEL_STEPS = (
    "records",
    "not single-doc",
    "not in CiteVQA download",
    "unreadable PDF",
    "pages out of range",
    "box outside page",
    "text mismatch",
    "not byte-verified",
    "kept",
)
"""Funnel counters, in order; ``kept`` is split into ``verified`` and ``unverifiable``."""

COORD_SCALE = 1000.0
"""CiteVQA's evidence boxes are relative to the page on this scale."""


@dataclass(frozen=True)
class CiteVQAFields:
    """Names tried, in order, for each field of a raw CiteVQA record and of one of its evidence elements."""

    index: tuple[str, ...] = ("index", "id", "question_id")
    question: tuple[str, ...] = ("Question", "question")
    answer: tuple[str, ...] = ("Answer", "answer", "gold_answer", "standard_answer", "answer_bboxes")
    pdf: tuple[str, ...] = ("PDF_Source", "pdf_source", "pdf", "pdf_path", "pdf_name", "doc_name")
    dataset_type: tuple[str, ...] = ("dataset_type",)
    language: tuple[str, ...] = ("language", "lang")
    qtype: tuple[str, ...] = ("question_type", "qtype", "type", "task_type")
    evidence: tuple[str, ...] = ("evidence", "Evidence", "evidences", "evidence_list", "gt_evidence")
    ev_page: tuple[str, ...] = ("page", "page_no", "page_num", "page_number")
    ev_bbox: tuple[str, ...] = ("bbox", "box", "bbox_2d")
    ev_text: tuple[str, ...] = ("content", "text", "evidence_text")
    ev_necessary: tuple[str, ...] = ("is_crucial", "crucial", "necessary", "is_necessary", "is_key")
    ev_type: tuple[str, ...] = ("type", "category", "element_type")
    answer_tags: tuple[str, ...] = ("answer_bboxes",)
    """Text whose ``<bbox .../>`` tags hold the evidence when a record has no evidence list (CiteVQA's scorer)."""
    tag_order: str = "yxyx"
    """How the four numbers of such a tag are ordered: ``yxyx`` (the release, ``[y1, x1, y2, x2]``) or ``xyxy``."""


_BBOX_TAG = re.compile(
    r"<\s*bbox\s+(?:doc=\"(\d+)\"\s+)?page=\"(\d+)\"\s+x1=\"([\d.]+)\"\s+y1=\"([\d.]+)\"\s+"
    r"x2=\"([\d.]+)\"\s+y2=\"([\d.]+)\"\s*/?>"
)


def strip_bbox_tags(text: str) -> str:
    """The answer text without its ``<bbox .../>`` tags (whitespace around them collapsed).

    >>> strip_bbox_tags('Rose by 5%: <bbox page="2" x1="1" y1="2" x2="3" y2="4" />\\nso yes.')
    'Rose by 5%:\\nso yes.'
    """
    out = _BBOX_TAG.sub("", text)
    out = re.sub(r"[ \t]+\n", "\n", out)
    out = re.sub(r"\n\s*\n+", "\n", out)
    return re.sub(r"[ \t]{2,}", " ", out).strip()


def evidence_from_tags(text: str, fields: CiteVQAFields) -> list[dict]:
    """Evidence elements ``{"page", "bbox": [y1, x1, y2, x2]}`` (0-1000, page 1-based) from an answer's tags.

    >>> evidence_from_tags('<bbox page="8" x1="584" y1="65" x2="598" y2="371" />', CiteVQAFields())
    [{'page': 8, 'bbox': [584.0, 65.0, 598.0, 371.0]}]
    """
    out = []
    for m in _BBOX_TAG.finditer(text or ""):
        a, b, c, d = (float(v) for v in m.groups()[2:])
        raw = [a, b, c, d] if fields.tag_order == "yxyx" else [b, a, d, c]
        out.append({"page": int(m.group(2)), "bbox": raw})
    return out


@dataclass(frozen=True)
class VerifyConfig:
    """Knobs of the verification filter."""

    min_text_recall: float = 0.5
    """Share of the annotation's tokens that must appear in the text extracted under its box."""
    pad_pt: float = 2.0
    """Points added around a box before extracting its text (annotations are drawn tight)."""
    min_page_chars: int = 20
    """A page with fewer text-layer characters counts as having no text layer (scanned)."""
    page_tolerance_pt: float = 3.0
    """A converted box may overshoot its page by this much before it counts as outside."""


# ---------------------------------------------------------------------------------------------- conversions
def raw_box_to_points(raw: list[float], page_size: tuple[float, float]) -> BBox:
    """CiteVQA's ``[y1, x1, y2, x2]`` on 0-1000 -> ``(x0, y0, x1, y1)`` in points of a ``(width, height)`` page.

    >>> raw_box_to_points([100, 200, 300, 400], (600.0, 800.0))
    (120.0, 80.0, 240.0, 240.0)
    """
    if len(raw) != 4:
        raise ValueError(f"a CiteVQA box has 4 numbers [y1, x1, y2, x2], got {raw!r}")
    y1, x1, y2, x2 = (float(v) for v in raw)
    w, h = page_size
    return (x1 / COORD_SCALE * w, y1 / COORD_SCALE * h, x2 / COORD_SCALE * w, y2 / COORD_SCALE * h)


def release_scale(space: str, page_size: tuple[float, float]) -> tuple[float, float]:
    """Units of the release's boxes per point, ``(sx, sy)``, for ``--release-space`` (module docstring)."""
    w, h = page_size
    kind, _, value = space.partition(":")
    try:
        if kind == "max-pixels":
            s = math.sqrt(float(value or 1_000_000) / (w * h))
            return s, s
        if kind == "dpi":
            s = float(value) / 72.0
            return s, s
    except ValueError:
        raise InputError(f"--release-space {space!r}: {kind} needs a number, e.g. {kind}:150") from None
    if kind == "points":
        return 1.0, 1.0
    if kind == "norm1000":
        return COORD_SCALE / w, COORD_SCALE / h
    raise InputError(f"--release-space {space!r}: expected max-pixels:N, dpi:N, points or norm1000")


def release_box_to_points(box: list[float], page_size: tuple[float, float], space: str) -> tuple[float, ...]:
    """A release box ``[x1, y1, x2, y2]`` in ``space`` -> points."""
    sx, sy = release_scale(space, page_size)
    x1, y1, x2, y2 = (float(v) for v in box)
    return (x1 / sx, y1 / sy, x2 / sx, y2 / sy)


def _inside(box, page_size, tol: float) -> bool:
    w, h = page_size
    x0, y0, x1, y1 = min(box[0], box[2]), min(box[1], box[3]), max(box[0], box[2]), max(box[1], box[3])
    return x0 >= -tol and y0 >= -tol and x1 <= w + tol and y1 <= h + tol


# ---------------------------------------------------------------------------------------------- reading
def _get(d: dict, names: tuple[str, ...], default: Any = None) -> Any:
    for n in names:
        if n in d and d[n] is not None:
            return d[n]
    return default


def load_citevqa(path: str | Path) -> list[dict]:
    """CiteVQA records from a JSON list, a ``{"data": [...]}`` object, or JSONL."""
    path = Path(path)
    from core.io import loads_record, read_text

    text = read_text(path)  # a regular file only, UTF-8 or one clear error
    try:
        data = loads_record(text, str(path))
    except InputError as whole:
        if "not valid JSON" not in str(whole):
            raise  # a bounded-number or nesting error of the one document: reported as it is
        data = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    data.append(loads_record(line, f"{path}:{lineno}"))
                except InputError as e:
                    if "not valid JSON" not in str(e):
                        raise
                    why = str(e).removeprefix(f"{path}:{lineno}: ")
                    raise InputError(f"{path}:{lineno}: neither a JSON document nor JSONL ({why})") from None
    if isinstance(data, dict):
        data = _get(data, ("data", "items", "records"), None)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path}: expected a list of CiteVQA records")
    return data


def pdf_name(record: dict, fields: CiteVQAFields) -> str | None:
    """The PDF's file stem named by a CiteVQA record (the first of ``PDF_Source`` when it is a list)."""
    v = _get(record, fields.pdf)
    if isinstance(v, list):
        v = v[0] if v else None
    return None if v is None else Path(str(v)).stem


def guess_language(text: str) -> str:
    """``zh`` when CJK characters are at least 20% of the non-space characters, else ``en``."""
    return "zh" if cjk_share(text) >= 0.2 else "en"


def _element_type(t: Any) -> str:
    t = str(t or "").lower()
    if "table" in t:
        return "table"
    if any(k in t for k in ("figure", "image", "chart", "picture")):
        return "figure"
    return "text"


# ---------------------------------------------------------------------------------------------- byte verification
@dataclass(frozen=True)
class SourcePdf:
    """One row of CiteVQA's ``pdf_source.csv``: the annotated version's size in bytes and page count."""

    content_length: int | None
    page_count: int | None


def load_pdf_source(path: str | Path) -> dict[str, SourcePdf]:
    """``track_id`` -> :class:`SourcePdf` from CiteVQA's ``data/download/pdf_source.csv``."""
    import csv

    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: cannot read CiteVQA's PDF list ({e})") from None
    if not rows or "track_id" not in rows[0] or "content_length" not in rows[0]:
        raise InputError(f"{path}: expected CiteVQA's pdf_source.csv (columns track_id, content_length, page_count)")

    def num(v, line: int, name: str) -> int | None:
        v = (v or "").strip()
        if not v:
            return None
        try:
            return int(float(v))
        except ValueError:
            raise InputError(f"{path}:{line}: {name} {v!r} is not a number") from None

    return {
        r["track_id"].strip(): SourcePdf(num(r.get("content_length"), i, "content_length"),
                                         num(r.get("page_count"), i, "page_count"))
        for i, r in enumerate(rows, 2)
    }  # fmt: skip


def default_pdf_source(citevqa_json: Path) -> Path:
    """Where CiteVQA keeps its PDF list relative to ``data/validation/CiteVQA.json``."""
    return citevqa_json.resolve().parent.parent / "download" / "pdf_source.csv"


def byte_verified(doc: Document, stem: str, sources: dict[str, SourcePdf]) -> bool:
    """True when the local PDF is the annotated version: listed, same size in bytes, same page count."""
    src = sources.get(stem)
    if src is None:
        return False
    if src.content_length is not None and doc.path.stat().st_size != src.content_length:
        return False
    return src.page_count is None or doc.n_pages == src.page_count


# ---------------------------------------------------------------------------------------------- element types
def _best_type(page: int, box, typed: list[tuple[int, tuple, str | None]], min_iou: float) -> str | None:
    best, best_iou = None, min_iou
    for p, b, t in typed:
        if p == page and t is not None:
            v = iou(box, b)
            if v >= best_iou and (best is None or v > best_iou):
                best, best_iou = t, v
    return best


def types_from_record(record: dict, doc: Document, fields: CiteVQAFields) -> list[tuple[int, tuple, str | None]]:
    """The CiteVQA record's evidence elements as ``(page, box in points, type or None)`` (empty without a list)."""
    evidence = _get(record, fields.evidence)
    out = []
    if isinstance(evidence, list):
        for ev in evidence:
            if not isinstance(ev, dict):
                continue
            page, bbox, t = _get(ev, fields.ev_page), _get(ev, fields.ev_bbox), _get(ev, fields.ev_type)
            try:
                page = int(page)
                box = raw_box_to_points(bbox, doc.page_sizes[page - 1])
            except (TypeError, ValueError, IndexError):
                continue
            out.append((page, box, _element_type(t) if t not in (None, "") else None))
    return out


class BlockTypes:
    """Types of parsed blocks from a block cache (``--types-cache``), by PDF stem."""

    def __init__(self, cache_dir: Path) -> None:
        from data_prep.cache import DocCache

        self.docs = DocCache(cache_dir)

    def typed(self, stem: str) -> list[tuple[int, tuple, str | None]]:
        try:
            cached = self.docs.get(stem)
        except InputError:
            return []
        return [(b.page, tuple(b.bbox), _element_type(b.type)) for b in cached.blocks]


def element_types(
    elements: list, sources: list[tuple[list[tuple[int, tuple, str | None]], float]]
) -> list[str] | None:
    """One type per ``[page, x0, y0, x1, y1]`` element (points): from the first ``(typed elements, min IoU)`` source
    holding a typed element on the same page with IoU >= min IoU (the highest IoU wins); None when any element
    stays untyped (the question gets no ``gt_types`` rather than a guessed one)."""
    out = []
    for e in elements:
        t = None
        for typed, min_iou in sources:
            t = _best_type(int(e[0]), tuple(e[1:]), typed, min_iou)
            if t is not None:
                break
        if t is None:
            return None
        out.append(t)
    return out


ANNOTATION_MATCH_IOU = 0.5
"""A release element takes the type of the record's annotated element it overlaps with at least this IoU."""
BLOCK_MATCH_IOU = 1e-9
"""A parsed block types an element it overlaps at all (the most-overlapping block wins)."""


# ---------------------------------------------------------------------------------------------- building
class _Pdfs:
    """Opened PDFs by stem (a failure is remembered as None)."""

    def __init__(self, pdf_dir: Path) -> None:
        self.pdf_dir = pdf_dir
        self.docs: dict[str, Document | None] = {}

    def get(self, stem: str) -> Document | None:
        if stem not in self.docs:
            try:
                self.docs[stem] = Document.open(self.pdf_dir / f"{stem}.pdf")
            except InputError:
                self.docs[stem] = None
        return self.docs[stem]

    def close(self) -> None:
        for d in self.docs.values():
            if d is not None:
                d.close()


def _page_has_text(doc: Document, page: int, cfg: VerifyConfig, memo: dict) -> bool:
    key = (doc.path, page)
    if key not in memo:
        memo[key] = len(doc.page_text(page).strip()) >= cfg.min_page_chars
    return memo[key]


def verify_element(doc: Document, page: int, box, annotated: str, cfg: VerifyConfig, memo: dict) -> bool | None:
    """True/False: the annotated text is/is not under ``box`` (points); None when it cannot be checked."""
    if not annotated or not annotated.strip() or not _page_has_text(doc, page, cfg, memo):
        return None
    w, h = doc.page_sizes[page - 1]
    x0, y0, x1, y1 = box
    padded = (max(0.0, x0 - cfg.pad_pt), max(0.0, y0 - cfg.pad_pt), min(w, x1 + cfg.pad_pt), min(h, y1 + cfg.pad_pt))
    if padded[2] <= padded[0] or padded[3] <= padded[1]:
        return False
    extracted = doc.text_in_bbox(page, padded)
    return token_recall(annotated, extracted) >= cfg.min_text_recall


def convert_raw(
    records: list[dict],
    pdf_dir: Path,
    fields: CiteVQAFields = CiteVQAFields(),
    cfg: VerifyConfig = VerifyConfig(),
    sources: dict[str, SourcePdf] | None = None,
    block_types: BlockTypes | None = None,
) -> tuple[list[dict], Counter]:
    """Raw CiteVQA records -> verified gold records and the funnel (module docstring, way 2). ``sources``: CiteVQA's
    PDF list for byte verification (None skips it); ``block_types``: parsed blocks typing untyped elements."""
    funnel: Counter = Counter()
    out = []
    pdfs = _Pdfs(pdf_dir)
    memo: dict = {}
    try:
        for n, rec in enumerate(records):
            funnel["records"] += 1
            dtype = _get(rec, fields.dataset_type)
            if dtype is not None and dtype != "Single-Doc":
                funnel["not single-doc"] += 1
                continue
            index = _get(rec, fields.index, n)
            evidence = _get(rec, fields.evidence)
            if evidence is None:
                evidence = evidence_from_tags(str(_get(rec, fields.answer_tags, "") or ""), fields) or None
            if not isinstance(evidence, list) or not evidence:
                raise InputError(
                    f"CiteVQA record {index!r}: no evidence list (looked for {', '.join(fields.evidence)}); "
                    "nor <bbox> tags in answer_bboxes; set CiteVQAFields.evidence to its field name"
                )
            stem = pdf_name(rec, fields)
            doc = pdfs.get(stem) if stem else None
            if doc is None:
                funnel["unreadable PDF"] += 1
                continue
            elements = []
            for i, ev in enumerate(evidence):
                page, bbox = _get(ev, fields.ev_page), _get(ev, fields.ev_bbox)
                if page is None or not isinstance(bbox, list) or len(bbox) != 4:
                    raise InputError(f"CiteVQA record {index!r} evidence {i}: needs a page and a 4-number bbox")
                elements.append((int(page), bbox, str(_get(ev, fields.ev_text, "") or ""), ev))
            if any(not 1 <= p <= doc.n_pages for p, _, _, _ in elements):
                funnel["pages out of range"] += 1
                continue
            converted = [(p, raw_box_to_points(b, doc.page_sizes[p - 1]), t, ev) for p, b, t, ev in elements]
            if any(not _inside(b, doc.page_sizes[p - 1], cfg.page_tolerance_pt) for p, b, _, _ in converted):
                funnel["box outside page"] += 1
                continue
            checks = [verify_element(doc, p, b, t, cfg, memo) for p, b, t, _ in converted]
            if any(c is False for c in checks):
                funnel["text mismatch"] += 1
                continue
            if sources is not None and not byte_verified(doc, stem, sources):
                funnel["not byte-verified"] += 1
                continue
            alignment = "verified" if any(c is True for c in checks) else "unverifiable"
            funnel["kept"] += 1
            funnel[alignment] += 1
            flags = [_get(ev, fields.ev_necessary) for _, _, _, ev in converted]
            necessary = [e for e, f in zip(converted, flags, strict=True) if f is None or bool(f)]
            question = str(_get(rec, fields.question, ""))
            annotated = [(p, b, _element_type(t) if (t := _get(ev, fields.ev_type)) not in (None, "") else None)
                         for p, b, _, ev in converted]  # fmt: skip
            type_sources = [(annotated, 1.0 - 1e-9)]  # an element's own annotation (same box)
            if block_types is not None:
                type_sources.append((block_types.typed(stem), BLOCK_MATCH_IOU))
            types = element_types([[p, *b] for p, b, _, _ in necessary], type_sources)
            if types is None:
                funnel["untyped"] += 1
            out.append(
                {
                    "index": index,
                    "doc_key": stem,
                    "question": question,
                    "answer": strip_bbox_tags(str(_get(rec, fields.answer, ""))),
                    "language": str(_get(rec, fields.language) or guess_language(question)),
                    "qtype": str(_get(rec, fields.qtype, "")),
                    "gt_necessary": [[p, *(round(v, 3) for v in b)] for p, b, _, _ in necessary],
                    "gt_all": [[p, *(round(v, 3) for v in b)] for p, b, _, _ in converted],
                    **({"gt_types": types} if types is not None else {}),
                    "alignment": alignment,
                    "pdf": str(doc.path),
                }
            )
    finally:
        pdfs.close()
    return out, funnel


RELEASE_FIELDS = ("index", "pdf_stem", "gt_necessary", "gt_all")


def rehydrate(
    release: list[dict],
    citevqa: list[dict],
    pdf_dir: Path,
    space: str = "max-pixels:1000000",
    fields: CiteVQAFields = CiteVQAFields(),
    cfg: VerifyConfig = VerifyConfig(),
    sources: dict[str, SourcePdf] | None = None,
    block_types: BlockTypes | None = None,
) -> tuple[list[dict], Counter]:
    """Verified release + CiteVQA download + PDFs -> gold records and the funnel (module docstring, way 1);
    ``sources`` and ``block_types`` as in :func:`convert_raw`."""
    release_scale(space, (612.0, 792.0))  # reject a bad --release-space before any work
    by_index = {str(_get(r, fields.index)): r for r in citevqa}
    funnel: Counter = Counter()
    out = []
    pdfs = _Pdfs(pdf_dir)
    try:
        for n, rec in enumerate(release):
            missing = [k for k in RELEASE_FIELDS if k not in rec]
            if missing:
                raise InputError(f"release record {n + 1}: lacks {', '.join(missing)} (is this the verified release?)")
            funnel["records"] += 1
            src = by_index.get(str(rec["index"]))
            if src is None:
                funnel["not in CiteVQA download"] += 1
                continue
            doc = pdfs.get(str(rec["pdf_stem"]))
            if doc is None:
                funnel["unreadable PDF"] += 1
                continue

            def elems(name: str, rec=rec) -> list:
                v = rec[name]
                if not isinstance(v, list) or not all(isinstance(e, list) and len(e) == 5 for e in v):
                    raise InputError(
                        f"release record {rec['index']!r}: {name} must be a list of [page, x1, y1, x2, y2]"
                    )
                return v

            nec, all_ = elems("gt_necessary"), elems("gt_all")
            if any(not 1 <= int(e[0]) <= doc.n_pages for e in (*nec, *all_)):
                funnel["pages out of range"] += 1
                continue

            def conv(e: list, doc: Document = doc) -> list:
                p = int(e[0])
                return [p, *(round(v, 3) for v in release_box_to_points(e[1:], doc.page_sizes[p - 1], space))]

            nec_pt, all_pt = [conv(e) for e in nec], [conv(e) for e in all_]
            if any(not _inside(e[1:], doc.page_sizes[e[0] - 1], cfg.page_tolerance_pt) for e in (*nec_pt, *all_pt)):
                funnel["box outside page"] += 1
                continue
            if sources is not None and not byte_verified(doc, str(rec["pdf_stem"]), sources):
                funnel["not byte-verified"] += 1
                continue
            type_sources = [(types_from_record(src, doc, fields), ANNOTATION_MATCH_IOU)]
            if block_types is not None:
                type_sources.append((block_types.typed(str(rec["pdf_stem"])), BLOCK_MATCH_IOU))
            types = element_types(nec_pt, type_sources)
            if types is None:
                funnel["untyped"] += 1
            funnel["kept"] += 1
            alignment = str(rec.get("alignment", ""))
            if alignment:
                funnel[alignment] += 1
            question = str(_get(src, fields.question, ""))
            out.append(
                {
                    "index": rec["index"],
                    "doc_key": str(rec["pdf_stem"]),
                    "question": question,
                    "answer": strip_bbox_tags(str(_get(src, fields.answer, ""))),
                    "language": str(rec.get("language") or guess_language(question)),
                    "qtype": str(rec.get("qtype", "")),
                    "gt_necessary": nec_pt,
                    "gt_all": all_pt,
                    **({"gt_types": types} if types is not None else {}),
                    "alignment": alignment,
                    "pdf": str(doc.path),
                }
            )
    finally:
        pdfs.close()
    return out, funnel


def format_funnel(funnel: Counter) -> str:
    """The funnel as aligned lines (steps with a zero count are shown too, except the single-doc/join ones)."""
    lines = []
    for step in FUNNEL_STEPS:
        if step in ("not single-doc", "not in CiteVQA download") and not funnel[step]:
            continue
        lines.append(f"{step:>26}: {funnel[step]}")
    split = [f"{k} {funnel[k]}" for k in ("verified", "unverifiable") if funnel[k]]
    if split:
        lines.append(f"{'':>26}  ({', '.join(split)})")
    if funnel["untyped"]:
        lines.append(f"{'':>26}  ({funnel['untyped']} kept without gt_types: an element no source types)")
    return "\n".join(lines)
