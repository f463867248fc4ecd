"""The training step of ``make demo``: a real GRPO run (TRL, :mod:`reward.trl_train`) of a tiny Qwen3-VL policy on
the sample document, with the quote reward (lexical judge).

1. the sample document's questions become a training set in ``data_prep longdocurl``'s format (``train.parquet``:
   ``prompt`` with one ``<image>`` per page, ``images``, ``answer`` the packed ground truth) with small page images;
2. a tiny random policy is made offline (:mod:`reward.tiny_policy`) and warm-started with TRL's ``SFTTrainer`` on
   well-formed responses (the gold response ``gold_share`` of the time, else another question's answer and quotes):
   a random policy writes no JSON, scores 0, and GRPO cannot move it;
3. GRPO with LoRA for a few dozen steps; the reward per step is printed, and the run folder holds ``run_log.jsonl``
   (``python -m launch.runlog plot RUN_DIR`` draws its curves page) and ``samples/`` with the page
   (``RUN_DIR/samples.html``).

Every random choice (the policy's weights, the warm-start data and order, sampling, LoRA's initialisation) follows
``seed``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from data_prep.groundtruth import GroundTruth, pack_ground_truth


@dataclass
class DemoSettings:
    """Sizes of the demo's training (small enough for about 2 minutes on 2 cores)."""

    seed: int = 0
    questions: int = 4
    """Questions of the sample document trained on (1..4)."""
    max_pixels: int = 4 * 32 * 32
    """Page image area: 4 image tokens a page."""
    sft_steps: int = 160
    sft_lr: float = 1e-2
    sft_batch: int = 4
    gold_share: float = 0.4
    """Share of gold responses in the warm-start data."""
    steps: int = 30
    num_generations: int = 4
    lr: float = 2e-3
    lora_rank: int = 16
    max_completion_length: int = 64
    format_prompt: bool = False
    """Render the recipe's format prompt around each question (as the 8B recipe does); off, the bare question: the
    warm-start teaches the tiny policy the format, and a step is several times shorter."""


def sample_questions(n: int):
    from data_prep.sample import SAMPLE_FACTS

    return list(SAMPLE_FACTS.qa[:n])


