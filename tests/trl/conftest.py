"""Shared set-up of the TRL tests: the sample document's cache, its training set in ``data_prep longdocurl``'s
format and a tiny policy warm-started on it (made once per session, offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

SMOKE = dict(questions=2, max_pixels=4 * 32 * 32, sft_steps=120, sft_lr=1e-2, sft_batch=4, gold_share=0.5,
             num_generations=8, lora_rank=8, max_completion_length=64, lr=2e-3)  # fmt: skip
"""Sizes of the smoke run: two questions, eight responses each, small pages; the warm-start leaves the policy
writing one of two well-formed responses per question (its own gold one or the other question's), so every group
has rewards that differ."""


@pytest.fixture(scope="session")
def trl_env(sample_pdf, tmp_path_factory):
    """``(cached, data_dir, warm_policy, settings)``."""
    from data_prep.cache import build_cache
    from data_prep.parsers import get_parser
    from quotecite.trl_demo import DemoSettings, warm_policy, write_sample_set

    root = tmp_path_factory.mktemp("trl")
    cached = build_cache(sample_pdf, get_parser("pdftext"), None, root / "cache")
    s = DemoSettings(seed=0, **SMOKE)
    data = root / "data"
    write_sample_set(cached, data, s.questions, s.max_pixels)
    warm = warm_policy(cached, data, root / "policy", s)
    return cached, Path(data), Path(warm), s
