"""Builders shared by the ``reward_form: lat`` tests (test_lat_reward.py, test_lat_regression.py): the sample PDF's
cache, the EasyR1 plugin loaded by file path, and Chain-of-Evidence responses and ground truths on that PDF."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

from data_prep.groundtruth import GroundTruth, pack_ground_truth
from data_prep.sample import SAMPLE_FACTS

CAPTION = SAMPLE_FACTS.fact("table_caption").text
ROW = SAMPLE_FACTS.fact("table_row").text
QUESTION = "Which test site had the highest annual yield?"


def build_lat_cache(sample_pdf, folder):
    """The sample PDF's cache: pdftext blocks, MiniLM embeddings (the text-layer step embedder's encoder)."""
    from data_prep.cache import build_cache
    from data_prep.encoders import get_encoder
    from data_prep.parsers import get_parser

    return build_cache(sample_pdf, get_parser("pdftext"), get_encoder("minilm"), folder)


def load_plugin():
    """``reward/quote_reward.py`` loaded by file path, as EasyR1 loads it."""
    path = Path(__file__).resolve().parents[2] / "reward" / "quote_reward.py"
    spec = importlib.util.spec_from_file_location("custom_reward_fn", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block(cache, text):
    return next(b for b in cache.blocks if text in b.text)


def grid(cache, b) -> list[int]:
    """A block's box on the 0-1000 grid of its page, rounded outwards."""
    w, h = cache.page_sizes[b.page - 1]
    x0, y0, x1, y1 = b.bbox
    return [math.floor(x0 / w * 1000), math.floor(y0 / h * 1000), math.ceil(x1 / w * 1000), math.ceil(y1 / h * 1000)]


def box(cache, b, image=None) -> str:
    """A block's box object; ``Image_index`` is its page unless ``image`` is given (a page window)."""
    return json.dumps({"bbox_2d": grid(cache, b), "Image_index": b.page if image is None else image})


def gt(cache, evidence=True, qid="q1", pages=None) -> str:
    """A packed ground truth on the sample PDF (gold "Shenzhen"; the table row's box as evidence)."""
    d = json.loads(pack_ground_truth(GroundTruth(qid, cache.key, QUESTION, "Shenzhen", pages)))
    if evidence:
        d["evidence"] = [{"page": 2, "bbox": list(block(cache, "Shenzhen | 150").bbox)}]
    return json.dumps(d)


def response(cache, steps, answer="Shenzhen", answer_block=None, image=None) -> str:
    """A Chain-of-Evidence response: each ``(text, block)`` step with its box, then the answer with its box."""
    think = " ".join(f"{text}\nBounding box: {box(cache, b, image)}" for text, b in steps)
    ans = answer + (f"\nBounding box: {box(cache, answer_block, image)}" if answer_block is not None else "")
    return f"<think>{think}</think>\n<answer>{ans}</answer>"


def inputs(responses, gts) -> list[dict]:
    """EasyR1 reward inputs of paired responses and ground truths."""
    return [{"response": r, "response_length": len(r), "ground_truth": g} for r, g in zip(responses, gts, strict=True)]
