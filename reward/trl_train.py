"""``python -m reward trl-train``: GRPO with the quote reward on TRL (``GRPOTrainer``), on a CPU or on GPUs.

    python -m reward trl-train --recipe recipes/qwen3vl_8b_trl.yaml --out RUN_DIR [key.path=value ...]
    accelerate launch -m reward trl-train --recipe recipes/qwen3vl_8b_trl.yaml --out RUN_DIR   # several GPUs

It reads what the EasyR1 recipe reads: ``data_prep longdocurl``'s ``train.parquet`` (``prompt``: one ``<image>``
per page, then the question; ``images``: page paths relative to ``data.image_dir``; ``answer``: the packed ground
truth), renders each prompt with the same format prompt (``recipes/prompts/language_interface.jinja``) into one
user turn whose page images come first, as EasyR1 builds it, and scores with :class:`reward.trl_reward.QuoteReward`
(the ``reward`` section: :class:`reward.config.RewardConfig`'s keys). The recipe's ``grpo`` section is TRL's
``GRPOConfig``; ``lora`` is PEFT's ``LoraConfig`` (rank 64, alpha 64 on the language model's linear layers, never
the vision tower); ``model`` names the policy. ``docs/training-trl.md`` lists what differs from the EasyR1 recipe.

Outputs in ``RUN_DIR``: ``checkpoints/checkpoint-N/`` (TRL's: the LoRA adapter ``adapter_model.safetensors`` +
``adapter_config.json``, optimizer, scheduler, RNG and trainer state; ``--resume`` continues from the newest),
``adapter/`` (the final adapter, what ``eval infer --lora`` serves), ``run_log.jsonl`` (one record per step in the
merged run-log format that ``python -m launch.runlog plot RUN_DIR`` draws: ``reward.*``, ``train_batch.*``,
``trl.*``), ``reward_counters.jsonl`` and ``samples/`` (the reward's, with TRL's advantages: ``python -m
launch.samples_page RUN_DIR``). Progress is one line per step on the terminal; wandb only with ``--wandb``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m reward trl-train")

import argparse
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InputError
from data_prep.validate import bounded_int
from data_prep.validate import seed as seed_type

RECIPE = "qwen3vl_8b_trl.yaml"
"""The recipe shipped with the package (``recipes/``)."""
RUN_LOG = "run_log.jsonl"
CHECKPOINTS = "checkpoints"
ADAPTER = "adapter"
IMAGE_PLACEHOLDER = "<image>"


# ----------------------------------------------------------------------------------------------- data
def prompt_messages(prompt: str, n_images: int, template: str | None) -> list[dict]:
    """The conversational prompt of one parquet row: the format prompt rendered around ``prompt`` as EasyR1 does,
    the ``n_images`` ``<image>`` placeholders (which ``data_prep longdocurl`` puts first) removed; TRL puts the
    images before the text of the user turn, where EasyR1 puts them.

    >>> prompt_messages("<image><image>What?", 2, None)
    [{'role': 'user', 'content': 'What?'}]
    """
    from data_prep.longdocurl import render_prompt_text

    head = IMAGE_PLACEHOLDER * n_images
    if not prompt.startswith(head) or IMAGE_PLACEHOLDER in prompt[len(head) :]:
        raise InputError(
            f"prompt {prompt[:60]!r}: expected its {n_images} {IMAGE_PLACEHOLDER} placeholders first and none after "
            "(the data_prep longdocurl format)"
        )
    text = prompt[len(head) :]
    return [{"role": "user", "content": render_prompt_text(template, text) if template is not None else text}]


def read_rows(parquet: str | Path, image_dir: str | Path | None = None) -> list[dict]:
    """The rows of a ``data_prep longdocurl`` parquet, image paths made absolute (relative ones from
    ``image_dir``, default the parquet's folder). Raises :class:`InputError` naming the file and what is wrong."""
    import pyarrow.parquet as pq

    parquet = Path(parquet)
    if not parquet.is_file():
        raise InputError(f"{parquet}: training parquet not found (write it with python -m data_prep longdocurl)")
    try:
        rows = pq.read_table(parquet).to_pylist()
    except Exception as e:  # pyarrow raises many kinds for a file that is not parquet
        raise InputError(f"{parquet}: not a readable parquet file ({e})") from None
    need = ("prompt", "images", "answer")
    if rows and (missing := [k for k in need if k not in rows[0]]):
        raise InputError(f"{parquet}: missing column(s) {', '.join(missing)} (expected {', '.join(need)})")
    if not rows:
        raise InputError(f"{parquet}: no rows")
    base = Path(image_dir) if image_dir else parquet.parent
    for i, r in enumerate(rows):
        paths = [Path(p) if Path(p).is_absolute() else base / p for p in (r["images"] or [])]
        for p in paths:
            if not p.is_file():
                raise InputError(f"{parquet}: row {i}: page image {p} not found (data.image_dir is {base})")
        r["images"] = [str(p) for p in paths]
    return rows


def training_dataset(rows: list[dict], template: str | None):
    """A ``datasets.Dataset`` TRL reads: ``prompt`` (conversational), ``images`` (decoded lazily from the paths),
    ``answer`` and the other columns (they reach the reward as lists)."""
    import datasets

    out = []
    for r in rows:
        out.append({**r, "prompt": prompt_messages(r["prompt"], len(r["images"]), template)})
    ds = datasets.Dataset.from_list(out)
    return ds.cast_column("images", datasets.List(datasets.Image()))


# ----------------------------------------------------------------------------------------------- settings
@dataclass
class TrlRun:
    """Everything a run needs, from a recipe (:func:`from_recipe`) or built directly (the demo, the tests)."""

    out: Path
    model_path: str
    rows: list[dict]
    reward: dict
    grpo: dict = field(default_factory=dict)
    lora: dict = field(default_factory=dict)
    format_prompt: str | None = None
    """The format prompt's text (jinja), or None for the bare prompt."""
    min_pixels: int | None = None
    max_pixels: int | None = None
    dtype: str = "float32"
    gradient_checkpointing: bool = False
    wandb: bool = False
    resume: bool = False
    quiet: bool = False
    callbacks: list = field(default_factory=list)
    """Extra ``transformers.TrainerCallback`` objects."""


def _reader_value(recipe: dict, dotted: str, default=None):
    from recipes.reader import dig

    return dig(recipe, dotted, default)


def from_recipe(args: argparse.Namespace) -> TrlRun:
    from recipes import prompt_path, recipe_path
    from recipes.reader import Unset, load_recipe

    recipe = load_recipe(args.recipe or recipe_path(RECIPE), args.overrides, resolve=True)

    def value(key, default=None):
        v = _reader_value(recipe, key, default)
        if isinstance(v, Unset):
            raise InputError(f"recipe {args.recipe or RECIPE}: {key} needs the environment variable {v.name}, unset")
        return v

    train_files = value("data.train_files")
    if not train_files:
        raise InputError("recipe: data.train_files is required (data_prep longdocurl's train.parquet)")
    fmt = value("data.format_prompt")
    template = None
    if fmt:
        p = Path(fmt)
        if not p.is_file():
            p = prompt_path(Path(fmt).name)
        from core.io import read_text

        template = read_text(p)
    grpo = dict(value("grpo", {}) or {})
    if args.max_steps:
        grpo["max_steps"] = args.max_steps
    if args.seed is not None:
        grpo["seed"] = args.seed
    model = value("model", {}) or {}
    return TrlRun(
        out=Path(args.out),
        model_path=str(value("model.model_path")),
        rows=read_rows(train_files, value("data.image_dir")),
        # a reward setting whose variable is unset is left out: RewardConfig's default (or its own error) applies
        reward={k: v for k, v in (value("reward", {}) or {}).items() if not isinstance(v, Unset)},
        grpo=grpo,
        lora=dict(value("lora", {}) or {}),
        format_prompt=template,
        min_pixels=value("data.min_pixels"),
        max_pixels=value("data.max_pixels"),
        dtype=str(model.get("dtype", "float32")),
        gradient_checkpointing=bool(model.get("gradient_checkpointing", False)),
        wandb=bool(args.wandb),
        resume=bool(args.resume),
    )


LORA_DEFAULTS = {"r": 64, "lora_alpha": 64, "target_modules": "all-linear", "exclude_modules": r".*visual.*",
                 "lora_dropout": 0.0}  # fmt: skip
"""The EasyR1 recipe's adapter: rank 64, alpha 64, every linear layer of the language model, none in the vision
tower (PEFT's ``all-linear`` leaves out the LM head)."""
_LORA_NAMES = {"rank": "r", "alpha": "lora_alpha", "dropout": "lora_dropout"}


def lora_config(settings: dict):
    from peft import LoraConfig

    kw = {**LORA_DEFAULTS, **{_LORA_NAMES.get(k, k): v for k, v in settings.items()}}
    return LoraConfig(task_type="CAUSAL_LM", **kw)


def grpo_config(run: TrlRun):
    """TRL's ``GRPOConfig`` of the recipe's ``grpo`` section over this module's defaults (one log line per step,
    checkpoints every 4 steps in ``RUN_DIR/checkpoints``, the CPU when no GPU is seen, wandb only when asked)."""
    from trl import GRPOConfig

    g = dict(run.grpo)
    g.setdefault("per_device_train_batch_size", int(g.get("num_generations", 5)))
    kw = dict(
        output_dir=str(run.out / CHECKPOINTS),
        logging_steps=1,
        save_strategy="steps",
        report_to=["wandb"] if run.wandb else [],
        use_cpu=not _has_gpu(),
        disable_tqdm=True,
        remove_unused_columns=False,
        bf16=run.dtype == "bfloat16",
        gradient_checkpointing=run.gradient_checkpointing,
    )
    kw.update(g)
    if kw.get("save_steps") is None:
        kw["save_steps"] = 4
    return GRPOConfig(**kw)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# ----------------------------------------------------------------------------------------------- the trainer
def _trainer_class():
    from trl import GRPOTrainer

    class SampledGRPOTrainer(GRPOTrainer):
        """TRL's ``GRPOTrainer`` that hands the advantages it computed for each scored generation batch to the
        quote reward's samples writer (:meth:`reward.trl_reward.QuoteReward.write_samples`)."""

        def _generate(self, prompts):
            t0 = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                self._rollout_s = time.perf_counter() - t0

        def _generate_and_score_completions(self, inputs):
            t0 = time.perf_counter()
            self._rollout_s = 0.0
            out = super()._generate_and_score_completions(inputs)
            if self.model.training:
                reward_s = 0.0
                for fn in self.reward_funcs:
                    if getattr(fn, "defer_samples", False) and self.accelerator.is_main_process:
                        fn.write_samples(out["advantages"].detach().float().cpu().tolist())  # its own slice
                    stats = getattr(fn, "last_stats", None)
                    reward_s += float(stats.seconds.get("total", 0.0)) if stats is not None else 0.0
                # seconds of this generation batch: rollout (generate), reward, and the rest of scoring (logprobs)
                metrics = self._metrics["train"]
                metrics["time/rollout_s"].append(self._rollout_s)
                metrics["time/reward_s"].append(reward_s)
                metrics["time/generate_and_score_s"].append(time.perf_counter() - t0)
            return out

    return SampledGRPOTrainer


class RunLog:
    """``RUN_DIR/run_log.jsonl`` in the merged run-log format (:mod:`launch.runlog`): one record per optimizer step
    (``step``, ``segment``, ``reward.*`` the quote reward's means, ``train_batch`` the reward's training-batch
    record, ``trl.*`` TRL's own metrics), each step once: a resumed run drops the records after its resume step."""

    def __init__(self, run_dir: Path, resume_step: int, segment: str) -> None:
        from core.io import atomic_write_jsonl

        self.path = run_dir / RUN_LOG
        self.segment = segment
        kept = []
        if self.path.exists():
            from core.io import read_jsonl

            kept = [r for _, r in read_jsonl(self.path) if isinstance(r.get("step"), int) and r["step"] <= resume_step]
        atomic_write_jsonl(self.path, kept)
        self.records = kept

    def add(self, record: dict) -> None:
        from core.io import atomic_write_jsonl

        self.records.append({**record, "segment": self.segment})
        atomic_write_jsonl(self.path, self.records)


def _callback(reward_fn, log: RunLog, max_steps: int, quiet: bool, per_step: list):
    from transformers import TrainerCallback

    prefix = "quote_reward/"

    class Progress(TrainerCallback):
        def __init__(self) -> None:
            self.t = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if not logs or "loss" not in logs or not state.is_world_process_zero:
                return  # one writer of the run log: the main process (its metrics are gathered over all)
            step = state.global_step
            parts = {k[len(prefix) :]: v for k, v in logs.items() if k.startswith(prefix)}
            trl = {k.replace("/", "."): v for k, v in logs.items() if not k.startswith(prefix)}
            record = {"step": step, "reward": parts, "trl": trl}
            batch = reward_fn.last_batch
            if batch is not None:
                record["train_batch"] = {k: v for k, v in batch.items() if k not in ("batch", "time")}
            log.add(record)
            dt, self.t = time.perf_counter() - self.t, time.perf_counter()
            per_step.append(record)
            if not quiet:
                print(
                    f"step {step}/{max_steps}  reward {parts.get('overall', float('nan')):.3f}  "
                    f"format {parts.get('format_ok', float('nan')):.2f}  answer {parts.get('answer', float('nan')):.2f}"
                    f"  kl {logs.get('kl', 0.0):.4f}  loss {logs['loss']:.4f}  {dt:.1f} s",
                    flush=True,
                )

    return Progress()


def _last_checkpoint(folder: Path) -> tuple[Path | None, int]:
    if not folder.is_dir():
        return None, 0
    best = None, 0
    for p in folder.glob("checkpoint-*"):
        try:
            n = int(p.name.split("-")[1])
        except ValueError:
            continue
        if (p / "trainer_state.json").is_file() and n > best[1]:
            best = p, n
    return best


def train(run: TrlRun) -> dict:
    """Run GRPO; returns ``{"steps": [run-log records of this start], "adapter": path, "resume_step": n,
    "seconds": s}``."""
    from reward.pipeline import METRICS_DIR_ENV
    from reward.trl_reward import QuoteReward

    t0 = time.perf_counter()
    out = run.out
    out.mkdir(parents=True, exist_ok=True)
    ckpt, resume_step = _last_checkpoint(out / CHECKPOINTS)
    if run.resume and ckpt is None:
        raise InputError(f"--resume: no checkpoint under {out / CHECKPOINTS}")
    if not run.resume and ckpt is not None:
        raise InputError(f"{out}: holds checkpoints up to step {resume_step}; pass --resume or use a new --out")
    resume_step = resume_step if run.resume else 0

    args = grpo_config(run)
    n = args.num_generations
    groups_per_call = max(1, args.per_device_train_batch_size * args.steps_per_generation // n)
    reward_fn = QuoteReward(**{"batch_groups": groups_per_call, **run.reward})
    reward_fn.defer_samples = True
    old_metrics_dir = os.environ.get(METRICS_DIR_ENV)
    os.environ[METRICS_DIR_ENV] = str(out)  # the reward's counters and samples go to the run folder
    try:
        return _train(run, args, reward_fn, resume_step, ckpt, t0)
    finally:
        if old_metrics_dir is None:
            os.environ.pop(METRICS_DIR_ENV, None)
        else:
            os.environ[METRICS_DIR_ENV] = old_metrics_dir


def _train(run: TrlRun, args, reward_fn, resume_step: int, ckpt, t0: float) -> dict:
    import torch
    from transformers import Qwen3VLForConditionalGeneration, set_seed

    from reward.tiny_policy import load_processor

    out = run.out
    n = args.num_generations
    set_seed(args.seed)  # LoRA's initialisation and everything else random before TRL seeds its own
    processor = load_processor(run.model_path, run.min_pixels, run.max_pixels)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[run.dtype]
    model = Qwen3VLForConditionalGeneration.from_pretrained(run.model_path, dtype=dtype)
    for name, p in model.named_parameters():  # the vision tower stays frozen, as in the EasyR1 recipe
        if ".visual." in f".{name}":
            p.requires_grad_(False)
    dataset = training_dataset(run.rows, run.format_prompt)

    per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps // n
    max_steps = args.max_steps if args.max_steps and args.max_steps > 0 else math.ceil(
        len(run.rows) * args.num_train_epochs / max(1, per_step)
    )  # fmt: skip
    log = RunLog(out, resume_step, f"trl-{int(time.time())}")
    records: list[dict] = []
    trainer = _trainer_class()(
        model=model,
        reward_funcs=[reward_fn],
        args=args,
        train_dataset=dataset,
        processing_class=processor,
        peft_config=lora_config(run.lora),
        callbacks=[_callback(reward_fn, log, max_steps, run.quiet, records), *run.callbacks],
    )
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the progress line above replaces its dict per step
    trainer.train(resume_from_checkpoint=str(ckpt) if run.resume else None)
    adapter = out / ADAPTER
    trainer.model.save_pretrained(adapter)
    processor.tokenizer.save_pretrained(adapter)
    return {"steps": records, "adapter": adapter, "resume_step": resume_step, "seconds": time.perf_counter() - t0,
            "trainer": trainer, "reward": reward_fn}  # fmt: skip


# ----------------------------------------------------------------------------------------------- command
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recipe", default=None, help=f"TRL recipe YAML (default: the packaged {RECIPE})")
    parser.add_argument("--out", required=True, help="run folder: checkpoints, adapter, run_log.jsonl, samples")
    parser.add_argument("--max-steps", type=bounded_int(1, 10**9), default=None, help="stop after N steps")
    parser.add_argument("--seed", type=seed_type, default=None, help="overrides grpo.seed")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --out")
    parser.add_argument("--wandb", action="store_true", help="also log to wandb (WANDB_* settings apply)")
    parser.add_argument("overrides", nargs="*", help="recipe overrides key.path=value (e.g. grpo.learning_rate=1e-4)")


def run(args: argparse.Namespace) -> int:
    result = train(from_recipe(args))
    steps = result["steps"]
    rewards = [s["reward"].get("overall") for s in steps if s["reward"].get("overall") is not None]
    summary = f"{len(steps)} steps in {result['seconds']:.0f} s"
    if rewards:
        k = max(1, len(rewards) // 5)
        summary += f"; mean reward first {k}: {sum(rewards[:k]) / k:.3f}, last {k}: {sum(rewards[-k:]) / k:.3f}"
    print(f"{summary}; adapter: {result['adapter']}; run log: {Path(args.out) / RUN_LOG}")
    return 0
