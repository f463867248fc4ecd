"""``python -m data_prep longdocurl``: the GRPO training set (EasyR1 parquet) from LongDocURL.

For each question a window of at most ``--max-window`` consecutive pages containing every evidence page, centred
on them where the document allows, is rendered as JPEG page images under the evaluation's per-page pixel budget
(lowered when the images plus the text would not fit ``max_prompt_length``; token count:
:mod:`data_prep.qwen_tokens`). The evidence pages place the window and are used for nothing else.

Outputs under ``--out``:

* ``train.parquet``, ``val.parquet``: columns ``prompt`` (one ``<image>`` per page, then the question),
  ``images`` (page image paths relative to ``--out``: set EasyR1's ``data.image_dir`` to ``--out``), ``answer``
  (:func:`data_prep.groundtruth.pack_ground_truth`: qid, doc_key, question, gold answer, window pages), ``doc_key``,
  ``n_images``. The split is seeded, holds out ``--val`` questions, and no document is in both.
* ``images/<doc_no>-<sha8>/p<page>_<pixels>px_q<quality>.jpg``; the block cache of every kept document in
  ``--cache-dir`` (default ``OUT/cache``; the reward reads it); ``summary.json``; ``skipped.jsonl`` (one line per
  skipped question with its reason); with ``--eval-pdfs``, ``overlap_report.json``.
* ``.state/``: one done-marker per document (its rows, skips and overlap verdict, keyed by a hash of everything
  that decides them) and cached fingerprints, so a rerun skips finished documents; every write is atomic.

As a job array (``launch/prep_array.sh``): ``--shard I/N`` (1-based, :mod:`data_prep.shards`) processes only the
documents whose ``doc_no`` hashes into shard I (cache entries, page images, done-markers) and writes no parquet,
summary or report; then one ``--finalize`` run takes every document from its done-marker and writes the outputs,
or fails naming the documents that have none (their shard task failed or never ran) without writing anything.

Pages are 1-based everywhere (LongDocURL's ``evidence_pages`` are 1-based).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pypdfium2 as pdfium

from core.errors import InputError
from core.io import (
    NotJSONError,
    atomic_path,
    atomic_write_json,
    atomic_write_text,
    loads_record,
    read_json,
    read_jsonl,
    read_text,
    safe_component,
)
from data_prep.document import Document, sha256_file
from data_prep.fingerprint import (
    DocFingerprint,
    MinHashConfig,
    MinHasher,
    find_overlaps,
    fingerprint_text,
    jaccard_estimate,
)
from data_prep.qwen_tokens import QWEN3_VL, PromptBudget, choose_page_budget, estimate_text_tokens, image_tokens
from data_prep.shards import Shard
from data_prep.validate import field_int
from recipes import prompt_path

DEFAULT_FORMAT_PROMPT = prompt_path("language_interface.jinja")
"""The format prompt the recipe renders around each prompt (its text counts toward the prompt length)."""

_TRANSPORT_ARGS = frozenset({"url", "api_key", "timeout_s", "max_concurrency", "batch_size", "device"})
"""Encoder arguments that change how vectors are fetched, not what they are: left out of the done-marker key."""

STATE_VERSION = 1
"""Bumped when the done-marker layout or the per-document logic changes (invalidates every marker)."""

# Skip reasons (one per skipped question, counted in the summary).
MISSING_PDF = "missing_pdf"
UNREADABLE_PDF = "unreadable_pdf"
EVAL_OVERLAP = "eval_overlap"
PAGE_COUNT_MISMATCH = "page_count_mismatch"
NO_EVIDENCE = "no_evidence_pages"
EVIDENCE_OUT_OF_RANGE = "evidence_out_of_range"
SPAN_EXCEEDS_WINDOW = "evidence_span_exceeds_window"
EMPTY_QUESTION = "empty_question"
EMPTY_ANSWER = "empty_answer"
PROMPT_TOO_LONG = "prompt_too_long"
DUPLICATE_QID = "duplicate_qid"
CACHE_FAILED = "cache_failed"


@dataclass(frozen=True)
class Record:
    """One LongDocURL question, normalised."""

    qid: str
    """``question_id``."""
    doc_no: str
    """``doc_no``: the document's id (the PDF is ``<doc_no>.pdf``)."""
    question: str
    answer: str
    """The gold answer as text (lists as JSON arrays)."""
    evidence_pages: tuple[int, ...]
    """1-based evidence pages, sorted, unique."""
    total_pages: int | None
    """The record's ``total_pages`` (checked against the PDF)."""
    pdf_name: str | None
    """Basename of the record's ``pdf_path``, if any."""


