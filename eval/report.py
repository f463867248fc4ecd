"""Tables, the recall-vs-IoU figure and the HTML report; ``python -m eval report`` rebuilds them.

* ``tables.md``: the paper's tables for one run, in percentages (Table 1 main metrics, Table 4 multi-threshold
  recall with the parser ceiling, Tables 6/7 per language and element type, per question type, Figure 7
  residual decomposition, Figure 8 selective prediction, Table 12 quote fidelity), then the metric definitions.
* ``recall_vs_iou.png``: recall at same page, 0.1, 0.3, 0.5, 0.7 (Figure 3), the parser ceiling dashed.
* ``report.html``: per question, the pages holding gold or cited boxes, drawn with the gold boxes (green: thick =
  necessary, thin = optional) and the citations (blue = matches a necessary element at IoU 0.5, red = misses),
  numbered as in the citation table below it (quote, similarity, hit), with the judge scores. Page images are
  JPEG files in ``report_files/`` next to the HTML.

``python -m eval report --runs A B ... --out DIR`` compares several scored runs (one row each: Tables 1, 2, 4,
10, 12 are such rows) and draws them in one recall-vs-IoU figure; ``--score-dir OUT`` redraws one run's report.
"""

from __future__ import annotations

import argparse
import html
import json
from collections.abc import Sequence
from pathlib import Path

from data_prep.types import InputError
from eval.metrics import metric_docs
from eval.schemas import atomic_write_text, iter_jsonl

