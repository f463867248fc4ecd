"""``python -m reward check``: find, before a training run starts, every misconfiguration the reward would only
meet hours into it (a document first sampled at step 90 with no cache entry, a page window past a document's end,
a judge URL that answers 404).

    python -m reward check --data TRAIN.parquet [--data VAL.parquet] --recipe recipes/qwen3vl_8b_grpo.yaml
    python -m reward check --data TRAIN.parquet --cache-dir DIR [--judge-url URL --judge-model M] [--embed-url URL]

What it checks, on every row of every data file (EasyR1 parquet: ``prompt``, ``images``, ``answer`` = packed
ground truth, ``doc_key``, ``n_images``; the recipe's ``data.*_key`` names are honoured):

* the answer column unpacks (:func:`data_prep.groundtruth.unpack_ground_truth`) and agrees with the ``doc_key`` column;
* each ``doc_key`` has a valid cache entry (:func:`data_prep.cache.load_cache`, once per document);
* the page window (1-based, inclusive) lies inside the document;
* the cache holds block embeddings of the encoder the reward will embed quotes with
  (:meth:`reward.pipeline.RewardScorer.encoder_for`, the reward's own check), and that encoder answers one probe;
* with the ``http`` judge, each document's PDF is where the cache says and unchanged (the judge's crops are cut
  from it; :meth:`data_prep.cache.CachedDoc.open_pdf`);
* every image exists (relative paths joined to ``data.image_dir`` as EasyR1 does; without a recipe, to the data
  file's folder, where ``data_prep longdocurl`` writes them), and the image count equals the window's page count
  (the whole document without a window), the ``<image>`` placeholders of the prompt (rendered with the recipe's
  ``data.format_prompt``, as EasyR1 does) and ``n_images``.

With a judge URL it sends one real judge request through the reward's own client (a crop of the smallest block of
the first row's window, the row's question and gold answer) and checks that the answer parses into three scores;
with an embedding URL the probe of an HTTP encoder goes to that server. It prints a summary (rows, documents,
problems by kind with the first examples) and exits 1 with one line per problem kind on stderr
(``reward check failed: KIND: ...``) when anything is wrong, 0 otherwise. :func:`check_training_set` is the same check as a
function.
"""

from __future__ import annotations

import dataclasses
import io
import math
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InputError
from core.io import check_regular, loads_record, read_text
from data_prep.validate import field_int, field_str
from recipes.reader import RecipeError, dig, load_recipe
from recipes.reader import Unset as _Unset

PROBLEM_KINDS: dict[str, str] = {
    "config": "the reward settings or the recipe do not make a working reward",
    "data": "a data file is missing, unreadable or lacks a column, or a row's column is null or of the wrong type",
    "ground_truth": "a row's answer column does not unpack, or names another doc_key than its doc_key column",
    "cache": "a doc_key has no valid cache entry",
    "window": "a row's page window lies outside its document",
    "encoder": "the cache has no block embeddings of the encoder the reward will use",
    "pdf": "a cached document's PDF is missing or changed (the judge's crops are cut from it)",
    "missing_image": "an image file of a row does not exist",
    "image_count": "a row's image count differs from its window's pages, its <image> placeholders or n_images",
    "judge": "the judge probe got no valid score",
    "embed": "the quote encoder's probe failed",
}
"""Every kind of problem the check reports, in report order."""

PROBE_TEXT = "Revenue grew by 12% in 2023."
"""Text embedded by the encoder probe when the data gives no block text."""

FAILURE_PREFIX = "reward check failed: "
"""Prefix of the one line per problem kind on stderr (the launch quotes these lines in its error)."""

URL_SETTINGS = ("judge_url", "embed_url")
"""Reward settings the launch provides at run time: left unset (not an error) when the recipe's env is absent."""


@dataclass(frozen=True)
class Problem:
    """One thing that would fail the reward.

    Attributes:
        kind: one of :data:`PROBLEM_KINDS`.
        where: the row (``file row N (qid Q)``, rows 0-based), the document or the setting concerned.
        message: what is wrong, in one line.
        doc_key: the document concerned, if any.
        rows: rows affected (a document's problem counts every row of that document).
    """

    kind: str
    where: str
    message: str
    doc_key: str | None = None
    rows: int = 1


