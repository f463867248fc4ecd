"""``reward_form: lat`` numbers pinned: every LAT breakdown of a fixed set of responses on the project's sample
PDF (pdftext blocks, MiniLM text-layer step embedder) equals the value recorded below.

The expected values were produced by the pre-refactor implementation (``reward/lat.py``'s own ``LatScorer``, before
LAT became a reward form of ``reward/pipeline.py``'s one scorer) and pasted here; the refactor must not change a
number. ``embed_s`` (wall time) is left out."""

from __future__ import annotations

import pytest

from tests.reward.lat_cases import CAPTION, ROW, block, build_lat_cache, gt, inputs, load_plugin, response


@pytest.fixture(scope="module")
def cache(sample_pdf, tmp_path_factory):
    return build_lat_cache(sample_pdf, tmp_path_factory.mktemp("lat-reg"))


@pytest.fixture(scope="module")
def plugin():
    return load_plugin()


def _responses(cache, image=None) -> dict[str, str]:
    cap, table, footer = block(cache, CAPTION), block(cache, "Shenzhen | 150"), block(cache, "Page 2 of 4")

    def resp(steps, answer="Shenzhen", answer_block=table):
        return response(cache, steps, answer, answer_block, image)

    return {
        "good": resp([(CAPTION, cap), (ROW, table)]),
        "empty_answer": resp([(CAPTION, cap), (ROW, table)], answer=""),
        "unsupported_step": resp([(CAPTION, cap), (ROW, footer)]),
        "overlap": resp([(ROW, table), (ROW, table)]),
        "wrong": resp([(CAPTION, cap), (ROW, table)], answer="Beijing"),
        "partial": resp([(CAPTION, cap), (ROW, table)], answer="zhen"),  # soft EM 1, recall 0: R_acc 0.5
        "answer_box_off_gold": resp([(CAPTION, cap), (ROW, table)], answer_block=cap),
        "three_steps": resp([(CAPTION, cap), (ROW, table), ("The footer.", footer)]),
        "unplaced_step": resp([(CAPTION, cap), (ROW, table)]).replace(
            "Bounding box: {", 'Bounding box: {"bbox_2d": [5, 5, 1, 1], "Image_index": 1} x. Bounding box: {', 1
        ),
        "no_answer_box": resp([(CAPTION, cap), (ROW, table)], answer_block=None),
        "bad_format": resp([(CAPTION, cap), (ROW, table)]) + " trailing prose",
        "prose": "Shenzhen has the highest yield.",
    }


def _score(plugin, cache, batch, embedder=None, **kw) -> list[dict]:
    """The LAT breakdowns of ``batch`` (through the EasyR1 plugin, or the scorer when an embedder is injected)."""
    if embedder is None:
        out = plugin.compute_score(batch, cache_dir=str(cache.path.parent), reward_form="lat", **kw)
    else:
        from reward.config import RewardConfig
        from reward.pipeline import RewardScorer

        cfg = RewardConfig(cache_dir=str(cache.path.parent), reward_form="lat", judge="lexical", **kw)
        out = [b.to_dict() for b, _ in RewardScorer(cfg, step_embedder=embedder).score(batch)]
    return [{k: v for k, v in d.items() if k != "embed_s"} for d in out]


def _poisoned(poison: str):
    from data_prep.encoders import get_encoder
    from reward.lat import TextLayerStepEmbedder

    class Poisoned(TextLayerStepEmbedder):
        def similarities(self, cached, regions, doc):
            if any(r.text == poison for r in regions):
                raise RuntimeError("embedding server hiccup")
            return super().similarities(cached, regions, doc)

    return Poisoned(get_encoder("minilm"))


def _check(got: list[dict], expected: dict[str, dict], names) -> None:
    assert len(got) == len(names)
    for name, d in zip(names, got, strict=True):
        assert list(d) == list(expected[name]), name
        assert d == pytest.approx(expected[name], abs=1e-6), name


LAT_FIELDS = ("overall", "format", "accuracy", "step", "ground", "format_ok", "n_steps", "n_placed_steps",
              "min_similarity", "max_step_iou", "ground_known", "unscorable")  # fmt: skip
"""The breakdown's keys in order (``embed_s`` left out)."""


def _row(*values: float) -> dict[str, float]:
    return dict(zip(LAT_FIELDS, values, strict=True))


