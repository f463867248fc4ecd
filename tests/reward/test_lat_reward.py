"""``reward_form: lat`` (reward/lat.py): each of LAT's terms against hand-computed cases, then the whole reward
through the EasyR1 plugin path (reward/quote_reward.py loaded by file path) on the project's sample PDF, scored by
the pipeline's one scorer (reward/pipeline.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.errors import InputError
from reward.config import RewardConfig
from reward.lat import (
    LAT_KEYS,
    ImageStepEmbedder,
    LatSettings,
    Region,
    accuracy,
    format_reward,
    ground_reward,
    parse_coe,
    step_reward,
)
from reward.pipeline import RewardScorer
from tests.reward.lat_cases import CAPTION, ROW, block, build_lat_cache, gt, inputs, load_plugin, response
from tests.support.openai_server import held_port

S = LatSettings()


# --------------------------------------------------------------------------------------------- R_acc
@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("Shenzhen", "Shenzhen", 1.0),  # EM 1, recall 1
        ("shenzhen.", "Shenzhen", 1.0),  # normalisation
        ("Shenzhen, China", "Shenzhen", 1.0),  # gold contained in the answer; recall 1/1
        ("12 percent", "growth of 12 percent", 0.75),  # answer contained in gold: 0.5 + 0.5 * 2/4
        ("growth 12", "12 percent growth", 0.5 / 3 * 2),  # no containment; recall 2/3 -> 1/3
        ("1,024 units", "1024", 1.0),  # thousands separator joined
        ("Beijing", "Shenzhen", 0.0),
        ("", "Shenzhen", 0.0),  # LAT's released code: "" in gold -> 0.5 (the loophole closed here)
        ("The.", "Shenzhen", 0.0),  # normalises to nothing: same loophole
    ],
)
def test_accuracy_is_half_soft_em_half_recall(pred, gold, expected):
    assert accuracy(pred, gold) == pytest.approx(expected)


# --------------------------------------------------------------------------------------------- R_format
@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>a</think><answer>b</answer>", 1.0),
        ("  <think>a</think>\n\n<answer>b</answer>\n", 1.0),
        ("<think>a</think>", -1.0),
        ("<answer>b</answer>", -1.0),
        ("<think>a</think><answer>b</answer> trailing prose", -1.0),
        ("Shenzhen", -1.0),
    ],
)
def test_format_reward(text, expected):
    assert format_reward(parse_coe(text)) == expected


def test_parse_takes_the_last_sentence_before_each_box():
    r = parse_coe(
        "<think>First look at page two. The table lists yields.\n"
        'Bounding box: {"bbox_2d": [10, 20, 300, 400], "Image_index": 2} Shenzhen leads. '
        "Bounding box: {'bbox_2d': [1, 2, 3, 4], 'Image_index': 1}</think>"
        '<answer>Shenzhen.\nBounding box: {"bbox_2d": [1, 2, 3, 4], "Image_index": 1}</answer>'
    )
    assert [(s.text, s.image, s.box) for s in r.steps] == [
        ("The table lists yields.", 2, (10.0, 20.0, 300.0, 400.0)),
        ("Shenzhen leads.", 1, (1.0, 2.0, 3.0, 4.0)),
    ]
    assert (r.answer, len(r.answer_boxes), r.format_ok) == ("Shenzhen", 1, True)


# --------------------------------------------------------------------------------------------- R_step
A = Region(1, (0.0, 0.0, 10.0, 10.0), "a")
B = Region(1, (20.0, 0.0, 30.0, 10.0), "b")  # disjoint from A
HALF = Region(1, (0.0, 0.0, 10.0, 5.0), "c")  # IoU(A, HALF) = 0.5 exactly
THIRD = Region(1, (5.0, 0.0, 15.0, 10.0), "d")  # IoU(A, THIRD) = 1/3
A_P2 = Region(2, (0.0, 0.0, 10.0, 10.0), "e")  # A's box on another page


@pytest.mark.parametrize(
    "sims, regions, acc, expected",
    [
        ([0.5, 0.4], [A, B], 1.0, 1.0),  # min sim 0.4 > 0.3, no overlap: 0.5 + 0.5
        ([0.5, 0.3], [A, B], 1.0, 0.0),  # min sim must exceed tau (0.3 is not above 0.3)
        ([0.5, 0.31], [A, B], 1.0, 1.0),
        ([0.9, 0.9], [A, HALF], 1.0, 0.5),  # IoU 0.5 >= threshold: redundant boxes lose the second half
        ([0.9, 0.9], [A, THIRD], 1.0, 1.0),  # IoU 1/3 < 0.5
        ([0.9, 0.9], [A, A_P2], 1.0, 1.0),  # the same box on different pages does not overlap
        ([0.9], [A], 1.0, 0.0),  # one step is not a chain (min_steps = 2)
        ([0.9, 0.9], [A, None], 1.0, 0.0),  # a step that cannot be placed scores similarity 0
        ([0.9, 0.9], [A, B], 0.39, 0.0),  # paid only when R_acc >= epsilon = 0.4
        ([0.9, 0.9], [A, B], 0.4, 1.0),
        ([0.9, 0.9], [A, HALF], 0.0, 0.0),
        ([], [], 1.0, 0.0),
    ],
)
def test_step_reward(sims, regions, acc, expected):
    assert step_reward(sims, regions, acc, S).reward == expected


def test_step_reward_reports_min_similarity_and_max_iou():
    r = step_reward([0.7, 0.4, 0.9], [A, THIRD, B], 1.0, S)
    assert (r.min_similarity, r.max_iou) == (pytest.approx(0.4), pytest.approx(1 / 3))


def test_step_thresholds_are_settings():
    strict = LatSettings(tau=0.5, overlap_iou=0.3)
    assert step_reward([0.45, 0.9], [A, B], 1.0, strict).reward == 0.0
    assert step_reward([0.9, 0.9], [A, THIRD], 1.0, strict).reward == 0.5
    with pytest.raises(InputError, match="unknown key"):
        LatSettings.from_dict({"taus": 0.3})
    with pytest.raises(InputError, match="epsilon"):
        LatSettings.from_dict({"epsilon": 2})


# --------------------------------------------------------------------------------------------- R_ground
def _answer(n: int):
    box = '{"bbox_2d": [0, 0, 10, 10], "Image_index": 1}'
    return parse_coe(f"<think>x {box}</think><answer>y " + " ".join([box] * n) + "</answer>")


GOLD = [(1, (0.0, 0.0, 10.0, 10.0))]


@pytest.mark.parametrize(
    "answer_regions, step_regions, evidence, expected",
    [
        ([A], [A], GOLD, 1.0),
        ([THIRD], [THIRD], GOLD, 0.0),  # IoU 1/3
        ([HALF], [HALF], GOLD, 0.0),  # IoU 0.5 is not above 0.5
        ([A_P2], [A_P2], GOLD, 0.0),  # right box, wrong page
        ([A], [B], GOLD, 0.0),  # the answer's source is not one of the chain's steps
        ([A], [A], [], 0.0),  # no gold boxes: nothing to ground against
    ],
)
def test_ground_reward(answer_regions, step_regions, evidence, expected):
    assert ground_reward(_answer(len(answer_regions)), answer_regions, step_regions, evidence, S) == expected


# --------------------------------------------------------------------------------------------- the paper's example
def test_the_worked_example_of_the_papers_framework_figure_scores_four():
    """The "Rule-based Reward Design" panel of LAT's framework figure: a three-step chain on image 1, the answer
    "24,000" for the gold "24000" with the box of step 1, step similarities 0.46 ... 0.52; the figure pays
    R_acc = R_step = R_ground = R_format = 1 and sums them, R = 4."""
    from reward.scoring import get_reward_form

    weights = get_reward_form("lat").weights(None)

    boxes = [(46, 38, 546, 308), (46, 321, 546, 340), (163, 215, 239, 254)]
    texts = ["Figure 4 in image 1 seems relevant.", "The caption mentions group B Streptococcal disease.",
             "The pie chart section labeled Latin America shows a value of 24,000."]  # fmt: skip

    def box(b):
        return "Bounding box: " + json.dumps({"bbox_2d": list(b), "Image_index": 1})

    chain = "\n".join(f"{i + 1}. {t} {box(b)}" for i, (t, b) in enumerate(zip(texts, boxes, strict=True)))
    parsed = parse_coe(f"<think>{chain}</think>\n<answer>24,000.\n{box(boxes[0])}</answer>")
    steps = [Region(1, tuple(float(x) for x in b), t) for b, t in zip(boxes, texts, strict=True)]
    terms = {
        "format": format_reward(parsed),
        "accuracy": (acc := accuracy(parsed.answer, "24000")),
        "step": step_reward([0.46, 0.49, 0.52], steps, acc, S).reward,
        "ground": ground_reward(parsed, [steps[0]], steps, [(1, steps[0].bbox)], S),
    }
    assert [s.text for s in parsed.steps] == texts and terms == dict.fromkeys(terms, 1.0)
    assert sum(weights[k] * v for k, v in terms.items()) == 4.0


# --------------------------------------------------------------------------------------------- plugin path
@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    return build_lat_cache(sample_pdf, tmp_path_factory.mktemp("lat-cache"))


@pytest.fixture(scope="module")
def plugin():
    return load_plugin()


def run(plugin, cache, responses, gts, **kw):
    return plugin.compute_score(inputs(responses, gts), cache_dir=str(cache.path.parent), reward_form="lat", **kw)


def test_whole_reward_through_the_plugin(plugin, cache):
    cap, table, footer = block(cache, CAPTION), block(cache, "Shenzhen | 150"), block(cache, "Page 2 of 4")
    good = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    cases = {
        # format 1 + acc 1 + step 1 (both crops match their text, disjoint boxes) + ground 1 (answer box = gold)
        "good": (good, 4.0),
        # empty answer: acc 0 closes the gate (LAT's code would pay acc 0.5 and the step reward); ground still 1
        "empty_answer": (response(cache, [(CAPTION, cap), (ROW, table)], answer="", answer_block=table), 2.0),
        # a step whose region (the footer) does not show its text: min similarity below tau
        "unsupported_step": (response(cache, [(CAPTION, cap), (ROW, footer)], answer_block=table), 2.0),
        # two steps on the same region: IoU 1 >= 0.5, only the first half of R_step
        "overlap": (response(cache, [(ROW, table), (ROW, table)], answer_block=table), 3.5),
        # wrong answer: acc 0, step gated; grounding does not depend on the answer (as in LAT)
        "wrong": (response(cache, [(CAPTION, cap), (ROW, table)], answer="Beijing", answer_block=table), 2.0),
        "prose": ("Shenzhen has the highest yield.", -1.0),
    }
    out = run(plugin, cache, [r for r, _ in cases.values()], [gt(cache)] * len(cases))
    assert all(list(d) == list(LAT_KEYS) and all(type(v) is float for v in d.values()) for d in out)
    got = {name: d for name, d in zip(cases, out, strict=True)}
    assert {k: d["overall"] for k, d in got.items()} == pytest.approx({k: v for k, (_, v) in cases.items()})
    g = got["good"]
    assert (g["format"], g["accuracy"], g["step"], g["ground"], g["n_steps"], g["ground_known"]) == (
        1.0, 1.0, 1.0, 1.0, 2.0, 1.0)  # fmt: skip
    assert g["min_similarity"] > 0.3 and g["max_step_iou"] == 0.0
    assert got["unsupported_step"]["min_similarity"] < 0.3 and got["unsupported_step"]["step"] == 0.0
    assert got["overlap"]["max_step_iou"] == pytest.approx(1.0) and got["overlap"]["step"] == 0.5
    assert got["empty_answer"]["accuracy"] == 0.0 and got["empty_answer"]["step"] == 0.0


def test_without_gold_boxes_grounding_is_unknown(plugin, cache):
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    (d,) = run(plugin, cache, [response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)],
               [gt(cache, evidence=False)])  # fmt: skip
    assert (d["ground"], d["ground_known"], d["overall"]) == (0.0, 0.0, 3.0)


def test_weights_and_settings_come_from_the_reward_kwargs(plugin, cache):
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    r = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    (d,) = run(plugin, cache, [r], [gt(cache)], weights={"format": 0.0, "step": 2.0}, lat={"tau": 0.999})
    assert (d["step"], d["overall"]) == (0.0, 2.0)  # tau 0.999: the table row (a whole table crop) fails
    with pytest.raises(InputError, match="no weight 'answer'"):
        run(plugin, cache, [r], [gt(cache)], weights={"answer": 1.0})
    with pytest.raises(InputError, match="lat"):
        run(plugin, cache, [r], [gt(cache)], lat={"tua": 0.3})


def test_bad_ground_truth_evidence_names_the_question(plugin, cache):
    d = json.loads(gt(cache))
    d["evidence"] = [{"page": 2, "bbox": [5, 5, 1, 1]}]
    with pytest.raises(InputError, match=r"reward input 0: ground truth 'q1': evidence\[0\]"):
        run(plugin, cache, ["<think></think><answer>x</answer>"], [json.dumps(d)])


def test_page_window_maps_image_index_to_pages(plugin, cache):
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    d = json.loads(gt(cache))
    d["pages"] = [2, 3]  # the policy saw pages 2-3: Image_index 1 is page 2
    text = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table).replace(
        '"Image_index": 2', '"Image_index": 1'
    )
    (ok,) = run(plugin, cache, [text], [json.dumps(d)])
    assert (ok["step"], ok["ground"], ok["n_placed_steps"]) == (1.0, 1.0, 2.0)
    out_of_window = text.replace('"Image_index": 1', '"Image_index": 3')
    (bad,) = run(plugin, cache, [out_of_window], [json.dumps(d)])
    assert (bad["n_placed_steps"], bad["step"], bad["ground"]) == (0.0, 0.0, 0.0)


def _lat(inputs, cfg, embedder):
    """The LAT breakdowns of ``inputs`` from the pipeline's scorer with an injected step embedder."""
    return [b for b, _ in RewardScorer(cfg, step_embedder=embedder).score(inputs)]


