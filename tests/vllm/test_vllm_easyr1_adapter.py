"""From EasyR1's training loop to evaluation: the LoRA adapter that ``RayPPOTrainer.fit`` saves on a CPU worker
(tests/easyr1/test_easyr1_fit.py's run, one step) is served by real vLLM with ``eval infer --lora
CKPT/global_step_1/actor/lora_adapter``, the path ``launch/eval_8b.sh`` takes, then resolved and scored; and the
prompt vLLM counted for a question (page images included) is, token for token in number, the prompt EasyR1's own
processor loader (``verl.utils.tokenizer.get_processor``) makes of the same messages.

Unlike the TRL adapter test's, this adapter is trained (its ``lora_B`` matrices are not zero): vLLM loads a LoRA
request's weights when it serves it and refuses names, shapes or ranks that do not fit the model. Needs both
.venv-vllm and .venv-easyr1."""

from __future__ import annotations

import json

import pytest

from tests.easyr1.conftest import EASYR1_READY, run_driver
from tests.vllm.conftest import CPU_MEMORY_SHARE, VLLM_PY, require_vllm, resolve_and_score, write_sample_gold
from tests.vllm.test_vllm_infer import INFER_DEADLINE_S, _run_with_deadline, _tail

pytestmark = [pytest.mark.vllm, pytest.mark.easyr1]
PIXELS = 400_000  # the document's pixel budget for eval infer (the sample has few pages)


@pytest.fixture(scope="module")
def trained(sample_pdf, tmp_path_factory):
    """One EasyR1 ``fit`` step on the fit test's data and scale, its checkpoint, and a gold file of two questions
    of the project's sample document with its block cache."""
    require_vllm()
    if not EASYR1_READY.exists():
        pytest.skip(".venv-easyr1 is absent: `make easyr1` builds it (EasyR1 b44b311 + slurm/trainer.lock)")
    from data_prep.cache import build_cache
    from data_prep.parsers import get_parser
    from tests.easyr1.test_easyr1_fit import build_data, candidates, fit

    root = tmp_path_factory.mktemp("easyr1-adapter")
    out = build_data(root)
    model, ckpt, work = root / "tiny_qwen3vl", root / "checkpoints", root / "job"
    work.mkdir()
    # groups of 8 (the fit test's are 4): the scripted answers split about evenly on this model's first tokens, and
    # EasyR1 stops at a step whose groups all got one reward; eight draws of a group all landing on one side is rare
    r, rep, _ = fit(work, out, ckpt, root / "metrics", model, "trainer.max_steps=1", "worker.rollout.n=8",
                    script=candidates(out), servable=True)  # fmt: skip
    assert rep["ok"], rep.get("error", "")[-3000:] + r.stderr[-3000:]

    cached = build_cache(sample_pdf, get_parser("pdftext"), None, root / "cache")
    gold_path = write_sample_gold(cached, root / "gold.jsonl")
    return {"model": model, "adapter": ckpt / "global_step_1" / "actor" / "lora_adapter", "gold": gold_path,
            "cache": cached, "root": root}  # fmt: skip


def _infer(trained, out, log, *lora: str) -> list[dict]:
    """``eval infer`` in .venv-vllm on the gold file; its prediction rows by index."""
    argv = [str(VLLM_PY), "-m", "eval", "infer", "--model", str(trained["model"]), *lora,
            "--gold", str(trained["gold"]), "--interface", "language", "--cache-dir",
            str(trained["cache"].path.parent), "--out", str(out), "--total-pixels", str(PIXELS), "--max-tokens", "24",
            "--max-model-len", "8192", "--gpu-memory-utilization", CPU_MEMORY_SHARE]  # fmt: skip
    rc, _ = _run_with_deadline(argv, log, INFER_DEADLINE_S)
    assert rc == 0, _tail(log)
    return sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["index"])


def test_the_adapter_easyr1_saved_is_served_by_vllm_then_resolved_and_scored(trained, tmp_path):
    from safetensors.numpy import load_file

    config = json.loads((trained["adapter"] / "adapter_config.json").read_text())
    weights = load_file(str(trained["adapter"] / "adapter_model.safetensors"))
    assert config["exclude_modules"] == ".*visual.*" and not any("visual" in k for k in weights)
    assert any(abs(w).sum() > 0 for k, w in weights.items() if "lora_B" in k), "fit did not train the adapter"

    pred, log = tmp_path / "pred.jsonl", tmp_path / "infer.log"
    rows = _infer(trained, pred, log, "--lora", str(trained["adapter"]))
    assert "lora" in log.read_text(errors="replace").lower(), "vLLM did not load the adapter"
    assert [r["index"] for r in rows] == [0, 1]

    resolve_and_score(pred, trained["gold"], str(trained["cache"].path.parent), tmp_path)

    # the prompt of question 0 as eval infer sent it, counted by EasyR1's processor and by vLLM
    from data_prep.document import Document
    from eval.infer import GenRequest, InferConfig, PromptTemplate, page_images, read_gold

    (g, *_) = read_gold(trained["gold"])
    with Document.open(trained["cache"].pdf_path) as doc:
        images = page_images(doc, InferConfig(total_pixels=PIXELS))
    system, user = PromptTemplate("language").render(g.question, len(images))
    spec = tmp_path / "tokens.json"
    messages = GenRequest(g.index, system, images, user).messages()
    spec.write_text(json.dumps({"model_dir": str(trained["model"]), "messages": messages}))
    _, rep = run_driver("drive_tokens.py", str(spec), timeout=300)
    assert rep["images"] == len(images) > 0
    assert rep["prompt_tokens"] == rows[0]["usage"]["prompt_tokens"]