THRESHOLD_LABELS = {"page": "page", "0.1": "@0.1", "0.3": "@0.3", "0.5": "@0.5", "0.7": "@0.7"}
REPORT_MAX_PIXELS = 450_000
"""Pixels of a page image in the HTML report."""
REPORT_JPEG_QUALITY = 80
"""JPEG quality of the report's page images."""
CITATION_PAD_PX = 4
"""Citations are drawn this many pixels outside their box, so the gold box of an exact hit shows inside."""


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def _num(v, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- tables
def _boxes(m: dict) -> dict:
    """The box metrics of Table 1: on the judged subset when the run was judged (paper Section 4), else all."""
    return m.get("judged_subset") or m


MAIN_COLUMNS = (
    ("Rec.5", lambda m: _pct(_boxes(m)["recall"].get("0.5"))),
    ("Prec", lambda m: _pct(_boxes(m).get("precision"))),
    ("F1", lambda m: _pct(_boxes(m).get("f1"))),
    ("Rel", lambda m: _pct(m.get("rel"))),
    ("Ans", lambda m: _pct(m.get("ans"))),
    ("SAA", lambda m: _pct(m.get("saa"))),
    ("AH", lambda m: _pct(m.get("ah"))),
    ("SAA-strict", lambda m: _pct(m.get("saa_strict"))),
    ("fmt", lambda m: _pct(m.get("format_rate"))),
    ("cit/resp", lambda m: _num(m.get("citations_per_response"))),
    ("n", lambda m: str(_boxes(m).get("n"))),
)


def main_table(runs: Sequence[tuple[str, dict]]) -> str:
    """Table 1 layout: one row per run (percentages; AH lower is better). For a judged run, Rec.5, Prec, F1 and n
    are over the questions with a parsed judge output (``judged_subset``), as in the paper's Table 1; the
    judge-free tables use all questions."""
    header = ["run", *(c for c, _ in MAIN_COLUMNS)]
    return _md_table(header, [[label, *(f(m) for _, f in MAIN_COLUMNS)] for label, m in runs])


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
            rows.append([f"parser ceiling ({label})", *(_pct(pc.get(k)) for k in keys), "-"])
    for label, m in runs:
        rows.append([label, *(_pct(m["recall"].get(k)) for k in keys), _pct(m.get("format_rate"))])
    return _md_table(header, rows)


def _group_table(groups: dict, title: str) -> str:
    cols = ["n", "recall@0.5", "recall@page", "precision", "f1", "ans", "rel", "saa", "ah"]
    present = [c for c in cols if any(c in row for row in groups.values())]
    rows = []
    for g, row in groups.items():
        rows.append([g, *(str(row[c]) if c == "n" else _pct(row.get(c)) for c in present)])
    return f"### {title}\n\n" + _md_table([title.split(" ")[-1], *present], rows)


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
            _md_table(["type", "elements", "recall"], [[t, v["n_elements"], _pct(v["recall"])] for t, v in et.items()])
        ]
        parts += [""]
    if "residuals" in extra:
        res = extra["residuals"]
        parts += ["## Residual decomposition of necessary elements (paper Appendix H, Figure 7)", ""]
        rows = []
        for crit in ("iou", "containment"):
            r = res[crit]
            rows.append([crit, r["n_elements"], *(_pct(r[k]) for k in ("recovered", "rank_limited", "not_retrieved",
                                                                        "parser_unreachable"))])  # fmt: skip
        parts += [
            _md_table(
                ["criterion", "elements", "recovered", "rank-limited", "not retrieved", "parser-unreachable"], rows
            )
        ]
        parts += [
            "",
            f"Not retrieved counted with the unreachable elements (the paper's reading): "
            f"{_pct(res['iou']['not_retrieved_incl_unreachable'])}. Unreachable elements fully contained in a block: "
            f"{_pct(res['unreachable_contained'])}.",
            "",
        ]
    if "selective_prediction" in extra:
        sp = extra["selective_prediction"]
        parts += ["## Selective prediction on citation similarity (paper Appendix I, Figure 8)", ""]
        parts += [_md_table(["similarity bin", "range", "citations", "hit rate"],
                            [[i + 1, f"{b['lo']:.3f}-{b['hi']:.3f}", b["n"], _pct(b["hit_rate"])]
                             for i, b in enumerate(sp["bins"])])]  # fmt: skip
        parts += ["", _md_table(["kept (most similar)", "citations", "min similarity", "precision vs necessary"],
                                [[_pct(r["keep"]), r["n"], f"{r['min_similarity']:.3f}", _pct(r["precision"])]
                                 for r in sp["retention"]])]  # fmt: skip
        parts += [""]
    if "quote_fidelity" in extra:
        q = extra["quote_fidelity"]
        parts += ["## Quote fidelity (paper Table 12)", ""]
        parts += [
            _md_table(
                ["quotes", "exact", "fuzzy (token F1 >= 0.8)"], [[q["n_quotes"], _pct(q["exact"]), _pct(q["fuzzy"])]]
            )
        ]
        parts += [""]
    if "lat" in extra or "multattreval" in extra:
        from eval.interfaces import rivals_section

        parts += [rivals_section(extra), ""]
    parts += ["## Metric definitions", "", _md_table(
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
        rec.add_row("parser ceiling", *(_pct(pc.get(k)) for k in keys), "-")
    for label, m in runs:
        rec.add_row(label, *(_pct(m["recall"].get(k)) for k in keys), _pct(m.get("format_rate")))
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


# ---------------------------------------------------------------------------------------------- figure
def plot_recall_vs_iou(runs: Sequence[tuple[str, dict]], path: str | Path) -> Path:
    """Recall (%) against the overlap requirement for each run; parser ceilings dashed (paper Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(runs[0][1]["recall"]) if runs else list(THRESHOLD_LABELS)
    xs = list(range(len(keys)))
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=120)
    drawn_ceilings = set()
    for label, m in runs:
        ax.plot(xs, [100 * m["recall"].get(k, 0.0) for k in keys], marker="o", label=label)
        pc = m.get("parser_ceiling")
        if pc and json.dumps(pc, sort_keys=True) not in drawn_ceilings:
            drawn_ceilings.add(json.dumps(pc, sort_keys=True))
            ax.plot(xs, [100 * pc.get(k, 0.0) for k in keys], ls="--", color="grey", label=f"parser ceiling ({label})")
    ax.set_xticks(xs, [THRESHOLD_LABELS.get(k, k) for k in keys])
    ax.set_xlabel("overlap requirement (same page, then IoU >= t)")
    ax.set_ylabel("recall of necessary evidence (%)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)
    return path


# ---------------------------------------------------------------------------------------------- HTML report
_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;font-size:13px;vertical-align:top}
th{background:#f3f3f3}.q{border-top:3px solid #888;margin-top:2em;padding-top:.5em}
.pages img{max-width:46%;margin:4px;border:1px solid #aaa}.hit{color:#1a56db;font-weight:bold}.miss{color:#c81e1e}
.k{color:#666}.legend span{display:inline-block;margin-right:1.5em}.resp{white-space:pre-wrap;background:#fafafa;
border:1px solid #eee;padding:.4em;max-height:12em;overflow:auto;font-size:12px}
"""


def _draw_page(doc, page: int, row: dict, out_file: Path) -> None:
    from PIL import ImageDraw, ImageFont

    img = doc.render_page(page, max_pixels=REPORT_MAX_PIXELS)
    w_pt, h_pt = doc.page_sizes[page - 1]
    sx, sy = img.width / w_pt, img.height / h_pt
    draw = ImageDraw.Draw(img)

    def rect(b, color, width, pad=0):
        x0, y0, x1, y1 = b
        draw.rectangle([x0 * sx - pad, y0 * sy - pad, max(x0, x1) * sx + pad, max(y0, y1) * sy + pad],
                       outline=color, width=width)  # fmt: skip

    try:
        font = ImageFont.load_default(size=max(12, img.height // 60))
    except TypeError:  # Pillow < 10.1 has one fixed-size default font
        font = ImageFont.load_default()

    nec = {tuple(e) for e in row["gt_necessary"]}
    for e in row["gt_all"]:
        if e[0] == page and tuple(e) not in nec:
            rect(e[1:], (40, 160, 60), 2)
    for e in row["gt_necessary"]:
        if e[0] == page:
            rect(e[1:], (20, 140, 40), 5)
    for i, c in enumerate(row["citations"], 1):
        if c["page"] != page:
            continue
        color = (26, 86, 219) if c.get("hit") else (200, 30, 30)
        # Drawn just outside the box, so a gold box under an exact hit stays visible inside it.
        rect(c["bbox"], color, 3, pad=CITATION_PAD_PX)
        x, y = min(c["bbox"][0], c["bbox"][2]) * sx - CITATION_PAD_PX, min(c["bbox"][1], c["bbox"][3]) * sy
        tx0, ty0, tx1, ty1 = draw.textbbox((0, 0), str(i), font=font)
        x = max(0.0, x - (tx1 - tx0) - 6)
        draw.rectangle([x, y, x + (tx1 - tx0) + 6, y + (ty1 - ty0) + 6], fill=color)
        draw.text((x + 3 - tx0, y + 3 - ty0), str(i), fill=(255, 255, 255), font=font)
    img.save(out_file, format="JPEG", quality=REPORT_JPEG_QUALITY)


def write_report(
    path: str | Path,
    rows: Sequence[dict],
    metrics: dict,
    docs=None,
    label: str = "",
    limit: int | None = None,
) -> Path:
    """Write report.html (and its page images) for per-question rows of ``eval score``. ``docs``: a
    :class:`~eval.cmd_resolve.DocCache` to draw pages from (text only without it); ``limit``: first N questions."""
    from tqdm import tqdm

    path = Path(path)
    files = path.parent / "report_files"
    files.mkdir(parents=True, exist_ok=True)
    shown = list(rows if limit is None else rows[:limit])
    esc = html.escape
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(label)} report</title>",
           f"<style>{_CSS}</style></head><body><h1>{esc(label)}: {metrics['n']} questions</h1>"]  # fmt: skip
    out.append("<h2>Summary</h2>" + _html_table(["metric", "value"], _summary_rows(metrics)))
    out.append(
        "<p class='legend'><span style='color:#148c28'>&#9632; gold necessary (thick) / optional (thin)</span>"
        "<span class='hit'>&#9632; citation matching a necessary element at IoU 0.5</span>"
        "<span class='miss'>&#9632; citation missing</span></p>"
    )
    index_rows = [
        [f"<a href='#q{i}'>{esc(str(r['index']))}</a>", esc(r.get("language") or ""), esc(r.get("qtype") or ""),
         _pct(r["recall"].get("0.5")), _pct(r["precision"]), str(r["n_citations"]),
         "-" if not r.get("judge") else f"{r['judge']['answer']}/{r['judge']['relevance']}"]
        for i, r in enumerate(shown)
    ]  # fmt: skip
    out.append("<h2>Questions</h2>" + _html_table(["index", "lang", "type", "Rec.5", "Prec", "cit.", "Ans/Rel"],
                                                  index_rows, raw=True))  # fmt: skip
    open_docs: dict[str, object] = {}
    try:
        for i, r in enumerate(tqdm(shown, desc="report", unit="q", disable=None)):
            out.append(_question_html(i, r, docs, files, open_docs))
    finally:
        for d in open_docs.values():
            if d is not None:
                d.close()
    out.append("</body></html>")
    return atomic_write_text(path, "\n".join(out))


def _summary_rows(m: dict) -> list[list[str]]:
    rows = [[f"recall {THRESHOLD_LABELS.get(k, k)}", _pct(v)] for k, v in m["recall"].items()]
    for k in ("precision", "f1", "format_rate", "ans", "rel", "saa", "ah", "saa_strict"):
        if k in m:
            rows.append([k, _pct(m[k])])
    rows.append(["citations per response", _num(m.get("citations_per_response"))])
    if "parser_ceiling" in m:
        rows.append(["parser ceiling @0.5", _pct(m["parser_ceiling"].get("0.5"))])
    return rows


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]], raw: bool = False) -> str:
    esc = (lambda s: s) if raw else html.escape
    h = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{h}</tr>{body}</table>"