@dataclass
class CheckReport:
    """What :func:`check_training_set` found."""

    rows: dict[str, int] = field(default_factory=dict)
    """Rows read per data file."""
    documents: int = 0
    """Distinct doc_keys of the rows."""
    encoders: Counter = field(default_factory=Counter)
    """Documents per cache encoder name (``none``: no embeddings)."""
    probes: dict[str, str] = field(default_factory=dict)
    """``judge`` / ``embed``: what the probe did (``ok ...``, ``failed ...`` or why it did not run)."""
    notes: list[str] = field(default_factory=list)
    """Things worth knowing that are not problems."""
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def by_kind(self) -> dict[str, list[Problem]]:
        """Problems grouped by kind, in :data:`PROBLEM_KINDS` order."""
        out: dict[str, list[Problem]] = {}
        for kind in PROBLEM_KINDS:
            found = [p for p in self.problems if p.kind == kind]
            if found:
                out[kind] = found
        return out

    @staticmethod
    def _extent(problems: list[Problem]) -> str:
        rows = sum(p.rows for p in problems)
        docs = len({p.doc_key for p in problems if p.doc_key})
        parts = [f"{rows} row{'s' * (rows != 1)}"] if rows else []
        if docs:
            parts.append(f"{docs} document{'s' * (docs != 1)}")
        return ", ".join(parts) or f"{len(problems)} problem{'s' * (len(problems) != 1)}"

    def failure_lines(self) -> list[str]:
        """One line per problem kind: ``KIND: EXTENT: first message``."""
        return [
            f"{k}: {self._extent(ps)}: {ps[0].message}" + (f" (and {len(ps) - 1} more)" if len(ps) > 1 else "")
            for k, ps in self.by_kind().items()
        ]

    def format(self, max_examples: int = 3) -> str:
        """The human-readable summary."""
        lines = [
            f"reward check: {sum(self.rows.values())} rows in {len(self.rows)} data file(s), "
            f"{self.documents} documents"
        ]
        lines += [f"  {name}: {n} rows" for name, n in self.rows.items()]
        if self.encoders:
            lines.append("  cache encoders: " + ", ".join(f"{k} ({v} documents)" for k, v in self.encoders.items()))
        lines += [f"  {name} probe: {text}" for name, text in self.probes.items()]
        lines += [f"  note: {n}" for n in self.notes]
        if self.ok:
            lines.append("no problems found")
            return "\n".join(lines)
        lines.append("problems:")
        for kind, ps in self.by_kind().items():
            lines.append(f"  {kind} ({self._extent(ps)}): {PROBLEM_KINDS[kind]}")
            lines += [f"    - {p.where}: {p.message}" for p in ps[:max_examples]]
            if len(ps) > max_examples:
                lines.append(f"    ... and {len(ps) - max_examples} more")
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------- the recipe
@dataclass
class RecipeSettings:
    """What the check needs from an EasyR1 recipe (interpolations resolved)."""

    uses_quote_reward: bool
    """``worker.reward.reward_function`` is ``reward/quote_reward.py``."""
    reward_kwargs: dict
    data_files: list[str]
    image_dir: object = None
    prompt_key: str = "prompt"
    answer_key: str = "answer"
    image_key: str = "images"
    format_prompt: object = None
    reward_function: object = None
    """``worker.reward.reward_function`` as written (``path[:name]``)."""


def read_recipe(
    path: str | Path, env: dict[str, str] | None = None, overrides: list[str] | None = None
) -> RecipeSettings:
    """The reward and data settings of an EasyR1 recipe YAML with ``overrides`` (``key=value``) applied. Raises
    :class:`InputError` when unreadable."""
    try:
        r = load_recipe(path, overrides, env, resolve=True)
    except RecipeError as e:
        raise InputError(str(e)) from None
    fn = dig(r, "worker.reward.reward_function") or ""
    kwargs = dig(r, "worker.reward.reward_function_kwargs") or {}
    files = [dig(r, "data.train_files"), dig(r, "data.val_files")]
    return RecipeSettings(
        uses_quote_reward=isinstance(fn, str) and Path(fn.split(":")[0]).name == "quote_reward.py",
        reward_kwargs=dict(kwargs) if isinstance(kwargs, dict) else {},
        data_files=[f for f in files if f not in (None, "")],
        image_dir=dig(r, "data.image_dir"),
        prompt_key=dig(r, "data.prompt_key") or "prompt",
        answer_key=dig(r, "data.answer_key") or "answer",
        image_key=dig(r, "data.image_key") or "images",
        format_prompt=dig(r, "data.format_prompt"),
        reward_function=fn or None,
    )


