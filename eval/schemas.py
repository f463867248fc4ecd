"""Gold and prediction records, and the JSONL reading/writing every eval command uses.

Coordinates: every box is ``[x0, y0, x1, y1]`` in PDF points, origin top-left of the displayed page (after
``/Rotate``); pages are 1-based. A box with ``x1 < x0`` or ``y1 < y0`` is normalised and flagged ``malformed``.

Gold, one JSON object per line::

    {"index", "doc_key", "question", "answer", "language", "qtype",
     "gt_necessary": [[page, x0, y0, x1, y1], ...], "gt_all": [...], "gt_types": ["text"|"table"|"figure", ...]}

``gt_types`` is optional (one per ``gt_necessary`` element). Any further keys are kept in ``extra``.

Predictions, one JSON object per line::

    {"index", "interface": "language"|"coordinate", "response", "answer",
     "citations": [{"page", "bbox", "similarity"?, "quote"?, "block_id"?}, ...]}

``index`` joins the two files (compared as strings, so ``7`` and ``"7"`` are the same question). Bad input raises
:class:`~core.errors.InputError` with ``FILE:LINE: what is wrong``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import (
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_jsonl,
    read_bytes,
    read_jsonl,
)
from data_prep.validate import field_int
from eval.boxes import Box, normalize_box
from eval.interfaces import INTERFACES  # how a model expressed its evidence (the registry)

ELEMENT_TYPES: tuple[str, ...] = ("text", "table", "figure")
"""Evidence element types of ``gt_types`` (text includes titles and lists; table its captions and notes)."""


@dataclass(frozen=True)
class Element:
    """One annotated evidence element: 1-based ``page`` and normalised ``bbox`` in points."""

    page: int
    bbox: Box
    malformed: bool = False

    def to_json(self) -> list:
        return [self.page, *(round(v, 3) for v in self.bbox)]


@dataclass(frozen=True)
class Gold:
    """A question with its gold answer and evidence elements (see the module docstring for the file format)."""

    index: Any
    doc_key: str
    question: str
    answer: str
    language: str
    qtype: str
    gt_necessary: tuple[Element, ...]
    gt_all: tuple[Element, ...]
    gt_types: tuple[str, ...] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        return str(self.index)

    def to_json(self) -> dict:
        d = {
            "index": self.index,
            "doc_key": self.doc_key,
            "question": self.question,
            "answer": self.answer,
            "language": self.language,
            "qtype": self.qtype,
            "gt_necessary": [e.to_json() for e in self.gt_necessary],
            "gt_all": [e.to_json() for e in self.gt_all],
        }
        if self.gt_types is not None:
            d["gt_types"] = list(self.gt_types)
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class Cited:
    """One citation of a prediction: 1-based ``page``, normalised ``bbox`` in points, and what produced it."""

    page: int
    bbox: Box
    similarity: float | None = None
    quote: str | None = None
    block_id: int | None = None
    malformed: bool = False

    def to_json(self) -> dict:
        d: dict = {"page": self.page, "bbox": [round(v, 3) for v in self.bbox]}
        if self.similarity is not None:
            d["similarity"] = round(float(self.similarity), 6)
        if self.quote is not None:
            d["quote"] = self.quote
        if self.block_id is not None:
            d["block_id"] = self.block_id
        return d


@dataclass(frozen=True)
class Prediction:
    """A model's response to one question and the citations it resolved to."""

    index: Any
    interface: str
    response: str
    answer: str
    citations: tuple[Cited, ...]
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> str:
        return str(self.index)

    def to_json(self) -> dict:
        d = {
            "index": self.index,
            "interface": self.interface,
            "response": self.response,
            "answer": self.answer,
            "citations": [c.to_json() for c in self.citations],
        }
        d.update(self.extra)
        return d


# ---------------------------------------------------------------------------------------------- parsing
GOLD_FIELDS = ("index", "doc_key", "question", "answer", "language", "qtype", "gt_necessary", "gt_all", "gt_types")
PRED_FIELDS = ("index", "interface", "response", "answer", "citations")