@pytest.fixture
def closed_port():
    with held_port() as port:
        yield port


def test_unreachable_image_embedder_makes_the_response_unscorable(cache, closed_port):
    from data_prep.encoders import get_encoder

    enc = get_encoder("qwen3-vl-embedding", transport="http", url=f"http://127.0.0.1:{closed_port}/v1", dim=8,
                      max_retries=0, timeout_s=2)  # fmt: skip
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    good = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    wrong = response(cache, [(CAPTION, cap), (ROW, table)], answer="Beijing", answer_block=table)
    inputs = [{"response": r, "response_length": 1, "ground_truth": gt(cache)} for r in (good, wrong)]
    cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical")
    a, b = _lat(inputs, cfg, ImageStepEmbedder(enc))
    # the wrong answer never needed the embedder (gated): its reward is known, 2.0; the good one gets the mean
    assert (b.unscorable, b.overall) == (0.0, 2.0)
    assert (a.unscorable, a.overall) == (1.0, 2.0)


def test_one_embedder_call_per_document_and_a_failure_stays_with_its_response(cache):
    """The steps of every response on one document go to the embedder together; when that call fails, each
    response's steps are embedded alone, so only the response whose steps fail is unscorable."""
    from data_prep.encoders import get_encoder
    from reward.lat import TextLayerStepEmbedder

    class Recording(TextLayerStepEmbedder):
        def __init__(self, poison=None):
            super().__init__(get_encoder("minilm"))
            self.poison, self.calls = poison, []

        def similarities(self, cached, regions, doc):
            self.calls.append(len(regions))
            if any(r.text == self.poison for r in regions):
                raise RuntimeError("embedding server hiccup")
            return super().similarities(cached, regions, doc)

    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    good = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    odd = response(cache, [("Yields by site.", cap), (ROW, table)], answer_block=table)
    inputs = [{"response": r, "response_length": 1, "ground_truth": gt(cache)} for r in (good, odd, good)]
    cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical")
    clean = Recording()
    assert [d.overall for d in _lat(inputs, cfg, clean)] == [4.0, 4.0, 4.0]
    assert clean.calls == [6]
    poisoned = Recording(poison="Yields by site.")
    out = _lat(inputs, cfg, poisoned)
    assert poisoned.calls == [6, 2, 2, 2]
    assert [(d.unscorable, d.overall) for d in out] == [(0.0, 4.0), (1.0, 4.0), (0.0, 4.0)]