def _question_html(i: int, r: dict, docs, files: Path, open_docs: dict) -> str:
    esc = html.escape
    parts = [f"<div class='q' id='q{i}'><h3>#{esc(str(r['index']))} <span class='k'>{esc(r['doc_key'])} "
             f"&middot; {esc(r.get('language') or '')} &middot; {esc(r.get('qtype') or '')}</span></h3>"]  # fmt: skip
    parts.append(f"<p><b>Q:</b> {esc(r['question'])}<br><b>Gold:</b> {esc(r['gold_answer'])}<br>"
                 f"<b>Model:</b> {esc(r['answer'] if r['answer'] is not None else '(no prediction)')}</p>")  # fmt: skip
    rec = " ".join(f"{THRESHOLD_LABELS.get(k, k)}={_pct(v)}" for k, v in r["recall"].items())
    line = f"recall {rec}; precision {_pct(r['precision'])}; F1 {_pct(r['f1'])}; {r['n_citations']} citation(s)"
    if "judge" in r:
        j = r["judge"]
        line += "; judge: output did not parse" if j is None else (
            f"; judge Ans {j['answer']} Rel {j['relevance']}"
            + (f" Cov {j['coverage']}" if j.get("coverage") is not None else "")  # CiteVQA's judge scores no coverage
            + f"; SAA {r.get('saa')} AH {r.get('ah')}")  # fmt: skip
    if r.get("resolve") and r["resolve"].get("reason"):
        line += f"; response not parsed: {r['resolve']['reason']}"
    parts.append(f"<p class='k'>{esc(line)}</p>")
    if r["citations"]:
        crow = []
        for n, c in enumerate(r["citations"], 1):
            cls = "hit" if c.get("hit") else "miss"
            mark = "hit" if c.get("hit") else ("optional" if c.get("hit_any") else "miss")
            crow.append([str(n), str(c["page"]), esc(", ".join(f"{v:.0f}" for v in c["bbox"])),
                         "-" if c.get("similarity") is None else f"{c['similarity']:.3f}",
                         esc(c.get("quote") or ""), f"<span class='{cls}'>{mark}</span>"])  # fmt: skip
        parts.append(_html_table(["#", "page", "bbox (pt)", "similarity", "quote", "match"], crow, raw=True))
    if docs is not None:
        pages = sorted(
            {e[0] for e in r["gt_necessary"]} | {e[0] for e in r["gt_all"]} | {c["page"] for c in r["citations"]}
        )
        if r["doc_key"] not in open_docs:
            try:
                open_docs[r["doc_key"]] = docs.get(r["doc_key"]).open_pdf()
            except InputError as e:
                open_docs[r["doc_key"]] = None
                parts.append(f"<p class='miss'>pages not drawn: {esc(str(e))}</p>")
        doc = open_docs[r["doc_key"]]
        if doc is not None:
            imgs = []
            for p in pages:
                if not 1 <= p <= doc.n_pages:
                    imgs.append(f"<p class='miss'>page {p} is not in the document ({doc.n_pages} pages)</p>")
                    continue
                name = f"q{i}_p{p}.jpg"
                _draw_page(doc, p, r, files / name)
                imgs.append(f"<img src='report_files/{name}' alt='page {p}' title='page {p}'>")
            parts.append("<div class='pages'>" + "".join(imgs) + "</div>")
    return "".join(parts) + "</div>"


