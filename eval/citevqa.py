"""CiteVQA's own prompts, read from a user's checkout of opendatalab/CiteVQA (``--citevqa-dir``).

The paper evaluates with CiteVQA's protocol (Section 4, Appendices J.1, J.3, J.4), so the prompts are CiteVQA's
files, never copies: this module reads ``prompts/`` of the checkout the user points at and fails with one line when
a file or one of its ``{fields}`` is missing. ``$QUOTECITE_CITEVQA_DIR`` stands in for the option.

* **Inference prompt of the coordinate interface** (:class:`CiteVQAInferPrompt`, J.1): ``infer_system.txt`` is the
  system turn; the user turn is the page images followed by ``infer_user.txt`` with ``{question}`` filled
  (CiteVQA's ``infer/run.py`` builds the same two turns).
* **The evaluation judge** (:class:`CiteVQAJudge`, J.3 and J.4): two calls per response, as CiteVQA's
  ``eval/run.py`` makes them.

  1. *Answer accuracy*: system ``eval_qa_acc_system.txt``; user ``eval_qa_acc_user.txt`` with ``{question}``,
     ``{standard_answer}`` (the gold answer) and ``{model_answer_no_bbox}`` (the model's answer, no tags); **no
     image**. The reply's ``<qa_acc>X</qa_acc>`` is Ans.
  2. *Relevance*: system ``eval_rel_system.txt``; user ``eval_rel_user.txt`` with ``{question}``,
     ``{standard_answer}`` and ``{answer_with_images}`` = the model's answer, and the crops of the cited regions
     (150 dpi, at most six, paper Appendix A) attached to the user message as images after the text. The reply's
     ``<relevance_score>X</relevance_score>`` is Rel. A response without citations is judged with no image (the
     judge scores unsupported evidence), as CiteVQA's scorer does.

  Both calls run on :class:`reward.judge_http.HttpJudge`'s client (concurrency, deadline, retries with backoff,
  de-duplication, failure counting): only the request body and the reply parser differ. A reply is read as the
  tag of its kind after any ``<think>`` block, spaces inside the tag allowed; a value outside 0..5, a reply
  without the tag, or one with two tags that disagree leaves that score missing and the question out of the judge
  metrics (paper Appendix B). CiteVQA's scorer takes the first tag, accepts any integer and then divides by 20 (its
  SAA bug; we keep 0-5). Temperature 0 and a 1,024-token reply limit are the paper's settings (Appendix A).

  Two judge settings apply to both calls (:class:`reward.judge.JudgeSettings`): thinking off (the default:
  ``chat_template_kwargs.enable_thinking`` false, so a thinking model answers within the 1,024 tokens) and
  constrained decoding on (the default: vLLM's ``structured_outputs`` with :func:`reply_regex`, the prompts' own
  shape of one reasoning line and the backticked tag, so every reply parses; ``--judge-unconstrained`` sends the
  paper's unconstrained requests).
"""

from __future__ import annotations

import base64
import os
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.io import read_text
from reward.judge import JudgeRequest, JudgeStats
from reward.judge_http import HttpJudge, run_sync
from reward.response import strip_reasoning

CITEVQA_DIR_ENV = "QUOTECITE_CITEVQA_DIR"
"""Environment fallback of ``--citevqa-dir``."""

PROMPT_FIELDS: dict[str, frozenset[str]] = {
    "infer_system.txt": frozenset(),
    "infer_user.txt": frozenset({"question"}),
    "eval_qa_acc_system.txt": frozenset(),
    "eval_qa_acc_user.txt": frozenset({"question", "standard_answer", "model_answer_no_bbox"}),
    "eval_rel_system.txt": frozenset(),
    "eval_rel_user.txt": frozenset({"question", "standard_answer", "answer_with_images"}),
}
"""The prompt files of a CiteVQA checkout this project reads, with the ``{fields}`` each template must have."""


def resolve_citevqa_dir(path: str | Path | None, needed_for: str) -> Path:
    """The checkout root named by ``path`` or ``$QUOTECITE_CITEVQA_DIR``; InputError naming ``needed_for``."""
    if path is None or str(path) == "":
        env = os.environ.get(CITEVQA_DIR_ENV)
        if not env:
            raise InputError(
                f"{needed_for} reads CiteVQA's prompts from your CiteVQA checkout "
                f"(git clone https://github.com/opendatalab/CiteVQA): give --citevqa-dir DIR or set {CITEVQA_DIR_ENV}"
            )
        path = env
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"--citevqa-dir {root}: not a folder (expected a checkout of opendatalab/CiteVQA)")
    if not (root / "prompts").is_dir():
        raise InputError(f"--citevqa-dir {root}: has no prompts/ folder (expected a checkout of opendatalab/CiteVQA)")
    return root