def answer_text(value) -> str:
    """LongDocURL answers are strings, numbers or lists; the judge reads text (lists as JSON arrays)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


MAX_PAGES = 100_000
"""A page number or page count above this is refused as a record error (no PDF of this project has more)."""


def _pages(value, where: str) -> tuple[int, ...]:
    if isinstance(value, str):  # some QA sets store "[3, 4]"
        try:
            value = loads_record(value, where)
        except InputError:
            raise InputError(f"{where}: evidence_pages {value!r} is not a list of page numbers") from None
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) and abs(p) <= MAX_PAGES for p in value
    ):
        raise InputError(
            f"{where}: evidence_pages must be a list of 1-based page numbers (at most {MAX_PAGES}), got {str(value)[:80]}"
        )
    return tuple(sorted(set(value)))


def load_records(path: str | Path) -> list[Record]:
    """Read a LongDocURL JSONL file. Raises :class:`InputError` naming the line of a malformed record."""
    path = Path(path)
    out: list[Record] = []
    for lineno, d in read_jsonl(path):
        where = f"{path}:{lineno}"
        missing = [k for k in ("question_id", "doc_no", "question", "answer", "evidence_pages") if k not in d]
        if missing:
            raise InputError(f"{where}: missing field(s) {', '.join(missing)} (is this LongDocURL.jsonl?)")
        pdf_path = d.get("pdf_path")
        out.append(
            Record(
                qid=str(d["question_id"]),
                doc_no=safe_component(d["doc_no"], f"{where}: doc_no"),
                question=str(d["question"] or "").strip(),
                answer=answer_text(d["answer"]),
                evidence_pages=_pages(d["evidence_pages"], where),
                total_pages=field_int(d, "total_pages", where, lo=1, hi=MAX_PAGES, default=None),
                pdf_name=os.path.basename(str(pdf_path)) if pdf_path else None,
            )
        )
    return out


def place_window(evidence_pages: tuple[int, ...], n_pages: int, max_window: int) -> tuple[int, int] | None:
    """The 1-based inclusive ``(first, last)`` window of ``min(max_window, n_pages)`` pages holding every evidence
    page, centred on the evidence span (odd spare pages go after it) and shifted back inside the document at
    its ends; None when the evidence spans more than ``max_window`` pages.

    >>> place_window((54,), 84, 30)
    (40, 69)
    """
    if max_window < 1:
        raise ValueError("max_window must be at least 1")
    if not evidence_pages:
        raise ValueError("no evidence pages")
    lo, hi = min(evidence_pages), max(evidence_pages)
    if lo < 1 or hi > n_pages:
        raise ValueError(f"evidence pages {evidence_pages} outside 1..{n_pages}")
    span = hi - lo + 1
    if span > max_window:
        return None
    size = min(max_window, n_pages)
    first = lo - (size - span) // 2
    first = max(1, min(first, n_pages - size + 1))
    return first, first + size - 1


def render_prompt_text(template: str, content: str) -> str:
    """The user turn EasyR1 builds: the format prompt (jinja, stripped) rendered with ``content``."""
    from jinja2 import Template

    return Template(template.strip()).render(content=content)


def build_prompt(n_images: int, question: str) -> str:
    """The ``prompt`` column: one ``<image>`` placeholder per page image, then the question.

    EasyR1 turns every ``<image>`` of the prompt into an image slot, so one written inside a question would
    misalign images and slots: it becomes ``[image]``.

    >>> build_prompt(2, "What does <image> show?")
    '<image><image>What does [image] show?'
    """
    return "<image>" * n_images + question.replace("<image>", "[image]")


@dataclass(frozen=True)
class BuildConfig:
    """Knobs of the training-set build (the CLI flags)."""

    jsonl: Path
    """LongDocURL JSONL (fields question_id, doc_no, question, answer, evidence_pages, total_pages, pdf_path)."""
    pdf_dir: Path
    """Folder searched recursively for ``<doc_no>.pdf`` (or the basename of the record's pdf_path)."""
    out: Path
    """Output folder."""
    eval_pdfs: Path | None = None
    """Folder of evaluation PDFs: training documents that duplicate one of them are excluded."""
    max_window: int = 30
    """Pages per window at most (the paper: 30)."""
    val: int = 83
    """Questions held out for validation (whole documents; the paper: 83)."""
    seed: int = 0
    """Seed of the train/val split."""
    parser: str = "pdftext"
    """Layout parser for the block cache (``data_prep.parsers``)."""
    encoder: str = "minilm"
    """Encoder for the block cache (``data_prep.encoders``); must be the one the reward embeds quotes with.
    ``none`` stores blocks without embeddings (a dry run; the reward cannot use such a cache)."""
    encoder_args: dict = field(default_factory=dict)
    """Keyword arguments for the encoder (``--encoder-arg key=value``)."""
    parser_args: dict = field(default_factory=dict)
    """Keyword arguments for the parser (``--parser-arg key=value``)."""
    cache_dir: Path | None = None
    """Block cache folder (default ``OUT/cache``)."""
    budget: PromptBudget = PromptBudget()
    """Prompt-length and pixel budget settings."""
    chat_overhead_tokens: int = 32
    """Tokens of the chat template around the user turn (role tags, generation prompt)."""
    format_prompt: Path | None = DEFAULT_FORMAT_PROMPT
    """The recipe's ``data.format_prompt`` (its text counts toward the prompt); None: the bare prompt."""
    jpeg_quality: int = 90
    """JPEG quality of page images."""
    minhash: MinHashConfig = MinHashConfig()
    """Near-duplicate check settings (threshold: estimated Jaccard at or above which a document is excluded)."""
    shard: Shard | None = None
    """Only this shard's documents, and no outputs but the cache, images and done-markers (a job-array task)."""
    finalize: bool = False
    """Build nothing: take every document from its done-marker and write the outputs; InputError naming the
    documents without one."""

    @property
    def cache_path(self) -> Path:
        return self.cache_dir if self.cache_dir is not None else self.out / "cache"


@dataclass
class BuildResult:
    """What a build produced (also written to ``summary.json``)."""

    train_rows: list[dict]
    val_rows: list[dict]
    skipped: list[dict]
    """One ``{"qid", "doc_no", "reason", "detail"}`` per skipped question."""
    overlaps: list[dict]
    """Training documents excluded as duplicates of evaluation documents."""
    rendered_images: int = 0
    """Page images rendered in this run."""
    reused_images: int = 0
    """Page images found on disk from an earlier run (or shared with another question)."""
    docs_from_state: int = 0
    """Documents taken whole from their done-marker."""
    documents: list[str] = field(default_factory=list)
    """The ``doc_no`` of every document this run processed (with ``--shard``: the shard's)."""
    lowered_budgets: int = 0
    """Questions whose per-page pixel budget is below the evaluation budget."""
    summary: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- helpers
def _atomic_write_json(path: Path, obj) -> None:
    atomic_write_json(path, obj)


def _save_jpeg(img, path: Path, quality: int) -> None:
    with atomic_path(path) as tmp:
        img.save(tmp, format="JPEG", quality=quality)


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("prompt", pa.string()),
            ("images", pa.list_(pa.string())),
            ("answer", pa.string()),
            ("doc_key", pa.string()),
            ("n_images", pa.int32()),
        ]
    )
    table = pa.Table.from_pylist([{k: r[k] for k in schema.names} for r in rows], schema=schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def list_pdfs(pdf_dir: Path) -> list[Path]:
    """Every ``*.pdf`` file under ``pdf_dir`` (recursive, any case), sorted."""
    if not pdf_dir.is_dir():
        raise InputError(f"{pdf_dir}: PDF folder not found")
    return [p for p in sorted(pdf_dir.rglob("*")) if p.suffix.lower() == ".pdf" and p.is_file()]


def index_pdfs(pdf_dir: Path) -> dict[str, Path]:
    """``{file name stem: path}`` of every PDF under ``pdf_dir`` (recursive); the first in sorted order wins."""
    out: dict[str, Path] = {}
    for p in list_pdfs(pdf_dir):
        out.setdefault(p.stem, p)
    return out


def _find_pdf(records: list[Record], index: dict[str, Path]) -> Path | None:
    for r in records:
        if r.pdf_name and Path(r.pdf_name).stem in index:
            return index[Path(r.pdf_name).stem]
    return index.get(records[0].doc_no)


def _skip(r: Record, reason: str, detail: str = "") -> dict:
    return {"qid": r.qid, "doc_no": r.doc_no, "reason": reason, "detail": detail}


class _Fingerprints:
    """Fingerprints cached under ``.state/fingerprints/<pdf sha256>.json`` (MinHash settings in the name)."""

    def __init__(self, state_dir: Path, config: MinHashConfig) -> None:
        self.dir = state_dir / "fingerprints" / _digest(asdict(config))
        self.hasher = MinHasher(config)

    def get(self, path: Path, sha256: str, doc: Document | None = None) -> DocFingerprint:
        cached = self.dir / f"{sha256}.json"
        if cached.is_file():
            d = read_json(cached)
            return DocFingerprint(str(path), sha256, d["text_sha256"], np.array(d["minhash"], np.uint64), d["n"])
        if doc is None:
            with Document.open(path) as opened:
                fp = fingerprint_text(str(path), sha256, opened.full_text(), self.hasher)
        else:
            fp = fingerprint_text(str(path), sha256, doc.full_text(), self.hasher)
        _atomic_write_json(
            cached, {"text_sha256": fp.text_sha256, "minhash": [int(v) for v in fp.minhash], "n": fp.n_shingles}
        )
        return fp


# ---------------------------------------------------------------------------------------------------- the build
class _Builder:
    def __init__(self, config: BuildConfig, console=None) -> None:
        from rich.console import Console

        self.c = config
        self.console = console or Console(stderr=True)
        self.state_dir = config.out / ".state"
        self.template = None
        if config.format_prompt is not None:
            if not Path(config.format_prompt).is_file():
                raise InputError(f"{config.format_prompt}: format prompt not found")
            self.template = read_text(config.format_prompt, "format prompt")  # a regular file of UTF-8 text
        self.fingerprints = _Fingerprints(self.state_dir, config.minhash)
        self._parser = None
        self._encoder = None
        self.result = BuildResult([], [], [], [])

    # lazily: a rerun that finds every document done never loads the encoder
    def parser(self):
        if self._parser is None:
            from data_prep.parsers import get_parser

            self._parser = get_parser(self.c.parser, **self.c.parser_args)
        return self._parser

    def encoder(self):
        if self._encoder is None and self.c.encoder != "none":
            from data_prep.encoders import get_encoder

            self._encoder = get_encoder(self.c.encoder, **self.c.encoder_args)
        return self._encoder

    def check_names(self) -> None:
        """Fail before any work on a misspelt parser or encoder (``KeyError`` with a did-you-mean)."""
        from data_prep.encoders import ENCODERS
        from data_prep.parsers import PARSERS

        PARSERS.entry(self.c.parser)
        if self.c.encoder != "none":
            ENCODERS.entry(self.c.encoder)

    def text_tokens(self, question: str) -> int:
        content = render_prompt_text(self.template, question) if self.template is not None else question
        return estimate_text_tokens(content) + self.c.chat_overhead_tokens

    # ---------------------------------------------------------------- evaluation set
    def eval_fingerprints(self) -> tuple[list[DocFingerprint], list[dict]]:
        if self.c.eval_pdfs is None:
            return [], []
        fps, unreadable = [], []
        paths = list_pdfs(self.c.eval_pdfs)
        if not paths:
            raise InputError(f"{self.c.eval_pdfs}: no PDF found under the evaluation folder")
        for p in self._progress(paths, "fingerprinting evaluation PDFs"):
            sha = sha256_file(p)
            try:
                fps.append(self.fingerprints.get(p, sha))
            except InputError as e:  # no text to compare: still caught when a training file has the same bytes
                unreadable.append({"path": str(p), "error": str(e)})
                fps.append(fingerprint_text(str(p), sha, "", self.fingerprints.hasher))
        return fps, unreadable

    def _progress(self, items, desc: str):
        from rich.progress import track

        return track(items, description=desc, console=self.console, transient=True)

    # ---------------------------------------------------------------- one document
    def doc_settings(self, records: list[Record], pdf_sha: str, eval_digest: str) -> str:
        c = self.c
        return _digest(
            {
                "v": STATE_VERSION,
                "records": [asdict(r) for r in records],
                "pdf": pdf_sha,
                "eval": eval_digest,
                "window": c.max_window,
                "budget": asdict(c.budget),
                "vision": asdict(QWEN3_VL),
                "chat": c.chat_overhead_tokens,
                "template": self.template,
                "jpeg": c.jpeg_quality,
                "minhash": asdict(c.minhash),
                "parser": [c.parser, c.parser_args],
                "encoder": [c.encoder, {k: v for k, v in c.encoder_args.items() if k not in _TRANSPORT_ARGS}],
                "cache": str(c.cache_path.resolve()),
            }
        )

    def process_doc(
        self, doc_no: str, records: list[Record], pdf: Path | None, evals: list[DocFingerprint], eval_digest: str
    ) -> dict:
        """Rows, skips and overlap verdict of one document (from its done-marker when still valid)."""
        if pdf is None:
            return {"rows": [], "skips": [_skip(r, MISSING_PDF, "no PDF for this doc_no") for r in records]}
        try:
            pdf_sha = sha256_file(pdf)
        except OSError as e:
            return {"rows": [], "skips": [_skip(r, UNREADABLE_PDF, str(e)) for r in records]}
        settings = self.doc_settings(records, pdf_sha, eval_digest)
        marker = self.state_dir / "docs" / f"{doc_no}.json"
        if marker.is_file():
            try:
                state = read_json(marker)
            except InputError:
                state = None
            if not isinstance(state, dict):
                state = None
            if state and state.get("settings") == settings and self._outputs_present(state["rows"]):
                self.result.docs_from_state += 1
                return state
        if self.c.finalize:
            return {"missing": str(pdf)}
        try:
            doc = Document.open(pdf)
        except InputError as e:
            state = {"rows": [], "skips": [_skip(r, UNREADABLE_PDF, str(e)) for r in records]}
        else:
            with doc:
                state = self._process_open_doc(doc_no, records, doc, pdf, evals)
        state["settings"] = settings
        if not state.pop("retry", False):
            _atomic_write_json(marker, state)
        return state

    def _outputs_present(self, rows: list[dict]) -> bool:
        """Every image of the rows is on disk and every row's cache entry is still there."""
        images = all((self.c.out / p).is_file() for r in rows for p in r["images"])
        return images and all((self.c.cache_path / r["doc_key"] / "manifest.json").is_file() for r in rows)

    def _process_open_doc(
        self, doc_no: str, records: list[Record], doc: Document, pdf: Path, evals: list[DocFingerprint]
    ) -> dict:
        c = self.c
        state: dict = {"rows": [], "skips": [], "overlap": None, "unverifiable": False}
        if evals:
            fp = self.fingerprints.get(pdf, doc.sha256, doc)
            matches = find_overlaps(fp, evals, c.minhash.threshold)
            state["max_jaccard"] = max((jaccard_estimate(fp.minhash, e.minhash) for e in evals), default=0.0)
            state["unverifiable"] = fp.text_sha256 is None
            if matches:
                m = matches[0]
                state["overlap"] = {
                    "doc_no": doc_no,
                    "train": str(pdf),
                    "eval": m.eval,
                    "kind": m.kind,
                    "jaccard": round(m.jaccard, 4),
                }
                detail = f"{m.kind} duplicate of {m.eval}"
                state["skips"] = [_skip(r, EVAL_OVERLAP, detail) for r in records]
                return state

        plans = []  # (record, (first, last), BudgetChoice)
        for r in records:
            if not r.question:
                state["skips"].append(_skip(r, EMPTY_QUESTION))
                continue
            if not r.answer:
                state["skips"].append(_skip(r, EMPTY_ANSWER))
                continue
            if r.total_pages is not None and r.total_pages != doc.n_pages:
                detail = f"record says {r.total_pages} pages, PDF has {doc.n_pages}"
                state["skips"].append(_skip(r, PAGE_COUNT_MISMATCH, detail))
                continue
            if not r.evidence_pages:
                state["skips"].append(_skip(r, NO_EVIDENCE))
                continue
            if r.evidence_pages[0] < 1 or r.evidence_pages[-1] > doc.n_pages:
                detail = f"evidence pages {list(r.evidence_pages)} outside 1..{doc.n_pages}"
                state["skips"].append(_skip(r, EVIDENCE_OUT_OF_RANGE, detail))
                continue
            window = place_window(r.evidence_pages, doc.n_pages, c.max_window)
            if window is None:
                span = r.evidence_pages[-1] - r.evidence_pages[0] + 1
                detail = f"evidence pages {list(r.evidence_pages)} span {span} > {c.max_window} pages"
                state["skips"].append(_skip(r, SPAN_EXCEEDS_WINDOW, detail))
                continue
            first, last = window
            sizes = [doc.page_sizes[p - 1] for p in range(first, last + 1)]
            text_tokens = self.text_tokens(r.question)
            choice = choose_page_budget(sizes, text_tokens, c.budget)
            if choice is None:
                detail = f"{last - first + 1} pages do not fit {c.budget.max_prompt_length} tokens at any budget"
                state["skips"].append(_skip(r, PROMPT_TOO_LONG, detail))
                continue
            plans.append((r, window, choice))
        if not plans:
            return state

        try:
            cached = self._build_cache(pdf)
        except Exception as e:  # one bad document (or an embedder outage) must not end a long build
            detail = f"{type(e).__name__}: {e}"
            state["skips"].extend(_skip(r, CACHE_FAILED, detail) for r, _, _ in plans)
            state["retry"] = True  # possibly transient (a server): no done-marker, the next run tries again
            return state

        doc_dir = f"images/{doc_no}-{doc.sha256[:8]}"
        for r, (first, last), choice in plans:
            px = int(choice.max_pixels)
            images, tokens = [], 0
            try:
                for i, page in enumerate(range(first, last + 1)):
                    rel = f"{doc_dir}/p{page:04d}_{px}px_q{c.jpeg_quality}.jpg"
                    target = choice.image_sizes[i]
                    self._render(doc, page, choice.max_pixels, target, c.out / rel)
                    images.append(rel)
                    tokens += image_tokens(*target)
            except pdfium.PdfiumError as e:  # a damaged page in a PDF that opens
                state["skips"].append(_skip(r, UNREADABLE_PDF, f"page {first + len(images)} does not render: {e}"))
                continue
            gt = self._ground_truth(r, cached.key, (first, last))
            state["rows"].append(
                {
                    "prompt": build_prompt(len(images), r.question),
                    "images": images,
                    "answer": gt,
                    "doc_key": cached.key,
                    "n_images": len(images),
                    "qid": r.qid,
                    "doc_no": doc_no,
                    "pages": [first, last],
                    "pixels_per_page": px,
                    "lowered": choice.lowered,
                    "prompt_tokens": tokens + choice.text_tokens,
                }
            )
        return state

    def _build_cache(self, pdf: Path):
        from data_prep.cache import build_cache

        return build_cache(pdf, self.parser(), self.encoder(), self.c.cache_path)

    @staticmethod
    def _ground_truth(r: Record, doc_key: str, pages: tuple[int, int]) -> str:
        from data_prep.groundtruth import GroundTruth, pack_ground_truth

        return pack_ground_truth(GroundTruth(r.qid, doc_key, r.question, r.answer, pages=pages))

    def _render(self, doc: Document, page: int, max_pixels: float, size: tuple[int, int], path: Path) -> None:
        if path.is_file():
            self.result.reused_images += 1
            return
        from PIL import Image

        img = doc.render_page(page, max_pixels=max_pixels)
        if img.size != size:  # pdfium rounds the bitmap up; bring it to the size the token count assumed
            img = img.resize(size, Image.Resampling.LANCZOS)
        _save_jpeg(img, path, self.c.jpeg_quality)
        self.result.rendered_images += 1

    # ---------------------------------------------------------------- whole build
    def run(self) -> BuildResult:
        c = self.c
        t0 = time.perf_counter()
        self.check_names()
        records = load_records(c.jsonl)
        if not records:
            raise InputError(f"{c.jsonl}: no records")
        index = index_pdfs(c.pdf_dir)
        seen: set[str] = set()
        by_doc: dict[str, list[Record]] = defaultdict(list)
        for r in records:
            if r.qid in seen:
                self.result.skipped.append(_skip(r, DUPLICATE_QID, "question_id seen earlier in the file"))
                continue
            seen.add(r.qid)
            by_doc[r.doc_no].append(r)

        evals, eval_unreadable = self.eval_fingerprints()
        eval_digest = _digest(sorted([e.sha256, e.text_sha256] for e in evals)) if evals else ""

        rows: list[dict] = []
        max_jaccards: dict[str, float] = {}
        unverifiable: list[str] = []
        missing: list[str] = []
        docs = sorted(by_doc) if c.shard is None else c.shard.select(sorted(by_doc), key=str)
        self.result.documents = docs
        what = f"shard {c.shard}: building {len(docs)} of {len(by_doc)}" if c.shard else f"building {len(docs)}"
        for doc_no in self._progress(docs, f"{what} documents"):
            recs = by_doc[doc_no]
            state = self.process_doc(doc_no, recs, _find_pdf(recs, index), evals, eval_digest)
            if "missing" in state:
                missing.append(f"{doc_no} ({state['missing']})")
                continue
            rows.extend(state["rows"])
            self.result.skipped.extend(state["skips"])
            if state.get("overlap"):
                self.result.overlaps.append(state["overlap"])
            if "max_jaccard" in state and not state.get("overlap"):
                max_jaccards[doc_no] = state["max_jaccard"]
            if state.get("unverifiable"):
                unverifiable.append(doc_no)

        if missing:
            shown = ", ".join(missing[:50]) + (f" and {len(missing) - 50} more" if len(missing) > 50 else "")
            raise InputError(
                f"--finalize: {len(missing)} of {len(docs)} documents have no finished entry under {self.state_dir} "
                f"(their shard task failed or never ran): {shown}; rerun those shards (or the build without "
                "--finalize); nothing was written"
            )
        self.result.lowered_budgets = sum(1 for r in rows if r["lowered"])
        if c.shard is not None:  # a job-array task: the --finalize run splits and writes the outputs
            self.result.train_rows = rows
            return self.result
        train, val = split_by_document(rows, c.val, c.seed)
        self.result.train_rows, self.result.val_rows = train, val
        self._write_outputs(evals, eval_unreadable, max_jaccards, unverifiable, time.perf_counter() - t0)
        return self.result

    def _write_outputs(self, evals, eval_unreadable, max_jaccards, unverifiable, seconds: float) -> None:
        c, res = self.c, self.result
        for name, rows in (("train.parquet", res.train_rows), ("val.parquet", res.val_rows)):
            if rows:
                _write_parquet(c.out / name, rows)
            elif (c.out / name).exists():
                (c.out / name).unlink()  # a stale split from an earlier build must not be trained on
        skipped_lines = "".join(json.dumps(s, ensure_ascii=False) + "\n" for s in res.skipped)
        atomic_write_text(c.out / "skipped.jsonl", skipped_lines)
        if c.eval_pdfs is not None:
            _atomic_write_json(
                c.out / "overlap_report.json",
                {
                    "eval_dir": str(c.eval_pdfs),
                    "eval_pdfs": len(evals),
                    "eval_without_text": sorted(e.path for e in evals if e.text_sha256 is None),
                    "eval_unreadable": eval_unreadable,
                    "minhash": asdict(c.minhash),
                    "checks": "bytes sha256, whole-text sha256 (normalised), MinHash Jaccard of word shingles",
                    "train_docs_checked": len(max_jaccards) + len(res.overlaps),
                    "excluded": res.overlaps,
                    "excluded_questions": sum(1 for s in res.skipped if s["reason"] == EVAL_OVERLAP),
                    "kept_max_jaccard": max(max_jaccards.values(), default=0.0),
                    "kept_max_jaccard_by_doc": dict(sorted(max_jaccards.items())),
                    "unverifiable_no_text": sorted(unverifiable),
                },
            )
        res.summary = summarize(res, c, seconds)
        _atomic_write_json(c.out / "summary.json", res.summary)


def split_by_document(rows: list[dict], n_val: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded split holding out ``n_val`` questions as whole documents (no document in both splits).

    Documents are shuffled with ``seed`` and taken into validation while they fit, so validation gets exactly
    ``n_val`` questions whenever some subset of the shuffled documents adds up to it greedily (the common case;
    otherwise fewer). Raises :class:`InputError` when ``n_val`` leaves no training question."""
    if n_val < 0:
        raise InputError(f"--val must be >= 0, got {n_val}")
    if n_val and n_val >= len(rows):
        raise InputError(f"--val {n_val} would hold out every one of the {len(rows)} kept questions")
    by_doc: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_doc[r["doc_key"]].append(r)
    docs = sorted(by_doc)
    random.Random(seed).shuffle(docs)
    val_docs: set[str] = set()
    n = 0
    for d in docs:
        if n == n_val:
            break
        if n + len(by_doc[d]) <= n_val:
            val_docs.add(d)
            n += len(by_doc[d])
    train = [r for r in rows if r["doc_key"] not in val_docs]
    val = [r for r in rows if r["doc_key"] in val_docs]
    return train, val


def _stats(values: list[float]) -> dict:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def summarize(res: BuildResult, c: BuildConfig, seconds: float) -> dict:
    rows = res.train_rows + res.val_rows
    reasons = Counter(s["reason"] for s in res.skipped)
    return {
        "questions_kept": len(rows),
        "questions_skipped": len(res.skipped),
        "skipped_by_reason": dict(sorted(reasons.items())),
        "train_questions": len(res.train_rows),
        "val_questions": len(res.val_rows),
        "train_documents": len({r["doc_key"] for r in res.train_rows}),
        "easyr1_steps_per_epoch_at_rollout_batch_32": len(res.train_rows) // 32,
        "val_documents": len({r["doc_key"] for r in res.val_rows}),
        "documents_excluded_as_eval_overlap": len(res.overlaps),
        "pages_per_window": _stats([r["pages"][1] - r["pages"][0] + 1 for r in rows]),
        "images_per_sample": _stats([r["n_images"] for r in rows]),
        "estimated_prompt_tokens": _stats([r["prompt_tokens"] for r in rows]),
        "pixels_per_page": _stats([r["pixels_per_page"] for r in rows]),
        "lowered_budgets": res.lowered_budgets,
        "max_prompt_length": c.budget.max_prompt_length,
        "rendered_images": res.rendered_images,
        "reused_images": res.reused_images,
        "documents_from_state": res.docs_from_state,
        "seconds": round(seconds, 2),
    }


def print_summary(summary: dict, out: Path, console=None) -> None:
    """The build summary as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"LongDocURL training set -> {out}")
    t.add_column("")
    t.add_column("value", justify="right")
    t.add_row("questions kept", str(summary["questions_kept"]))
    t.add_row("  train / val questions", f"{summary['train_questions']} / {summary['val_questions']}")
    t.add_row("  train / val documents", f"{summary['train_documents']} / {summary['val_documents']}")
    t.add_row(
        "  EasyR1 steps per epoch (rollout batch 32)", str(summary["easyr1_steps_per_epoch_at_rollout_batch_32"])
    )
    t.add_row("questions skipped", str(summary["questions_skipped"]))
    for reason, n in summary["skipped_by_reason"].items():
        t.add_row(f"  {reason}", str(n))
    t.add_row("documents excluded (evaluation overlap)", str(summary["documents_excluded_as_eval_overlap"]))
    for key, label in (
        ("pages_per_window", "pages per window"),
        ("images_per_sample", "images per sample"),
        ("estimated_prompt_tokens", "estimated prompt tokens"),
        ("pixels_per_page", "pixels per page"),
    ):
        s = summary[key]
        val = "-" if s["min"] is None else f"{s['min']:g} / {s['median']:g} / {s['max']:g}"
        t.add_row(f"{label} (min / median / max)", val)
    t.add_row(
        "budgets lowered to fit the prompt", f"{summary['lowered_budgets']} (max {summary['max_prompt_length']})"
    )
    t.add_row("page images rendered / reused", f"{summary['rendered_images']} / {summary['reused_images']}")
    t.add_row("documents taken from the done-markers", str(summary["documents_from_state"]))
    t.add_row("seconds", f"{summary['seconds']:.1f}")
    console.print(t)
    if summary["skipped_by_reason"].get(CACHE_FAILED):
        console.print(f"[yellow]{CACHE_FAILED}: those documents have no done-marker; rerun the command to retry them")


def build(config: BuildConfig, console=None) -> BuildResult:
    """Build the data set described by ``config`` (see the module docstring)."""
    config.out.mkdir(parents=True, exist_ok=True)
    return _Builder(config, console).run()


# ---------------------------------------------------------------------------------------------------- CLI
def _kv(items: list[str] | None, flag: str) -> dict:
    out = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"{flag} {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        try:
            out[k] = loads_record(v, f"{flag} {k}")  # numbers bounded, no NaN or infinity
        except NotJSONError:
            out[k] = v  # not JSON at all: the text itself
        except InputError as e:  # JSON that the record parser refuses (NaN, 1e999, 400 digits): said
            raise InputError(f"{flag} {item!r}: {e}") from None
    return out


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    if args.max_window < 1:
        raise InputError(f"--max-window must be at least 1, got {args.max_window}")
    if not 1 <= args.jpeg_quality <= 100:
        raise InputError(f"--jpeg-quality must be 1..100, got {args.jpeg_quality}")
    if not 0.0 < args.near_dup_threshold <= 1.0:
        raise InputError(f"--near-dup-threshold must be in (0, 1], got {args.near_dup_threshold}")
    budget = PromptBudget(
        max_prompt_length=args.max_prompt_length,
        max_pixels_per_page=args.max_pixels_per_page,
        total_pixels=args.total_pixels,
        headroom_tokens=args.headroom,
    )
    return BuildConfig(
        jsonl=args.jsonl,
        pdf_dir=args.pdf_dir,
        out=args.out,
        eval_pdfs=args.eval_pdfs,
        max_window=args.max_window,
        val=args.val,
        seed=args.seed,
        parser=args.parser,
        parser_args=_kv(args.parser_arg, "--parser-arg"),
        encoder=args.encoder,
        encoder_args=_kv(args.encoder_arg, "--encoder-arg"),
        cache_dir=args.cache_dir,
        budget=budget,
        format_prompt=args.format_prompt,
        jpeg_quality=args.jpeg_quality,
        minhash=MinHashConfig(threshold=args.near_dup_threshold),
        shard=Shard.parse(args.shard) if getattr(args, "shard", None) is not None else None,
        finalize=bool(getattr(args, "finalize", False)),
    )
