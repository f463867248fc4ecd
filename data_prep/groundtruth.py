"""What the reward needs to know about a question, packed into the dataset's answer column.

EasyR1 hands a batch reward only ``response``, ``response_length`` and ``ground_truth`` (the dataset's answer
column), so data preparation packs the question, the gold answer, the document's cache key and the page window
the policy saw into that column as one JSON string; the reward unpacks it. Both sides use this module.

>>> gt = GroundTruth("q1", "abc-123", "How much did revenue grow?", "12%", (3, 5))
>>> unpack_ground_truth(pack_ground_truth(gt)) == gt
True
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from core.errors import InputError
from core.io import loads_record

FIELDS: tuple[str, ...] = ("qid", "doc_key", "question", "answer", "pages")


@dataclass(frozen=True)
class GroundTruth:
    """One training/eval question.

    Attributes:
        qid: question id, unique in the dataset (groups the n responses of one prompt).
        doc_key: key of the document's entry in the block/embedding cache (:func:`data_prep.cache.make_doc_key`).
        question: the question text shown to the policy.
        answer: the gold answer (read by the judge only).
        pages: 1-based inclusive ``(first, last)`` page window the policy saw; None = the whole document.
    """

    qid: str
    doc_key: str
    question: str
    answer: str
    pages: tuple[int, int] | None

    def __post_init__(self) -> None:
        if self.pages is not None:
            first, last = self.pages
            if not (isinstance(first, int) and isinstance(last, int)) or not 1 <= first <= last:
                raise InputError(f"ground truth {self.qid!r}: pages must be 1-based [first, last], got {self.pages}")


def pack_ground_truth(gt: GroundTruth) -> str:
    """One-line JSON string for the dataset's answer column (UTF-8 text kept readable)."""
    return json.dumps(
        {
            "qid": gt.qid,
            "doc_key": gt.doc_key,
            "question": gt.question,
            "answer": gt.answer,
            "pages": None if gt.pages is None else [gt.pages[0], gt.pages[1]],
        },
        ensure_ascii=False,
    )


_NON_FINITE_FIELD = re.compile(r'"(\w+)"\s*:\s*(-?Infinity|NaN)\b')
"""A field whose value JSON cannot hold as a finite number (named in the error)."""


def unpack_ground_truth(s: str | dict) -> GroundTruth:
    """Inverse of :func:`pack_ground_truth`; raises :class:`InputError` naming the missing or bad field."""
    if isinstance(s, dict):
        d = s
    else:
        if not isinstance(s, str):
            raise InputError(f"ground_truth is not a packed JSON object: {str(s)[:80]!r}")
        try:  # the one record boundary: bounded numbers and nesting (a 100000-deep list is an error, not a crash)
            d = loads_record(s, "ground_truth")
        except InputError as e:
            m = _NON_FINITE_FIELD.search(s[:100_000])
            where = f" (field {m.group(1)!r} is {m.group(2)})" if m else ""
            raise InputError(f"ground_truth is not a packed JSON object ({e}){where}: {s[:80]!r}") from None
    if not isinstance(d, dict):
        raise InputError(f"ground_truth is not a JSON object: {str(s)[:80]!r}")
    missing = [f for f in FIELDS if f not in d]
    if missing:
        raise InputError(f"ground_truth is missing field(s) {', '.join(missing)}: {str(s)[:80]!r}")
    for f in ("qid", "doc_key", "question", "answer"):
        v = d[f]
        if f == "qid" and isinstance(v, int) and not isinstance(v, bool):
            d = {**d, f: str(v)}  # numeric ids are common in QA sets
        elif f == "answer" and isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            d = {**d, f: str(v)}  # so are numeric gold answers (LongDocURL has floats: 3.5, 0.25)
        elif not isinstance(v, str) or not v.strip():
            raise InputError(f"ground_truth field {f!r} must be a non-empty string, got {v!r}")
    pages = d["pages"]
    if pages is not None:
        if (
            not isinstance(pages, list | tuple)
            or len(pages) != 2
            or not all(isinstance(p, int) and not isinstance(p, bool) for p in pages)
        ):
            raise InputError(f"ground_truth field 'pages' must be null or [first, last] 1-based ints, got {pages!r}")
        pages = (int(pages[0]), int(pages[1]))
    return GroundTruth(str(d["qid"]), d["doc_key"], d["question"], str(d["answer"]), pages)