def missing_paths(recipe: RecipeSettings, cwd: str | Path | None = None) -> list[Problem]:
    """``data.format_prompt`` and the file of ``worker.reward.reward_function`` that do not resolve from ``cwd``
    (default: here) the way EasyR1 resolves them (``get_abs_path``: relative to the trainer's working directory).
    EasyR1 only prints "not found" for a missing format prompt and trains without it, so each is a problem.

    >>> [p.where for p in missing_paths(RecipeSettings(True, {}, [], format_prompt="nope.jinja",
    ...                                                 reward_function="./nope.py:compute_score"))]
    ['data.format_prompt', 'worker.reward.reward_function']
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    out = []
    for where, value in (("data.format_prompt", recipe.format_prompt), ("worker.reward.reward_function",
                                                                          recipe.reward_function)):  # fmt: skip
        if value is None or isinstance(value, _Unset):
            continue
        path = str(value)
        if where == "worker.reward.reward_function" and ":" in path:
            path = path.rsplit(":", 1)[0]
        full = Path(path) if Path(path).is_absolute() else base / path
        if not full.is_file():
            out.append(Problem("config", where, f"{value}: no such file (resolved to {full}); EasyR1 would train "
                               "without it; give an absolute path", rows=0))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------- data files
def _parquet_files(spec: str) -> list[Path]:
    """EasyR1's ``data.train_files``: a parquet file or a folder of them, optionally ``@split``."""
    p = Path(spec)
    if not p.exists() and "@" in spec:
        p = Path(spec.rsplit("@", 1)[0])
    if p.is_dir():
        return sorted(p.glob("*.parquet"))
    return [p]


def _read_rows(path: Path, columns: list[str]) -> tuple[list[dict] | None, str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        check_regular(path)
    except InputError as e:
        return None, str(e)
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        return None, f"{path}: not a readable parquet file ({e})"
    missing = [c for c in columns if c not in schema.names]
    if missing:
        return None, f"{path}: no column(s) {', '.join(missing)} (has {', '.join(schema.names)})"
    keep = [c for c in (*columns, "doc_key", "n_images") if c in schema.names]
    try:
        return pq.read_table(path, columns=list(dict.fromkeys(keep))).to_pylist(), ""
    except (OSError, pa.ArrowException) as e:
        return None, f"{path}: unreadable ({e})"


MAX_IMAGES = 100_000
"""Largest ``n_images`` a row may give (a document of more pages is no training row)."""


def _embedded_image(img) -> bool:
    """Whether ``img`` (an item of the images column) is an image EasyR1 reads from the data itself (bytes, or a
    struct with ``bytes``) rather than a path."""
    return isinstance(img, bytes) or (isinstance(img, dict) and isinstance(img.get("bytes"), bytes))


def _tiny_png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), "white").save(buf, format="PNG")
    return buf.getvalue()


def _takes_url(name: str) -> bool:
    """Whether encoder ``name`` can be served over HTTP (its registry entry needs a ``url``)."""
    from data_prep.encoders import ENCODERS

    return name in ENCODERS and ENCODERS.needs(name, "url")


