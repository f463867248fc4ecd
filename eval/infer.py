"""``python -m eval infer``: generate predictions for a gold file with a policy checkpoint (vLLM, on a GPU).

The protocol of the paper (Section 4, Appendix A): every page of the document, rendered at
``min(1e6, total_pixels / n_pages)`` pixels (aspect ratio kept) and sent as JPEG, in page order; greedy
decoding; 1,536 output tokens, 4,096 for thinking models (``--thinking``, which also passes
``enable_thinking: true`` to the chat template). ``--chat-template-kwargs JSON`` hands further variables to the
model's chat template (vLLM ``LLM.chat(..., chat_template_kwargs=...)``, e.g. ``{"enable_thinking": false}`` for a
hybrid model that thinks by default); what was sent is recorded in every prediction line (``chat_template_kwargs``,
``max_tokens``, ``thinking``, ``prompt``), and what vLLM reports of each generation in ``usage`` (``prompt_tokens``,
page images included, ``completion_tokens`` and ``finish_reason``: ``length`` for a reply cut at ``max_tokens``).

Prompts (paper Appendix J):

* **Language interface** (J.2, "language-interface system prompt"): ``recipes/prompts/language_interface.jinja``
  (a Jinja template rendered with ``content`` and ``question``, ``content`` being EasyR1's name, so training and
  evaluation share the file, plus ``n_pages`` and ``interface``). By default (``--prompt-role system``) the
  instructions, rendered with an empty question, are the **system** turn and the user turn is the page images
  followed by the question. ``--prompt-role user`` puts the whole rendered template (question first) in the user
  turn after the images (our earlier protocol, and how EasyR1's ``format_prompt`` sends it in training; the
  default of our other templates). A template with ``=== system ===`` / ``=== user ===`` sections is split as
  written, whatever the role.
* **Coordinate interface** (J.1): CiteVQA's own inference prompt from your CiteVQA checkout (``--citevqa-dir`` or
  ``$QUOTECITE_CITEVQA_DIR``; :class:`eval.citevqa.CiteVQAInferPrompt`): ``prompts/infer_system.txt`` as the
  system turn, the page images and ``prompts/infer_user.txt`` with the question as the user turn.
  ``--coordinate-prompt ours`` uses ``recipes/prompts/coordinate_interface.jinja`` like the language prompt.

Resumable: the output JSONL is appended one whole line per finished question (single write, fsync), indices
already in it are skipped, and a partial last line left by a crash is removed on start.

As a job array (``launch/eval_8b.sh`` with ``QUOTECITE_EVAL_SHARDS``): ``--shard I/N`` (1-based,
:mod:`data_prep.shards`) answers only the gold questions whose index hashes into shard I, each task into its own
``--out``; :func:`merge_shards` then joins the N files into one, checking that every question is answered once.

The model runs behind :class:`Generator` (``generate(requests) -> texts``). :class:`VLLMGenerator` is the real
one (vLLM offline ``LLM.chat`` with an optional LoRA adapter; imported only when used; its engine process is
stopped by :meth:`VLLMGenerator.close`, at exit at the latest); tests use a scripted one. A generator with a
``last_usage`` list (one dict or None per request of its last ``generate``) has it recorded as each line's
``usage``.
"""

from __future__ import annotations

import atexit
import base64
import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from PIL import Image
from tqdm import tqdm

from core.errors import InputError
from data_prep.document import Document
from data_prep.shards import Shard
from eval.schemas import Gold, append_jsonl, iter_jsonl, read_gold, repair_jsonl_tail
from recipes import prompts_dir

PROMPTS_DIR = prompts_dir()
"""Where the interface prompts live (``language_interface.jinja``, ``coordinate_interface.jinja``)."""


@dataclass(frozen=True)
class InferConfig:
    """Inference knobs (defaults: the paper's protocol)."""

    total_pixels: float = 200_000_000
    """Pixel budget of a whole document; per page ``min(max_pixels_per_page, total_pixels / n_pages)``. The default
    keeps every page of a 182-page document at the 1 MP cap, as in the paper."""
    max_pixels_per_page: float = 1_000_000
    """Per-page cap (one megapixel)."""
    jpeg_quality: int = 90
    """JPEG quality of the page images."""
    max_tokens: int = 1536
    """Output tokens for non-thinking models."""
    thinking_max_tokens: int = 4096
    """Output tokens for thinking models (reasoning must not truncate the citations)."""
    temperature: float = 0.0
    """0 = greedy decoding."""
    batch_size: int = 8
    """Questions handed to the generator at once (vLLM batches them internally)."""
    page_labels: bool = False
    """Put a text part "Page N:" before each page image (CiteVQA's protocol does not)."""


