"""``python -m eval infer``: predictions for a gold file from a vLLM-served policy (:mod:`eval.infer`), or from the
prefill attention (``--interface attention``, :mod:`eval.attention`)."""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run by its path: its imports need the package
    raise SystemExit("error: run this from the repository as: python -m eval infer")

import argparse
import time
from pathlib import Path

from core.errors import InputError
from data_prep.document import Document
from data_prep.shards import Shard
from eval.infer import (
    COORDINATE_PROMPTS,
    PROMPT_ROLES,
    PROMPTS_DIR,
    InferConfig,
    PromptTemplate,
    VLLMGenerator,
    chat_template_kwargs_from,
    pdf_locator,
    run_inference,
)
from eval.schemas import read_gold


def make_template(args: argparse.Namespace):
    """The prompt of ``eval infer`` (module docstring): CiteVQA's for an interface that needs it (the coordinate
    interface) unless ``--coordinate-prompt ours``, else our template with ``--prompt-role``."""
    from eval.interfaces import INTERFACES

    if INTERFACES.needs(args.interface, "citevqa_prompt") and args.coordinate_prompt == "citevqa":
        from eval.citevqa import CiteVQAInferPrompt

        return CiteVQAInferPrompt(args.citevqa_dir)
    return PromptTemplate(args.interface, args.prompts_dir, role=args.prompt_role)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="base model folder or name (vLLM)")
    parser.add_argument("--lora", default=None, help="LoRA adapter folder (e.g. global_step_144/actor/lora_adapter)")
    parser.add_argument("--gold", type=Path, required=True, help="gold JSONL")
    from eval.interfaces import INTERFACES

    parser.add_argument(
        "--interface", required=True, choices=INTERFACES.names(),
        help="; ".join(f"{e['name']}: {e['summary']}" for e in INTERFACES.describe()),
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="predictions JSONL (appended; resumable)")
    parser.add_argument("--pdf-dir", type=Path, default=None, help="folder of <doc_key>.pdf")
    parser.add_argument("--cache-dir", type=Path, default=None, help="or: block cache whose manifests name the PDFs")
    parser.add_argument(
        "--thinking", action="store_true", help="thinking model: 4,096 output tokens and enable_thinking=true"
    )
    parser.add_argument(
        "--chat-template-kwargs",
        default=None,
        metavar="JSON",
        help="variables for the chat template, e.g. '{\"enable_thinking\": false}' (recorded in every prediction)",
    )
    parser.add_argument("--max-tokens", type=int, default=None, help="override the output token limit")
    parser.add_argument("--total-pixels", type=float, default=InferConfig.total_pixels, help="document pixel budget")
    parser.add_argument("--batch-size", type=int, default=InferConfig.batch_size)
    parser.add_argument("--page-labels", action="store_true", help='a "Page N:" text part before each image')
    parser.add_argument("--prompts-dir", type=Path, default=PROMPTS_DIR)
    parser.add_argument(
        "--prompt-role",
        default=None,
        choices=PROMPT_ROLES,
        help="our template's instructions as the system turn (the language interface's default, paper J.2) or all "
        "of it in the user turn (the default of our other templates)",
    )
    parser.add_argument(
        "--coordinate-prompt",
        default="citevqa",
        choices=COORDINATE_PROMPTS,
        help="coordinate interface: CiteVQA's inference prompt from --citevqa-dir (paper J.1, default) or ours",
    )
    parser.add_argument(
        "--citevqa-dir", type=Path, default=None, help="your CiteVQA checkout (its prompts/infer_*.txt)"
    )
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions of the gold file")
    parser.add_argument(
        "--shard",
        metavar="I/N",
        default=None,
        help="job-array task: only the questions of shard I of N (1-based, by a hash of the gold index)",
    )
    from eval.attention import add_arguments as attention_arguments

    attention_arguments(parser)  # --interface attention (MultAttnAttrib, eval/attention.py)


def run(args: argparse.Namespace) -> int:
    from core.io import refuse_output_over_inputs

    refuse_output_over_inputs(args.out, [args.gold])  # predictions are appended: never to the gold file
    from eval.interfaces import INTERFACES

    shard = Shard.parse(args.shard) if args.shard is not None else None
    reads_attention = INTERFACES.needs(args.interface, "attention")  # no vLLM: MultAttnAttrib (eval/attention.py)
    if shard is not None and reads_attention:
        raise InputError(f"--shard is not supported with --interface {args.interface}")
    if reads_attention:
        from eval.attention import run_cli

        return run_cli(args)
    t0 = time.perf_counter()
    golds = read_gold(args.gold)[: args.limit]
    if shard is not None:
        golds = shard.select(golds, key=lambda g: g.key)
    template = make_template(args)  # fail before loading a model
    chat_kwargs = chat_template_kwargs_from(args.chat_template_kwargs, args.thinking)
    cfg = InferConfig(total_pixels=args.total_pixels, batch_size=args.batch_size, page_labels=args.page_labels)
    max_tokens = args.max_tokens or (cfg.thinking_max_tokens if args.thinking else cfg.max_tokens)
    locate = pdf_locator(args.pdf_dir, args.cache_dir)
    max_pages = 1
    for g in golds:
        with Document.open(locate(g)) as d:
            max_pages = max(max_pages, d.n_pages)
    gen = VLLMGenerator(
        args.model,
        args.lora,
        max_tokens=max_tokens,
        temperature=cfg.temperature,
        max_images=max_pages,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        chat_template_kwargs=chat_kwargs,
    )
    meta = {"model": args.model, "lora": args.lora, "max_tokens": max_tokens, "thinking": bool(args.thinking),
            "chat_template_kwargs": chat_kwargs, "prompt": template.describe()}  # fmt: skip
    counts = run_inference(golds, gen, args.out, args.interface, locate, cfg, template, meta)
    print(
        f"{counts['generated']} generated, {counts['skipped']} already done, {counts['total']} questions"
        f"{f' of shard {shard}' if shard else ''} -> {args.out} "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    return 0