# --------------------------------------------------------------------------------------------- the check
def check_training_set(
    data_files: list[str | Path],
    config,
    *,
    image_dir: str | Path | None = None,
    prompt_key: str = "prompt",
    answer_key: str = "answer",
    image_key: str = "images",
    format_prompt: str | Path | None = None,
    probe: bool = True,
) -> CheckReport:
    """Check ``data_files`` (EasyR1 parquet) against the reward settings ``config``
    (:class:`reward.config.RewardConfig`); see the module docstring for what is checked.

    ``image_dir``: folder relative image paths are joined to (EasyR1's ``data.image_dir``); None: each data file's
    folder. ``format_prompt``: the recipe's jinja format prompt, rendered around each prompt before its
    ``<image>`` placeholders are counted. ``probe``: run the encoder probe and, with a judge URL, the judge probe.
    Never raises for a problem it finds: every one is in the report."""
    from reward.judge import JUDGES, OFFLINE_JUDGE
    from reward.pipeline import RewardScorer
    from reward.resolve import resolver_uses_encoder

    report = CheckReport()
    template = None
    if format_prompt is not None:
        try:
            template = read_text(format_prompt, "data.format_prompt")
        except InputError as e:
            report.problems.append(Problem("config", "data.format_prompt", str(e), rows=0))

    # The reward's own set-up (cache dir, judge client): the same code and the same errors as its first call.
    judge_needs_url = JUDGES.needs(config.judge, "url")
    judge_url = config.judge_url if judge_needs_url else None
    try:  # without its URL the server judge cannot be built: check the rest with the offline one
        setup = config if not judge_needs_url or judge_url else dataclasses.replace(config, judge=OFFLINE_JUDGE)
        scorer = RewardScorer(setup)
    except InputError as e:
        report.problems.append(Problem("config", "reward settings", str(e), rows=0))
        scorer = None
    judge = scorer.judge if scorer is not None and judge_needs_url and judge_url else None

    rows = _RowChecks(report, scorer, template, (prompt_key, answer_key, image_key))
    for spec in data_files:
        paths = _parquet_files(str(spec))
        if not paths:  # a folder without parquet files would check nothing and pass
            report.problems.append(Problem("data", "data file", f"{spec}: a folder with no .parquet file", rows=0))
        for path in paths:
            rows.check_file(path, Path(image_dir) if image_dir is not None else None)
    loaded = rows.documents()
    if scorer is not None and JUDGES.needs(config.judge, "crops"):  # its crops are rendered from the PDFs
        rows.check_pdfs(loaded)

    if scorer is not None and resolver_uses_encoder(config.resolver):  # embedding, fused
        _check_encoders(scorer, loaded, rows.doc_rows, report, probe, rows.probe_row)
    elif scorer is not None:
        report.probes["embed"] = f"not needed (resolver {config.resolver!r} reads block text)"

    if not judge_needs_url:
        report.probes["judge"] = f"not needed (judge {config.judge!r} runs in the reward)"
    elif scorer is None:
        report.probes["judge"] = "not run (the reward settings do not build: see config)"
    elif judge is None:
        report.probes["judge"] = "not run (no judge URL: give --judge-url)"
    elif probe:
        _probe_judge(judge, config, rows.probe_row, report)
    return report


