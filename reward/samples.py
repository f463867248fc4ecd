"""Sampled rollouts per training step: what the reward saw.

Every ``samples_every`` reward calls of training (groups of more than one response) the :class:`SampleWriter`
keeps ``samples_groups`` groups (seeded choice by step; at least one group the keep band drops when there is one)
and writes them to ``$QUOTECITE_METRICS_DIR/samples/step_<NNNNNN>.json`` atomically. Crops are stored once by
sha256 under ``samples/crops/<sha>.png``. A step's file is keyed by its step number and replaced whole, so a
requeued segment that scores the same step again neither loses nor duplicates it. The folder's size is bounded by
``samples_max_mb``: the oldest steps are removed first (and crops no longer referenced), and each removal is
appended to ``samples/thinned.jsonl``.

Advantages follow EasyR1 b44b311's GRPO rule (``compute_grpo_outcome_advantage``):
``(r - mean) / (std + 1e-6)`` over the group, ``std`` the unbiased (n - 1) standard deviation.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_bytes, atomic_write_json, read_json

GRPO_EPS = 1e-6
SAMPLES_DIR = "samples"


def grpo_advantages(rewards: list[float], eps: float = GRPO_EPS) -> list[float]:
    """EasyR1's GRPO group-normalised advantage of each reward of one group.

    >>> [round(a, 4) for a in grpo_advantages([1.0, 0.0])]
    [0.7071, -0.7071]
    """
    n = len(rewards)
    if n < 2:
        raise InputError(f"grpo_advantages: a group needs at least 2 rewards, got {n}")
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    return [(r - mean) / (std + eps) for r in rewards]


def step_name(step: int) -> str:
    return f"batch_{step:06d}.json"


_STEP_FILE = re.compile(r"batch_(\d{1,18})\.json")


def step_files(root: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of the step files in samples folder ``root``, by step number."""
    found = ((_STEP_FILE.fullmatch(p.name), p) for p in root.glob("batch_*.json"))
    return sorted((int(m.group(1)), p) for m, p in found if m)