@dataclass(frozen=True)
class GenRequest:
    """One generation: the system text (or None), the page images (JPEG bytes, page order), the user text."""

    index: Any
    system: str | None
    images: tuple[bytes, ...]
    user_text: str
    page_labels: bool = False

    def messages(self) -> list[dict]:
        """OpenAI-style chat messages with the images as ``data:image/jpeg;base64`` URLs."""
        content: list[dict] = []
        for n, img in enumerate(self.images, 1):
            if self.page_labels:
                content.append({"type": "text", "text": f"Page {n}:"})
            url = "data:image/jpeg;base64," + base64.b64encode(img).decode("ascii")
            content.append({"type": "image_url", "image_url": {"url": url}})
        content.append({"type": "text", "text": self.user_text})
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        return [*msgs, {"role": "user", "content": content}]


def chat_template_kwargs_from(text: str | None, thinking: bool) -> dict:
    """The chat-template variables of a run: the JSON object ``text`` (or none), with ``enable_thinking: true`` added
    for a thinking run. InputError when ``text`` is not a JSON object or contradicts ``--thinking``.

    >>> chat_template_kwargs_from('{"enable_thinking": false}', thinking=False)
    {'enable_thinking': False}
    >>> chat_template_kwargs_from(None, thinking=True)
    {'enable_thinking': True}
    """
    kwargs: dict = {}
    if text:
        try:
            kwargs = json.loads(text)  # a command-line value: its errors are said below with their position
        except json.JSONDecodeError as e:
            raise InputError(
                f"--chat-template-kwargs is not valid JSON ({e.msg} at character {e.pos}): {text!r}"
            ) from None
        if not isinstance(kwargs, dict):
            raise InputError(f"--chat-template-kwargs must be a JSON object, got {type(kwargs).__name__}: {text!r}")
    if thinking:
        if kwargs.get("enable_thinking", True) is not True:
            raise InputError(
                f"--thinking sets enable_thinking true but --chat-template-kwargs sets it to "
                f"{json.dumps(kwargs['enable_thinking'])}; drop one of them"
            )
        kwargs = {**kwargs, "enable_thinking": True}
    return kwargs


class Generator(Protocol):
    """Anything that turns requests into response texts, one per request, in order."""

    def generate(self, requests: Sequence[GenRequest]) -> list[str]: ...


# ---------------------------------------------------------------------------------------------- prompts
PROMPT_ROLES: tuple[str, ...] = ("system", "user")
"""Where a template without sections goes (``--prompt-role``)."""
DEFAULT_PROMPT_ROLES: dict[str, str] = {"language": "system"}
"""The default role per interface: the language prompt is a system prompt (paper J.2); any other template of ours
(``--coordinate-prompt ours``, a rival system's) stays in the user turn."""
COORDINATE_PROMPTS: tuple[str, ...] = ("citevqa", "ours")
"""``--coordinate-prompt``: CiteVQA's inference prompt (default, the paper's J.1) or our template."""


