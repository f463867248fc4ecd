"""The samples step of ``make demo``: two training batches of the demo responses scored with the
lexical judge under a metrics folder, their samples written by the reward (:mod:`reward.samples`) and the
browser page (:mod:`eval.samples_page`) written beside them."""

from __future__ import annotations

import json
import os
from pathlib import Path

from data_prep.groundtruth import GroundTruth, pack_ground_truth


def samples_demo_batches(cached) -> list[list[dict]]:
    """Two reward calls of groups (3 responses each): a group that teaches, one the keep band drops."""
    from data_prep.sample import SAMPLE_FACTS
    from reward.demo import HALLUCINATED_QUOTE

    qa = SAMPLE_FACTS.qa[0]
    evidence = [f.text for f in SAMPLE_FACTS.evidence(qa)]
    qa2 = next(q for q in SAMPLE_FACTS.qa if "rotated_sentence" in q.evidence)
    rotated = SAMPLE_FACTS.fact("rotated_sentence").text

    def row(qid, q, answer, quotes):
        gt = pack_ground_truth(GroundTruth(qid, cached.key, q.question, q.answer, None))
        r = json.dumps({"answer": answer, "quotes": quotes}, ensure_ascii=False)
        return {"response": r, "response_length": len(r), "ground_truth": gt}

    first = [
        row("demo-yield", qa, "Shenzhen had the highest annual yield.", evidence),
        row("demo-yield", qa, "Beijing had the highest annual yield.", evidence),
        row("demo-yield", qa, "Shenzhen", [HALLUCINATED_QUOTE]),
        row("demo-wrong", qa, "Beijing", evidence[:1]),
        row("demo-wrong", qa, "Beijing", evidence[:1]),
        row("demo-wrong", qa, "Beijing", evidence[:1]),
    ]
    second = [
        row("demo-clean", qa2, "Every 14 days.", [rotated]),
        row("demo-clean", qa2, "Every 30 days.", [rotated]),
        row("demo-clean", qa2, "Every 14 days.", [HALLUCINATED_QUOTE]),
        row("demo-unparsed", qa, "no JSON", []),
        {**row("demo-unparsed", qa, "", []), "response": "The answer is Shenzhen."},
        {**row("demo-unparsed", qa, "", []), "response": "Shenzhen, page 2."},
    ]
    return [first, second]


def run_samples_demo(cached, out_dir: Path) -> Path:
    """Score the batches with ``$QUOTECITE_METRICS_DIR=out_dir`` and write ``out_dir/samples.html``."""
    from eval.samples_page import write_samples_page
    from reward.config import RewardConfig
    from reward.pipeline import METRICS_DIR_ENV, RewardScorer

    out_dir = Path(out_dir)
    old = os.environ.get(METRICS_DIR_ENV)
    os.environ[METRICS_DIR_ENV] = str(out_dir)
    try:
        config = RewardConfig(cache_dir=str(cached.path.parent), judge="lexical", batch_groups=1,
                              keep_band=[0.01, 0.99], samples_groups=2)  # fmt: skip
        scorer = RewardScorer(config)
        for batch in samples_demo_batches(cached):
            scorer.score(batch)
    finally:
        if old is None:
            os.environ.pop(METRICS_DIR_ENV, None)
        else:
            os.environ[METRICS_DIR_ENV] = old
    return write_samples_page(out_dir)
