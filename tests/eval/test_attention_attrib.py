"""MultAttnAttrib on page images and layout blocks (eval/attention.py), on a tiny randomly initialised Qwen3-VL
with eager attention on the CPU (the checkpoint of tests/data_prep/test_qwen3vl_encoder.py) and the project's sample PDF."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from core.errors import InputError
from data_prep.document import Document  # noqa: E402
from data_prep.types import Block  # noqa: E402
from eval.attention import (  # noqa: E402
    AttentionRecorder,
    HeadSet,
    attribute,
    block_scores,
    build_prompt,
    cma_head_scores,
    corrupt_region,
    corrupt_span,
    f1_threshold_sweep,
    mas_head_scores,
    prediction,
    select_heads,
    token_boxes,
    tokens_in_box,
)
from tests.support.tiny_qwen3vl import QWEN3_VL_8B, config, write_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoTokenizer, Qwen3VLModel
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    path = tmp_path_factory.mktemp("tiny-qwen3-vl-attn")
    write_checkpoint(path)
    tok = AutoTokenizer.from_pretrained(path)
    ip = Qwen2VLImageProcessorPil.from_pretrained(path)
    model = Qwen3VLModel.from_pretrained(path, attn_implementation="eager").eval()
    return tok, ip, model


def pages_of(sample_pdf, max_pixels=40_000):
    with Document.open(sample_pdf) as doc:
        return [doc.render_page(p, max_pixels=max_pixels) for p in (1, 2)], [doc.page_sizes[0], doc.page_sizes[1]]


def inputs(tiny, images, question="how much did revenue grow", answer="12 %", text_layer=None):
    tok, ip, model = tiny
    feats = ip(images, return_tensors="pt")
    merge = ip.merge_size
    grids = [(int(g[1]) // merge, int(g[2]) // merge) for g in feats["image_grid_thw"]]
    layout = build_prompt(tok, grids, list(range(1, len(images) + 1)), question, answer, text_layer)
    ids = torch.tensor(layout.input_ids)[None]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "pixel_values": feats["pixel_values"],
             "image_grid_thw": feats["image_grid_thw"], "mm_token_type_ids": (ids == model.config.image_token_id).int()}  # fmt: skip
    return layout, batch


# --------------------------------------------------------------------------------------------- geometry
def test_image_tokens_map_to_page_cells_and_blocks(tiny, sample_pdf):
    images, sizes = pages_of(sample_pdf)
    layout, batch = inputs(tiny, images)
    (rows, cols), (start, end) = layout.grids[1], layout.image_spans[1]
    assert end - start == rows * cols == int(batch["image_grid_thw"][1].prod()) // 4
    assert all(int(batch["input_ids"][0, i]) == tiny[2].config.image_token_id for i in range(start, end))
    cells = token_boxes(rows, cols, sizes[1])
    assert cells[0, :2].tolist() == [0.0, 0.0] and cells[-1, 2:] == pytest.approx(sizes[1])  # the whole page
    block = Block(0, 2, (300.0, 400.0, 590.0, 800.0), "text", "x")
    idx = tokens_in_box(cells, block.bbox)
    centres = (cells[idx, :2] + cells[idx, 2:]) / 2
    assert len(idx) and (centres >= [300, 400]).all() and (centres <= [590, 800]).all()
    tiny_block = (10.0, 10.0, 11.0, 11.0)  # smaller than a cell: the cell under it
    assert tokens_in_box(cells, tiny_block).tolist() == [0]
    got = layout.block_tokens([block], sizes)[0]
    assert (got["image"] == start + idx).all() and len(got["text"]) == 0


def test_a_head_forced_onto_one_patch_attributes_the_block_under_it(tiny, sample_pdf):
    images, sizes = pages_of(sample_pdf)
    layout, _ = inputs(tiny, images)
    blocks = [
        Block(0, 1, (50.0, 50.0, 300.0, 300.0), "text", "a"),
        Block(1, 2, (50.0, 50.0, 300.0, 300.0), "table", "b"),
        Block(2, 2, (300.0, 500.0, 590.0, 830.0), "figure", ""),
    ]
    tokens = layout.block_tokens(blocks, sizes)
    n_keys = len(layout.input_ids)
    att = np.full((2, 4, n_keys), 1.0 / n_keys)  # every head uniform ...
    patch = int(tokens[2]["image"][0])  # ... but head (1, 3) looks at one patch of block 2 (page 2, bottom right)
    att[1, 3] = 0.0
    att[1, 3, patch] = 1.0
    cited = attribute(block_scores(att, tokens, [(1, 3)]), {"image": 0.5, "text": 0.5})
    assert [c[0] for c in cited] == [2]
    p = prediction(7, "12 %", cited, {b.block_id: b for b in blocks})
    assert p["citations"][0]["page"] == 2 and p["citations"][0]["bbox"] == [300.0, 500.0, 590.0, 830.0]
    # a uniform head gives every block the same score: nothing passes a threshold, the fallback cites one block
    assert len(attribute(block_scores(att, tokens, [(0, 0)]), {"image": 0.5})) == 1


# --------------------------------------------------------------------------------------------- recording
def test_recorded_query_rows_equal_the_models_eager_attention(tiny, sample_pdf):
    images, _ = pages_of(sample_pdf)
    layout, batch = inputs(tiny, images, text_layer=[(1, 0, "revenue grew by 12 %")])
    model = tiny[2]
    with torch.no_grad():
        ref_out = model(**batch, output_attentions=True, use_cache=False)
    ref = np.stack([a[0][:, layout.query, :].float().mean(1).numpy() for a in ref_out.attentions])
    for inner in ("eager", "sdpa"):
        rec = AttentionRecorder(inner)
        rec.install(model)
        rec.query_positions = layout.query
        with torch.no_grad():
            out = model(**batch, use_cache=False)
        got = rec.take()
        assert got.shape == ref.shape == (2, 4, len(layout.input_ids))
        np.testing.assert_allclose(got, ref, atol=1e-5)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-5)
        torch.testing.assert_close(out.last_hidden_state, ref_out.last_hidden_state, atol=1e-4, rtol=1e-4)
    model.set_attn_implementation("eager")
    assert layout.text_spans[0][1] > layout.text_spans[0][0]
    with pytest.raises(RuntimeError, match="no attention recorded"):
        AttentionRecorder().take()


# --------------------------------------------------------------------------------------------- head identification
def test_causal_mediation_bookkeeping_on_the_tiny_model(tiny, sample_pdf):
    from PIL import Image

    images, sizes = pages_of(sample_pdf)
    evidence_pt = (63.0, 197.0, 525.0, 298.0)  # the sample's table, page 2
    sx, sy = images[1].width / sizes[1][0], images[1].height / sizes[1][1]
    box_px = (evidence_pt[0] * sx, evidence_pt[1] * sy, evidence_pt[2] * sx, evidence_pt[3] * sy)
    donor = Image.new("RGB", (37, 11), (200, 30, 30))
    corrupted = corrupt_region(images[1], box_px, donor)
    assert corrupted.size == images[1].size and corrupted.tobytes() != images[1].tobytes()
    clean_layout, clean_batch = inputs(tiny, images)
    bad_layout, bad_batch = inputs(tiny, [images[0], corrupted])
    assert clean_batch["input_ids"].shape == bad_batch["input_ids"].shape
    assert torch.equal(clean_batch["image_grid_thw"], bad_batch["image_grid_thw"])  # same patch grid
    model = tiny[2]
    rec = AttentionRecorder("eager")
    rec.install(model)
    atts = []
    for layout, batch in ((clean_layout, clean_batch), (bad_layout, bad_batch)):
        rec.query_positions = layout.query
        with torch.no_grad():
            model(**batch, use_cache=False)
        atts.append(rec.take())
    model.set_attn_implementation("eager")
    gt = clean_layout.block_tokens([Block(0, 2, evidence_pt, "table", "")], sizes)[0]["image"]
    scores = cma_head_scores(atts[0], atts[1], gt, clean_layout.document)
    assert scores.shape == (2, 4) and np.isfinite(scores).all()
    assert not np.allclose(atts[0][..., gt], atts[1][..., gt])  # the corruption reached the evidence tokens


def test_effect_sign_entropy_weight_and_shapes():
    doc = np.arange(10)
    gt = np.array([2, 3])
    clean = np.full((1, 3, 10), 0.1)
    corrupt = clean.copy()
    clean[0, 0] = 0.0
    clean[0, 0, gt] = 0.5  # head 0 reads the evidence ...
    corrupt[0, 0] = 0.1  # ... and stops when it is replaced: positive effect
    clean[0, 2] = 0.0
    clean[0, 2, 7] = 1.0  # head 2 attends elsewhere in the clean pass, to the evidence once corrupted
    corrupt[0, 2] = 0.0
    corrupt[0, 2, gt] = 0.5
    s = cma_head_scores(clean, corrupt, gt, doc)
    assert s[0, 0] > 0  # mediates retrieval
    assert s[0, 1] == pytest.approx(0.0)  # uniform head: no effect, and entropy weight 0
    assert s[0, 2] < 0  # negative effect
    assert select_heads(s, 1) == [(0, 0)]
    weight = 1 - (-(2 * 0.5 * math.log(0.5))) / math.log(10)  # normalised entropy of head 0's clean attention
    assert s[0, 0] == pytest.approx((0.5 - 0.1) * weight)
    mas = mas_head_scores(clean, gt, doc)
    assert mas[0, 0] == pytest.approx(0.5 / 1.0) and mas[0, 1] == pytest.approx(0.1 / 1.0)
    with pytest.raises(InputError, match="same shape"):
        cma_head_scores(clean, corrupt[..., :9], gt, doc)


def test_text_corruption_keeps_the_length():
    ids = np.arange(10)
    out = corrupt_span(ids, (3, 6), [90, 91, 92, 93])
    assert out.tolist() == [0, 1, 2, 90, 91, 92, 6, 7, 8, 9] and out.shape == ids.shape
    with pytest.raises(InputError, match="donor"):
        corrupt_span(ids, (3, 6), [1])


# --------------------------------------------------------------------------------------------- calibration
def test_f1_sweep_on_a_synthetic_score_distribution():
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(0.7, 0.08, 200), rng.normal(0.35, 0.08, 600)
    scores = np.concatenate([pos, neg])
    labels = np.array([True] * 200 + [False] * 600)
    t, f1 = f1_threshold_sweep(scores, labels)

    def f1_at(x):
        pred = scores >= x
        tp = (pred & labels).sum()
        return 2 * tp / (pred.sum() + labels.sum())

    brute = max(f1_at(x) for x in np.unique(scores))
    assert f1 == pytest.approx(brute) and f1 == pytest.approx(f1_at(t))
    assert 0.45 < t < 0.6 and f1 > 0.95  # between the two modes
    assert f1_threshold_sweep([0.2, 0.4], [False, False]) == (math.inf, 0.0)


# --------------------------------------------------------------------------------------------- output and reuse
def test_predictions_have_the_common_format_and_resolve_keeps_them(tmp_path):
    from eval.cmd_resolve import Resolver
    from eval.schemas import read_predictions, write_jsonl

    blocks = {4: Block(4, 2, (10.0, 20.0, 30.0, 40.0), "text", "x")}
    p = prediction("q1", "Shenzhen", [(4, "image", 0.8)], blocks)
    write_jsonl(tmp_path / "p.jsonl", [p])
    (pred,) = read_predictions(tmp_path / "p.jsonl")
    assert (pred.interface, pred.answer, pred.citations[0].page, pred.citations[0].block_id) == (
        "attention", "Shenzhen", 2, 4)  # fmt: skip
    from data_prep.cache import DocCache
    from eval.interfaces import get_interface

    record = get_interface(pred.interface).cite(Resolver(DocCache(tmp_path)), None, pred, None)  # kept as they are
    assert record["citations"] == [{"page": 2, "bbox": [10.0, 20.0, 30.0, 40.0], "similarity": 0.8, "block_id": 4}]
    assert json.loads(p["response"])["attributed_blocks"] == [4]


def test_head_set_round_trip_and_bad_files(tmp_path):
    hs = HeadSet("tiny", "cma", [(1, 3), (0, 2)], {"image": 0.42, "text": math.inf}, 6, [[0.1, 0.2]], {"image": 0.9})
    path = hs.save(tmp_path / "heads.json")
    assert HeadSet.load(path) == hs
    (tmp_path / "bad.json").write_text(json.dumps({"model": "m", "method": "grad", "heads": [[0, 0]],
                                                   "thresholds": {}, "n_probes": 1}))  # fmt: skip
    with pytest.raises(InputError, match="method"):
        HeadSet.load(tmp_path / "bad.json")
    with pytest.raises(InputError, match="cannot read"):
        HeadSet.load(tmp_path / "missing.json")


# --------------------------------------------------------------------------------------------- eval infer
def test_eval_infer_attention_builds_saves_and_reuses_the_head_set(tiny, sample_pdf, tmp_path, capsys):
    from core.cli import main as cli_main
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser
    from data_prep.sample import SAMPLE_FACTS
    from eval.__main__ import COMMANDS
    from eval.schemas import Element, Gold, read_predictions, write_jsonl

    cache = build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), tmp_path / "cache")
    model_dir = tmp_path / "model"
    write_checkpoint(model_dir)
    golds = []
    for i, qa in enumerate(SAMPLE_FACTS.qa[:3]):
        facts = [SAMPLE_FACTS.fact(k) for k in qa.evidence]
        els = tuple(Element(b.page, tuple(b.bbox)) for f in facts for b in cache.blocks if f.text[:30] in b.text)
        golds.append(Gold(i, cache.key, qa.question, qa.answer, "en", "t", els, els).to_json())
    write_jsonl(tmp_path / "gold.jsonl", golds)
    write_jsonl(tmp_path / "probes.jsonl", golds[:2])
    args = ["infer", "--interface", "attention", "--model", str(model_dir), "--gold", str(tmp_path / "gold.jsonl"),
            "--cache-dir", str(tmp_path / "cache"), "--heads", str(tmp_path / "heads.json"),
            "--out", str(tmp_path / "pred.jsonl"), "--total-pixels", "160000", "--attention-kernel", "eager"]  # fmt: skip
    assert (
        cli_main(
            "eval", "", COMMANDS, [*args, "--probes", str(tmp_path / "probes.jsonl"), "--top-k", "3", "--limit", "2"]
        )
        == 0
    )
    hs = HeadSet.load(tmp_path / "heads.json")
    assert (hs.method, len(hs.heads), hs.n_probes) == ("cma", 3, 2) and set(hs.thresholds) == {"image"}
    assert np.asarray(hs.scores).shape == (2, 4)
    assert cli_main("eval", "", COMMANDS, args) == 0  # reuses the saved head set; resumes after the two done questions
    preds = read_predictions(tmp_path / "pred.jsonl")
    assert [p.index for p in preds] == [0, 1, 2] and {p.interface for p in preds} == {"attention"}
    ids = {b.block_id: b for b in cache.blocks}
    for p in preds:
        assert p.citations and all(c.block_id in ids and c.page == ids[c.block_id].page for c in p.citations)
        assert p.answer == SAMPLE_FACTS.qa[p.index].answer and p.extra["answer_source"] == "gold"
    assert "1 attributed, 2 already done" in capsys.readouterr().out


def test_text_layer_evidence_is_corrupted_with_an_equal_length_span(tmp_path):
    """With the text layer in the prompt, CMA also replaces the evidence block's text tokens (same length)."""
    from PIL import Image

    from eval.attention import AttentionModel, Probe, evidence_positions, identify_heads

    write_checkpoint(tmp_path / "m")
    am = AttentionModel(tmp_path / "m", inner="eager")
    size = (200.0, 100.0)
    blocks = [Block(0, 1, (10.0, 10.0, 190.0, 40.0), "text", "revenue grew by 12 % in 2023"),
              Block(1, 1, (10.0, 60.0, 190.0, 90.0), "text", "net income fell")]  # fmt: skip
    layer = [(1, 0, blocks[0].text), (1, 1, blocks[1].text)]

    def probe(i, color):
        img = Image.new("RGB", (128, 64), color)
        return Probe(i, [img], [1], [size], blocks, "how much did revenue grow", "12 %",
                     [(1, blocks[0].bbox)], layer)  # fmt: skip

    probes = [probe(0, "white"), probe(1, "gray")]
    layout, _ = am.attention(probes[0].images, [1], probes[0].question, probes[0].answer, layer)
    gt = evidence_positions(layout, probes[0])
    s, e = layout.text_spans[0]
    assert set(range(s, e)) <= set(gt.tolist())  # the evidence block's text tokens are evidence
    assert not set(range(*layout.text_spans[1])) & set(gt.tolist())
    scores = identify_heads(am, probes, "cma")
    assert scores.shape == (2, 4) and np.isfinite(scores).all()
    mas = identify_heads(am, probes, "mas")
    assert (mas > 0).all()  # every head puts some attention on the evidence
    with pytest.raises(InputError, match="at least two probes"):
        identify_heads(am, probes[:1], "cma")


def test_the_cost_benchmarks_8b_shapes_are_qwen3_vl_8b():
    """benchmarks/bench_attention.py measures the GPU cost on Qwen3-VL-8B-Instruct's shapes with random weights;
    those shapes give the published parameter count (8.77B) and the layout the recorder's estimates assume."""
    from transformers import Qwen3VLForConditionalGeneration

    from tests.support.tiny_qwen3vl import SPECIAL

    vocab = {t: i for i, t in enumerate(SPECIAL + ["[UNK]"])}
    cfg = config(vocab, **QWEN3_VL_8B)
    with torch.device("meta"):
        model = Qwen3VLForConditionalGeneration(cfg)
    assert sum(p.numel() for p in model.parameters()) == 8_767_123_696
    text = cfg.text_config
    assert (text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads) == (36, 32, 8)
    assert cfg.vision_config.out_hidden_size == text.hidden_size == 4096