# --------------------------------------------------------------------------------------------- image attribution
def test_image_attribution_with_a_tiny_qwen3vl(cache, tmp_path_factory):
    """The multimodal path: crops of the step regions embedded as images by the Qwen3-VL encoder interface."""
    pytest.importorskip("transformers")
    from data_prep.encoders import get_encoder
    from tests.support.tiny_qwen3vl import SMALL_PIXELS, write_checkpoint

    path = tmp_path_factory.mktemp("tiny-qwen3-vl-lat")
    write_checkpoint(path)
    enc = get_encoder("qwen3-vl-embedding", model_path=str(path), model="tiny", max_pixels=SMALL_PIXELS)
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    r = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical", lat={"tau": -1.0})
    embedder = ImageStepEmbedder(enc, dpi=72)
    (d,) = _lat([{"response": r, "response_length": 1, "ground_truth": gt(cache)}], cfg, embedder)
    from reward.lat import locate

    regions = [locate(s, None, cache) for s in parse_coe(r).steps]
    with cache.open_pdf() as doc:
        crops = [doc.crop(x.page, x.bbox, dpi=72) for x in regions]
    img, txt = enc.embed_images(crops), enc.embed_texts([CAPTION, ROW])
    assert img.shape == (2, enc.dim)
    np.testing.assert_allclose(np.linalg.norm(img, axis=1), 1.0, atol=1e-5)
    expected = float(np.min(np.einsum("nd,nd->n", img, txt)))
    assert d.min_similarity == pytest.approx(expected, abs=1e-5)
    assert d.step == 1.0  # tau -1: any similarity passes; disjoint boxes, right answer