# ---------------------------------------------------------------------------------------------- several runs
CONDITION_ORDER = ("raw", "snap", "q", "q+a", "lex", "bm25", "quotes")
"""Column order of the condition grid (paper Table 2: coordinate raw / +snap, retrieval controls, resolvers)."""


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
        cells.setdefault(b, {})[c] = _pct(m["recall"].get(key))
        if c not in conds:
            conds.append(c)
    if not cells:
        return None
    conds.sort(key=lambda c: (CONDITION_ORDER.index(c) if c in CONDITION_ORDER else len(CONDITION_ORDER), c))
    rows = [[b, *(row.get(c, "-") for c in conds)] for b, row in cells.items()]
    return _md_table(["backbone", *conds], rows)


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
            union_qqa = _pct(mean([max(rqo[k], ra[k]) for k in keys]))
        rows.append([b, _pct(mean([rq[k] for k in keys])), _pct(mean([ra[k] for k in keys])),
                     _pct(mean([max(rq[k], ra[k]) for k in keys])), union_qqa, str(len(keys))])  # fmt: skip
    if not rows:
        return None
    return _md_table(["backbone", "quotes", "q+a", "quotes|q+a", "q|q+a", "n"], rows)


def _rows(path: Path) -> dict[str, dict] | None:
    f = path / "per_question.jsonl"
    return {str(d["index"]): d for _, d in iter_jsonl(f)} if f.is_file() else None