def _where(path: str | Path, lineno: int) -> str:
    return f"{path}:{lineno}"


def parse_element(value: Any, where: str, name: str) -> Element:
    """``[page, x0, y0, x1, y1]`` -> :class:`Element` (page 1-based, box in points)."""
    if not isinstance(value, list | tuple) or len(value) != 5:
        raise InputError(f"{where}: {name} must be [page, x0, y0, x1, y1], got {value!r}")
    page = _page(value[0], where, name)
    bbox, malformed = _box(value[1:], where, name)
    return Element(page, bbox, malformed)


def _page(value: Any, where: str, name: str) -> int:
    """A 1-based page through :func:`data_prep.validate.field_int` (a bool, a text, a fraction or NaN refused)."""
    try:
        return field_int({"page": value}, "page", where, lo=1)
    except InputError:
        raise InputError(
            f"{where}: {name} page must be an integer >= 1 (pages are 1-based), got {type(value).__name__} "
            f"{repr(value)[:40]}"
        ) from None


def _index(d: dict, where: str) -> int | str:
    """A record's ``index``: a string, or an integer through :func:`data_prep.validate.field_int` (``true`` is
    not question 1, ``7.0`` is question 7, a list or an object is refused)."""
    value = d.get("index")
    return value if isinstance(value, str) else field_int(d, "index", where)


def _box(value: Any, where: str, name: str) -> tuple[Box, bool]:
    if not isinstance(value, list | tuple) or len(value) != 4:
        raise InputError(f"{where}: {name} bbox must be 4 numbers [x0, y0, x1, y1], got {value!r}")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        raise InputError(f"{where}: {name} bbox must be 4 finite numbers, got {value!r}")
    return normalize_box(value)


def _require(d: dict, keys: Iterable[str], where: str, kind: str) -> None:
    missing = [k for k in keys if k not in d]
    if missing:
        raise InputError(f"{where}: {kind} record lacks {', '.join(repr(k) for k in missing)}")


