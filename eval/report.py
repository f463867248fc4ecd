"""The recall-vs-IoU figure and the HTML report of a scored run.

* ``recall_vs_iou.png``: recall at same page, 0.1, 0.3, 0.5, 0.7 (Figure 3), the parser ceiling dashed.
* ``report.html``: per question, the pages holding gold or cited boxes, drawn with the gold boxes (green: thick =
  necessary, thin = optional) and the citations (blue = matches a necessary element at IoU 0.5, red = misses),
  numbered as in the citation table below it (quote, similarity, hit), with the judge scores. Page images are
  JPEG files in ``report_files/`` next to the HTML.

The tables are :mod:`eval.tables`; ``python -m eval report`` (:mod:`eval.cmd_report`) rebuilds both.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text
from eval.tables import THRESHOLD_LABELS, pct, summary_rows

REPORT_MAX_PIXELS = 450_000
"""Pixels of a page image in the HTML report."""


REPORT_JPEG_QUALITY = 80
"""JPEG quality of the report's page images."""


CITATION_PAD_PX = 4
"""Citations are drawn this many pixels outside their box, so the gold box of an exact hit shows inside."""


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
        ys = [m["recall"].get(k) for k in keys]  # null (no question at that threshold): a gap in the line
        ax.plot(xs, [float("nan") if y is None else 100 * y for y in ys], marker="o", label=label)
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


REPORT_CSS = """
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
           f"<style>{REPORT_CSS}</style></head><body><h1>{esc(label)}: {metrics['n']} questions</h1>"]  # fmt: skip
    out.append("<h2>Summary</h2>" + _html_table(["metric", "value"], summary_rows(metrics)))
    out.append(
        "<p class='legend'><span style='color:#148c28'>&#9632; gold necessary (thick) / optional (thin)</span>"
        "<span class='hit'>&#9632; citation matching a necessary element at IoU 0.5</span>"
        "<span class='miss'>&#9632; citation missing</span></p>"
    )
    index_rows = [
        [f"<a href='#q{i}'>{esc(str(r['index']))}</a>", esc(r.get("language") or ""), esc(r.get("qtype") or ""),
         esc(pct(r["recall"].get("0.5"))), esc(pct(r["precision"])), esc(str(r["n_citations"])),
         "-" if not r.get("judge") else esc(f"{r['judge']['answer']}/{r['judge']['relevance']}")]
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


def _fmt(v, digits: int) -> str:
    """A number with ``digits`` decimals; anything else (a hand-edited per_question.jsonl) as its text, which the
    caller escapes."""
    return f"{v:.{digits}f}" if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


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
    rec = " ".join(f"{THRESHOLD_LABELS.get(k, k)}={pct(v)}" for k, v in r["recall"].items())
    line = f"recall {rec}; precision {pct(r['precision'])}; F1 {pct(r['f1'])}; {r['n_citations']} citation(s)"
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
            crow.append([str(n), esc(str(c["page"])), esc(", ".join(_fmt(v, 0) for v in c["bbox"])),
                         "-" if c.get("similarity") is None else esc(_fmt(c["similarity"], 3)),
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
