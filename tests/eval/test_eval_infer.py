"""``eval infer`` on a CPU: prompt building, image budgeting and resumption with a scripted generator."""

from __future__ import annotations

import io
import json
import sys
from types import ModuleType, SimpleNamespace

import pytest
from PIL import Image

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.document import Document
from eval.__main__ import COMMANDS
from eval.infer import (
    GenRequest,
    InferConfig,
    PromptTemplate,
    VLLMGenerator,
    chat_template_kwargs_from,
    page_images,
    run_inference,
)
from eval.schemas import Element, Gold

TEMPLATE = """=== system ===
You answer questions about a {{ n_pages }}-page document and quote your evidence.
=== user ===
Question: {{ question }}
Reply with JSON."""


@pytest.fixture
def prompts(tmp_path):
    d = tmp_path / "prompts"
    d.mkdir()
    (d / "language_interface.jinja").write_text(TEMPLATE)
    (d / "coordinate_interface.jinja").write_text("Question: {{ question }}\nCite with <bbox/> tags.")
    return d


def golds(n: int, doc_key: str = "sample") -> list[Gold]:
    e = (Element(1, (0.0, 0.0, 10.0, 10.0)),)
    return [Gold(i, doc_key, f"question {i}?", "a", "en", "t", e, e) for i in range(n)]


