"""Training curves of a run without wandb: ``RUN_DIR/run_log.jsonl`` -> one self-contained HTML page of plots.

    python -m launch.runlog plot RUN_DIR [--out FILE]      # default RUN_DIR/curves.html

One panel per question a researcher asks of a GRPO run, each against the optimizer step (the merged log of
:mod:`launch.runlog`, every step once across chained jobs):

* reward: the mean reward of the responses that trained (``train_batch.reward.overall``, from the reward's
  training-batch records), EasyR1's ``reward/overall`` over every response generated across the filter attempts,
  and the validation reward (``val/reward_score``);
* the reward's parts over the responses that trained: judge answer, relevance, coverage (0..5);
* unscorable rate (judge/embedder failures filled with the group mean) and format rate (responses that parsed);
* citations (and quotes) per response;
* the online filter: groups trained, groups dropped by reason (zero variance, all unscorable, outside the band),
  and generation attempts per step.

Where the training-batch record is missing (a run without the launch's reward settings) the panels fall back to
EasyR1's own ``reward/*`` means. Vertical dotted lines mark where a new job segment (a resume) starts. Pictures are
PNG (matplotlib, Agg) embedded as base64, so the page is one file that opens anywhere.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.io import atomic_write_text, loads_record, read_text

Series = tuple[str, str, str]
"""(label, dotted key in a run_log record, line style)."""

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


def read_run_log(path: Path) -> list[dict]:
    """The records of ``run_log.jsonl`` sorted by step. Raises :class:`launch.run_files.RunError` when the file is
    missing, unreadable or holds no step record."""
    from launch.run_files import RunError

    try:
        text = read_text(path, "run log")  # a regular file of UTF-8 text (a FIFO is never waited on)
    except (OSError, InputError) as e:
        raise RunError(f"{path}: cannot read ({getattr(e, 'strerror', None) or e}); run `python -m launch.runlog "
                       "merge` first") from None  # fmt: skip
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = loads_record(line, f"{path}:{n}")  # the one record parser: numbers and nesting bounded
        except ValueError:
            raise RunError(f"{path}:{n}: not JSON") from None
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    if not rows:
        raise RunError(f"{path}: no step records")
    return sorted(rows, key=lambda r: r["step"])


def value(record: dict, keys: str) -> float | None:
    """The first of ``a.b|c.d`` present in ``record`` as a number, else None."""
    for dotted in keys.split("|"):
        node: Any = record
        for k in dotted.split("."):
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, int | float) and not isinstance(node, bool):
            return float(node)
    return None


def series(rows: list[dict], keys: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], v) for r in rows if (v := value(r, keys)) is not None]
    return [s for s, _ in pts], [v for _, v in pts]


def _panel_png(
    title: str, ylabel: str, lines: list[tuple[str, list[int], list[float], str]], starts: list[int]
) -> str:
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
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def render_html(rows: list[dict], source: str) -> str:
    """The page for ``rows`` (run_log records)."""
    segs: list[tuple[int, str]] = []
    for r in rows:
        if not segs or r.get("segment") != segs[-1][1]:
            segs.append((r["step"], r.get("segment")))
    starts = [s for s, _ in segs[1:]]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Training curves</title>",
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto;color:#222}"
        "figure{margin:1.5em 0}figcaption{font-size:.9em;color:#555}td,th{padding:2px 8px;text-align:right}"
        "</style></head><body>",
        f"<h1>Training curves</h1><p>{html.escape(source)}: steps {rows[0]['step']}..{rows[-1]['step']} "
        f"({len(rows)} records, {len(segs)} job segment(s); dotted lines: a segment resumes)</p>",
    ]
    # --- samples: link the samples browser of the same run folder ---
    parts.append("<p><a href='samples.html'>sampled rollouts: crops, judge scores, advantages</a> "
                 "(<code>python -m launch.samples_page RUN_DIR</code>)</p>")  # fmt: skip
    for title, ylabel, spec in PANELS:
        lines = []
        for label, keys, style in spec:
            xs, ys = series(rows, keys)
            if xs:
                lines.append((label, xs, ys, style))
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
    """Write the page for ``run_log`` to ``out`` (atomically); returns ``out``."""
    rows = read_run_log(run_log)
    atomic_write_text(out, render_html(rows, str(run_log)))
    return out