def gold_from_json(d: dict, where: str = "gold") -> Gold:
    """Validate one gold record (see the module docstring)."""
    _require(d, ("index", "doc_key", "question", "answer", "gt_necessary", "gt_all"), where, "gold")
    for name in ("gt_necessary", "gt_all"):
        if not isinstance(d[name], list):
            raise InputError(f"{where}: {name} must be a list of [page, x0, y0, x1, y1]")
    nec = tuple(parse_element(v, where, f"gt_necessary[{i}]") for i, v in enumerate(d["gt_necessary"]))
    if not nec:
        raise InputError(f"{where}: gt_necessary is empty; recall needs at least one necessary element")
    all_ = tuple(parse_element(v, where, f"gt_all[{i}]") for i, v in enumerate(d["gt_all"]))
    types = d.get("gt_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != len(nec):
            raise InputError(f"{where}: gt_types must be a list with one type per gt_necessary element ({len(nec)})")
        bad = [t for t in types if t not in ELEMENT_TYPES]
        if bad:
            raise InputError(f"{where}: gt_types has {bad[0]!r}; expected one of {ELEMENT_TYPES}")
        types = tuple(types)
    extra = {k: v for k, v in d.items() if k not in GOLD_FIELDS}
    return Gold(
        index=_index(d, where),
        doc_key=str(d["doc_key"]),
        question=str(d["question"]),
        answer=str(d["answer"]),
        language=str(d.get("language", "")),
        qtype=str(d.get("qtype", "")),
        gt_necessary=nec,
        gt_all=all_,
        gt_types=types,
        extra=extra,
    )


def cited_from_json(c: Any, where: str, i: int) -> Cited:
    if not isinstance(c, dict):
        raise InputError(f"{where}: citations[{i}] must be an object with page and bbox, got {c!r}")
    _require(c, ("page", "bbox"), where, f"citations[{i}]")
    page = _page(c["page"], where, f"citations[{i}]")
    bbox, malformed = _box(c["bbox"], where, f"citations[{i}]")
    sim = c.get("similarity")
    if sim is not None and (not isinstance(sim, int | float) or isinstance(sim, bool) or not math.isfinite(sim)):
        raise InputError(f"{where}: citations[{i}].similarity must be a finite number, got {sim!r}")
    block_id = field_int(c, "block_id", f"{where}: citations[{i}]", lo=0, default=None)
    return Cited(
        page=page,
        bbox=bbox,
        similarity=None if sim is None else float(sim),
        quote=None if c.get("quote") is None else str(c["quote"]),
        block_id=block_id,
        malformed=malformed,
    )


def prediction_from_json(d: dict, where: str = "prediction") -> Prediction:
    """Validate one prediction record (see the module docstring)."""
    _require(d, ("index",), where, "prediction")
    interface = d.get("interface", "language")
    if interface not in INTERFACES:
        raise InputError(f"{where}: interface must be one of {tuple(INTERFACES.names())}, got {interface!r}")
    cits = d.get("citations", [])
    if cits is None:
        cits = []
    if not isinstance(cits, list):
        raise InputError(f"{where}: citations must be a list")
    extra = {k: v for k, v in d.items() if k not in PRED_FIELDS}
    return Prediction(
        index=_index(d, where),
        interface=interface,
        response="" if d.get("response") is None else str(d["response"]),
        answer="" if d.get("answer") is None else str(d["answer"]),
        citations=tuple(cited_from_json(c, where, i) for i, c in enumerate(cits)),
        extra=extra,
    )


# ---------------------------------------------------------------------------------------------- JSONL IO
def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for each non-blank line; InputError names the file and line (bytes that
    are not UTF-8 included): the shared reader :func:`core.io.read_jsonl`."""
    return read_jsonl(path)


def _unique(records: list, path: Path, kind: str) -> None:
    seen: dict[str, int] = {}
    for i, r in enumerate(records):
        if r.key in seen:
            raise InputError(f"{path}: {kind} index {r.index!r} appears twice (records {seen[r.key] + 1} and {i + 1})")
        seen[r.key] = i


def read_gold(path: str | Path) -> list[Gold]:
    """All gold records of a JSONL file, validated; indices must be unique."""
    path = Path(path)
    out = [gold_from_json(d, _where(path, n)) for n, d in iter_jsonl(path)]
    if not out:
        raise InputError(f"{path}: no gold records")
    _unique(out, path, "gold")
    return out


def read_predictions(path: str | Path) -> list[Prediction]:
    """All prediction records of a JSONL file, validated; indices must be unique."""
    path = Path(path)
    out = [prediction_from_json(d, _where(path, n)) for n, d in iter_jsonl(path)]
    _unique(out, path, "prediction")
    return out


write_json = atomic_write_json
write_jsonl = atomic_write_jsonl


def append_jsonl(path: str | Path, row: dict) -> None:
    """Append one line with a single write, flushed and fsynced, so a crash leaves whole lines behind (at most a
    partial last line, which :func:`repair_jsonl_tail` removes)."""
    data = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def repair_jsonl_tail(path: str | Path) -> int:
    """Drop a trailing partial or unparsable line left by a crash; returns the number of lines dropped (0/1).

    Only the *last* line may be damaged (appends are whole lines); damage elsewhere is an InputError."""
    path = Path(path)
    if not path.exists():
        return 0
    raw = read_bytes(path, "predictions")  # a regular file only: a FIFO named as the output is never waited on
    if not raw:
        return 0
    lines = raw.split(b"\n")
    # A file of whole lines ends with "\n", so the split's last item is b"".
    tail_partial = lines[-1] != b""
    body = lines[:-1]
    if not tail_partial:
        try:
            if body and body[-1].strip():
                json.loads(body[-1])  # only whether the last line is whole (a torn tail), never its content
            return 0
        except json.JSONDecodeError:
            body = body[:-1]
    for i, line in enumerate(body, 1):
        if line.strip():
            try:
                json.loads(line)
            except json.JSONDecodeError:
                raise InputError(f"{path}:{i}: not valid JSON in the middle of the file; fix or remove it") from None
    atomic_write_bytes(path, b"".join(line + b"\n" for line in body))
    return 1