def test_a_sliver_of_a_box_is_cropped_not_a_crash(cache):
    """A step box of a thousandth of a grid unit is a real region of the page for the image embedder."""
    from data_prep.encoders import get_encoder

    class Recording:
        name = "recording"

        def __init__(self):
            self.enc = get_encoder("minilm")
            self.sizes = []

        def embed_images(self, images):
            self.sizes += [im.size for im in images]
            return self.enc.embed_texts(["x"] * len(images))

        def embed_texts(self, texts):
            return self.enc.embed_texts(texts)

    rec = Recording()
    sliver = '{"bbox_2d": [100, 100, 100.001, 100.001], "Image_index": 1}'
    other = '{"bbox_2d": [100, 200, 900, 300], "Image_index": 1}'
    text = f"<think>First. Bounding box: {sliver} Second. Bounding box: {other}</think><answer>Shenzhen</answer>"
    cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical")
    (d,) = _lat([{"response": text, "response_length": 1, "ground_truth": gt(cache)}], cfg, ImageStepEmbedder(rec))
    assert d.n_placed_steps == 2 and d.unscorable == 0.0
    assert min(min(s) for s in rec.sizes) >= 6  # widened to 4 points: ~8 px at 150 dpi (renderer rounding)


def test_each_batch_appends_its_counters_for_the_launch(plugin, cache, tmp_path, monkeypatch):
    monkeypatch.setenv("QUOTECITE_METRICS_DIR", str(tmp_path / "metrics"))
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    good = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    run(plugin, cache, [good, "prose"], [gt(cache)] * 2)
    (line,) = (tmp_path / "metrics" / "reward_counters.jsonl").read_text().splitlines()
    d = json.loads(line)
    assert all(isinstance(v, int | float) for v in d.values())  # the pipeline's one writer: flat numbers
    assert (d["responses"], d["format_ok"], d["step_paid"], d["ground_paid"], d["unscorable"]) == (2, 1, 1, 1, 0)
    assert d["judge_requests"] == 0 and d["seconds_embed"] >= 0  # no judge: only LAT's step embedder ran