class _RowChecks:
    """The per-row part of :func:`check_training_set`: ground truth, document, page window, images and image
    counts of every row, each document loaded once."""

    def __init__(self, report: CheckReport, scorer, template: str | None, keys: tuple[str, str, str]) -> None:
        self.report, self.problems = report, report.problems
        self.scorer, self.template = scorer, template
        self.prompt_key, self.answer_key, self.image_key = keys
        self.docs: dict[str, object] = {}  # doc_key -> CachedDoc, or the CacheError message
        self.doc_rows: Counter = Counter()
        self.first_row: dict[str, str] = {}
        self.probe_row = None  # (GroundTruth, CachedDoc) of the first row whose document loaded
        self._exists: dict[Path, bool] = {}

    def check_file(self, path: Path, image_dir: Path | None) -> None:
        rows, err = _read_rows(path, [self.prompt_key, self.answer_key, self.image_key])
        if rows is None:
            self.problems.append(Problem("data", "data file", err, rows=0))
            return
        self.report.rows[str(path)] = len(rows)
        if not rows:
            self.problems.append(Problem("data", "data file", f"{path}: no rows", rows=0))
        base = image_dir if image_dir is not None else path.parent
        for i, row in enumerate(rows):
            try:
                typed = self.typed_row(f"{path} row {i}", row)
            except InputError as e:
                self.problems.append(Problem("data", f"{path.name} row {i}", str(e)))
                continue
            self.check_row(f"{path.name} row {i}", typed, base)
        self.report.documents = len(self.doc_rows)

    def _doc(self, doc_key: str):
        from data_prep.cache import CacheError

        if self.scorer is None:
            return None
        if doc_key not in self.docs:
            try:
                self.docs[doc_key] = self.scorer.doc(doc_key)
            except CacheError as e:
                self.docs[doc_key] = str(e)
        value = self.docs[doc_key]
        return None if isinstance(value, str) else value

    def typed_row(self, where: str, row: dict) -> dict:
        """``row`` with every column the check reads of the type EasyR1 and the reward need, through
        :mod:`data_prep.validate`; :class:`InputError` naming the file, the row, the column and the type expected
        otherwise (a null, a number for a string, a string for a list, a list of ints for a list of paths)."""
        for key, what in ((self.prompt_key, "a string"), (self.answer_key, "a string (the packed ground truth) or a "
                          "struct"), (self.image_key, "a list of image paths")):  # fmt: skip
            if row.get(key) is None:
                raise InputError(f"{where}: column {key!r} is null, expected {what}")
        out = dict(row)
        field_str(row, self.prompt_key, where)
        answer = row[self.answer_key]
        if not isinstance(answer, str | dict):
            raise InputError(f"{where}: field {self.answer_key!r} must be a string (the packed ground truth) or a "
                             f"struct, got {type(answer).__name__} {str(answer)[:40]!r}")  # fmt: skip
        images = row[self.image_key]
        if not isinstance(images, list):
            raise InputError(f"{where}: field {self.image_key!r} must be a list of image paths, got "
                             f"{type(images).__name__} {str(images)[:40]!r}")  # fmt: skip
        for j, img in enumerate(images):
            if not _embedded_image(img):
                field_str({f"{self.image_key}[{j}]": img}, f"{self.image_key}[{j}]", where)
        field_str(row, "doc_key", where, default=None)
        out["n_images"] = field_int(row, "n_images", where, lo=0, hi=MAX_IMAGES, default=None)
        return out

    def check_row(self, where: str, row: dict, base: Path) -> None:
        from data_prep.groundtruth import unpack_ground_truth

        answer = row[self.answer_key]
        try:
            if isinstance(answer, str):  # the one record parser first: bounded numbers and nesting
                answer = loads_record(answer, f"column {self.answer_key!r}")
            gt = unpack_ground_truth(answer)
        except InputError as e:
            self.problems.append(Problem("ground_truth", where, str(e)))
            return
        where += f" (qid {gt.qid})"
        if row.get("doc_key") not in (None, gt.doc_key):
            self.problems.append(
                Problem(
                    "ground_truth",
                    where,
                    f"doc_key column {row['doc_key']!r} but answer names {gt.doc_key!r}",
                    gt.doc_key,
                )  # fmt: skip
            )
        self.doc_rows[gt.doc_key] += 1
        self.first_row.setdefault(gt.doc_key, where)
        cached = self._doc(gt.doc_key)
        n_pages = cached.n_pages if cached is not None else None
        if cached is not None and gt.pages is not None and gt.pages[1] > n_pages:
            self.problems.append(
                Problem(
                    "window",
                    where,
                    f"page window {list(gt.pages)} exceeds document {gt.doc_key} ({n_pages} pages)",
                    gt.doc_key,
                )  # fmt: skip
            )
        elif cached is not None and self.probe_row is None:
            self.probe_row = (gt, cached)
        images = row[self.image_key]
        self._check_images(where, gt, images, base)
        self._check_image_count(where, gt, row, images, n_pages)

    def _check_images(self, where: str, gt, images: list, base: Path) -> None:
        missing = []
        for img in images:
            if _embedded_image(img):
                continue
            p = Path(img)
            p = p if p.is_absolute() else base / p
            if p not in self._exists:
                try:
                    self._exists[p] = p.is_file()
                except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no such file
                    self._exists[p] = False
            if not self._exists[p]:
                missing.append(str(p))
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            self.problems.append(Problem("missing_image", where, f"{missing[0]} does not exist{more}", gt.doc_key))

    def _check_image_count(self, where: str, gt, row: dict, images: list, n_pages: int | None) -> None:
        """The images of a row must be as many as its page window (or document), its prompt's ``<image>``
        placeholders (after the format prompt) and its ``n_images``."""
        counts = []
        if gt.pages is not None:
            counts.append((gt.pages[1] - gt.pages[0] + 1, f"window {list(gt.pages)}"))
        elif n_pages is not None:
            counts.append((n_pages, "whole document"))
        prompt = row[self.prompt_key]
        if self.template is not None:
            from data_prep.longdocurl import render_prompt_text

            prompt = render_prompt_text(self.template, prompt)
        counts.append((prompt.count("<image>"), "<image> placeholders"))
        if row.get("n_images") is not None:
            counts.append((row["n_images"], "n_images"))
        wrong = [f"{n} ({what})" for n, what in counts if n != len(images)]
        if wrong:
            self.problems.append(
                Problem("image_count", where, f"{len(images)} images but {', '.join(wrong)}", gt.doc_key)
            )

    def documents(self) -> dict:
        """The loaded documents (doc_key -> CachedDoc); a problem for each that did not load; encoder counts."""
        for key, value in self.docs.items():
            if isinstance(value, str):
                self.problems.append(
                    Problem("cache", f"document {key} (first: {self.first_row[key]})", value, key, self.doc_rows[key])
                )
        loaded = {k: v for k, v in self.docs.items() if not isinstance(v, str)}
        for cached in loaded.values():
            self.report.encoders[(cached.manifest.get("encoder") or {}).get("name") or "none"] += 1
        return loaded

    def check_pdfs(self, loaded: dict) -> None:
        """Every document's PDF opens (the judge's crops are rendered from it)."""
        for key, cached in loaded.items():
            try:
                cached.open_pdf().close()
            except InputError as e:
                self.problems.append(Problem("pdf", f"document {key}", str(e), key, self.doc_rows[key]))
            except Exception as e:  # a PDF that no longer opens
                self.problems.append(
                    Problem("pdf", f"document {key}", f"{type(e).__name__}: {e}", key, self.doc_rows[key])
                )


