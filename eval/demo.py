"""The evaluation part of ``make demo``: gold and sample predictions on the generated sample PDF, resolved,
scored (with the offline lexical judge) and reported.

Gold: for each question of :data:`data_prep.sample.SAMPLE_FACTS`, the necessary elements are the cached blocks
holding its evidence facts (the block of the fact's page whose text contains most of the fact's tokens);
``gt_all`` adds the table caption to table questions as optional evidence.

Two runs on the same questions show the paper's contrast on a small scale:

* language interface: JSON responses quoting the evidence verbatim (one quotes the wrong sentence, one has no
  JSON at all), resolved by the reward's embedding resolver;
* coordinate interface: CiteVQA-style ``<bbox/>`` tags (one tight, one loose, one on the wrong page, one answer
  that describes the location in words instead).
"""

from __future__ import annotations

import json
from pathlib import Path

from data_prep.cache import CachedDoc
from data_prep.text import token_recall

ELEMENT_TYPE_OF_BLOCK = {
    "table": "table",
    "table_caption": "table",
    "table_footnote": "table",
    "figure": "figure",
    "figure_caption": "figure",
}
"""Block type -> gold element type (text otherwise), as in the paper's Table 7 grouping."""


def _block_for(cached: CachedDoc, page: int, text: str):
    on_page = [b for b in cached.blocks if b.page == page]
    if not on_page:
        raise RuntimeError(f"the sample's page {page} has no parsed block")
    return max(on_page, key=lambda b: (token_recall(text, b.text), -len(b.text)))


def build_demo_gold(cached: CachedDoc) -> list[dict]:
    """Gold records (module docstring) for the sample document in ``cached``."""
    from data_prep.sample import SAMPLE_FACTS

    rows = []
    for i, qa in enumerate(SAMPLE_FACTS.qa):
        facts = SAMPLE_FACTS.evidence(qa)
        blocks = [_block_for(cached, f.page, f.text) for f in facts]
        nec = [[b.page, *b.bbox] for b in blocks]
        all_ = list(nec)
        if any(f.type == "table" for f in facts):
            cap = SAMPLE_FACTS.fact("table_caption")
            cb = _block_for(cached, cap.page, cap.text)
            if [cb.page, *cb.bbox] not in all_:
                all_.append([cb.page, *cb.bbox])
        rows.append(
            {
                "index": i,
                "doc_key": cached.key,
                "question": qa.question,
                "answer": qa.answer,
                "language": "en",
                "qtype": "Factual Retrieval" if len(facts) == 1 else "Complex Synthesis",
                "gt_necessary": nec,
                "gt_all": all_,
                "gt_types": [ELEMENT_TYPE_OF_BLOCK.get(b.type, "text") for b in blocks],
            }
        )
    return rows


def demo_predictions(cached: CachedDoc, gold: list[dict]) -> tuple[list[dict], list[dict]]:
    """(language-interface, coordinate-interface) raw predictions for the demo questions."""
    from data_prep.sample import SAMPLE_FACTS

    f = SAMPLE_FACTS.fact
    lang_responses = [
        {"answer": "Shenzhen", "quotes": [f("en_sentence").text, f("table_row").text]},
        {"answer": "214.5 MWh", "quotes": [f("table_row").text]},
        {"answer": "July", "quotes": [f("figure_caption").text]},
        None,  # no JSON at all: a format failure
    ]
    language = []
    for g, resp in zip(gold, lang_responses, strict=True):
        text = (
            "```json\n" + json.dumps(resp, ensure_ascii=False) + "\n```"
            if resp is not None
            else "The panels were cleaned every 14 days, as the maintenance log on the last page says."
        )
        language.append(
            {"index": g["index"], "interface": "language", "response": text, "answer": "", "citations": []}
        )

    def tag(page: int, box, pad: float) -> str:
        w, h = cached.page_sizes[page - 1]
        x0, y0, x1, y1 = box
        v = [(x0 - pad) / w, (y0 - pad) / h, (x1 + pad) / w, (y1 + pad) / h]
        x1_, y1_, x2_, y2_ = (round(1000 * min(1.0, max(0.0, t))) for t in v)
        return f'<bbox page="{page}" x1="{x1_}" y1="{y1_}" x2="{x2_}" y2="{y2_}" />'

    n0, n1, n2 = gold[0]["gt_necessary"], gold[1]["gt_necessary"], gold[2]["gt_necessary"]
    coord_texts = [
        f"Shenzhen had the highest yield. {tag(n0[0][0], n0[0][1:], 60.0)}",  # a loose box around the evidence
        f"214.5 MWh. {tag(n1[0][0], n1[0][1:], 1.0)}",  # a tight box
        f"July. {tag(min(n2[0][0] + 1, cached.n_pages), n2[0][1:], 0.0)}",  # the right box on the wrong page
        "Every 14 days; see the maintenance log in the appendix on the last page.",  # location in words only
    ]
    coordinate = [
        {"index": g["index"], "interface": "coordinate", "response": t, "answer": "", "citations": []}
        for g, t in zip(gold, coord_texts, strict=True)
    ]
    return language, coordinate


def run_eval_demo(cached: CachedDoc, out_dir: str | Path) -> dict:
    """Build, resolve, score and report the demo runs; print the metrics table.

    Returns ``{"metrics", "metrics_coordinate", "recall_vs_iou", "report", "tables", "gold"}`` (paths as Path)."""
    from rich.console import Console

    from data_prep.cache import DocCache
    from eval.cmd_resolve import Resolver, resolve_file
    from eval.cmd_score import score, write_outputs
    from eval.report import plot_recall_vs_iou
    from eval.schemas import read_gold, read_predictions, write_jsonl
    from eval.tables import rich_tables
    from reward.judge import get_judge

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    gold_rows = build_demo_gold(cached)
    gold_path = write_jsonl(out / "gold.jsonl", gold_rows)
    language, coordinate = demo_predictions(cached, gold_rows)
    docs = DocCache(cached.path.parent)
    runs = []
    paths: dict = {"gold": gold_path}
    for name, raw in (("language", language), ("coordinate", coordinate)):
        raw_path = write_jsonl(out / f"pred_{name}_raw.jsonl", raw)
        resolved = out / f"pred_{name}.jsonl"
        resolve_file(gold_path, raw_path, resolved, Resolver(docs, resolver="embedding"))
        golds = read_gold(gold_path)
        preds = {p.key: p for p in read_predictions(resolved)}
        run = score(golds, [preds.get(g.key) for g in golds], docs=docs, judge=get_judge("lexical"))
        label = name
        p = write_outputs(run, out / name, label, docs)
        runs.append((label, run.metrics))
        paths[name] = p
    console = Console()
    for table in rich_tables(runs):
        console.print(table)
    figure = plot_recall_vs_iou(runs, out / "recall_vs_iou.png")
    return {
        "metrics": runs[0][1],
        "metrics_coordinate": runs[1][1],
        "recall_vs_iou": figure,
        "report": paths["language"]["report"],
        "report_coordinate": paths["coordinate"]["report"],
        "tables": paths["language"]["tables"],
        "gold": gold_path,
    }