class PromptTemplate:
    """``recipes/prompts/<interface>_interface.jinja`` split into its system and user parts (module docstring)."""

    def __init__(self, interface: str, prompts_dir: str | Path = PROMPTS_DIR, role: str | None = None) -> None:
        import jinja2

        role = role or DEFAULT_PROMPT_ROLES.get(interface, "user")
        if role not in PROMPT_ROLES:
            raise InputError(f"--prompt-role {role!r}: expected one of {PROMPT_ROLES}")
        self.role = role

        path = Path(prompts_dir) / f"{interface}_interface.jinja"
        if not path.is_file():
            raise InputError(
                f"prompt template {path} not found: the {interface} interface needs it "
                f"(recipes/prompts/{interface}_interface.jinja)"
            )
        self.path = path
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
        try:
            self.template = env.from_string(path.read_text(encoding="utf-8"))
        except jinja2.TemplateSyntaxError as e:
            raise InputError(f"{path}:{e.lineno}: template syntax error ({e.message})") from None
        self.interface = interface

    def render(self, question: str, n_pages: int) -> tuple[str | None, str]:
        """``(system or None, user text)`` for one question."""
        import jinja2

        def fill(q: str) -> str:
            try:
                # ``content`` is EasyR1's name for the prompt text in a format_prompt template (the same files).
                return self.template.render(content=q, question=q, n_pages=n_pages, interface=self.interface)
            except jinja2.UndefinedError as e:
                raise InputError(f"{self.path}: template uses an unknown variable ({e.message})") from None

        text = fill(question)
        m = re.search(r"^=== system ===\n(.*?)^=== user ===\n(.*)\Z", text, re.DOTALL | re.MULTILINE)
        if m:
            return m.group(1).strip() or None, m.group(2).strip()
        m = re.search(r"^=== user ===\n(.*)\Z", text, re.DOTALL | re.MULTILINE)
        if m:
            return None, m.group(1).strip()
        if self.role == "system":
            return fill("").strip() or None, question.strip()
        return None, text.strip()

    def describe(self) -> dict:
        """What a prediction line records about the prompt."""
        return {"source": str(self.path), "role": self.role}


# ---------------------------------------------------------------------------------------------- images
def page_images(doc: Document, cfg: InferConfig) -> tuple[bytes, ...]:
    """Every page as JPEG under the per-page budget ``min(max_pixels_per_page, total_pixels / n_pages)``."""
    budget = Document.page_pixel_budget(doc.n_pages, cfg.total_pixels, cfg.max_pixels_per_page)
    out = []
    for p in range(1, doc.n_pages + 1):
        img = doc.render_page(p, max_pixels=budget)
        if img.width * img.height > budget:  # the renderer rounds the bitmap size up: trim to the budget
            s = math.sqrt(budget / (img.width * img.height))
            img = img.resize((max(1, math.floor(img.width * s)), max(1, math.floor(img.height * s))), Image.LANCZOS)
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=cfg.jpeg_quality)
        out.append(buf.getvalue())
    return tuple(out)


# ---------------------------------------------------------------------------------------------- the run
def done_indices(out: Path, interface: str) -> set[str]:
    """Indices already in ``out`` (after removing a partial last line); InputError on another interface."""
    if not out.exists():
        return set()
    dropped = repair_jsonl_tail(out)
    if dropped:
        print(f"{out}: removed a partial last line left by an interrupted run")
    done = set()
    for lineno, d in iter_jsonl(out):
        if d.get("interface", interface) != interface:
            raise InputError(f"{out}:{lineno}: holds {d.get('interface')!r}-interface predictions, not {interface!r}")
        done.add(str(d["index"]))
    return done


def _answer(text: str, interface: str) -> str:
    from eval.interfaces import get_interface

    return get_interface(interface).answer(text)


def run_inference(
    golds: Sequence[Gold],
    generator: Generator,
    out: Path,
    interface: str,
    pdf_for: Callable[[Gold], Path],
    cfg: InferConfig = InferConfig(),
    template: PromptTemplate | None = None,
    meta: dict | None = None,
) -> dict:
    """Generate a response for every gold question not yet in ``out``, appending one line per question.

    ``pdf_for(gold)`` gives the PDF of a question. Questions are grouped by document so each document is rendered
    once per batch. Returns counts ``{"total", "skipped", "generated"}``."""
    template = template or PromptTemplate(interface)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = done_indices(out, interface)
    todo = [g for g in golds if g.key not in done]
    todo.sort(key=lambda g: g.doc_key)  # stable: gold order within a document
    counts = {"total": len(golds), "skipped": len(golds) - len(todo), "generated": 0}
    images_of: dict[str, tuple[bytes, ...]] = {}
    with tqdm(total=len(todo), desc=f"infer ({interface})", unit="q", disable=None) as bar:
        for start in range(0, len(todo), cfg.batch_size):
            batch = todo[start : start + cfg.batch_size]
            keep = {g.doc_key for g in batch}
            images_of = {k: v for k, v in images_of.items() if k in keep}  # only this batch's documents in memory
            requests = []
            for g in batch:
                if g.doc_key not in images_of:
                    with Document.open(pdf_for(g)) as doc:
                        images_of[g.doc_key] = page_images(doc, cfg)
                images = images_of[g.doc_key]
                system, user = template.render(g.question, len(images))
                requests.append(GenRequest(g.index, system, images, user, cfg.page_labels))
            texts = generator.generate(requests)
            if len(texts) != len(requests):
                raise RuntimeError(f"generator returned {len(texts)} texts for {len(requests)} requests")
            usage = getattr(generator, "last_usage", None)
            usage = usage if isinstance(usage, list) and len(usage) == len(texts) else [None] * len(texts)
            for g, text, used in zip(batch, texts, usage, strict=True):
                row = {"index": g.index, "interface": interface, "response": text, "answer": _answer(text, interface),
                       "citations": [], **(meta or {})}  # fmt: skip
                if used is not None:
                    row["usage"] = used
                append_jsonl(out, row)
                counts["generated"] += 1
                bar.update(1)
    return counts


