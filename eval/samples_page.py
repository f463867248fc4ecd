"""The samples browser's page: one self-contained HTML page of a run's sampled rollouts (:mod:`reward.samples`).

:func:`write_samples_page` renders the sampled steps it is given (or those of a bare metrics folder's
``samples/``) into one page: steps on a slider, each group's responses side by side sorted by advantage with their
crops and scores, filters for "positive advantage", "dropped by the keep band", "unscorable" and "judge said
irrelevant". Crops are linked relative to the page (the page works from a copied run folder, no server) or embedded
with ``embed=True``. Colours and styles are the evaluation report's (:data:`eval.report.REPORT_CSS`). A run folder
of the training launch is read by ``python -m launch.samples_page`` (its segments give each batch its step)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import os
import re
import stat
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text, read_bytes
from eval.report import REPORT_CSS
from reward.samples import SAMPLES_DIR, load_steps

PAGE = "samples.html"


def folder_steps(folder: str | Path) -> list[tuple[int, Path, dict]]:
    """``(step, samples folder, batch record)`` of a bare metrics folder's ``samples/`` (no segments), by step."""
    folder = Path(folder)
    if not (folder / SAMPLES_DIR).is_dir():
        return []
    found = {int(rec["step"]): rec for rec in load_steps(folder)}
    return [(s, folder / SAMPLES_DIR, found[s]) for s in sorted(found)]


CROP_NAME = re.compile(r"crops/([0-9a-f]{64})\.png")
"""How a batch file names a crop: ``crops/<sha256 of its bytes>.png`` inside its own samples folder
(:meth:`reward.samples.SampleWriter._store_crop`). Nothing else is ever read or linked."""
MAX_CROP_BYTES = 16 * 2**20
"""Largest crop file read (a crop of a page at the judge's resolution is well under 1 MB)."""


def _crop(folder: Path, rel, page_dir: Path, embed: bool) -> str | None:
    """The page's ``src`` of crop ``rel`` of samples folder ``folder``, or None when it is not one of that folder's
    crops: a name not of :data:`CROP_NAME`'s form (an absolute path, ``../``, a quote), a link, anything but a regular
    file, a file over :data:`MAX_CROP_BYTES`, or bytes whose sha256 is not the name's. The page is a security
    boundary: a batch file names its crops, and the page shows them, so it reads only what the writer wrote."""
    m = CROP_NAME.fullmatch(rel) if isinstance(rel, str) else None
    if not m:
        return None
    path = folder / rel
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CROP_BYTES:
            return None
        data = read_bytes(path, "samples crop")
    except (OSError, InputError):
        return None
    if hashlib.sha256(data).hexdigest() != m.group(1):
        return None
    if embed:
        return "data:image/png;base64," + base64.b64encode(data).decode()
    try:
        return os.path.relpath(path.resolve(), page_dir.resolve()).replace(os.sep, "/")
    except ValueError:  # another drive: embed instead
        return "data:image/png;base64," + base64.b64encode(data).decode()


