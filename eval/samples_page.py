"""The samples browser's page: one self-contained HTML page of a run's sampled rollouts (:mod:`reward.samples`).

:func:`write_samples_page` renders the sampled steps it is given (or those of a bare metrics folder's
``samples/``) into one page: steps on a slider, each group's responses side by side sorted by advantage with their
crops and scores, filters for "positive advantage", "dropped by the keep band", "unscorable" and "judge said
irrelevant". Crops are linked relative to the page (the page works from a copied run folder, no server) or embedded
with ``embed=True``. Colours and styles are the evaluation report's (:data:`eval.report.REPORT_CSS`). A run folder
of the training launch is read by ``python -m launch.samples_page`` (its segments give each batch its step)."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from core.errors import InputError
from core.io import atomic_write_text
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


def _src(folder: Path, rel: str, page_dir: Path, embed: bool) -> str:
    path = folder / rel
    if embed:
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    return path.resolve().relative_to(page_dir.resolve()).as_posix()


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
        groups = []
        for g in rec["groups"]:
            resps = []
            for r in g["responses"]:
                try:
                    crops = [_src(folder, c, page_dir, embed) for c in r["crops"]]
                except ValueError:  # page outside the run folder: embed instead
                    crops = [_src(folder, c, page_dir, True) for c in r["crops"]]
                resps.append({**r, "crops": crops})
            groups.append({**g, "responses": resps})
        data.append({"step": step, "groups": groups})
    blob = json.dumps(data, ensure_ascii=False).replace("</", "<\\/")
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
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
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
      <span class="tag">keep ${(+g.keep).toFixed(3)}</span><span class="tag">${g.trained ? 'trained' : 'dropped'}</span>${(g.attempt || 1) > 1 ? `<span class="tag">attempt ${g.attempt}</span>` : ''}
      <div class="cards">`;
    for (const r of rs) {
      cards++; imgs += r.crops.length; const done = new Set();
      const img = k => (k === null || done.has(k) || !r.crops[k]) ? '' : (done.add(k), `<img class="crop" src="${r.crops[k]}">`);
      const s = r.scores ? `a ${r.scores.answer} r ${r.scores.relevance} c ${r.scores.coverage}` : 'no judge score';
      h += `<div class="card ${r.advantage > 0 ? 'pos' : 'neg'}"><div class="adv">advantage ${r.advantage.toFixed(3)}</div>
        <div>reward ${r.reward.overall.toFixed(3)} (${s})${r.unscorable ? ' <span class="miss">unscorable</span>' : ''}</div>
        <div class="resp">${esc(r.answer)}</div>` +
        r.citations.map(c => `<div class="${c.crop === null ? 'miss' : 'hit'}">p${c.page} [${c.bbox.map(v => v.toFixed(0))}]
          sim ${c.similarity.toFixed(3)}</div><div class="k">${esc(c.text).slice(0, 300)}</div>` +
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
