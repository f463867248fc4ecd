"""The reward part of ``make demo``: a handful of responses on the sample document, scored with the lexical judge.

The cases show what the reward pays for: a grounded correct answer, a wrong answer citing the right evidence
(gated to 0), a correct answer with a quote that is not in the document (it resolves to some block with a low
similarity and earns little evidence credit), a correct answer from the rotated page, and a response that does not
follow the JSON contract (0, counted as a format failure).
"""

from __future__ import annotations

import json
from pathlib import Path

from core.io import atomic_write_jsonl
from data_prep.cache import CachedDoc
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from reward.config import RewardConfig
from reward.pipeline import RewardScorer

HALLUCINATED_QUOTE = "The maintenance crew received a safety award from the city government in 2019."
"""A quote that appears nowhere in the sample document."""


def demo_inputs(cached: CachedDoc) -> list[tuple[str, dict]]:
    """``(case name, EasyR1 reward input)`` pairs over the sample document's facts."""
    from data_prep.sample import SAMPLE_FACTS

    qa_yield = SAMPLE_FACTS.qa[0]  # which site had the highest annual yield -> Shenzhen
    qa_clean = next(q for q in SAMPLE_FACTS.qa if "rotated_sentence" in q.evidence)
    gt_yield = pack_ground_truth(GroundTruth("demo-yield", cached.key, qa_yield.question, qa_yield.answer, None))
    gt_clean = pack_ground_truth(GroundTruth("demo-clean", cached.key, qa_clean.question, qa_clean.answer, None))
    evidence = [f.text for f in SAMPLE_FACTS.evidence(qa_yield)]
    clean_quote = SAMPLE_FACTS.fact("rotated_sentence").text

    def response(answer: str, quotes: list[str]) -> str:
        return json.dumps({"answer": answer, "quotes": quotes}, ensure_ascii=False)

    cases = [
        ("good answer, right quotes", response("Shenzhen had the highest annual yield.", evidence), gt_yield),
        ("wrong answer, right quotes", response("Beijing had the highest annual yield.", evidence), gt_yield),
        ("right answer, hallucinated quote", response("Shenzhen", [HALLUCINATED_QUOTE]), gt_yield),
        ("good answer from the rotated page", response("Every 14 days.", [clean_quote]), gt_clean),
        ("unparseable (no JSON object)", "The answer is Shenzhen; see the table on page 2.", gt_yield),
    ]
    return [(name, {"response": r, "response_length": len(r), "ground_truth": gt}) for name, r, gt in cases]


def run_reward_demo(cached: CachedDoc, out_dir: Path) -> list[dict]:
    """Score the demo responses on ``cached`` (the sample document's cache entry), print a table of rewards with
    their parts and citations, write ``out_dir/reward_demo.jsonl``, and return one dict per case
    (``case``, the reward breakdown, ``citations``)."""
    from rich.console import Console
    from rich.table import Table

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = RewardConfig(cache_dir=str(cached.path.parent), judge="lexical", resolver="embedding")
    scorer = RewardScorer(config)
    cases = demo_inputs(cached)
    scored = scorer.score([inp for _, inp in cases])
    results = []
    table = Table(title="reward = (a/5) * (r + c)/10 with the lexical judge (a, r, c in 0..5)")
    for col in ("case", "reward", "a", "r", "c", "format", "citations (page:block sim)"):
        table.add_column(col, justify="left" if col in ("case", "citations (page:block sim)") else "right")
    for (name, _), (breakdown, citations) in zip(cases, scored, strict=True):
        d = {"case": name, **breakdown.to_dict(), "citations": [c.to_json() for c in citations]}
        results.append(d)
        cites = ", ".join(f"p{c.page}:#{c.block_id} {c.similarity:.2f}" for c in citations) or "-"
        table.add_row(
            name,
            f"{breakdown.overall:.2f}",
            f"{breakdown.answer:.0f}",
            f"{breakdown.relevance:.0f}",
            f"{breakdown.coverage:.0f}",
            "ok" if breakdown.format_ok else "rejected",
            cites,
        )
    console = Console()
    console.print(table)
    stats = scorer.last
    console.print(
        f"format ok {stats.format_ok}/{stats.responses} (rejects: {dict(stats.reject_reasons) or 'none'}), "
        f"unscorable {stats.unscorable}, {stats.seconds['total']:.2f} s"
    )
    path = out_dir / "reward_demo.jsonl"
    atomic_write_jsonl(path, results)
    console.print(f"reward demo: {path}")
    return results