# Produced by the pre-refactor implementation (reward/lat.py's LatScorer) and pasted; never recomputed.
EXPECTED_DEFAULT: dict[str, dict] = {
    "good": _row(4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "empty_answer": _row(2.0, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "unsupported_step": _row(2.0, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.10222356, 0.0, 1.0, 0.0),
    "overlap": _row(3.5, 1.0, 1.0, 0.5, 1.0, 1.0, 2.0, 2.0, 0.590873122, 1.0, 1.0, 0.0),
    "wrong": _row(2.0, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "partial": _row(3.5, 1.0, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "answer_box_off_gold": _row(3.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "three_steps": _row(2.0, 1.0, 1.0, 0.0, 0.0, 1.0, 3.0, 3.0, 0.260771811, 0.0, 0.0, 0.0),
    "unplaced_step": _row(3.0, 1.0, 1.0, 0.0, 1.0, 1.0, 3.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "no_answer_box": _row(3.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "bad_format": _row(2.0, -1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "prose": _row(-1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0),
}
EXPECTED_SETTINGS: dict[str, dict] = {
    "good": _row(1.75, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "empty_answer": _row(0.75, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "unsupported_step": _row(1.5, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "overlap": _row(1.75, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 1.0, 1.0, 0.0),
    "wrong": _row(0.75, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "partial": _row(1.25, 1.0, 0.5, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "answer_box_off_gold": _row(1.5, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "three_steps": _row(3.75, 1.0, 1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 0.260771811, 0.0, 1.0, 0.0),
    "unplaced_step": _row(1.75, 1.0, 1.0, 0.0, 1.0, 1.0, 3.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "no_answer_box": _row(1.5, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "bad_format": _row(0.75, -1.0, 1.0, 0.0, 1.0, 0.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "prose": _row(-0.5, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0),
}
EXPECTED_WINDOW: dict[str, dict] = {
    "good": _row(4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "empty_answer": _row(2.0, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "unsupported_step": _row(2.0, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.10222356, 0.0, 1.0, 0.0),
    "overlap": _row(3.5, 1.0, 1.0, 0.5, 1.0, 1.0, 2.0, 2.0, 0.590873122, 1.0, 1.0, 0.0),
    "wrong": _row(2.0, 1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "partial": _row(3.5, 1.0, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "answer_box_off_gold": _row(3.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "three_steps": _row(3.0, 1.0, 1.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.260771811, 0.0, 1.0, 0.0),
    "unplaced_step": _row(3.0, 1.0, 1.0, 0.0, 1.0, 1.0, 3.0, 2.0, 0.0, 0.0, 1.0, 0.0),
    "no_answer_box": _row(3.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "bad_format": _row(2.0, -1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    "prose": _row(-1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0),
}
EXPECTED_POISONED: list[dict] = [
    _row(4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    _row(3.75, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0),
    _row(3.5, 1.0, 1.0, 0.5, 1.0, 1.0, 2.0, 2.0, 0.590873122, 1.0, 1.0, 0.0),
    _row(4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 0.590873122, 0.0, 1.0, 0.0),
    _row(4.0, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 0.0, 0.0, 1.0, 1.0),
]


def test_default_settings(plugin, cache):
    rs = _responses(cache)
    names = list(rs)
    gts = [gt(cache)] * len(names)
    gts[names.index("three_steps")] = gt(cache, qid="q2", evidence=False)
    _check(_score(plugin, cache, inputs(rs.values(), gts)), EXPECTED_DEFAULT, names)


def test_weights_and_lat_settings(plugin, cache):
    rs = _responses(cache)
    names = list(rs)
    out = _score(plugin, cache, inputs(rs.values(), [gt(cache)] * len(names)),
                 weights={"format": 0.5, "step": 2.0, "ground": 0.25}, lat={"tau": 0.2, "overlap_iou": 0.9,
                                                                             "epsilon": 0.6, "min_steps": 3})  # fmt: skip
    _check(out, EXPECTED_SETTINGS, names)


def test_page_window(plugin, cache):
    rs = _responses(cache, image=1)  # the policy saw pages 2-3: Image_index 1 is page 2
    names = list(rs)
    out = _score(plugin, cache, inputs(rs.values(), [gt(cache, pages=[2, 3])] * len(names)))
    _check(out, EXPECTED_WINDOW, names)


def test_a_failed_embedding_gets_its_groups_mean(plugin, cache):
    rs = _responses(cache)
    odd = rs["good"].replace(CAPTION, "Yields by site.", 1)
    batch = [rs["good"], odd, rs["overlap"], rs["good"], odd]
    gts = [gt(cache), gt(cache), gt(cache), gt(cache, qid="q2"), gt(cache, qid="q2")]
    out = _score(plugin, cache, inputs(batch, gts), embedder=_poisoned("Yields by site."), lat={"tau": -1.0})
    assert len(out) == len(EXPECTED_POISONED)
    for d, e in zip(out, EXPECTED_POISONED, strict=True):
        assert d == pytest.approx(e, abs=1e-6)