def _check_encoders(scorer, loaded: dict, doc_rows: Counter, report: CheckReport, probe: bool, probe_row) -> None:
    """Each document's embeddings against the encoder the reward will use; one probe per distinct encoder."""
    import numpy as np

    from reward.resolve import quote_encoder

    cfg = scorer.config
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for key, cached in loaded.items():
        meta = cached.manifest.get("encoder") or {}
        if not meta or cached.embeddings is None:
            report.problems.append(
                Problem(
                    "encoder",
                    f"document {key}",
                    f"cache {key} has no block embeddings (built without an "
                    "encoder); rebuild it with the encoder the reward uses",
                    key,
                    doc_rows[key],
                )  # fmt: skip
            )
            continue
        if cfg.encoder and cfg.encoder != meta.get("name"):
            report.problems.append(
                Problem(
                    "encoder",
                    f"document {key}",
                    f"reward setting encoder is {cfg.encoder!r} but cache {key} "
                    f"was embedded with {meta.get('name')!r}",
                    key,
                    doc_rows[key],
                )  # fmt: skip
            )
            continue
        groups[(meta.get("name"), meta.get("fingerprint") or "")].append(cached)
    results = []
    for (name, _), members in groups.items():
        if not probe:
            results.append(f"{name}: not run")
            continue
        if _takes_url(name) and not cfg.embed_url:
            results.append(f"{name}: not run (no embedding URL: give --embed-url)")
            continue
        first = members[0]
        try:
            encoder = scorer.encoder_for(first)  # the reward's own checks: name, fingerprint, dimension
        except InputError as e:
            report.problems += [
                Problem("encoder", f"document {c.key}", str(e), c.key, doc_rows[c.key]) for c in members
            ]
            results.append(f"{name}: failed")
            continue
        except Exception as e:  # a server that does not answer, a package missing in this environment
            report.problems.append(Problem("embed", f"encoder {name}", f"{type(e).__name__}: {e}", first.key))
            results.append(f"{name}: failed")
            continue
        for cached in members[1:]:
            try:
                quote_encoder(cached, encoder)
            except InputError as e:
                report.problems.append(Problem("encoder", f"document {cached.key}", str(e), cached.key,
                                               doc_rows[cached.key]))  # fmt: skip
        text = PROBE_TEXT
        if probe_row is not None and probe_row[1].key == first.key:
            text = probe_row[0].question
        t0 = time.perf_counter()
        try:
            vec = np.asarray(encoder.embed_texts([text]), dtype=np.float32)
        except Exception as e:
            report.problems.append(Problem("embed", f"encoder {name}", f"{type(e).__name__}: {e}", first.key))
            results.append(f"{name}: failed")
            continue
        dim = int(first.embeddings.shape[1])
        norm = float(np.linalg.norm(vec[0])) if vec.ndim == 2 and len(vec) == 1 else float("nan")
        if vec.shape != (1, dim) or not np.all(np.isfinite(vec)) or not math.isclose(norm, 1.0, abs_tol=1e-2):
            report.problems.append(
                Problem(
                    "embed",
                    f"encoder {name}",
                    f"probe gave shape {vec.shape} (norm {norm:.3g}); the cache needs (1, {dim}) unit vectors",
                    first.key,
                )  # fmt: skip
            )
            results.append(f"{name}: failed")
            continue
        where = f" at {cfg.embed_url}" if _takes_url(name) else " (in-process)"
        results.append(f"{name}{where}: ok, {dim}-d unit vector in {time.perf_counter() - t0:.2f}s")
    if results:
        report.probes["embed"] = "; ".join(results)