class SampleWriter:
    """Writes sampled groups of scored training batches under ``folder/samples``."""

    def __init__(self, folder: str | Path, every: int = 1, groups: int = 2, max_mb: float = 200.0,
                 seed: int = 0, keep_band: list | None = None) -> None:  # fmt: skip
        for name, value, ok in (
            ("samples_every", every, isinstance(every, int) and every >= 1),
            ("samples_groups", groups, isinstance(groups, int) and groups >= 1),
            ("samples_max_mb", max_mb, isinstance(max_mb, int | float) and max_mb > 0),
        ):
            if not ok:
                raise InputError(f"reward setting {name}: expected a positive number, got {value!r}")
        self.root = Path(folder) / SAMPLES_DIR
        self.every, self.groups, self.max_bytes, self.seed = every, groups, int(max_mb * 2**20), seed
        self.band = keep_band

    def due(self, step: int) -> bool:
        return step >= 1 and (step - 1) % self.every == 0

    def _trained(self, keep: float) -> bool:
        if self.band is None:
            return True  # online filtering off: every group of the call trains
        return self.band[0] < keep < self.band[1]

    def choose(self, step: int, groups: dict[tuple[int, str], list[dict]]) -> list[tuple[int, str]]:
        """Seeded choice of groups (keyed ``(attempt, qid)``): at least one dropped group when there is one."""
        keys = sorted(groups)
        rng = random.Random(f"{self.seed}:{step}")
        dropped = [k for k in keys if not self._trained(groups[k][0]["keep"])]
        chosen: list[tuple[int, str]] = [rng.choice(dropped)] if dropped else []
        rest = [k for k in keys if k not in chosen]
        rng.shuffle(rest)
        return chosen + rest[: max(0, self.groups - len(chosen))]

    def _store_crop(self, png: bytes) -> str:
        sha = hashlib.sha256(png).hexdigest()
        path = self.root / "crops" / f"{sha}.png"
        try:
            kept = path.is_file() and not path.is_symlink() and hashlib.sha256(path.read_bytes()).hexdigest() == sha
        except OSError:
            kept = False
        if not kept:  # absent, or not these bytes (damaged, replaced): written again
            atomic_write_bytes(path, png)
        return f"crops/{sha}.png"

    def write(self, step: int, responses: list[dict], trained_qids=None) -> Path | None:
        """Write the samples of ``step`` from ``responses`` (one dict per response of the call, with keys qid,
        question, gold, answer, quotes, citations [{page, bbox, similarity, text}], crops [png bytes], scores
        {answer, relevance, coverage, crop_relevance} or None, reply, reward {overall, ...}, keep, unscorable, and
        ``attempt``: the reward call of the batch it came from). A group is the responses of one qid in one attempt:
        EasyR1's online filter may generate the same question again in a later attempt, which is another group with
        its own advantages. A group whose every response carries ``advantage`` (the trainer's own, e.g. TRL's:
        :mod:`reward.trl_reward`) keeps them; otherwise EasyR1's rule (:func:`grpo_advantages`) gives them. Returns
        the step file, or None when the step is not due or has no group of 2+ responses."""
        if not isinstance(step, int) or step < 1:
            raise InputError(f"samples: step must be an int >= 1, got {step!r}")
        if not self.due(step):
            return None
        groups: dict[tuple[int, str], list[dict]] = {}
        for i, r in enumerate(responses):
            if not isinstance(r, dict) or "qid" not in r or "reward" not in r:
                raise InputError(f"samples: response {i} needs 'qid' and 'reward'")
            groups.setdefault((int(r.get("attempt", 1)), r["qid"]), []).append(r)
        groups = {k: m for k, m in groups.items() if len(m) > 1}
        if not groups:
            return None
        out_groups = []
        for attempt, qid in self.choose(step, groups):
            members = groups[(attempt, qid)]
            if all("advantage" in m for m in members):  # the trainer's own advantages (a TRL run)
                adv = [float(m["advantage"]) for m in members]
            else:
                adv = grpo_advantages([float(m["reward"]["overall"]) for m in members])
            rows = []
            for m, a in zip(members, adv, strict=True):
                crops = [self._store_crop(p) for p in m.get("crops", ())]
                row = {k: v for k, v in m.items() if k not in ("crops", "question", "gold", "attempt")}
                rows.append({**row, "crops": crops, "advantage": a})
            rows.sort(key=lambda r: -r["advantage"])
            keep = members[0]["keep"]
            trained = self._trained(keep) and (trained_qids is None or qid in trained_qids)
            out_groups.append({"qid": qid, "attempt": attempt, "question": members[0].get("question", ""),
                               "gold": members[0].get("gold", ""), "keep": keep, "trained": trained,
                               "responses": rows})  # fmt: skip
        path = self.root / step_name(step)
        atomic_write_json(path, {"step": step, "time": round(time.time(), 3), "groups": out_groups})
        self.thin()
        return path

    def thin(self) -> list[int]:
        """Remove the oldest steps (never the newest) until the folder fits ``max_bytes``; returns removed steps."""
        removed: list[int] = []
        while True:
            steps = step_files(self.root)  # by step number (a name sort puts batch_1000000 before batch_999999)
            files = [p for p in self.root.rglob("*") if p.is_file()]
            if sum(p.stat().st_size for p in files) <= self.max_bytes or len(steps) <= 1:
                break
            step, oldest = steps[0]
            oldest.unlink()
            removed.append(step)
            used = set()
            for _, s in steps[1:]:
                try:
                    rec = read_json(s, "samples file")
                except InputError:
                    continue  # a damaged step file shows nothing: its crops are not kept for it
                for g in rec.get("groups", []) if isinstance(rec, dict) else []:
                    for r in g.get("responses", []) if isinstance(g, dict) else []:
                        if isinstance(r, dict) and isinstance(r.get("crops"), list):
                            used.update(c for c in r["crops"] if isinstance(c, str))
            for p in (self.root / "crops").glob("*.png"):
                if f"crops/{p.name}" not in used:
                    p.unlink()
        if removed:
            with open(self.root / "thinned.jsonl", "a") as f:
                f.write(json.dumps({"time": round(time.time(), 3), "removed_steps": removed}) + "\n")
        return removed


