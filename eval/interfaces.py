"""``eval report --runs``: the interfaces side by side (language, coordinate, LAT, attention) on our metrics and on
the rivals' own: LAT's soft EM, IoU@0.5 and Stepwise Attribution (:mod:`eval.lat`) and MultAttrEval's macro
P/R/F1 (:mod:`eval.multattreval`), read from each run's ``metrics.json``, ``analyses.json`` and
``per_question.jsonl``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from data_prep.registry import Registry


@dataclass(frozen=True)
class Interface:
    """How a model shows its evidence: what ``eval infer`` reads as the answer of a response
    (``answer_of``: ``"module:function"``, text -> answer; None: no generated text) and how ``eval resolve`` turns a
    prediction into citations (``cites_by``: ``quotes`` resolved to blocks, ``boxes`` snapped to blocks, ``steps``
    of a Chain-of-Evidence, or ``citations`` already made by the interface)."""

    name: str
    answer_of: str | None
    cites_by: str

    def answer(self, text: str) -> str:
        if self.answer_of is None:
            raise ValueError(f"interface {self.name!r} produces no text to read an answer from")
        import importlib

        module, _, attr = self.answer_of.partition(":")
        return getattr(importlib.import_module(module), attr)(text)


INTERFACES: Registry[Interface] = Registry("interface", needs=("generation", "attention"))
"""The interfaces; ``needs``: ``generation`` (vLLM generates the response) or ``attention`` (read off the prefill
attention, no generation)."""


def _interface(name: str, answer_of: str | None, cites_by: str, summary: str, needs: tuple[str, ...]) -> None:
    iface = Interface(name, answer_of, cites_by)
    INTERFACES.register(name, summary=summary, needs=needs)(lambda: iface)


_interface(
    "language",
    "eval.interfaces:_quotes_answer",
    "quotes",
    "answer + verbatim quotes, resolved to layout blocks (ours, paper J.2)",
    ("generation",),
)
_interface(
    "coordinate",
    "eval.interfaces:_coordinate_answer",
    "boxes",
    "answer + boxes in page coordinates (CiteVQA's, paper J.1)",
    ("generation",),
)
_interface(
    "lat",
    "eval.interfaces:_lat_answer",
    "steps",
    "LAT's Chain-of-Evidence: steps with box and page, then the answer",
    ("generation",),
)
_interface("attention", None, "citations",
           "MultAttnAttrib: blocks read off the prefill attention of the same VLM", ("attention",))  # fmt: skip


def get_interface(name: str) -> Interface:
    return INTERFACES.create(name)


def _quotes_answer(text: str) -> str:
    from reward.response import parse_response

    return parse_response(text).answer


def _coordinate_answer(text: str) -> str:
    from eval.coordinate import parse_coordinate_response

    return parse_coordinate_response(text).answer


def _lat_answer(text: str) -> str:
    from reward.lat import parse_coe

    return parse_coe(text).answer


HEADER = ["run", "interface", "n", "Rec.5", "Prec", "F1", "Ans", "SAA",
          "LAT EM", "LAT IoU@0.5", "LAT SA", "MAE P", "MAE R", "MAE F1"]  # fmt: skip
"""Ours (box recall at IoU 0.5, precision, F1, judge Ans and SAA), LAT's, MultAttrEval's (MAE)."""


def run_interface(run_dir: Path | None) -> str:
    """The interface of a scored run (the most common one of its per-question rows; ``-`` when unknown)."""
    if run_dir is None or not (run_dir / "per_question.jsonl").is_file():
        return "-"
    counts: Counter = Counter()
    with open(run_dir / "per_question.jsonl", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                counts[json.loads(line).get("interface") or "-"] += 1
    if not counts:
        return "-"
    name, _ = counts.most_common(1)[0]
    return name if len(counts) == 1 else f"{name} (+{len(counts) - 1} more)"


def interfaces_table(loaded: Sequence[tuple[str, dict, dict]], run_dirs: dict[str, Path] | None = None) -> str:
    """One row per run: its interface, our metrics and the rivals' metrics (``-`` where a run has none)."""
    from eval.tables import _boxes, _md_table, _pct

    rows = []
    for label, m, a in loaded:
        b = _boxes(m)
        lat = a.get("lat") or {}
        mae = a.get("multattreval") or {}
        rows.append([
            label, run_interface((run_dirs or {}).get(label)), str(b.get("n")),
            _pct((b.get("recall") or {}).get("0.5")), _pct(b.get("precision")), _pct(b.get("f1")),
            _pct(m.get("ans")), _pct(m.get("saa")),
            _pct(lat.get("soft_em")), _pct(lat.get("iou50")), _pct(lat.get("stepwise_attribution")),
            _pct(mae.get("precision")), _pct(mae.get("recall")), _pct(mae.get("f1")),
        ])  # fmt: skip
    return _md_table(HEADER, rows)


def rivals_section(analyses: dict) -> str:
    """The rivals' metrics of one run for its ``tables.md`` (``eval score``)."""
    from eval.tables import _md_table, _pct

    lat = analyses.get("lat") or {}
    mae = analyses.get("multattreval") or {}
    row = [_pct(lat.get("soft_em")), _pct(lat.get("iou50")), _pct(lat.get("stepwise_attribution")),
           _pct(mae.get("precision")), _pct(mae.get("recall")), _pct(mae.get("f1"))]  # fmt: skip
    note = ""
    if lat.get("stepwise_attribution") is not None:
        note = f"\\n\\nStepwise Attribution over {lat['n_lat']} LAT responses, step embedder {lat.get('sa_embedder')}."
    return (
        "## The rivals' own metrics (LAT: eval/lat.py; MultAttrEval: eval/multattreval.py)\\n\\n"
        + _md_table(HEADER[8:], [row])
        + note
    )