def _probe_judge(judge, config, probe_row, report: CheckReport) -> None:
    """One real request through the reward's judge client: the first row's question and gold answer (given as the
    answer), with a crop of the smallest block of its window (a blank 16x16 image without one)."""
    from data_prep.crops import crop_pngs
    from reward.judge import JudgeRequest
    from reward.resolve import Citation

    question, gold, crop = "What does the evidence show?", "a test", b""
    if probe_row is not None:
        gt, cached = probe_row
        question, gold = gt.question, gt.answer
        ids = cached.block_ids_on_pages(gt.pages)
        blocks = [cached.blocks[int(i)] for i in ids if cached.blocks[int(i)].text.strip()]
        if blocks:
            b = min(blocks, key=lambda b: (b.bbox[2] - b.bbox[0]) * (b.bbox[3] - b.bbox[1]))
            try:
                crops = crop_pngs(cached, [Citation(b.page, tuple(b.bbox), b.block_id, 1.0, "")], 1, config.crop_dpi)
                crop = crops[0] if crops else b""
            except Exception:  # the PDF problem is reported on its own
                crop = b""
    request = JudgeRequest(question=question, gold_answer=gold, answer=gold, crops=(crop or _tiny_png(),))
    t0 = time.perf_counter()
    outage_s = getattr(judge, "outage_s", None)
    if outage_s is not None:
        judge.outage_s = None  # the check reports a judge that is down at once instead of waiting it out
    try:
        (scores,) = judge.score_batch([request])
    except Exception as e:
        scores = None
        judge.failure_examples = {"error": f"{type(e).__name__}: {e}"}
    finally:
        if outage_s is not None:
            judge.outage_s = outage_s
    where = f"{judge.url} (model {judge.model!r})"
    if scores is None:
        examples = getattr(judge, "failure_examples", {}) or {}
        kinds = sorted(set(getattr(judge.stats, "failures", {})) | set(examples))
        detail = "; ".join(examples.get(k, k) for k in kinds) or "no score"  # each example starts with its kind
        report.problems.append(
            Problem("judge", where, f"{where}: {detail}; check judge_url, judge_model and the server", rows=0)
        )
        report.probes["judge"] = f"{where}: failed"
        return
    report.probes["judge"] = (
        f"{where}: ok, answer={scores.answer} relevance={scores.relevance} coverage={scores.coverage} "
        f"in {time.perf_counter() - t0:.2f}s"
    )


# --------------------------------------------------------------------------------------------- the command