def response_rows(items, out, display_crops=None) -> list[dict]:
    """One sample dict per response of a reward call, from the pipeline's items and their breakdowns.
    ``crops`` are the exact PNGs the judge received; for a judge that reads no crops (``lexical``),
    ``display_crops(item)`` renders them for the page instead and ``judge_saw_crops`` is False."""
    rows = []
    for it, (b, cits) in zip(items, out, strict=True):
        crops, saw = tuple(it.crops), bool(it.crops)
        if not crops and it.shown and it.cached is not None and display_crops is not None:
            try:
                crops = tuple(display_crops(it))
            except Exception:  # a page the renderer cannot draw: the sample goes without crops
                crops = ()
        blocks = it.cached.blocks if it.cached is not None else []
        shown = {c.block_id: k for k, c in enumerate(it.shown)}
        s = it.scores
        rows.append({
            "qid": it.gt.qid,
            "question": it.gt.question,
            "gold": it.gt.answer,
            "format_ok": bool(it.parsed.ok),
            "answer": it.parsed.answer,
            "quotes": list(it.parsed.quotes),
            "citations": [
                {"page": c.page, "bbox": [float(x) for x in c.bbox], "similarity": float(c.similarity),
                 "quote": c.quote, "text": blocks[c.block_id].text if c.block_id < len(blocks) else "",
                 "crop": shown.get(c.block_id) if shown.get(c.block_id, 1 << 30) < len(crops) else None}
                for c in cits
            ],  # fmt: skip
            "crops": list(crops),
            "judge_saw_crops": saw,
            "scores": None if s is None else {"answer": s.answer, "relevance": s.relevance, "coverage": s.coverage,
                                              "crop_relevance": list(s.crop_relevance or []) or None},  # fmt: skip
            "reply": getattr(s, "reply", None),
            "failed": it.failed,
            "reward": b.to_dict(),
            "keep": b.keep,
            "unscorable": bool(b.unscorable),
        })  # fmt: skip
    return rows


class BatchSampler:
    """The pipeline's hook: buffers the calls (filter attempts) of one training batch and writes its samples when
    the batch completes (``record`` from :class:`reward.pipeline.TrainBatchTracker`), or every call without one."""

    def __init__(self, writer: SampleWriter, display_crops=None) -> None:
        self.writer = writer
        self.display_crops = display_crops
        self.buffer: list[dict] = []
        self.calls = 0
        self.attempt = 0  # reward calls of the batch so far (EasyR1's filter attempts)

    def add_call(self, items, out, record: dict | None, tracked: bool) -> Path | None:
        rows = response_rows(items, out, self.display_crops)
        if len({r["qid"] for r in rows}) == len(rows):
            return None  # validation (groups of one)
        self.attempt += 1
        self.buffer.extend({**r, "attempt": self.attempt} for r in rows)
        if tracked and record is None:
            return None  # another filter attempt follows
        self.calls += 1
        step = record["batch"] if record else self.calls
        rows, self.buffer, self.attempt = self.buffer, [], 0
        try:
            return self.writer.write(step, rows, set(record["qids"]) if record else None)
        except OSError as e:  # samples must never kill a training step
            import logging

            logging.getLogger(__name__).warning("could not write samples of batch %d: %s", step, e)
            return None


def make_sampler(config) -> BatchSampler | None:
    """The sampler of a reward config: None when ``samples_every`` is 0 or ``$QUOTECITE_METRICS_DIR`` is unset."""
    import os

    folder = os.environ.get("QUOTECITE_METRICS_DIR")
    if not folder or not config.samples_every:
        return None
    from data_prep.crops import crop_pngs

    writer = SampleWriter(folder, config.samples_every, config.samples_groups, config.samples_max_mb,
                          keep_band=config.keep_band)  # fmt: skip
    return BatchSampler(writer, lambda it: crop_pngs(it.cached, it.shown, config.max_crops, config.crop_dpi))