class ScriptedGenerator:
    """Answers "response <index>"; raises after ``fail_after`` requests to simulate a crash."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.fail_after = fail_after
        self.seen: list[GenRequest] = []

    def generate(self, requests):
        out = []
        for r in requests:
            if self.fail_after is not None and len(self.seen) >= self.fail_after:
                raise RuntimeError("simulated crash")
            self.seen.append(r)
            out.append(json.dumps({"answer": f"answer {r.index}", "quotes": ["q"]}))
        return out


def test_prompt_template_splits_system_and_user_and_fills_the_fields(prompts):
    t = PromptTemplate("language", prompts)
    system, user = t.render("What grew?", 4)
    assert system == "You answer questions about a 4-page document and quote your evidence."
    assert user == "Question: What grew?\nReply with JSON."
    assert PromptTemplate("coordinate", prompts, role="user").render("Q?", 2) == (
        None,
        "Question: Q?\nCite with <bbox/> tags.",
    )


@pytest.mark.parametrize(
    ("interface", "marker", "default"), [("language", '"quotes"', "system"), ("coordinate", '<bbox page="N"', "user")]
)
def test_the_language_prompt_is_a_system_prompt_and_the_user_role_gives_the_question_first(interface, marker, default):
    # The paper's J.2 is a system prompt; the user turn is the pages and the question.
    q = "Which site had the highest yield?"
    system, user = PromptTemplate(interface, role="system").render(q, 3)
    assert marker in system and q not in system
    assert user == q
    # --prompt-role user: the whole template, question first, in the user turn (the earlier protocol).
    system, user = PromptTemplate(interface, role="user").render(q, 3)
    assert system is None
    assert user.startswith(q) and marker in user
    # The default: system for the language interface (J.2); our coordinate template keeps the user turn.
    assert PromptTemplate(interface).role == default
    with pytest.raises(InputError, match="--prompt-role"):
        PromptTemplate(interface, role="assistant")


def test_missing_or_broken_template_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="language_interface.jinja not found"):
        PromptTemplate("language", tmp_path)
    (tmp_path / "language_interface.jinja").write_text("{{ question }} {{ pages_total }}")
    with pytest.raises(InputError, match="unknown variable"):
        PromptTemplate("language", tmp_path).render("q", 1)


def test_request_messages_put_every_page_image_before_the_text():
    r = GenRequest(3, "sys", (b"\xff\xd8a", b"\xff\xd8b"), "Question: q", page_labels=True)
    msgs = r.messages()
    assert msgs[0] == {"role": "system", "content": "sys"}
    parts = msgs[1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "text", "image_url", "text"]
    assert parts[0]["text"] == "Page 1:" and parts[-1]["text"] == "Question: q"
    assert parts[1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert GenRequest(3, None, (b"x",), "t").messages()[0]["role"] == "user"


def test_pages_are_rendered_at_the_per_page_budget_capped_at_one_megapixel(sample_pdf):
    with Document.open(sample_pdf) as doc:
        small = page_images(doc, InferConfig(total_pixels=4 * 200_000))  # 4 pages: 200k pixels each
        capped = page_images(doc, InferConfig())  # budget / pages far above the cap
    sizes_small = [Image.open(io.BytesIO(b)).size for b in small]
    sizes_capped = [Image.open(io.BytesIO(b)).size for b in capped]
    assert len(small) == 4 and all(b[:2] == b"\xff\xd8" for b in small)  # JPEG, one per page
    assert all(190_000 <= w * h <= 200_000 for w, h in sizes_small)
    assert all(980_000 <= w * h <= 1_000_000 for w, h in sizes_capped)
    assert sizes_capped[3][0] > sizes_capped[3][1]  # the /Rotate 90 page is displayed landscape
    assert sizes_capped[0][0] < sizes_capped[0][1]


def test_inference_appends_one_line_per_question_and_resumes_after_a_crash(sample_pdf, prompts, tmp_path):
    out = tmp_path / "pred.jsonl"
    gs = golds(5)
    cfg = InferConfig(total_pixels=4 * 50_000, batch_size=2)
    crashing = ScriptedGenerator(fail_after=3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_inference(gs, crashing, out, "language", lambda g: sample_pdf, cfg, PromptTemplate("language", prompts))
    assert [json.loads(x)["index"] for x in out.read_text().splitlines()] == [0, 1]  # whole batches only
    with open(out, "ab") as f:
        f.write(b'{"index": 2, "respo')  # a partial line, as a kill in the middle of a write leaves
    gen = ScriptedGenerator()
    counts = run_inference(gs, gen, out, "language", lambda g: sample_pdf, cfg, PromptTemplate("language", prompts),
                           meta={"model": "m"})  # fmt: skip
    assert counts == {"total": 5, "skipped": 2, "generated": 3}
    assert [r.index for r in gen.seen] == [2, 3, 4]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[4] == {"index": 4, "interface": "language", "response": json.dumps({"answer": "answer 4", "quotes": ["q"]}),
                       "answer": "answer 4", "citations": [], "model": "m"}  # fmt: skip
    assert len(gen.seen[0].images) == 4 and gen.seen[0].system.startswith("You answer questions about a 4-page")
    again = ScriptedGenerator()
    assert (
        run_inference(gs, again, out, "language", lambda g: sample_pdf, cfg, PromptTemplate("language", prompts))[
            "generated"
        ]
        == 0
    )
    assert again.seen == []


def test_resuming_into_a_file_of_the_other_interface_is_refused(sample_pdf, prompts, tmp_path):
    out = tmp_path / "pred.jsonl"
    out.write_text(json.dumps({"index": 0, "interface": "coordinate", "response": ""}) + "\n")
    with pytest.raises(InputError, match="holds 'coordinate'-interface predictions"):
        run_inference(golds(1), ScriptedGenerator(), out, "language", lambda g: sample_pdf, InferConfig(),
                      PromptTemplate("language", prompts))  # fmt: skip


def test_vllm_generator_without_vllm_says_so():
    pytest.importorskip("PIL")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(InputError, match="vLLM is not installed"):
            VLLMGenerator("some/model")
    else:  # pragma: no cover - only on a GPU machine
        pytest.skip("vllm is installed here")


# ---------------------------------------------------------------------------------------------- vLLM call arguments
class FakeVLLM:
    """Stands in for the ``vllm`` package: records what :class:`VLLMGenerator` hands to ``LLM`` and ``LLM.chat``."""

    def __init__(self) -> None:
        self.llm_kwargs: dict | None = None
        self.sampling: dict | None = None
        self.chats: list[tuple[list, object, dict]] = []
        fake = self

        class LLM:
            def __init__(self, **kwargs):
                fake.llm_kwargs = kwargs

            def chat(self, messages, sampling_params, **kwargs):
                fake.chats.append((messages, sampling_params, kwargs))
                return [
                    SimpleNamespace(outputs=[SimpleNamespace(text=json.dumps({"answer": f"a{i}", "quotes": ["q"]}))])
                    for i, _ in enumerate(messages)
                ]

        class SamplingParams:
            def __init__(self, **kwargs):
                fake.sampling = kwargs

        self.module = ModuleType("vllm")
        self.module.LLM = LLM
        self.module.SamplingParams = SamplingParams


@pytest.fixture
def fake_vllm(monkeypatch):
    fake = FakeVLLM()
    monkeypatch.setitem(sys.modules, "vllm", fake.module)
    return fake


def _write_gold(path, pdf, n=2):
    rows = [g.to_json() | {"pdf": str(pdf)} for g in golds(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


CHAT_KWARGS_RUNS = [
    # (extra flags, chat_template_kwargs handed to LLM.chat, max_tokens, thinking recorded)
    ([], None, 1536, False),  # no flag: the template's own defaults, the non-thinking budget
    (["--thinking"], {"enable_thinking": True}, 4096, True),  # --thinking: enable_thinking and 4,096 tokens
    (["--chat-template-kwargs", '{"enable_thinking": false}'], {"enable_thinking": False}, 1536, False),
    (["--thinking", "--chat-template-kwargs", '{"add_vision_id": true}'],  # merged with --thinking
     {"add_vision_id": True, "enable_thinking": True}, 4096, True),
    (["--thinking", "--max-tokens", "8000"], {"enable_thinking": True}, 8000, True),  # explicit budget wins
]  # fmt: skip


@pytest.mark.parametrize(("flags", "chat_kwargs", "max_tokens", "thinking"), CHAT_KWARGS_RUNS)
def test_infer_hands_chat_template_kwargs_to_llm_chat_and_records_them(
    fake_vllm, sample_pdf, prompts, tmp_path, flags, chat_kwargs, max_tokens, thinking
):
    gold, out = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    _write_gold(gold, sample_pdf)
    argv = ["infer", "--model", "m", "--gold", str(gold), "--interface", "language", "--out", str(out),
            "--prompts-dir", str(prompts), "--total-pixels", "200000", *flags]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, argv) == 0
    assert len(fake_vllm.chats) == 1  # both questions in one batch
    messages, params, kwargs = fake_vllm.chats[0]
    assert kwargs == {"lora_request": None, "use_tqdm": False, "chat_template_kwargs": chat_kwargs}
    assert fake_vllm.sampling == {"temperature": 0.0, "max_tokens": max_tokens, "seed": 0}
    assert fake_vllm.llm_kwargs["limit_mm_per_prompt"] == {"image": 4}  # the sample PDF has 4 pages
    assert len(messages) == 2 and [p["type"] for p in messages[0][-1]["content"]].count("image_url") == 4
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["answer"] for r in rows] == ["a0", "a1"]
    for r in rows:
        assert (r["chat_template_kwargs"], r["max_tokens"], r["thinking"]) == (chat_kwargs or {}, max_tokens, thinking)
        assert (r["model"], r["lora"]) == ("m", None)


BAD_CHAT_KWARGS = [
    (["--chat-template-kwargs", "{enable_thinking: false}"], "--chat-template-kwargs is not valid JSON"),
    (["--chat-template-kwargs", "[1, 2]"], "--chat-template-kwargs must be a JSON object, got list"),
    (["--thinking", "--chat-template-kwargs", '{"enable_thinking": false}'],  # contradicts itself
     "--thinking sets enable_thinking true but --chat-template-kwargs sets it to false"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "message"), BAD_CHAT_KWARGS)
def test_bad_chat_template_kwargs_fail_before_loading_a_model(fake_vllm, sample_pdf, prompts, tmp_path, capsys,
                                                               flags, message):  # fmt: skip
    gold = tmp_path / "gold.jsonl"
    _write_gold(gold, sample_pdf)
    argv = ["infer", "--model", "m", "--gold", str(gold), "--interface", "language", "--out", str(tmp_path / "p"),
            "--prompts-dir", str(prompts), *flags]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert fake_vllm.llm_kwargs is None  # no model was loaded


def test_scripted_generator_sees_the_recorded_run_settings(sample_pdf, prompts, tmp_path):
    out = tmp_path / "pred.jsonl"
    meta = {"model": "m", "max_tokens": 4096, "thinking": True,
            "chat_template_kwargs": chat_template_kwargs_from(None, thinking=True)}  # fmt: skip
    run_inference(golds(1), ScriptedGenerator(), out, "language", lambda g: sample_pdf,
                  InferConfig(total_pixels=4 * 50_000), PromptTemplate("language", prompts), meta)  # fmt: skip
    row = json.loads(out.read_text())
    assert row["chat_template_kwargs"] == {"enable_thinking": True} and row["max_tokens"] == 4096


# ---------------------------------------------------------------------------------------------- CiteVQA's prompt
@pytest.fixture(scope="module")
def citevqa_dir(tmp_path_factory):
    from tests.support.citevqa_vendor import unpack_citevqa

    return unpack_citevqa(tmp_path_factory.mktemp("citevqa"))


def test_coordinate_interface_uses_citevqas_inference_prompt_from_the_checkout(fake_vllm, sample_pdf, prompts,
                                                                             tmp_path, citevqa_dir):  # fmt: skip
    gold, out = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    _write_gold(gold, sample_pdf, n=1)
    argv = ["infer", "--model", "m", "--gold", str(gold), "--interface", "coordinate", "--out", str(out),
            "--prompts-dir", str(prompts), "--total-pixels", "200000", "--citevqa-dir", str(citevqa_dir)]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, argv) == 0
    messages = fake_vllm.chats[0][0][0]
    system = (citevqa_dir / "prompts" / "infer_system.txt").read_text(encoding="utf-8")
    user = (citevqa_dir / "prompts" / "infer_user.txt").read_text(encoding="utf-8").format(question="question 0?")
    assert messages[0] == {"role": "system", "content": system}  # J.1: CiteVQA's own text, as a system turn
    parts = messages[1]["content"]
    assert [p["type"] for p in parts] == ["image_url"] * 4 + ["text"] and parts[-1]["text"] == user
    row = json.loads(out.read_text())
    assert row["prompt"] == {"source": str(citevqa_dir / "prompts" / "infer_system.txt"), "role": "system"}


def test_coordinate_prompt_ours_and_a_missing_checkout(fake_vllm, sample_pdf, prompts, tmp_path, monkeypatch, capsys):
    gold = tmp_path / "gold.jsonl"
    _write_gold(gold, sample_pdf, n=1)
    monkeypatch.delenv("QUOTECITE_CITEVQA_DIR", raising=False)
    base = ["infer", "--model", "m", "--gold", str(gold), "--interface", "coordinate", "--prompts-dir", str(prompts),
            "--total-pixels", "200000"]  # fmt: skip
    assert cli_main("eval", "", COMMANDS, [*base, "--out", str(tmp_path / "a.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "--citevqa-dir" in err and len(err.strip().splitlines()) == 1
    assert fake_vllm.llm_kwargs is None  # failed before loading a model
    (tmp_path / "empty").mkdir()
    argv = [*base, "--citevqa-dir", str(tmp_path / "empty"), "--out", str(tmp_path / "b")]
    assert cli_main("eval", "", COMMANDS, argv) == 2
    assert "has no prompts/ folder" in capsys.readouterr().err
    # tmp_path has a prompts/ folder, but not CiteVQA's: the missing file is named
    assert cli_main("eval", "", COMMANDS, [*base, "--citevqa-dir", str(tmp_path), "--out", str(tmp_path / "b")]) == 2
    assert "prompts/infer_system.txt: cannot read CiteVQA prompt" in capsys.readouterr().err
    # --coordinate-prompt ours: our template (here the fixture's) in the user turn, as before
    argv = [*base, "--coordinate-prompt", "ours", "--out", str(tmp_path / "c.jsonl")]
    assert cli_main("eval", "", COMMANDS, argv) == 0
    messages = fake_vllm.chats[0][0][0]
    assert messages[0]["role"] == "user"
    assert messages[0]["content"][-1]["text"] == "Question: question 0?\nCite with <bbox/> tags."
    assert json.loads((tmp_path / "c.jsonl").read_text())["prompt"]["role"] == "user"


def test_language_cli_sends_the_instructions_as_a_system_turn(fake_vllm, sample_pdf, tmp_path):
    gold, out = tmp_path / "gold.jsonl", tmp_path / "pred.jsonl"
    _write_gold(gold, sample_pdf, n=1)
    argv = ["infer", "--model", "m", "--gold", str(gold), "--interface", "language", "--total-pixels", "200000"]
    assert cli_main("eval", "", COMMANDS, [*argv, "--out", str(out)]) == 0
    messages = fake_vllm.chats[-1][0][0]
    assert messages[0]["role"] == "system" and '"quotes"' in messages[0]["content"]
    assert messages[1]["content"][-1]["text"] == "question 0?"
    assert cli_main("eval", "", COMMANDS, [*argv, "--prompt-role", "user", "--out", str(tmp_path / "u.jsonl")]) == 0
    messages = fake_vllm.chats[-1][0][0]
    assert [m["role"] for m in messages] == ["user"] and messages[0]["content"][-1]["text"].startswith("question 0?")