def shard_file(out: Path, shard: Shard) -> Path:
    """The predictions file of one shard: ``predictions.jsonl`` -> ``predictions.shard-2-of-4.jsonl``."""
    return out.with_name(f"{out.stem}.shard-{shard.index}-of-{shard.count}{out.suffix}")


def merge_shards(gold_path: Path, out: Path, count: int, limit: int | None = None) -> int:
    """Join the ``count`` shard files of ``out`` (:func:`shard_file`) into ``out`` (atomic), in the order one
    unsharded run writes (by document, gold order within one). InputError naming the file when a shard file is
    missing, holds a question of another shard or one twice, or lacks questions of its shard. Returns the lines."""
    from core.io import atomic_write_text

    golds = read_gold(gold_path)[:limit]
    want = {g.key for g in golds}
    lines: dict[str, str] = {}
    for i in range(1, count + 1):
        shard = Shard(i, count)
        part = shard_file(out, shard)
        if not part.is_file():
            raise InputError(f"{part}: shard {shard} has no predictions file (its inference task did not run)")
        repair_jsonl_tail(part)
        for lineno, d in iter_jsonl(part):
            key = str(d.get("index"))
            if key not in want or not shard.holds(key):
                raise InputError(f"{part}:{lineno}: index {key!r} is not a gold question of shard {shard}")
            if key in lines:
                raise InputError(f"{part}:{lineno}: index {key!r} answered twice")
            lines[key] = json.dumps(d, ensure_ascii=False)
        missing = [g.key for g in golds if shard.holds(g.key) and g.key not in lines]
        if missing:
            shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
            raise InputError(f"{part}: {len(missing)} question(s) of shard {shard} unanswered: {shown}")
    order = sorted(golds, key=lambda g: g.doc_key)  # run_inference's order
    atomic_write_text(out, "".join(lines[g.key] + "\n" for g in order))
    return len(order)


# ---------------------------------------------------------------------------------------------- vLLM
def _usage_of(output) -> dict | None:
    """What a vLLM ``RequestOutput`` reports of one generation: prompt tokens (page images included), reply tokens
    and why it stopped; None when it lacks them."""
    prompt = getattr(output, "prompt_token_ids", None)
    first = output.outputs[0]
    reply = getattr(first, "token_ids", None)
    if prompt is None or reply is None:
        return None
    return {"prompt_tokens": len(prompt), "completion_tokens": len(reply), "finish_reason": first.finish_reason}


# --- LoRA layouts: EasyR1's and TRL's (reward/trl_train.py) ---
LORA_LAYOUTS = ("actor/lora_adapter", "adapter")
"""Where an adapter lies below a folder that is not one itself: EasyR1's step folder (``global_step_N``) and a TRL
run folder (``reward/trl_train.py``'s ``RUN_DIR``; its ``checkpoints/checkpoint-N`` are adapter folders)."""


def lora_adapter_dir(path: str | Path) -> Path:
    """The adapter folder (holding ``adapter_config.json``) that ``--lora`` names: the folder itself (EasyR1's
    ``global_step_N/actor/lora_adapter``, TRL's ``RUN_DIR/adapter`` or ``RUN_DIR/checkpoints/checkpoint-N``), or
    one of :data:`LORA_LAYOUTS` below it. Raises :class:`InputError` naming the layouts."""
    path = Path(path)
    for folder in (path, *(path / sub for sub in LORA_LAYOUTS)):
        if (folder / "adapter_config.json").is_file():
            return folder
    raise InputError(
        f"{path}: not a LoRA adapter folder (no adapter_config.json in it or in {', '.join(LORA_LAYOUTS)} below it)"
    )


