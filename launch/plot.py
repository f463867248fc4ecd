"""``python -m launch.runlog plot RUN_DIR [--out FILE]``: the training curves of ``RUN_DIR/run_log.jsonl`` as one
self-contained HTML page (docs/recipes.md), one panel per question a researcher asks of a GRPO run, each against the
step. A panel falls back to EasyR1's own ``reward/*`` means where the reward's training-batch record is missing;
dotted lines mark where a job segment resumes; the PNGs (matplotlib, Agg) are embedded as base64.
"""

from __future__ import annotations

import base64
import html
import io
from itertools import pairwise
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import atomic_write_text, read_jsonl
from launch.run_files import RunError

Series = tuple[str, str, str]  # (label, dotted keys "a.b|c.d" in a run_log record, the first present counts, style)
Line = tuple[str, list[int], list[float], str]  # (label, steps, values, style)

PANELS: list[tuple[str, str, list[Series]]] = [
    ("Reward", "mean reward per step (0..1)", [
        ("trained responses", "train_batch.reward.overall", "-"),
        ("all generated (EasyR1 reward/overall)", "reward.overall", "--"),
        ("validation", "val.reward_score", "o"),
    ]),
    ("Reward parts (trained responses)", "judge score (0..5)", [
        ("answer", "train_batch.reward.answer|reward.answer", "-"),
        ("relevance", "train_batch.reward.relevance|reward.relevance", "-"),
        ("coverage", "train_batch.reward.coverage|reward.coverage", "-"),
    ]),
    ("Unscorable and format rate", "share of responses", [
        ("unscorable (trained)", "train_batch.reward.unscorable", "-"),
        ("unscorable (all generated)", "reward.unscorable", "--"),
        ("format ok (trained)", "train_batch.reward.format_ok", "-"),
        ("format ok (all generated)", "reward.format_ok", "--"),
    ]),
    ("Citations per response", "count", [
        ("citations (trained)", "train_batch.reward.n_citations|reward.n_citations", "-"),
        ("quotes (trained)", "train_batch.reward.n_quotes|reward.n_quotes", "--"),
    ]),
    ("Groups and the online filter", "groups (prompts) per step", [
        ("trained", "train_batch.groups_trained", "-"),
        ("seen", "train_batch.groups_seen", "--"),
        ("dropped: zero variance", "train_batch.dropped.zero_variance", "-"),
        ("dropped: all unscorable", "train_batch.dropped.all_unscorable", "-"),
        ("dropped: outside the band", "train_batch.dropped.out_of_band", "-"),
        ("generation attempts", "train_batch.calls", ":"),
    ]),
]  # fmt: skip


def series(rows: list[dict], keys: str) -> tuple[list[int], list[float]]:
    """The steps and values of the first of ``a.b|c.d`` that each record holds as a number."""
    xs, ys = [], []
    for r in rows:
        for dotted in keys.split("|"):
            node: Any = r
            for k in dotted.split("."):
                node = node.get(k) if isinstance(node, dict) else None
            if isinstance(node, int | float) and not isinstance(node, bool):
                xs.append(r["step"])
                ys.append(float(node))
                break
    return xs, ys


def _panel_png(title: str, ylabel: str, lines: list[Line], starts: list[int]) -> str:
    """The panel as a base64 PNG: one line per series, a dotted line where each segment after the first starts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=100)
    for label, xs, ys, style in lines:
        if style == "o":
            ax.plot(xs, ys, "o", label=label, markersize=5)
        else:
            ax.plot(xs, ys, style, label=label, linewidth=1.6, marker="." if len(xs) < 40 else None)
    for s in starts:
        ax.axvline(s, color="grey", linestyle=":", linewidth=1)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(rows: list[dict], source: str) -> str:
    """The page for ``rows`` (run_log records)."""
    starts = [b["step"] for a, b in pairwise(rows) if b.get("segment") != a.get("segment")]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Training curves</title>",
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}figcaption{font-size:.9em;color:#555}td,th{padding:2px 8px;text-align:right}"
        "</style></head><body>",
        f"<h1>Training curves</h1><p>{html.escape(source)}: steps {rows[0]['step']}..{rows[-1]['step']} "
        f"({len(rows)} records, {len(starts) + 1} job segment(s); dotted lines: a segment resumes)</p>",
        "<p><a href='samples.html'>sampled rollouts: crops, judge scores, advantages</a> "
        "(<code>python -m launch.samples_page RUN_DIR</code>)</p>",
    ]
    for title, ylabel, spec in PANELS:
        lines = [(label, *series(rows, keys), style) for label, keys, style in spec]
        lines = [line for line in lines if line[1]]
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if not lines:
            parts.append("<p><em>no data in this run log</em></p>")
            continue
        png = _panel_png(title, ylabel, lines, starts)
        last = "".join(
            f"<tr><td style='text-align:left'>{html.escape(label)}</td><td>{xs[-1]}</td><td>{ys[-1]:.4g}</td></tr>"
            for label, xs, ys, _ in lines
        )
        parts.append(
            f"<figure><img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>"
            f"<figcaption><table><tr><th style='text-align:left'>series</th><th>last step</th><th>value</th></tr>"
            f"{last}</table></figcaption></figure>"
        )
    parts.append("</body></html>")
    return "\n".join(parts)


def write_curves(run_log: Path, out: Path) -> Path:
    """Write the page for ``run_log`` to ``out`` (atomically); :class:`RunError` when the file is missing,
    unreadable, not JSONL or holds no step record."""
    try:
        rows = [r for _, r in read_jsonl(run_log) if isinstance(r.get("step"), int)]
    except (OSError, InputError) as e:
        raise RunError(f"{run_log}: cannot read ({e}); run `python -m launch.runlog merge` first") from None
    if not rows:
        raise RunError(f"{run_log}: no step records")
    atomic_write_text(out, render_html(sorted(rows, key=lambda r: r["step"]), str(run_log)))
    return out
