"""The paper's tables as Markdown (and rich tables for the terminal), for one run (``tables.md`` of ``eval score``)
or several side by side (``eval report --runs``).

``tables.md``: Table 1 main metrics, Table 4 multi-threshold recall with the parser ceiling, Tables 6/7 per
language and element type, per question type, Figure 7 residual decomposition, Figure 8 selective prediction,
Table 12 quote fidelity, in percentages, then the metric definitions. Several runs: one row each (Tables 1, 2, 4,
10, 12), the condition grid, the oracle union and the correctness split.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from eval.metrics import metric_docs
from eval.schemas import iter_jsonl

MAIN_COLUMNS = (
    ("Rec.5", lambda m: pct(box_summary(m)["recall"].get("0.5"))),
    ("Prec", lambda m: pct(box_summary(m).get("precision"))),
    ("F1", lambda m: pct(box_summary(m).get("f1"))),
    ("Rel", lambda m: pct(m.get("rel"))),
    ("Ans", lambda m: pct(m.get("ans"))),
    ("SAA", lambda m: pct(m.get("saa"))),
    ("AH", lambda m: pct(m.get("ah"))),
    ("SAA-strict", lambda m: pct(m.get("saa_strict"))),
    ("fmt", lambda m: pct(m.get("format_rate"))),
    ("cit/resp", lambda m: _num(m.get("citations_per_response"))),
    ("n", lambda m: str(box_summary(m).get("n"))),
)
CONDITION_ORDER = ("raw", "snap", "q", "q+a", "lex", "bm25", "quotes")
"""Column order of the condition grid (paper Table 2: coordinate raw / +snap, retrieval controls, resolvers)."""
REFERENCE_CONDITION = "quotes"
"""The run of a backbone whose judge verdicts split the other conditions by answer correctness (the language
interface: the q+a control re-reads its answer, Appendix F)."""

THRESHOLD_LABELS = {"page": "page", "0.1": "@0.1", "0.3": "@0.3", "0.5": "@0.5", "0.7": "@0.7"}


def pct(v) -> str:
    """A fraction as a percentage with one decimal; ``-`` for None, ``?`` for anything that is not a number.

    >>> pct(0.1234), pct(None), pct("0.5")
    ('12.3', '-', '?')
    """
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return "?"
    return f"{100 * v:.1f}"


def _num(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def box_summary(m: dict) -> dict:
    """The box metrics of Table 1: on the judged subset when the run was judged (paper Section 4), else all."""
    return m.get("judged_subset") or m


def main_table(runs: Sequence[tuple[str, dict]]) -> str:
    """Table 1 layout: one row per run (percentages; AH lower is better). For a judged run, Rec.5, Prec, F1 and n
    are over the questions with a parsed judge output (``judged_subset``), as in the paper's Table 1; the
    judge-free tables use all questions."""
    header = ["run", *(c for c, _ in MAIN_COLUMNS)]
    return md_table(header, [[label, *(f(m) for _, f in MAIN_COLUMNS)] for label, m in runs])


def threshold_table(runs: Sequence[tuple[str, dict]]) -> str:
    """Table 4 layout: recall per threshold and format rate; a parser-ceiling row per distinct ceiling."""
    keys = list(runs[0][1]["recall"]) if runs else list(THRESHOLD_LABELS)
    header = ["run", *(THRESHOLD_LABELS.get(k, k) for k in keys), "fmt"]
    rows = []
    seen = set()
    for label, m in runs:
        pc = m.get("parser_ceiling")
        if pc and json.dumps(pc, sort_keys=True) not in seen:
            seen.add(json.dumps(pc, sort_keys=True))
            rows.append([f"parser ceiling ({label})", *(pct(pc.get(k)) for k in keys), "-"])
    for label, m in runs:
        rows.append([label, *(pct(m["recall"].get(k)) for k in keys), pct(m.get("format_rate"))])
    return md_table(header, rows)


def _group_table(groups: dict, title: str) -> str:
    cols = ["n", "recall@0.5", "recall@page", "precision", "f1", "ans", "rel", "saa", "ah"]
    present = [c for c in cols if any(c in row for row in groups.values())]
    rows = []
    for g, row in groups.items():
        rows.append([g, *(str(row[c]) if c == "n" else pct(row.get(c)) for c in present)])
    return f"### {title}\n\n" + md_table([title.split(" ")[-1], *present], rows)


def tables_markdown(metrics: dict, extra: dict, label: str) -> str:
    """``tables.md`` of one run (see the module docstring)."""
    parts = [f"# Evaluation of {label}", "", f"{metrics['n']} questions. Percentages; AH lower is better.", ""]
    parts += ["## Main metrics (paper Table 1)", "", main_table([(label, metrics)]), ""]
    parts += ["## Recall by overlap threshold (paper Table 4, Figure 3)", "", threshold_table([(label, metrics)]), ""]
    c = metrics.get("counts", {})
    parts += [
        f"Citations: {c.get('citations', 0)} in {c.get('with_citation', 0)} responses; malformed boxes "
        f"{c.get('malformed_citations', 0)} (cited) / {c.get('malformed_gold', 0)} (gold); missing predictions "
        f"{c.get('missing_predictions', 0)}.",
        "",
    ]
    if "judge_failures" in metrics:
        jf = metrics["judge_failures"]
        parts += [f"Judge: {jf['judged']} questions judged, {jf['failed']} left out (judge output did not parse).", ""]
    if "by_language" in extra:
        parts += ["## Breakdowns (paper Appendix C)", "", _group_table(extra["by_language"], "By language"), ""]
    if "by_qtype" in extra:
        parts += [_group_table(extra["by_qtype"], "By question qtype"), ""]
    if "by_answer_correctness" in extra:
        parts += ["### By answer correctness, judge Ans >= 4 vs < 4 (paper Appendix F)", "",
                  _group_table(extra["by_answer_correctness"], "answer").split("\n", 2)[2], ""]  # fmt: skip
    if "by_element_type" in extra:
        et = extra["by_element_type"]
        parts += ["### Element-level recall at IoU 0.5 by evidence type (paper Table 7)", ""]
        parts += [
            md_table(["type", "elements", "recall"], [[t, v["n_elements"], pct(v["recall"])] for t, v in et.items()])
        ]
        parts += [""]
    if "residuals" in extra:
        res = extra["residuals"]
        parts += ["## Residual decomposition of necessary elements (paper Appendix H, Figure 7)", ""]
        rows = []
        for crit in ("iou", "containment"):
            r = res[crit]
            rows.append([crit, r["n_elements"], *(pct(r[k]) for k in ("recovered", "rank_limited", "not_retrieved",
                                                                        "parser_unreachable"))])  # fmt: skip
        parts += [
            md_table(
                ["criterion", "elements", "recovered", "rank-limited", "not retrieved", "parser-unreachable"], rows
            )
        ]
        parts += [
            "",
            f"Not retrieved counted with the unreachable elements (the paper's reading): "
            f"{pct(res['iou']['not_retrieved_incl_unreachable'])}. Unreachable elements fully contained in a block: "
            f"{pct(res['unreachable_contained'])}.",
            "",
        ]
    if "selective_prediction" in extra:
        sp = extra["selective_prediction"]
        parts += ["## Selective prediction on citation similarity (paper Appendix I, Figure 8)", ""]
        parts += [md_table(["similarity bin", "range", "citations", "hit rate"],
                            [[i + 1, f"{b['lo']:.3f}-{b['hi']:.3f}", b["n"], pct(b["hit_rate"])]
                             for i, b in enumerate(sp["bins"])])]  # fmt: skip
        parts += ["", md_table(["kept (most similar)", "citations", "min similarity", "precision vs necessary"],
                                [[pct(r["keep"]), r["n"], f"{r['min_similarity']:.3f}", pct(r["precision"])]
                                 for r in sp["retention"]])]  # fmt: skip
        parts += [""]
    if "quote_fidelity" in extra:
        q = extra["quote_fidelity"]
        parts += ["## Quote fidelity (paper Table 12)", ""]
        parts += [
            md_table(
                ["quotes", "exact", "fuzzy (token F1 >= 0.8)"], [[q["n_quotes"], pct(q["exact"]), pct(q["fuzzy"])]]
            )
        ]
        parts += [""]
    if "lat" in extra or "multattreval" in extra:
        parts += [rivals_section(extra), ""]
    parts += ["## Metric definitions", "", md_table(
        ["metric", "aggregation", "higher is better"],
        [[d["name"], d["aggregation"], "yes" if d["higher_is_better"] else "no"] for d in metric_docs()],
    ), "", "Full rules and the differences from CiteVQA's scorer: `eval/metrics.py` (module docstring).", ""]  # fmt: skip
    return "\n".join(parts)


def rich_tables(runs: Sequence[tuple[str, dict]]) -> list:
    """Two :class:`rich.table.Table` s (recall by threshold with the parser ceiling; the other main metrics), one
    row per run, each narrow enough for an 80-column terminal."""
    from rich.table import Table

    keys = list(runs[0][1]["recall"]) if runs else []
    rec = Table(title="Recall of necessary evidence (%)")
    rec.add_column("run")
    for k in keys:
        rec.add_column(THRESHOLD_LABELS.get(k, k), justify="right")
    rec.add_column("fmt", justify="right")
    pc = runs[0][1].get("parser_ceiling") if runs else None
    if pc:
        rec.add_row("parser ceiling", *(pct(pc.get(k)) for k in keys), "-")
    for label, m in runs:
        rec.add_row(label, *(pct(m["recall"].get(k)) for k in keys), pct(m.get("format_rate")))
    cols = [c for c in MAIN_COLUMNS if c[0] not in ("Rec.5", "fmt", "SAA-strict")]
    main = Table(title="Precision, judge metrics (%; AH lower is better)")
    main.add_column("run")
    for name, _ in cols:
        main.add_column(name, justify="right")
    for label, m in runs:
        main.add_row(label, *(f(m) for _, f in cols))
    return [rec, main]


def metrics_summary(metrics: dict, label: str) -> str:
    """The console summary: main metrics and recall by threshold."""
    return f"{label}\n\n{main_table([(label, metrics)])}\n\n{threshold_table([(label, metrics)])}"


def summary_rows(m: dict) -> list[list[str]]:
    rows = [[f"recall {THRESHOLD_LABELS.get(k, k)}", pct(v)] for k, v in m["recall"].items()]
    for k in ("precision", "f1", "format_rate", "ans", "rel", "saa", "ah", "saa_strict"):
        if k in m:
            rows.append([k, pct(m[k])])
    rows.append(["citations per response", _num(m.get("citations_per_response"))])
    if "parser_ceiling" in m:
        rows.append(["parser ceiling @0.5", pct(m["parser_ceiling"].get("0.5"))])
    return rows


def split_label(label: str) -> tuple[str, str] | None:
    """``"BACKBONE/CONDITION"`` -> ``(backbone, condition)``; None for a label without a slash."""
    if "/" not in label:
        return None
    backbone, _, condition = label.rpartition("/")
    return (backbone, condition) if backbone and condition else None


def condition_grid(runs: Sequence[tuple[str, dict]], key: str = "0.5") -> str | None:
    """Paper Tables 2 and 12: recall at ``key`` with one row per backbone and one column per condition, for runs
    labelled ``BACKBONE/CONDITION`` (conditions in :data:`CONDITION_ORDER` first, others after). None when fewer
    than one labelled run."""
    cells: dict[str, dict[str, str]] = {}
    conds: list[str] = []
    for label, m in runs:
        bc = split_label(label)
        if bc is None:
            continue
        b, c = bc
        cells.setdefault(b, {})[c] = pct(m["recall"].get(key))
        if c not in conds:
            conds.append(c)
    if not cells:
        return None
    conds.sort(key=lambda c: (CONDITION_ORDER.index(c) if c in CONDITION_ORDER else len(CONDITION_ORDER), c))
    rows = [[b, *(row.get(c, "-") for c in conds)] for b, row in cells.items()]
    return md_table(["backbone", *conds], rows)


def _recalls(path: Path, key: str) -> dict[str, float] | None:
    f = path / "per_question.jsonl"
    if not f.is_file():
        return None
    return {str(d["index"]): float(d["recall"][key]) for _, d in iter_jsonl(f) if key in d.get("recall", {})}


def oracle_union_table(run_dirs: dict[str, Path], key: str = "0.5") -> str | None:
    """Paper Table 11: per backbone, recall of quotes and q+a, and the oracle unions quotes|q+a and q|q+a (each
    question scored by the better of its two readings, mean over the questions of both runs). Needs runs labelled
    ``BACKBONE/quotes``, ``BACKBONE/q+a`` (and ``BACKBONE/q`` for the diversity control) with per_question.jsonl."""
    by: dict[str, dict[str, Path]] = {}
    for label, d in run_dirs.items():
        bc = split_label(label)
        if bc is not None:
            by.setdefault(bc[0], {})[bc[1]] = d
    rows = []
    for b, conds in by.items():
        if "quotes" not in conds or "q+a" not in conds:
            continue
        rq, ra = _recalls(conds["quotes"], key), _recalls(conds["q+a"], key)
        if rq is None or ra is None:
            continue
        keys = sorted(set(rq) & set(ra))
        if not keys:
            continue

        def mean(vals: list[float]) -> float:
            return sum(vals) / len(vals)

        union_qqa = "-"
        rqo = _recalls(conds["q"], key) if "q" in conds else None
        if rqo is not None and set(keys) <= set(rqo):
            union_qqa = pct(mean([max(rqo[k], ra[k]) for k in keys]))
        rows.append([b, pct(mean([rq[k] for k in keys])), pct(mean([ra[k] for k in keys])),
                     pct(mean([max(rq[k], ra[k]) for k in keys])), union_qqa, str(len(keys))])  # fmt: skip
    if not rows:
        return None
    return md_table(["backbone", "quotes", "q+a", "quotes|q+a", "q|q+a", "n"], rows)


def _rows(path: Path) -> dict[str, dict] | None:
    f = path / "per_question.jsonl"
    return {str(d["index"]): d for _, d in iter_jsonl(f)} if f.is_file() else None


def correctness_split_table(run_dirs: dict[str, Path], key: str = "0.5") -> str | None:
    """Paper Appendix F: recall at ``key`` of every condition of a backbone on the questions its language run
    (``BACKBONE/quotes``, judged) answered correctly (Ans >= 4) and on those it answered wrongly. Every run is
    split by the same verdicts, so the conditions are compared on the same questions; questions unjudged in the
    reference are left out. None when no backbone has a judged ``quotes`` run with per_question.jsonl."""
    from eval.analyses import recall_by_reference_correctness

    by: dict[str, dict[str, Path]] = {}
    for label, d in run_dirs.items():
        bc = split_label(label)
        if bc is not None:
            by.setdefault(bc[0], {})[bc[1]] = d
    out = []
    for b, conds in by.items():
        ref = _rows(conds[REFERENCE_CONDITION]) if REFERENCE_CONDITION in conds else None
        if not ref or not any(r.get("answer_correct") is not None for r in ref.values()):
            continue
        order = sorted(conds, key=lambda c: (CONDITION_ORDER.index(c) if c in CONDITION_ORDER else 99, c))
        for c in order:
            rows = _rows(conds[c])
            if rows is None:
                continue
            split = recall_by_reference_correctness(rows, ref, key)
            cor, inc = split["correct"], split["incorrect"]
            out.append([b, c, str(cor["n"]), pct(cor["recall"]), str(inc["n"]), pct(inc["recall"])])
    if not out:
        return None
    return md_table(["backbone", "condition", "n correct", "Rec.5 correct", "n wrong", "Rec.5 wrong"], out)


def runs_markdown(loaded: Sequence[tuple[str, dict, dict]], run_dirs: dict[str, Path] | None = None) -> str:
    """``tables.md`` of ``eval report --runs``: every table of the paper that several scored runs make, one row
    per run (labels ``BACKBONE/CONDITION`` also give the condition grid and the oracle union)."""
    runs = [(label, m) for label, m, _ in loaded]
    parts = ["# Runs side by side", "", "Percentages; AH lower is better.", ""]
    parts += ["## Main metrics (paper Table 1; box metrics on the judged subset of judged runs)", "",
              main_table(runs), ""]  # fmt: skip
    parts += ["## Recall by overlap threshold (paper Tables 4, 9, 10; Figure 3)", "", threshold_table(runs), ""]
    parts += ["## Interfaces side by side: our metrics, LAT's (EM, IoU@0.5, SA) and MultAttrEval's (MAE P/R/F1)", "",
              interfaces_table(loaded, run_dirs), ""]  # fmt: skip
    grid = condition_grid(runs)
    if grid:
        parts += ["## Recall at IoU 0.5 by condition (paper Tables 2 and 12)", "", grid, ""]
    union = oracle_union_table(run_dirs or {})
    if union:
        parts += ["## Oracle union of two readings, recall at IoU 0.5 (paper Table 11)", "", union, ""]
    split = correctness_split_table(run_dirs or {})
    if split:
        parts += ["## Recall at IoU 0.5 by answer correctness of the language run (paper Appendix F)", "",
                  "Every condition of a backbone split by the judge verdict on its `quotes` run (Ans >= 4 = correct).",
                  "", split, ""]  # fmt: skip
    own = [[label, *(v for g in ("correct", "incorrect") for v in
                     (str(a["by_answer_correctness"].get(g, {}).get("n", 0)),
                      pct(a["by_answer_correctness"].get(g, {}).get("recall@0.5"))))]
           for label, _, a in loaded if a.get("by_answer_correctness")]  # fmt: skip
    if own:
        parts += ["## Recall at IoU 0.5 by each run's own answer verdict (Ans >= 4 vs < 4)", "",
                  md_table(["run", "n correct", "Rec.5 correct", "n wrong", "Rec.5 wrong"], own), ""]  # fmt: skip
    lang_rows = []
    for label, _, a in loaded:
        for g, row in (a.get("by_language") or {}).items():
            lang_rows.append([label, g, str(row["n"]), pct(row.get("recall@0.5")), pct(row.get("saa")),
                              pct(row.get("ah"))])  # fmt: skip
    if lang_rows:
        parts += ["## Per language (paper Table 6; judged runs: over the judged subset)", "",
                  md_table(["run", "language", "n", "Rec.5", "SAA", "AH"], lang_rows), ""]  # fmt: skip
    qt_rows = []
    for label, _, a in loaded:
        for g, row in (a.get("by_qtype") or {}).items():
            qt_rows.append([label, g, str(row["n"]), pct(row.get("recall@0.5")), pct(row.get("saa")),
                            pct(row.get("ah"))])  # fmt: skip
    if qt_rows:
        parts += ["## Per question type", "", md_table(["run", "type", "n", "Rec.5", "SAA", "AH"], qt_rows), ""]
    types = sorted({t for _, _, a in loaded for t in (a.get("by_element_type") or {})})
    if types:
        rows = [[label, *(pct((a.get("by_element_type") or {}).get(t, {}).get("recall")) for t in types)]
                for label, _, a in loaded if a.get("by_element_type")]  # fmt: skip
        parts += ["## Element-level recall at IoU 0.5 by evidence type (paper Table 7)", "",
                  md_table(["run", *types], rows), ""]  # fmt: skip
    res_rows = []
    for label, _, a in loaded:
        r = (a.get("residuals") or {}).get("iou")
        if r:
            res_rows.append([label, str(r["n_elements"]), *(pct(r[k]) for k in ("recovered", "rank_limited",
                             "not_retrieved", "parser_unreachable")), pct(r["not_retrieved_incl_unreachable"])])  # fmt: skip
    if res_rows:
        parts += ["## Residual decomposition, IoU 0.5 (paper Appendix H, Figure 7)", "",
                  md_table(["run", "elements", "recovered", "rank-limited", "not retrieved", "parser-unreachable",
                             "not retrieved incl. unreachable"], res_rows), ""]  # fmt: skip
    sel = [(label, a["selective_prediction"]) for label, _, a in loaded if a.get("selective_prediction")]
    if sel:
        nb = max(len(sp["bins"]) for _, sp in sel)
        parts += ["## Hit rate by similarity quintile, lowest first (paper Appendix I, Figure 8b)", "",
                  md_table(["run", *(f"Q{i + 1}" for i in range(nb))],
                            [[label, *(pct(b["hit_rate"]) for b in sp["bins"])] for label, sp in sel]), ""]  # fmt: skip
        keeps = [r["keep"] for r in sel[0][1]["retention"]]
        parts += ["## Precision against necessary evidence as low-similarity citations are dropped (Figure 8a)", "",
                  md_table(["run", *(f"keep {pct(k)}" for k in keeps)],
                            [[label, *(pct(r["precision"]) for r in sp["retention"])] for label, sp in sel]), ""]  # fmt: skip
    fid = [(label, a["quote_fidelity"]) for label, _, a in loaded if a.get("quote_fidelity")]
    if fid:
        parts += ["## Quote fidelity (paper Table 12)", "",
                  md_table(["run", "quotes", "exact", "fuzzy"],
                            [[label, str(q["n_quotes"]), pct(q["exact"]), pct(q["fuzzy"])] for label, q in fid]),
                  ""]  # fmt: skip
    return "\n".join(parts)


HEADER = ["run", "interface", "n", "Rec.5", "Prec", "F1", "Ans", "SAA",
          "LAT EM", "LAT IoU@0.5", "LAT SA", "MAE P", "MAE R", "MAE F1"]  # fmt: skip
"""Ours (box recall at IoU 0.5, precision, F1, judge Ans and SAA), LAT's, MultAttrEval's (MAE)."""


def run_interface(run_dir: Path | None) -> str:
    """The interface of a scored run (the most common one of its per-question rows; ``-`` when unknown)."""
    if run_dir is None or not (run_dir / "per_question.jsonl").is_file():
        return "-"
    counts: Counter = Counter()
    for _, row in iter_jsonl(run_dir / "per_question.jsonl"):  # the one JSONL reader (errors name file:line)
        counts[str(row.get("interface") or "-")] += 1
    if not counts:
        return "-"
    name, _ = counts.most_common(1)[0]
    return name if len(counts) == 1 else f"{name} (+{len(counts) - 1} more)"


def interfaces_table(loaded: Sequence[tuple[str, dict, dict]], run_dirs: dict[str, Path] | None = None) -> str:
    """One row per run: its interface, our metrics and the rivals' metrics (``-`` where a run has none)."""
    rows = []
    for label, m, a in loaded:
        b = box_summary(m)
        lat = a.get("lat") or {}
        mae = a.get("multattreval") or {}
        rows.append([
            label, run_interface((run_dirs or {}).get(label)), str(b.get("n")),
            pct((b.get("recall") or {}).get("0.5")), pct(b.get("precision")), pct(b.get("f1")),
            pct(m.get("ans")), pct(m.get("saa")),
            pct(lat.get("soft_em")), pct(lat.get("iou50")), pct(lat.get("stepwise_attribution")),
            pct(mae.get("precision")), pct(mae.get("recall")), pct(mae.get("f1")),
        ])  # fmt: skip
    return md_table(HEADER, rows)


def rivals_section(analyses: dict) -> str:
    """The rivals' metrics of one run for its ``tables.md`` (``eval score``)."""
    lat = analyses.get("lat") or {}
    mae = analyses.get("multattreval") or {}
    row = [pct(lat.get("soft_em")), pct(lat.get("iou50")), pct(lat.get("stepwise_attribution")),
           pct(mae.get("precision")), pct(mae.get("recall")), pct(mae.get("f1"))]  # fmt: skip
    note = ""
    if lat.get("stepwise_attribution") is not None:
        note = f"\\n\\nStepwise Attribution over {lat['n_lat']} LAT responses, step embedder {lat.get('sa_embedder')}."
    return (
        "## The rivals' own metrics (LAT: eval/lat.py; MultAttrEval: eval/multattreval.py)\\n\\n"
        + md_table(HEADER[8:], [row])
        + note
    )