REFERENCE_CONDITION = "quotes"
"""The run of a backbone whose judge verdicts split the other conditions by answer correctness (the language
interface: the q+a control re-reads its answer, Appendix F)."""


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
            out.append([b, c, str(cor["n"]), _pct(cor["recall"]), str(inc["n"]), _pct(inc["recall"])])
    if not out:
        return None
    return _md_table(["backbone", "condition", "n correct", "Rec.5 correct", "n wrong", "Rec.5 wrong"], out)


def runs_markdown(loaded: Sequence[tuple[str, dict, dict]], run_dirs: dict[str, Path] | None = None) -> str:
    """``tables.md`` of ``eval report --runs``: every table of the paper that several scored runs make, one row
    per run (labels ``BACKBONE/CONDITION`` also give the condition grid and the oracle union)."""
    runs = [(label, m) for label, m, _ in loaded]
    parts = ["# Runs side by side", "", "Percentages; AH lower is better.", ""]
    parts += ["## Main metrics (paper Table 1; box metrics on the judged subset of judged runs)", "",
              main_table(runs), ""]  # fmt: skip
    parts += ["## Recall by overlap threshold (paper Tables 4, 9, 10; Figure 3)", "", threshold_table(runs), ""]
    from eval.interfaces import interfaces_table

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
                      _pct(a["by_answer_correctness"].get(g, {}).get("recall@0.5"))))]
           for label, _, a in loaded if a.get("by_answer_correctness")]  # fmt: skip
    if own:
        parts += ["## Recall at IoU 0.5 by each run's own answer verdict (Ans >= 4 vs < 4)", "",
                  _md_table(["run", "n correct", "Rec.5 correct", "n wrong", "Rec.5 wrong"], own), ""]  # fmt: skip
    lang_rows = []
    for label, _, a in loaded:
        for g, row in (a.get("by_language") or {}).items():
            lang_rows.append([label, g, str(row["n"]), _pct(row.get("recall@0.5")), _pct(row.get("saa")),
                              _pct(row.get("ah"))])  # fmt: skip
    if lang_rows:
        parts += ["## Per language (paper Table 6; judged runs: over the judged subset)", "",
                  _md_table(["run", "language", "n", "Rec.5", "SAA", "AH"], lang_rows), ""]  # fmt: skip
    qt_rows = []
    for label, _, a in loaded:
        for g, row in (a.get("by_qtype") or {}).items():
            qt_rows.append([label, g, str(row["n"]), _pct(row.get("recall@0.5")), _pct(row.get("saa")),
                            _pct(row.get("ah"))])  # fmt: skip
    if qt_rows:
        parts += ["## Per question type", "", _md_table(["run", "type", "n", "Rec.5", "SAA", "AH"], qt_rows), ""]
    types = sorted({t for _, _, a in loaded for t in (a.get("by_element_type") or {})})
    if types:
        rows = [[label, *(_pct((a.get("by_element_type") or {}).get(t, {}).get("recall")) for t in types)]
                for label, _, a in loaded if a.get("by_element_type")]  # fmt: skip
        parts += ["## Element-level recall at IoU 0.5 by evidence type (paper Table 7)", "",
                  _md_table(["run", *types], rows), ""]  # fmt: skip
    res_rows = []
    for label, _, a in loaded:
        r = (a.get("residuals") or {}).get("iou")
        if r:
            res_rows.append([label, str(r["n_elements"]), *(_pct(r[k]) for k in ("recovered", "rank_limited",
                             "not_retrieved", "parser_unreachable")), _pct(r["not_retrieved_incl_unreachable"])])  # fmt: skip
    if res_rows:
        parts += ["## Residual decomposition, IoU 0.5 (paper Appendix H, Figure 7)", "",
                  _md_table(["run", "elements", "recovered", "rank-limited", "not retrieved", "parser-unreachable",
                             "not retrieved incl. unreachable"], res_rows), ""]  # fmt: skip
    sel = [(label, a["selective_prediction"]) for label, _, a in loaded if a.get("selective_prediction")]
    if sel:
        nb = max(len(sp["bins"]) for _, sp in sel)
        parts += ["## Hit rate by similarity quintile, lowest first (paper Appendix I, Figure 8b)", "",
                  _md_table(["run", *(f"Q{i + 1}" for i in range(nb))],
                            [[label, *(_pct(b["hit_rate"]) for b in sp["bins"])] for label, sp in sel]), ""]  # fmt: skip
        keeps = [r["keep"] for r in sel[0][1]["retention"]]
        parts += ["## Precision against necessary evidence as low-similarity citations are dropped (Figure 8a)", "",
                  _md_table(["run", *(f"keep {_pct(k)}" for k in keeps)],
                            [[label, *(_pct(r["precision"]) for r in sp["retention"])] for label, sp in sel]), ""]  # fmt: skip
    fid = [(label, a["quote_fidelity"]) for label, _, a in loaded if a.get("quote_fidelity")]
    if fid:
        parts += ["## Quote fidelity (paper Table 12)", "",
                  _md_table(["run", "quotes", "exact", "fuzzy"],
                            [[label, str(q["n_quotes"]), _pct(q["exact"]), _pct(q["fuzzy"])] for label, q in fid]),
                  ""]  # fmt: skip
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- command
def _load_run(d: Path) -> tuple[dict, dict]:
    mf = d / "metrics.json"
    if not mf.is_file():
        raise InputError(f"{d}: no metrics.json (give `eval score` output folders)")
    metrics = json.loads(mf.read_text())
    af = d / "analyses.json"
    return metrics, (json.loads(af.read_text()) if af.is_file() else {})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=Path, nargs="+", default=None, help="score folders to put side by side")
    parser.add_argument("--labels", nargs="+", default=None, help="names of the runs (default: folder names)")
    parser.add_argument("--score-dir", type=Path, default=None, help="redraw report.html of this score folder")
    parser.add_argument("--cache-dir", type=Path, default=None, help="block cache to draw pages from")
    parser.add_argument("--parser", default=None, help="pick cache entries made by this parser")
    parser.add_argument("--limit", type=int, default=None, help="questions drawn (default all)")
    parser.add_argument("--out", type=Path, default=None, help="output folder for --runs")