def template_fields(text: str) -> set[str]:
    """The ``{name}`` fields of a ``str.format`` template."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def read_prompt(root: Path, name: str) -> str:
    """``root/prompts/name``, checked to have the fields CiteVQA's scripts fill (:data:`PROMPT_FIELDS`)."""
    path = root / "prompts" / name
    try:
        text = read_text(path, "CiteVQA prompt")  # a regular file of UTF-8 text
    except (OSError, InputError) as e:
        raise InputError(f"{path}: cannot read CiteVQA prompt ({getattr(e, 'strerror', None) or e})") from None
    try:
        have = template_fields(text)
    except ValueError as e:
        raise InputError(f"{path}: not a str.format template ({e})") from None
    want = PROMPT_FIELDS.get(name, frozenset())
    if want - have or (want and have - want):
        raise InputError(
            f"{path}: expected the fields {sorted(want)}, found {sorted(have)} (a different CiteVQA version?)"
        )
    return text


def fill(template: str, **values: str) -> str:
    """``template.format(**values)`` (values are inserted once, never re-read as fields)."""
    return template.format(**values)


# ---------------------------------------------------------------------------------------------- inference
class CiteVQAInferPrompt:
    """CiteVQA's single-document inference prompt (paper J.1) with :class:`eval.infer.PromptTemplate`'s
    ``render(question, n_pages) -> (system, user)``."""

    interface = "coordinate"

    def __init__(self, citevqa_dir: str | Path | None) -> None:
        root = resolve_citevqa_dir(citevqa_dir, "the coordinate interface's prompt (CiteVQA's infer_system.txt)")
        self.path = root / "prompts" / "infer_system.txt"
        self.system = read_prompt(root, "infer_system.txt")
        self.user_template = read_prompt(root, "infer_user.txt")

    def render(self, question: str, n_pages: int) -> tuple[str | None, str]:
        return self.system, fill(self.user_template, question=question)

    def describe(self) -> dict:
        """What a prediction line records about the prompt."""
        return {"source": str(self.path), "role": "system"}


# ---------------------------------------------------------------------------------------------- judge
_QA_TAG = re.compile(r"<qa_acc>\s*(\d+)\s*</qa_acc>")
_REL_TAG = re.compile(r"<relevance_score>\s*(\d+)\s*</relevance_score>")


def parse_tag_score(text: str, tag: re.Pattern, max_score: int = 5) -> int | None:
    """The last ``tag`` value of a judge reply (reasoning removed) when it is 0..``max_score``; else None.

    >>> parse_tag_score("Exact match.\\n```<qa_acc>4</qa_acc>```", _QA_TAG)
    4
    >>> parse_tag_score("<qa_acc>80</qa_acc>", _QA_TAG) is None
    True
    """
    if not isinstance(text, str):
        return None
    found = tag.findall(strip_reasoning(text))
    if not found or len({int(v) for v in found}) > 1:
        return None  # no score, or two that disagree (a verdict, then an injected one): never "last one wins"
    v = int(found[-1])
    return v if 0 <= v <= max_score else None


REASONING_MAX_CHARS = 400
"""Longest reasoning line a constrained CiteVQA reply may have (its prompts ask for one line, then the score)."""


def reply_regex(tag: str) -> str:
    r"""The shape CiteVQA's judge prompts ask for, as a regex for constrained decoding: one reasoning line (no
    newline, ``<`` or backtick, so it cannot hold a second tag), a newline, then the score tag in backticks as in
    the prompts' output example; the score one digit 0..5. :func:`parse_tag_score` reads every reply of it.

    >>> import re
    >>> bool(re.fullmatch(reply_regex("qa_acc"), "Matches the standard answer.\n```<qa_acc>4</qa_acc>```"))
    True
    """
    return rf"[^\n<`]{{1,{REASONING_MAX_CHARS}}}\n```<{tag}>[0-5]</{tag}>```"


@dataclass(frozen=True)
class TagScore:
    """One call's score (``value``) with the shape :meth:`HttpJudge._call` returns."""

    value: int


