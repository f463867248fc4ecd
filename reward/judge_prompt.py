"""The judge's prompt and reply format: the rubric prompt (``recipes/prompts/judge.txt``) rendered for a request,
the regex of the reply (what constrained decoding sends) and the one parser of a reply into scores.

The prompt frames the question, the answers and the crops' text as data inside delimiters with an explicit rule
that they are never instructions; delimiter tags inside the data are removed (:func:`frame_data`). A reply's verdict
is the JSON object naming the three scores, anywhere in it (:func:`parse_judge_output`); anything else is None.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from core.errors import InputError
from core.io import MAX_INT_DIGITS, NotJSONError, loads_record, read_text
from data_prep.crops import png_data_url
from recipes import prompt_path
from reward.judge import SCORE_KEYS, SCORE_MAX, JudgeRequest, JudgeScores
from reward.response import iter_json_objects, strip_reasoning

DEFAULT_PROMPT = prompt_path("judge.txt")
"""The judge prompt: a ``=== system ===`` section and a ``=== user ===`` template with ``{{name}}`` fields."""


# --------------------------------------------------------------------------------------------- output parsing
def _score_value(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and 0 <= v <= SCORE_MAX:
        return v
    return None


_DIGITS = re.compile(r"\d+")


def _verdict_objects(text: str) -> list[dict] | None:
    """The JSON objects of a reply's verdict text (its reasoning removed), each through the one record parser
    (:func:`core.io.loads_record`: no integer of more than 300 digits, no NaN or infinity, nesting bounded);
    None when any of them fails those bounds (the reply is unparseable, never an exception).

    A reply that is one JSON value (a structured reply, or one inside a code fence) is parsed as it is; otherwise
    the objects are found in the prose (:func:`reward.response.iter_json_objects`) and each is parsed again
    through the record parser from its JSON text, so NaN, an infinity or a 400-digit integer that the scan
    accepted are refused the same way.

    >>> _verdict_objects('{"answer": 5, "relevance": 4, "coverage": 3}')
    [{'answer': 5, 'relevance': 4, 'coverage': 3}]
    >>> _verdict_objects('{"answer": 5, "relevance": 4, "coverage": NaN}') is None
    True
    """
    body = strip_reasoning(text).strip()
    if len(body) >= 6 and body.startswith("```") and body.endswith("```"):  # one code fence (sliced: linear)
        inner = body[3:-3]
        body = (inner[4:] if inner[:4].lower() == "json" else inner).strip()
    if any(len(m.group()) > MAX_INT_DIGITS for m in _DIGITS.finditer(body)):
        return None  # a number the record parser refuses, even where the scan below would skip its object
    try:
        whole = loads_record(body, "judge reply")
    except NotJSONError:
        pass  # prose around the verdict: its objects are found below
    except InputError:
        return None  # JSON the record parser refuses (a number past its bounds, NaN, nesting too deep)
    else:
        if isinstance(whole, dict):
            return [whole]
    out = []
    for obj in iter_json_objects(body):
        try:
            out.append(loads_record(json.dumps(obj), "judge reply"))
        except (InputError, ValueError, RecursionError):
            return None
    return out


def parse_judge_output(text: str) -> JudgeScores | None:
    """The one verdict of a reply: the JSON object naming a score, anywhere in it (after reasoning, inside a code
    fence).

    Every one of ``answer``, ``relevance``, ``coverage`` must be an integer 0..5 (``4.0`` counts as 4); anything
    else (missing, out of range, a string, a reply cut off inside ``<think>``) gives None, never a guess. A reply
    with two score objects that disagree (a verdict, then one quoted from injected text) is unparseable too: no
    "last one wins"; the same object repeated counts once.

    >>> parse_judge_output('The answer matches.\\n```json\\n{"answer": 5, "relevance": 4, "coverage": 3}\\n```')
    JudgeScores(answer=5, relevance=4, coverage=3)
    >>> parse_judge_output('{"answer": 6, "relevance": 4, "coverage": 3}') is None
    True
    """
    objects = _verdict_objects(text) if isinstance(text, str) else None
    if objects is None:
        return None
    found: list[JudgeScores] = []
    for obj in objects:
        if any(k in obj for k in SCORE_KEYS):
            values = [_score_value(obj.get(k)) for k in SCORE_KEYS]
            if any(v is None for v in values):
                return None
            scores = JudgeScores(*values, crop_relevance=parse_crop_relevance(obj.get(CROP_RELEVANCE_KEY)))
            if found and (scores != found[0] or scores.crop_relevance != found[0].crop_relevance):
                return None
            found.append(scores)
    return found[0] if found else None


def reply_regex(n_crops: int) -> str:
    r"""The rubric's reply for ``n_crops`` crops as one compact JSON object, as a regex for constrained decoding
    (what :attr:`JudgeSettings.structured` sends as vLLM's per-request ``structured_outputs``): the keys of
    the three scores in order, then ``crop_relevance``, each score one digit 0..5, exactly one 0/1 per crop, one blank after each ``:``
    and ``,`` and no other whitespace. A JSON-schema ``response_format`` lets a model put any amount of whitespace
    between tokens (a random judge filled its whole token budget with it on a server started without
    ``disable_any_whitespace``); this regex leaves no free whitespace, so it holds on any vLLM server, whatever its
    flags. :func:`parse_judge_output` reads every reply it admits.

    >>> import re
    >>> bool(re.fullmatch(reply_regex(2), '{"answer": 4, "relevance": 3, "coverage": 5, "crop_relevance": [1, 0]}'))
    True
    >>> bool(re.fullmatch(reply_regex(0), '{"answer": 4, "relevance": 3, "coverage": 5, "crop_relevance": []}'))
    True
    >>> bool(re.fullmatch(reply_regex(1), '{"answer": 4, "relevance": 3, "coverage": 5, "crop_relevance": [1, 0]}'))
    False
    """
    if not isinstance(n_crops, int) or isinstance(n_crops, bool) or n_crops < 0:
        raise ValueError(f"reply_regex: n_crops must be an integer >= 0 (got {n_crops!r})")
    digit = f"[0-{SCORE_MAX}]"
    scores = ", ".join(f'"{k}": {digit}' for k in SCORE_KEYS)
    crops = ", ".join(["[01]"] * n_crops)
    return r"\{" + scores + f', "{CROP_RELEVANCE_KEY}": ' + r"\[" + crops + r"\]\}"


CROP_RELEVANCE_KEY = "crop_relevance"
"""Optional key of the judge's reply: one 0/1 per crop, in order (the ``precision`` reward form reads it)."""


def parse_crop_relevance(value) -> tuple[int, ...] | None:
    """The judge's per-crop relevance list as a tuple of 0/1 (``true``/``false`` and ``1.0`` accepted); None when
    absent or not such a list (the three scores still count: a reply without the list is the older format).

    >>> parse_crop_relevance([1, 0, True]), parse_crop_relevance([1, 2]), parse_crop_relevance(None)
    ((1, 0, 1), None, None)
    """
    if not isinstance(value, list):
        return None
    out = []
    for v in value:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or v not in (0, 1):
            return None
        out.append(int(v))
    return tuple(out)


# --------------------------------------------------------------------------------------------- prompt
_DATA_TAGS = re.compile(r"</?\s*(?:question|gold_answer|model_answer)\b[^>]*>", re.IGNORECASE)
_FIELD = re.compile(r"\{\{(\w+)\}\}")


def frame_data(text: str) -> str:
    """Data placed between the prompt's delimiters: our delimiter tags are removed so data cannot close its
    own frame and pose as prompt text."""
    return _DATA_TAGS.sub("[tag removed]", text)


class JudgePrompt:
    """The judge prompt file split into its system text and user template."""

    def __init__(self, path: str | Path = DEFAULT_PROMPT) -> None:
        path = Path(path)
        try:
            raw = read_text(path, "judge prompt")  # a regular file of UTF-8 text (a FIFO is never waited on)
        except (OSError, InputError) as e:
            raise InputError(f"judge prompt {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
        m = re.search(r"^=== system ===\n(.*?)^=== user ===\n(.*)\Z", raw, re.DOTALL | re.MULTILINE)
        if not m:
            raise InputError(f"judge prompt {path}: expected '=== system ===' then '=== user ===' sections")
        self.path = path
        self.system = m.group(1).strip()
        self.user_template = m.group(2).strip()
        missing = {"question", "gold_answer", "answer"} - set(_FIELD.findall(self.user_template))
        if missing:
            raise InputError(f"judge prompt {path}: user template lacks {{{{{sorted(missing)[0]}}}}}")

    def render_user(self, request: JudgeRequest) -> str:
        values = {
            "question": frame_data(request.question),
            "gold_answer": frame_data(request.gold_answer),
            "answer": frame_data(request.answer),
            "n_crops": str(len(request.crops)),
        }
        # One pass over the template: inserted data is never scanned for fields again.
        return _FIELD.sub(lambda m: values.get(m.group(1), m.group(0)), self.user_template)

    def messages(self, request: JudgeRequest) -> list[dict]:
        """OpenAI chat messages: the system rubric, then the user text followed by one image part per crop."""
        parts: list[dict] = [{"type": "text", "text": self.render_user(request)}]
        for i, png in enumerate(request.crops, 1):
            parts.append({"type": "text", "text": f"Evidence crop {i} of {len(request.crops)}:"})
            # base64 made once per crop (issue 33): a crop shown again costs no encoding
            parts.append({"type": "image_url", "image_url": {"url": png_data_url(png)}})
        return [{"role": "system", "content": self.system}, {"role": "user", "content": parts}]