def run(args: argparse.Namespace) -> int:
    if bool(args.runs) == bool(args.score_dir):
        raise InputError("give either --runs DIR... --out DIR (side by side) or --score-dir DIR (one report)")
    if args.runs and args.out:
        from data_prep.io import refuse_output_dir_over_inputs

        refuse_output_dir_over_inputs(args.out, args.runs)
    if args.score_dir:
        metrics, _ = _load_run(args.score_dir)
        rows = [d for _, d in iter_jsonl(args.score_dir / "per_question.jsonl")]
        docs = None
        if args.cache_dir:
            from eval.cmd_resolve import DocCache

            docs = DocCache(args.cache_dir, parser=args.parser)
        p = write_report(args.score_dir / "report.html", rows, metrics, docs, args.score_dir.name, args.limit)
        print(f"report: {p}")
        return 0
    if not args.out:
        raise InputError("--runs needs --out")
    labels = args.labels or [d.name for d in args.runs]
    if len(labels) != len(args.runs):
        raise InputError(f"{len(labels)} labels for {len(args.runs)} runs")
    loaded = [(label, *_load_run(d)) for label, d in zip(labels, args.runs, strict=True)]
    runs = [(label, m) for label, m, _ in loaded]
    text = runs_markdown(loaded, {label: d for label, d in zip(labels, args.runs, strict=True)})
    args.out.mkdir(parents=True, exist_ok=True)
    t = atomic_write_text(args.out / "tables.md", text)
    png = plot_recall_vs_iou(runs, args.out / "recall_vs_iou.png")
    print(text)
    print(f"tables: {t}\nfigure: {png}")
    return 0