# --------------------------------------------------------------------------------------------- python -m reward score
def _score_cli(tmp_path, cache, rows, *extra):
    from core.cli import main
    from reward.__main__ import COMMANDS

    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(
        "".join(json.dumps({"response": r, "response_length": 1, "ground_truth": g}) + "\n" for r, g in rows)
    )
    argv = ["score", "--inputs", str(src), "--cache-dir", str(cache.path.parent), "--out", str(out), *extra]
    rc = main("python -m reward", "", COMMANDS, argv)
    return rc, ([json.loads(x) for x in out.read_text().splitlines()] if out.exists() else None)


def test_reward_score_cli_scores_with_the_lat_form(cache, tmp_path, capsys):
    """``python -m reward score --reward-form lat``: the plugin's numbers, in input order, with the chain's boxes as
    citations in points; no judge is called (none is configured or reachable)."""
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    good = response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table)
    empty = response(cache, [(CAPTION, cap), (ROW, table)], answer="", answer_block=table)
    other = json.loads(gt(cache, qid="q2"))
    rows = [(good, gt(cache)), ("prose", json.dumps(other)), (empty, gt(cache))]  # q1's rows apart: regrouped
    rc, out = _score_cli(tmp_path, cache, rows, "--reward-form", "lat")
    assert rc == 0
    assert [d["overall"] for d in out] == pytest.approx([4.0, -1.0, 2.0])
    assert all(set(LAT_KEYS) <= set(d) for d in out)
    w, h = cache.page_sizes[1]
    cits = out[0]["citations"]
    assert [(c["page"], c["role"], c["text"]) for c in cits] == [(2, "step", CAPTION), (2, "step", ROW),
                                                                  (2, "answer", "Shenzhen")]  # fmt: skip
    x0, y0, x1, y1 = cits[2]["bbox"]
    assert x0 <= table.bbox[0] and y0 <= table.bbox[1] and x1 >= table.bbox[2] and y1 >= table.bbox[3]
    assert x1 - x0 < table.bbox[2] - table.bbox[0] + w / 1000 * 2  # the grid rounds outwards by under a unit
    assert out[1]["citations"] == []
    assert "reward_form lat" in capsys.readouterr().err


