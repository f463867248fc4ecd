"""The hostile-input suite's shared environment and its end-of-run report.

``hostile_env`` (session): the project's sample PDF, a block cache of it (pdftext + MiniLM: the real CPU parser and
encoder), a gold file of the sample's questions with the blocks of their evidence as gold boxes, raw responses that
quote that evidence verbatim, the same predictions resolved (``eval resolve``), and EasyR1 reward inputs.
Cases only read these; a case that corrupts one copies it into its own folder first.

At the end of the run the terminal summary prints the suite's counts: cases, clean errors, successes, crashes with
a traceback, silent wrong results and data lost (the last three must be 0)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hostile import harness


@dataclass
class HostileEnv:
    sample_pdf: Path
    cache_dir: Path
    doc_key: str
    n_pages: int
    page_sizes: list
    gold: Path
    raw: Path
    pred: Path
    inputs: Path
    score_dir: Path
    root: Path

    def copy_cache(self, dest: Path) -> Path:
        """A private copy of the cache folder (for cases that damage it)."""
        shutil.copytree(self.cache_dir, dest)
        return dest


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def hostile_env(sample_pdf, tmp_path_factory) -> HostileEnv:
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.groundtruth import GroundTruth, pack_ground_truth
    from data_prep.parsers import get_parser
    from data_prep.sample import SAMPLE_FACTS

    root = tmp_path_factory.mktemp("hostile")
    cache_dir = root / "cache"
    cached = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), cache_dir)
    gold, raw, inputs = [], [], []
    for i, qa in enumerate(SAMPLE_FACTS.qa):
        facts = SAMPLE_FACTS.evidence(qa)
        blocks = [next(b for b in cached.blocks if f.text[:30] in b.text) for f in facts]
        boxes = [[b.page, *[round(v, 3) for v in b.bbox]] for b in blocks]
        gold.append({"index": i, "doc_key": cached.key, "question": qa.question, "answer": qa.answer,
                     "language": "en", "qtype": "Factual Retrieval", "gt_necessary": boxes, "gt_all": boxes})  # fmt: skip
        response = json.dumps({"answer": qa.answer, "quotes": [f.text for f in facts]}, ensure_ascii=False)
        raw.append({"index": i, "interface": "language", "response": response})
        for _k in range(2):  # two responses per question: a GRPO group
            inputs.append({"response": response, "response_length": len(response),
                           "ground_truth": pack_ground_truth(GroundTruth(f"q{i}", cached.key, qa.question,
                                                                         qa.answer, None))})  # fmt: skip
    env = HostileEnv(
        sample_pdf=sample_pdf,
        cache_dir=cache_dir,
        doc_key=cached.key,
        n_pages=cached.n_pages,
        page_sizes=[tuple(s) for s in cached.page_sizes],
        gold=_jsonl(root / "gold.jsonl", gold),
        raw=_jsonl(root / "raw.jsonl", raw),
        pred=root / "pred.jsonl",
        inputs=_jsonl(root / "inputs.jsonl", inputs),
        score_dir=root / "score",
        root=root,
    )
    res = harness.run_cli(["eval", "resolve", "--pred", env.raw, "--gold", env.gold, "--cache-dir", cache_dir,
                           "--out", env.pred])  # fmt: skip
    assert res.rc == 0, res.stderr + res.tb
    res = harness.run_cli(["eval", "score", "--gold", env.gold, "--pred", env.pred, "--out", env.score_dir,
                           "--no-report"])  # fmt: skip
    assert res.rc == 0, res.stderr + res.tb
    return env


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not harness.RESULTS:
        return
    s = harness.summary()
    by_suite: dict[str, int] = {}
    for suite, _, _ in harness.RESULTS:
        by_suite[suite] = by_suite.get(suite, 0) + 1
    tr = terminalreporter
    tr.section("hostile-input suite")
    tr.write_line(f"cases: {s['cases']} ({', '.join(f'{k}: {v}' for k, v in sorted(by_suite.items()))})")
    tr.write_line(f"clean errors: {s['clean_error']}   successes: {s['success']}")
    tr.write_line(
        f"crashes with a traceback: {s['crash']} (must be 0)   silent wrong results: {s['silent_wrong']} (must be 0)"
        f"   data lost: {s['data_lost']} (must be 0)"
    )
    other = s["unclear_error"] + s["unexpected_error"]
    if other:
        tr.write_line(f"unclear errors: {s['unclear_error']}   unexpected errors: {s['unexpected_error']}")
    bad = [(su, n, o) for su, n, o in harness.RESULTS if o not in harness.GOOD_OUTCOMES]
    for su, n, o in bad[:20]:
        tr.write_line(f"  {o}: {su}::{n}")
