"""Samples of scored training batches (reward/samples.py)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from core.errors import InputError
from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.sample import SAMPLE_FACTS
from reward.config import RewardConfig
from reward.pipeline import RewardScorer
from reward.samples import WANDB_COLUMNS, SampleWriter, WandbSamples, grpo_advantages, load_steps, wandb_table

EN = SAMPLE_FACTS.fact("en_sentence").text
QA = SAMPLE_FACTS.qa[0]


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path_factory.mktemp("c"))


def group(cache, qid, answers):
    gt = pack_ground_truth(GroundTruth(qid, cache.key, QA.question, QA.answer, None))
    return [{"response": json.dumps({"answer": a, "quotes": [EN]}), "ground_truth": gt} for a in answers]


def test_advantage_is_easyr1_grpo_rule():
    rs = [1.0, 0.5, 0.0, 0.0]
    mean, std = statistics.mean(rs), statistics.stdev(rs)  # unbiased, as torch.std
    assert grpo_advantages(rs) == pytest.approx([(r - mean) / (std + 1e-6) for r in rs])
    assert grpo_advantages([0.3, 0.3]) == [0.0, 0.0]
    with pytest.raises(InputError, match="at least 2"):
        grpo_advantages([1.0])


def test_bad_settings_name_the_setting(tmp_path):
    with pytest.raises(InputError, match="samples_groups"):
        SampleWriter(tmp_path, groups=0)
    with pytest.raises(InputError, match="samples_every"):
        RewardConfig(cache_dir=str(tmp_path), judge="lexical", samples_every=-1)
    with pytest.raises(InputError, match="step"):
        SampleWriter(tmp_path).write(0, [])


def fake(qid, overall, keep, crops=()):
    return {"qid": qid, "question": "Q", "gold": "G", "answer": f"a{overall}", "quotes": [], "citations": [],
            "crops": list(crops), "scores": None, "reward": {"overall": overall}, "keep": keep, "unscorable": False}  # fmt: skip


def test_choice_keeps_a_dropped_group_crops_once_and_requeue_replaces(tmp_path):
    w = SampleWriter(tmp_path, groups=2, keep_band=[0.01, 0.99])
    png = b"\x89PNG fake crop"
    rows = [fake(q, v, 0.5, [png]) for q in "abcde" for v in (1.0, 0.0)] + [fake("z", 0.0, -1.0), fake("z", 0.0, -1.0)]
    path = w.write(3, rows)
    rec = json.loads(path.read_text())
    assert len(rec["groups"]) == 2 and "z" in [g["qid"] for g in rec["groups"]]
    z = next(g for g in rec["groups"] if g["qid"] == "z")
    assert z["trained"] is False and all(r["advantage"] == 0 for r in z["responses"])
    kept = next(g for g in rec["groups"] if g["qid"] != "z")
    assert [r["advantage"] for r in kept["responses"]] == pytest.approx(
        sorted(grpo_advantages([1.0, 0.0]), reverse=True)
    )
    assert len(list((tmp_path / "samples" / "crops").glob("*.png"))) == 1  # stored once by content hash
    w.write(3, rows)  # a requeued segment scoring the same step again
    assert [r["step"] for r in load_steps(tmp_path)] == [3]
    assert w.write(3, rows) and json.loads(path.read_text())["groups"][0]["qid"] == rec["groups"][0]["qid"]  # seeded


def test_size_bound_thins_oldest_steps_and_reports(tmp_path):
    w = SampleWriter(tmp_path, groups=1, max_mb=0.05)  # 52 KB
    for step in range(1, 8):
        w.write(step, [fake("q", 1.0, 0.5, [bytes([step]) * 20000]), fake("q", 0.0, 0.5)])
    files = [p for p in (tmp_path / "samples").rglob("*") if p.is_file() and p.name != "thinned.jsonl"]
    assert sum(p.stat().st_size for p in files) <= 0.05 * 2**20
    steps = [r["step"] for r in load_steps(tmp_path)]
    assert steps[-1] == 7 and steps == list(range(steps[0], 8)) and steps[0] > 1
    removed = [s for line in (tmp_path / "samples" / "thinned.jsonl").read_text().splitlines()
               for s in json.loads(line)["removed_steps"]]  # fmt: skip
    assert removed == list(range(1, steps[0]))
    assert len(list((tmp_path / "samples" / "crops").glob("*.png"))) == len(steps)  # unreferenced crops removed


def test_pipeline_writes_samples_of_each_training_batch(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    cfg = RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", batch_groups=1, keep_band=[0.01, 0.99])
    scorer = RewardScorer(cfg)
    right, wrong = QA.answer, "Beijing"
    scorer.score(group(cache, "v", [right]))  # validation: nothing
    assert not (tmp_path / "seg" / "samples").exists()
    out = scorer.score(group(cache, "a", [right, wrong, wrong]) + group(cache, "b", [wrong] * 3))
    recs = load_steps(tmp_path / "seg")
    assert [r["step"] for r in recs] == [1]
    by = {g["qid"]: g for g in recs[0]["groups"]}
    assert by["a"]["trained"] and not by["b"]["trained"]
    rewards = [b.overall for b, _ in out[:3]]
    assert sorted(r["advantage"] for r in by["a"]["responses"]) == pytest.approx(sorted(grpo_advantages(rewards)))
    r0 = by["a"]["responses"][0]
    assert r0["answer"] == right and r0["citations"][0]["text"] and r0["citations"][0]["page"] >= 1
    assert r0["reward"]["overall"] == pytest.approx(max(rewards)) and "keep" in r0


def test_a_question_in_two_filter_attempts_is_two_groups_with_their_own_advantages(cache, tmp_path, monkeypatch):
    """EasyR1's online filter generates the batch again when too few groups pass the keep band; a question drawn in
    both attempts is two GRPO groups (two uids), each normalised on its own, as compute_advantage does."""
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "seg"))
    cfg = RewardConfig(cache_dir=str(cache.path.parent), judge="lexical", batch_groups=2, keep_band=[0.01, 0.99],
                       samples_groups=4)  # fmt: skip
    scorer = RewardScorer(cfg)
    right, wrong = QA.answer, "Beijing"
    first = scorer.score(group(cache, "a", [right, wrong, wrong]) + group(cache, "b", [wrong] * 3))
    assert not (tmp_path / "seg" / "samples").exists()  # one group passed: EasyR1 generates another attempt
    second = scorer.score(group(cache, "a", [right, right, wrong]) + group(cache, "b", [wrong] * 3))
    (rec,) = load_steps(tmp_path / "seg")
    by = {(g["attempt"], g["qid"]): g for g in rec["groups"]}
    assert sorted(by) == [(1, "a"), (1, "b"), (2, "a"), (2, "b")]
    for attempt, out in ((1, first), (2, second)):
        rewards = [b.overall for b, _ in out[:3]]
        got = sorted(r["advantage"] for r in by[(attempt, "a")]["responses"])
        assert got == pytest.approx(sorted(grpo_advantages(rewards)))  # not normalised over both attempts' six
        assert by[(attempt, "a")]["trained"] and not by[(attempt, "b")]["trained"]


def test_wandb_table_one_row_per_response_and_one_image_column_per_crop(tmp_path):
    w = SampleWriter(tmp_path, groups=1)
    w.write(1, [fake("q", 1.0, 0.5, [b"png1", b"png2"]), fake("q", 0.0, 0.5, [b"png3"]), fake("q", 0.5, 0.5)])
    rec = load_steps(tmp_path)[0]
    columns, rows = wandb_table(tmp_path, rec, step=7)
    assert columns == [*WANDB_COLUMNS, "crop_1", "crop_2"] and all(len(r) == len(columns) for r in rows)
    by_adv = sorted(rows, key=lambda r: -r[5])
    assert [r[0] for r in rows] == [7, 7, 7]  # the trainer's step, not the segment's batch number
    assert [Path(c).read_bytes() for c in by_adv[0][-2:]] == [b"png1", b"png2"]
    assert by_adv[1][-2:] == [None, None] and Path(by_adv[2][-2]).read_bytes() == b"png3" and by_adv[2][-1] is None
    _, imaged = wandb_table(tmp_path, rec, image=lambda p: ("image", p))
    assert {c[0] for r in imaged for c in r[-2:] if c is not None} == {"image"}


def test_wandb_samples_log_nothing_without_a_folder_or_a_new_batch(tmp_path):
    """The trainer-side logger (tests/easyr1/test_easyr1_batch.py logs through it into a real offline wandb run)
    asks wandb nothing when there is no samples folder or no batch file (wandb is not installed in .venv)."""
    assert WandbSamples(None).log_new(1) is None
    assert WandbSamples(tmp_path).log_new(1) is None


def test_the_judges_reply_is_kept_with_its_scores_and_reaches_the_sample(tmp_path):
    # what the samples browser shows beside the scores: the reply as the judge wrote it
    from reward.judge import JudgeRequest, JudgeScores
    from reward.judge_http import HttpJudge
    from reward.samples import SampleWriter
    from tests.support.openai_server import Reply, ScriptedOpenAIServer, chat_completion

    text = 'The quote is on page 2.\n{"answer": 5, "relevance": 4, "coverage": 3}'
    with ScriptedOpenAIServer(handler=lambda path, body, n: Reply(json=chat_completion(text))) as srv:
        (s,) = HttpJudge(srv.url, "judge-model", retries=0, timeout_s=10).score_batch(
            [JudgeRequest("q", "gold", "answer", ())]
        )
    assert s == JudgeScores(5, 4, 3) and s.reply == text
    w = SampleWriter(tmp_path, groups=1)
    rows = [{**fake("q", 1.0, 0.5), "reply": s.reply}, fake("q", 0.0, 0.5)]
    w.write(1, rows)
    (g,) = load_steps(tmp_path)[0]["groups"]
    assert [r.get("reply") for r in g["responses"]] == [text, None]