@dataclass(frozen=True)
class CiteVQAScores:
    """The two calls' scores of one response (None where that call failed); ``coverage`` is always None."""

    answer: int | None
    relevance: int | None
    coverage: int | None = None


class _TagCall(HttpJudge):
    """One of the two judge calls: :class:`HttpJudge`'s client with CiteVQA's prompt and tag parser."""

    def __init__(self, system: str, user_template: str, field: str, tag: re.Pattern, images: bool, **kw) -> None:
        super().__init__(**kw)
        self.system = system
        self.user_template = user_template
        self.field = field
        self.tag = tag
        self.tag_name = tag.pattern[1 : tag.pattern.index(">")]
        self.images = images

    def body(self, request: JudgeRequest) -> dict:
        text = fill(
            self.user_template,
            question=request.question,
            standard_answer=request.gold_answer,
            **{self.field: request.answer},
        )
        parts: list[dict] = [{"type": "text", "text": text}]
        if self.images:
            for png in request.crops:
                url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
                parts.append({"type": "image_url", "image_url": {"url": url}})
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": parts}]
        return {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            **self.extra_body,
            **self.format_constraint(request),
        }

    def format_constraint(self, request: JudgeRequest) -> dict:
        """vLLM's ``structured_outputs`` regex of this call's reply shape (:func:`reply_regex`), ``{}`` when off."""
        return {"structured_outputs": {"regex": reply_regex(self.tag_name)}} if self.structured else {}

    def parse_reply(self, content: str):
        v = parse_tag_score(content, self.tag)
        return None if v is None else TagScore(v)


class CiteVQAJudge:
    """The paper's evaluation judge: CiteVQA's answer-accuracy call (no images) and relevance call (crops).

    Same interface as :class:`reward.judge_http.HttpJudge` (``score_batch``, ``stats``, ``total``, ``url``, ``model``,
    ``failure_examples``); ``score_batch`` returns :class:`CiteVQAScores` (never None: a failed call leaves its
    field None). Keyword arguments go to both calls' :class:`HttpJudge` (``concurrency``, ``timeout_s``, ...); the two
    calls of a batch run side by side, so up to twice ``concurrency`` requests can be in flight."""

    needs_crops = True
    protocol = "citevqa"

    def __init__(self, base_url: str, model: str, citevqa_dir: str | Path | None = None, **http_kwargs) -> None:
        root = resolve_citevqa_dir(citevqa_dir, "the CiteVQA evaluation judge (the default of eval score)")
        self.citevqa_dir = root
        common = {"base_url": base_url, "model": model, **http_kwargs}
        self.answer_call = _TagCall(
            read_prompt(root, "eval_qa_acc_system.txt"), read_prompt(root, "eval_qa_acc_user.txt"),
            "model_answer_no_bbox", _QA_TAG, images=False, **common,
        )  # fmt: skip
        self.relevance_call = _TagCall(
            read_prompt(root, "eval_rel_system.txt"), read_prompt(root, "eval_rel_user.txt"),
            "answer_with_images", _REL_TAG, images=True, **common,
        )  # fmt: skip
        self.url = self.answer_call.url
        self.model = model
        self.stats = JudgeStats()
        self.total = JudgeStats()
        self.failure_examples: dict[str, str] = {}

    async def ascore_batch(self, requests: Sequence[JudgeRequest]) -> list[CiteVQAScores]:
        import asyncio

        # The answer call sees no image: drop the crops so identical answers are sent once.
        no_crops = [JudgeRequest(r.question, r.gold_answer, r.answer, (), r.evidence_texts) for r in requests]
        ans, rel = await asyncio.gather(
            self.answer_call.ascore_batch(no_crops), self.relevance_call.ascore_batch(list(requests))
        )
        stats = JudgeStats()
        stats.add(self.answer_call.stats)
        stats.add(self.relevance_call.stats)
        stats.requests = len(requests)
        stats.wall_s = max(self.answer_call.stats.wall_s, self.relevance_call.stats.wall_s)
        self.stats = stats
        self.total.add(stats)
        self.failure_examples = {**self.relevance_call.failure_examples, **self.answer_call.failure_examples}
        return [
            CiteVQAScores(a.value if a is not None else None, r.value if r is not None else None)
            for a, r in zip(ans, rel, strict=True)
        ]

    def score_batch(self, requests: Sequence[JudgeRequest]) -> list[CiteVQAScores]:
        return run_sync(self.ascore_batch(list(requests)))