# --- end LoRA layouts ---


class VLLMGenerator:
    """vLLM offline generation (GPU). Imports vLLM when constructed, so the rest of the package never needs it.

    Args:
        model: Hugging Face model folder or name of the base model.
        lora: folder of a LoRA adapter (EasyR1's ``global_step_N/actor/lora_adapter`` or a TRL run's adapter:
            :func:`lora_adapter_dir`), or None.
        max_tokens, temperature: sampling (greedy by default).
        max_images: images per prompt vLLM must accept (>= the longest document's pages).
        tensor_parallel_size, max_model_len, gpu_memory_utilization: vLLM engine settings.
        max_lora_rank: at least the adapter's rank (the paper's is 64).
        chat_template_kwargs: extra variables for the model's chat template (``LLM.chat(...,
            chat_template_kwargs=...)``), e.g. ``{"enable_thinking": True}``; None = the template's defaults.
    """

    def __init__(
        self,
        model: str,
        lora: str | None = None,
        *,
        max_tokens: int = 1536,
        temperature: float = 0.0,
        max_images: int = 200,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        max_lora_rank: int = 64,
        seed: int = 0,
        chat_template_kwargs: dict | None = None,
    ) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:
            raise InputError(f"vLLM is not installed ({e}); `eval infer` runs on a GPU machine with vllm") from None
        kwargs: dict = {
            "model": model,
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "limit_mm_per_prompt": {"image": max_images},
            "seed": seed,
            "trust_remote_code": True,
        }
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        if lora:
            lora = str(lora_adapter_dir(lora))
            kwargs.update(enable_lora=True, max_lora_rank=max_lora_rank, max_loras=1)
        self.llm = LLM(**kwargs)
        # vLLM's EngineCore is a non-daemon child process that only a shutdown stops; at exit multiprocessing
        # joins such children before vLLM's own finalizer has run, so a run that never closed its generator would
        # wait on it forever (the work done, the process idle). Registered after vLLM's import, this runs first.
        atexit.register(self.close)
        self.params = SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed)
        self.chat_template_kwargs = dict(chat_template_kwargs) if chat_template_kwargs else None
        self.last_usage: list[dict | None] | None = None
        """What vLLM reported of each request of the last :meth:`generate` (tokens, finish reason)."""
        self.lora_request = None
        if lora:
            from vllm.lora.request import LoRARequest

            self.lora_request = LoRARequest("policy", 1, str(lora))

    def generate(self, requests: Sequence[GenRequest]) -> list[str]:
        if self.llm is None:
            raise RuntimeError("VLLMGenerator.generate after close()")
        outs = self.llm.chat(
            [r.messages() for r in requests],
            self.params,
            lora_request=self.lora_request,
            use_tqdm=False,
            chat_template_kwargs=self.chat_template_kwargs,
        )
        self.last_usage = [_usage_of(o) for o in outs]
        return [o.outputs[0].text for o in outs]

    def close(self) -> None:
        """Stop vLLM's engine (its EngineCore process and workers); idempotent, also run at exit."""
        llm, self.llm = self.llm, None
        engine = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if engine is not None:
            engine.shutdown()

    def __enter__(self) -> VLLMGenerator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------- command
def pdf_locator(pdf_dir: Path | None, cache_dir: Path | None, parser: str | None = None) -> Callable[[Gold], Path]:
    """``gold -> PDF``: the gold's ``pdf`` field, else ``pdf_dir/<doc_key>.pdf``, else the cache's PDF."""
    docs = None
    if cache_dir is not None:
        from data_prep.cache import DocCache

        docs = DocCache(cache_dir, parser=parser)

    def locate(g: Gold) -> Path:
        if g.extra.get("pdf") and Path(g.extra["pdf"]).is_file():
            return Path(g.extra["pdf"])
        if pdf_dir is not None and (pdf_dir / f"{g.doc_key}.pdf").is_file():
            return pdf_dir / f"{g.doc_key}.pdf"
        if docs is not None:
            return docs.get(g.doc_key).pdf_path
        raise InputError(f"question {g.index!r}: no PDF for doc_key {g.doc_key!r} (give --pdf-dir or --cache-dir)")

    return locate