def write_sample_set(cached, out: str | Path, questions: int = 4, max_pixels: int = 8 * 32 * 32) -> Path:
    """``out/train.parquet`` and ``out/images/`` for the sample document's first ``questions`` questions, in
    ``data_prep longdocurl``'s format (every page of the document is each question's window); returns the parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from core.io import atomic_path
    from data_prep.longdocurl import build_prompt

    out = Path(out)
    (out / "images").mkdir(parents=True, exist_ok=True)
    doc = cached.open_pdf()
    try:
        images = []
        for page in range(1, cached.n_pages + 1):
            rel = f"images/p{page}_{max_pixels}px.png"
            doc.render_page(page, max_pixels=max_pixels).convert("RGB").save(out / rel)
            images.append(rel)
    finally:
        doc.close()
    rows = []
    for i, qa in enumerate(sample_questions(questions)):
        gt = GroundTruth(f"sample-q{i}", cached.key, qa.question, qa.answer, (1, cached.n_pages))
        rows.append({"prompt": build_prompt(len(images), qa.question), "images": images,
                     "answer": pack_ground_truth(gt), "doc_key": cached.key, "n_images": len(images)})  # fmt: skip
    path = out / "train.parquet"
    with atomic_path(path) as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    return path


def warm_rows(rows: list[dict], template: str | None, per_question: int, gold_share: float, seed: int) -> list[dict]:
    """The warm-start's prompt-completion rows: ``per_question`` well-formed responses to each question of ``rows``
    (:func:`reward.tiny_policy.warmup_responses`: its gold response or another question's of ``rows``), shuffled
    with ``seed``."""
    from PIL import Image

    from data_prep.groundtruth import unpack_ground_truth
    from data_prep.sample import SAMPLE_FACTS
    from reward.tiny_policy import warmup_responses
    from reward.trl_train import prompt_messages

    questions = [unpack_ground_truth(r["answer"]).question for r in rows]
    facts = {qa.question: (qa.answer, [f.text for f in SAMPLE_FACTS.evidence(qa)]) for qa in SAMPLE_FACTS.qa}
    facts = {q: facts[q] for q in questions}
    rng = random.Random(seed)
    out = []
    for r, question in zip(rows, questions, strict=True):
        others = [c for q, c in facts.items() if q != question]
        pages = [Image.open(p).convert("RGB") for p in r["images"]]
        for text in warmup_responses(facts[question], others, per_question, gold_share, rng):
            out.append({"prompt": prompt_messages(r["prompt"], len(r["images"]), template),
                        "completion": [{"role": "assistant", "content": text}], "images": pages})  # fmt: skip
    rng.shuffle(out)
    return out


def texts_of(cached) -> list[str]:
    """What the policy's tokenizer is trained on besides the prompts: the document's block texts, the questions
    and answers."""
    return [b.text for b in cached.blocks] + [t for qa in sample_questions(4) for t in (qa.question, qa.answer)]


def warm_policy(cached, data_dir: Path, out: Path, s: DemoSettings, log=None) -> Path:
    """A tiny policy for ``cached`` (:func:`reward.tiny_policy.write_policy`) warm-started on the sample set in
    ``data_dir``; returns the warm checkpoint ``out/warm``."""
    from recipes import read_prompt
    from reward.tiny_policy import warm_start, write_policy
    from reward.trl_train import read_rows

    rows = read_rows(Path(data_dir) / "train.parquet")
    template = read_prompt("language_interface.jinja") if s.format_prompt else None
    base = write_policy(out / "policy_random", texts_of(cached), seed=s.seed)
    per_question = max(4, s.sft_steps * s.sft_batch // max(1, len(rows)) // 2)
    sft = warm_rows(rows, template, per_question, s.gold_share, s.seed)
    return warm_start(base, sft, out / "warm", s.sft_steps, s.seed, s.sft_lr, s.sft_batch, log=log)


def trl_run(cached, data_dir: Path, model: Path, out: Path, s: DemoSettings, lr: float | None = None, quiet=False):
    """The :class:`reward.trl_train.TrlRun` of the demo (lexical judge and resolver; ``lr`` overrides ``s.lr``)."""
    from recipes import read_prompt
    from reward.trl_train import TrlRun, read_rows

    rows = read_rows(Path(data_dir) / "train.parquet")
    return TrlRun(
        out=Path(out),
        model_path=str(model),
        rows=rows,
        reward={
            "cache_dir": str(Path(cached.path).parent),
            "judge": "lexical",
            "resolver": "lexical",
            "samples_groups": 2,
        },  # fmt: skip
        grpo={
            "num_generations": s.num_generations,
            "per_device_train_batch_size": s.num_generations * len(rows),
            "max_steps": s.steps,
            "learning_rate": s.lr if lr is None else lr,
            "lr_scheduler_type": "constant",
            "max_completion_length": s.max_completion_length,
            "beta": 0.01,  # the recipe's KL coefficient
            "save_steps": max(1, s.steps),
            "seed": s.seed,
            "data_seed": s.seed,
            "temperature": 1.0,
        },
        lora={"rank": s.lora_rank, "alpha": 2 * s.lora_rank},
        format_prompt=read_prompt("language_interface.jinja") if s.format_prompt else None,
        max_pixels=s.max_pixels,
        quiet=quiet,
    )


def run_trl_demo(cached, out: str | Path, settings: DemoSettings | None = None) -> dict:
    """Warm-start and train on the sample document under ``out``; returns :func:`reward.trl_train.train`'s result
    with ``samples_page`` added."""
    from rich.console import Console

    from eval.samples_page import write_samples_page
    from reward.trl_train import train

    s = settings or DemoSettings()
    out = Path(out)
    console = Console()
    data = out / "data"
    write_sample_set(cached, data, s.questions, s.max_pixels)
    console.print(f"warm-start: {s.sft_steps} supervised steps on well-formed responses (gold {s.gold_share:.0%})")
    model = warm_policy(
        cached, data, out, s, log=lambda step, loss: console.print(f"  sft step {step}: loss {loss:.3f}")
    )
    console.print(
        f"GRPO: {s.steps} steps, {s.questions} questions x {s.num_generations} responses, LoRA r{s.lora_rank}"
    )
    result = train(trl_run(cached, data, model, out / "run", s))
    result["samples_page"] = write_samples_page(out / "run")
    return result