def load_steps(folder: str | Path) -> list[dict]:
    """Every step file under ``folder`` (a run/metrics folder or its ``samples`` folder), by step."""
    root = Path(folder)
    if (root / SAMPLES_DIR).is_dir():
        root = root / SAMPLES_DIR
    if not root.is_dir():
        raise InputError(f"samples folder {folder}: not a folder")
    out = []
    for _, p in step_files(root):
        rec = read_json(p, "samples file")  # a regular file (never a FIFO waited on), bounded JSON, one clear error
        step = rec.get("step") if isinstance(rec, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise InputError(f"samples file {p}: expected an object with an integer 'step' >= 1, got {step!r}")
        if not isinstance(rec.get("groups"), list):
            raise InputError(f"samples file {p}: 'groups' is not a list")
        out.append(rec)
    return out


WANDB_COLUMNS = ["step", "qid", "attempt", "trained", "keep", "advantage", "reward", "answer", "scores", "unscorable"]
"""The columns of the samples table before the crops: then one image column per crop, ``crop_1`` .. ``crop_K``
(K the most crops of a response of the step; a wandb cell holds one image, a list of images is not kept)."""


def wandb_table(folder: str | Path, rec: dict, image=None, step: int | None = None) -> tuple[list[str], list[list]]:
    """``(columns, rows)`` of one step's samples for a ``wandb.Table``, one row per response (``image``:
    ``wandb.Image``, applied to each crop's path, else the path; ``step``: the trainer's step, default the batch
    number of the file)."""
    root = Path(folder)
    if (root / SAMPLES_DIR).is_dir():
        root = root / SAMPLES_DIR
    responses = [(g, r) for g in rec["groups"] for r in g["responses"]]
    k = max((len(r["crops"]) for _, r in responses), default=0)
    rows = []
    for g, r in responses:
        crops = [str(root / c) for c in r["crops"]]
        cells = [image(c) for c in crops] if image else crops
        rows.append([rec["step"] if step is None else step, g["qid"], g.get("attempt", 1), g["trained"], g["keep"],
                     r["advantage"], r["reward"]["overall"], r.get("answer", ""), json.dumps(r.get("scores")),
                     r.get("unscorable", False), *cells, *[None] * (k - len(cells))])  # fmt: skip
    return [*WANDB_COLUMNS, *(f"crop_{i}" for i in range(1, k + 1))], rows


class WandbSamples:
    """Logs the reward's samples as a ``wandb.Table`` with the crops as images, from the process that owns the wandb
    run: EasyR1's trainer (its ``Runner`` actor), not the reward workers that write them. Each call of
    :meth:`log_new` logs the newest ``batch_*.json`` of ``folder/samples`` not logged yet, at the trainer's step
    (the reward writes a batch's samples before the trainer logs that step's metrics)."""

    KEY = "samples"

    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder else None
        self.logged: set[str] = set()

    def log_new(self, step: int) -> Path | None:
        """Log the newest unlogged batch at ``step``; the file logged, or None (none new, no folder, no wandb run).
        A samples file that cannot be read is a warning: samples never stop a training step."""
        if self.folder is None:
            return None
        files = sorted((self.folder / SAMPLES_DIR).glob("batch_*.json"))
        if not files or files[-1].name in self.logged:
            return None
        import wandb

        if wandb.run is None:
            return None
        newest = files[-1]
        self.logged.add(newest.name)
        try:
            rec = read_json(newest, "samples file")
            columns, rows = wandb_table(self.folder, rec, wandb.Image, step)
        except (InputError, KeyError, TypeError, AttributeError) as e:
            import logging

            logging.getLogger(__name__).warning("samples %s not logged to wandb: %s", newest, e)
            return None
        wandb.log({self.KEY: wandb.Table(columns=columns, data=rows)}, step=step)
        return newest


WANDB_HOOK = "reward.samples.install_wandb_samples"
"""The Ray ``worker_process_setup_hook`` that :mod:`reward.train` adds to EasyR1's ``runtime_env``."""


def install_wandb_samples() -> bool:
    """Make EasyR1's ``wandb`` logger (``verl.utils.logger.logger.LOGGERS["wandb"]``) also log the samples of
    ``$QUOTECITE_METRICS_DIR`` (:class:`WandbSamples`) after each step's metrics. Run in every Ray worker process
    (the hook :data:`WANDB_HOOK`); only the trainer's ``Runner`` builds a ``Tracker``, so only it logs. False where
    EasyR1 is not importable (nothing changes). Idempotent."""
    import os

    try:
        from verl.utils.logger import logger as easyr1_logger  # EasyR1 b44b311: verl/utils/logger/logger.py
    except ImportError:
        return False
    base = easyr1_logger.LOGGERS.get("wandb")
    if base is None:
        return False
    if getattr(base, "logs_samples", False):
        return True

    class WandbLoggerWithSamples(base):
        logs_samples = True

        def __init__(self, config) -> None:
            super().__init__(config)
            self.samples = WandbSamples(os.environ.get("QUOTECITE_METRICS_DIR"))

        def log(self, data, step: int) -> None:
            super().log(data=data, step=step)
            self.samples.log_new(step)

    easyr1_logger.LOGGERS["wandb"] = WandbLoggerWithSamples
    return True
