"""``eval infer`` on a CPU: prompt building, image budgeting and resumption with a scripted generator."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from data_prep.document import Document
from data_prep.types import InputError
from eval.infer import GenRequest, InferConfig, PromptTemplate, VLLMGenerator, page_images, run_inference
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
    assert PromptTemplate("coordinate", prompts).render("Q?", 2) == (None, "Question: Q?\nCite with <bbox/> tags.")


@pytest.mark.parametrize(("interface", "marker"), [("language", '"quotes"'), ("coordinate", '<bbox page="N"')])
def test_the_repository_prompts_render_with_the_question_first(interface, marker):
    system, user = PromptTemplate(interface).render("Which site had the highest yield?", 3)
    assert system is None
    assert user.startswith("Which site had the highest yield?")
    assert marker in user


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