def test_reward_score_cli_takes_the_lat_recipe_and_overrides(cache, tmp_path, monkeypatch):
    """``--recipe recipes/qwen3vl_8b_lat.yaml`` selects the LAT form with the recipe's constants; ``--lat`` overrides
    one (tau 0.999: no step crop passes, R_step 0)."""
    monkeypatch.delenv("QUOTECITE_CACHE_DIR", raising=False)  # the recipe's cache_dir is unset: --cache-dir gives it
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "qwen3vl_8b_lat.yaml"
    cap, table = block(cache, CAPTION), block(cache, "Shenzhen | 150")
    rows = [(response(cache, [(CAPTION, cap), (ROW, table)], answer_block=table), gt(cache))]
    rc, (d,) = _score_cli(tmp_path, cache, rows, "--recipe", str(recipe))
    assert rc == 0 and (d["step"], d["overall"]) == (1.0, 4.0)
    rc, (d,) = _score_cli(tmp_path, cache, rows, "--recipe", str(recipe), "--lat", "tau=0.999")
    assert rc == 0 and (d["step"], d["overall"]) == (0.0, 3.0)


def test_reward_score_cli_lat_bad_input_is_one_clear_line(cache, tmp_path, capsys):
    good = response(cache, [(CAPTION, block(cache, CAPTION))], answer_block=None)
    rc, out = _score_cli(tmp_path, cache, [(good, gt(cache))], "--lat", "tau=0.5")
    assert rc == 2 and out is None
    assert "--lat applies to --reward-form lat" in capsys.readouterr().err
    rc, _ = _score_cli(tmp_path, cache, [(good, gt(cache))], "--reward-form", "lat", "--lat", "tau")
    assert rc == 2 and "--lat 'tau': expected KEY=VALUE" in capsys.readouterr().err
    rc, _ = _score_cli(tmp_path, cache, [(good, gt(cache))], "--reward-form", "lat", "--lat", "tua=0.3")
    assert rc == 2 and "unknown key(s) ['tua']" in capsys.readouterr().err
    d = json.loads(gt(cache))
    d["evidence"] = [{"page": 0, "bbox": [0, 0, 1, 1]}]
    rc, _ = _score_cli(tmp_path, cache, [("x", gt(cache)), ("y", json.dumps(d))], "--reward-form", "lat")
    assert rc == 2
    err = capsys.readouterr().err
    assert "in.jsonl: input 2: ground truth 'q1': evidence[0]" in err
    quote_recipe = Path(__file__).resolve().parents[2] / "recipes" / "qwen3vl_8b_grpo.yaml"
    other = tmp_path / "other.yaml"
    other.write_text(quote_recipe.read_text().replace("./reward/quote_reward.py", "./elsewhere.py"))
    rc, _ = _score_cli(tmp_path, cache, [(good, gt(cache))], "--recipe", str(other))
    assert rc == 2 and "not reward/quote_reward.py" in capsys.readouterr().err