def _num(v) -> float | None:
    """A finite number of a batch file (booleans and text are no numbers), else None (the page shows ``?``)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _text(v) -> str:
    """A text field of a batch file: a string as it is (the page escapes it), anything else empty."""
    return v if isinstance(v, str) else ""


def _score(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 5 else None


def _response(r, folder: Path, page_dir: Path, embed: bool) -> dict:
    """One response of a batch file as the page shows it: every field typed (numbers finite, texts strings, a
    citation's crop an index of the response's crops), crops through :func:`_crop`; nothing else is passed on."""
    r = r if isinstance(r, dict) else {}
    raw = r.get("crops") if isinstance(r.get("crops"), list) else []
    crops = [_crop(folder, c, page_dir, embed) for c in raw]
    scores = r.get("scores") if isinstance(r.get("scores"), dict) else None
    if scores is not None:
        flags = scores.get("crop_relevance")
        scores = {k: _score(scores.get(k)) for k in ("answer", "relevance", "coverage")} | {
            "crop_relevance": [f for f in flags if f in (0, 1) and not isinstance(f, bool)]
            if isinstance(flags, list) else []
        }  # fmt: skip
    citations = []
    for c in r.get("citations") if isinstance(r.get("citations"), list) else []:
        c = c if isinstance(c, dict) else {}
        bbox = c.get("bbox") if isinstance(c.get("bbox"), list) else []
        crop = c.get("crop")
        crop = crop if isinstance(crop, int) and not isinstance(crop, bool) and 0 <= crop < len(crops) else None
        page = c.get("page")
        citations.append({"page": page if isinstance(page, int) and not isinstance(page, bool) else None,
                          "bbox": [_num(v) for v in bbox[:4]], "similarity": _num(c.get("similarity")),
                          "text": _text(c.get("text")), "crop": crop})  # fmt: skip
    reward = r.get("reward") if isinstance(r.get("reward"), dict) else {}
    return {"answer": _text(r.get("answer")), "reply": _text(r.get("reply")), "advantage": _num(r.get("advantage")),
            "reward": {"overall": _num(reward.get("overall"))}, "scores": scores, "citations": citations,
            "unscorable": r.get("unscorable") is True or bool(_num(r.get("unscorable"))), "crops": crops}  # fmt: skip


def _group(g, folder: Path, page_dir: Path, embed: bool) -> dict:
    g = g if isinstance(g, dict) else {}
    attempt = g.get("attempt")
    responses = g.get("responses") if isinstance(g.get("responses"), list) else []
    return {"qid": _text(g.get("qid")) or str(_num(g.get("qid")) or ""), "question": _text(g.get("question")),
            "gold": _text(g.get("gold")), "keep": _num(g.get("keep")), "trained": g.get("trained") is True,
            "attempt": attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 1 else 1,
            "responses": [_response(r, folder, page_dir, embed) for r in responses]}  # fmt: skip


def write_samples_page(
    run_dir: str | Path, out: str | Path | None = None, embed: bool = False, steps: list | None = None
) -> Path:
    """Write the page of ``steps`` (default: :func:`folder_steps` of ``run_dir``) to ``out`` (default
    ``run_dir/samples.html``); returns its path."""
    run = Path(run_dir)
    if not run.is_dir():
        raise InputError(f"run folder {run_dir}: not a folder")
    out = Path(out) if out else run / PAGE
    steps = folder_steps(run) if steps is None else steps
    if not steps:
        raise InputError(f"run folder {run_dir}: no samples (reward setting samples_every, $QUOTECITE_METRICS_DIR)")
    page_dir = out.parent
    data = []
    for step, folder, rec in steps:
        groups = rec.get("groups") if isinstance(rec, dict) and isinstance(rec.get("groups"), list) else []
        data.append({"step": step, "groups": [_group(g, Path(folder), page_dir, embed) for g in groups]})
    # inside <script>: no '<', '>' or '&' at all (JSON escapes), so no text of a batch can end or re-open the element
    blob = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    text = _TEMPLATE.replace("/*CSS*/", REPORT_CSS + _CSS).replace("/*DATA*/", blob)
    text = text.replace("<!--TITLE-->", html.escape(f"samples of {run.resolve().name}"))
    return atomic_write_text(out, text)


_CSS = """
.grp{border-top:3px solid #888;margin-top:1.2em;padding-top:.4em}.cards{display:flex;gap:8px;overflow-x:auto}
.card{flex:0 0 300px;border:1px solid #ccc;padding:6px;font-size:12px;background:#fff}
.card.pos{border-color:#148c28}.card.neg{border-color:#c81e1e}.card img{max-width:100%;border:1px solid #aaa;margin:2px 0}
.adv{font-weight:bold}.tag{display:inline-block;background:#eee;border-radius:3px;padding:0 4px;margin-right:3px}
"""

_TEMPLATE = """<!doctype html><html><head><meta charset="utf-8"><title><!--TITLE--></title><style>/*CSS*/</style></head>
<body><h1><!--TITLE--></h1>
<p>step <input type="range" id="slider" min="0" value="0"> <select id="steps"></select>
<label><input type="checkbox" class="f" value="pos"> positive advantage</label>
<label><input type="checkbox" class="f" value="dropped"> dropped by the keep band</label>
<label><input type="checkbox" class="f" value="unscorable"> unscorable</label>
<label><input type="checkbox" class="f" value="irrelevant"> judge said irrelevant</label></p>
<div id="counts" data-cards="0" data-imgs="0" data-steps="0"></div><div id="view"></div>
<script id="data" type="application/json">/*DATA*/</script>
<script>
const DATA = JSON.parse(document.getElementById('data').textContent);
const esc = s => String(s ?? '').replace(/[&<>"']/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c]));
const num = (v, d) => Number.isFinite(v) ? v.toFixed(d) : '?';
const sel = document.getElementById('steps'), sl = document.getElementById('slider');
DATA.forEach((d, i) => { const o = document.createElement('option'); o.value = i; o.textContent = d.step; sel.appendChild(o); });
sl.max = DATA.length - 1;
function irrelevant(r) { const s = r.scores; return !!s && (s.relevance === 0 || (s.crop_relevance || []).includes(0)); }
function render() {
  const on = [...document.querySelectorAll('.f:checked')].map(x => x.value);
  const d = DATA[+sel.value]; let cards = 0, imgs = 0, h = '';
  for (const g of d.groups) {
    const rs = g.responses.filter(r => on.every(f => f === 'pos' ? r.advantage > 0 : f === 'dropped' ? !g.trained
      : f === 'unscorable' ? r.unscorable : irrelevant(r)));
    if (!rs.length) continue;
    h += `<div class="grp"><b>${esc(g.qid)}</b> ${esc(g.question)} <span class="k">gold:</span> ${esc(g.gold)}
      <span class="tag">keep ${num(g.keep, 3)}</span><span class="tag">${g.trained ? 'trained' : 'dropped'}</span>${g.attempt > 1 ? `<span class="tag">attempt ${esc(g.attempt)}</span>` : ''}
      <div class="cards">`;
    for (const r of rs) {
      cards++; imgs += r.crops.length; const done = new Set();
      const img = k => (k === null || done.has(k) || !r.crops[k]) ? '' : (done.add(k), `<img class="crop" src="${esc(r.crops[k])}">`);
      const s = r.scores ? `a ${esc(r.scores.answer)} r ${esc(r.scores.relevance)} c ${esc(r.scores.coverage)}` : 'no judge score';
      h += `<div class="card ${r.advantage > 0 ? 'pos' : 'neg'}"><div class="adv">advantage ${num(r.advantage, 3)}</div>
        <div>reward ${num(r.reward.overall, 3)} (${s})${r.unscorable ? ' <span class="miss">unscorable</span>' : ''}</div>
        <div class="resp">${esc(r.answer)}</div>` +
        r.citations.map(c => `<div class="${c.crop === null ? 'miss' : 'hit'}">p${esc(c.page)} [${c.bbox.map(v => num(v, 0))}]
          sim ${num(c.similarity, 3)}</div><div class="k">${esc(c.text.slice(0, 300))}</div>` +
          img(c.crop)).join('') + r.crops.map((_, k) => img(k)).join('') +
        (r.reply ? `<div class="resp">${esc(r.reply)}</div>` : '') + '</div>';
    }
    h += '</div></div>';
  }
  document.getElementById('view').innerHTML = h || '<p>nothing matches the filters</p>';
  const c = document.getElementById('counts');
  c.dataset.cards = cards; c.dataset.imgs = document.querySelectorAll('#view img.crop').length; c.dataset.steps = DATA.length;
}
sel.onchange = () => { sl.value = sel.value; render(); };
sl.oninput = () => { sel.value = sl.value; render(); };
document.querySelectorAll('.f').forEach(x => x.onchange = render);
const q = new URLSearchParams(location.search);
if (q.get('step') !== null) { sel.value = sl.value = q.get('step'); }
(q.get('filters') || '').split(',').filter(Boolean).forEach(f => { const x = document.querySelector(`.f[value="${f}"]`); if (x) x.checked = true; });
render();
</script></body></html>
"""
