"""The LongDocURL training-set builder (data_prep/longdocurl.py) on real LongDocURL and MMLongBench-Doc records.

LongDocURL's PDFs are not in the fixtures: the tests generate PDFs with each record's page count (one line of
document-specific words a page, tiny pages so that generation and rendering stay fast). The MMLongBench-Doc
documents are real PDFs with page-level QA records. Pages are rendered under a small pixel budget to keep the suite
fast; the token arithmetic at the real budget is tested in test_qwen_tokens.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
from pathlib import Path

import pytest

from core.cli import main as cli_main
from core.errors import InputError
from data_prep.cache import load_cache
from data_prep.document import Document
from data_prep.longdocurl import (
    CACHE_FAILED,
    DEFAULT_FORMAT_PROMPT,
    DUPLICATE_QID,
    EMPTY_ANSWER,
    EVAL_OVERLAP,
    EVIDENCE_OUT_OF_RANGE,
    MISSING_PDF,
    NO_EVIDENCE,
    PAGE_COUNT_MISMATCH,
    PROMPT_TOO_LONG,
    SPAN_EXCEEDS_WINDOW,
    UNREADABLE_PDF,
    BuildConfig,
    answer_text,
    build,
    load_records,
    place_window,
    render_prompt_text,
    split_by_document,
)
from data_prep.qwen_tokens import PromptBudget, fitted_size
from tests.conftest import fixture_path

PIXELS = 20_000  # per-page budget of the tests (the real one is 1e6)
PAGE = (144.0, 180.0)  # points: tiny pages keep generation and rendering fast
COMMANDS = {"longdocurl": ("data_prep.cmd_longdocurl", "build the GRPO training set")}


def longdocurl_records() -> list[dict]:
    path = fixture_path("dengc2023_LongDocURL", "LongDocURL_sample.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_pdf(
    path: Path, n_pages: int, tag: str, title: str = "", changed_pages: frozenset[int] = frozenset()
) -> Path:
    """``n_pages`` tiny pages, each with one line of words drawn from a generator seeded by ``tag``."""
    from reportlab.pdfgen import canvas

    rng = random.Random(tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    c = canvas.Canvas(str(path), pagesize=PAGE)
    if title:
        c.setTitle(title)
    for page in range(1, n_pages + 1):
        words = [f"{tag}w{rng.randrange(10_000)}" for _ in range(8)]
        if page in changed_pages:
            words = [f"edited{page}x{i}" for i in range(8)]
        c.setFont("Helvetica", 4)
        c.drawString(6, PAGE[1] - 20, f"page {page} " + " ".join(words))
        c.showPage()
    c.save()
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def config(tmp: Path, jsonl: Path, pdf_dir: Path, cache: Path, **kw) -> BuildConfig:
    budget = kw.pop("budget", PromptBudget(max_pixels_per_page=PIXELS))
    return BuildConfig(jsonl=jsonl, pdf_dir=pdf_dir, out=tmp / "out", cache_dir=cache, budget=budget, **kw)


def quiet_build(cfg: BuildConfig):
    from rich.console import Console

    return build(cfg, Console(file=io.StringIO()))


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One block cache for the module: the same PDFs are parsed and embedded once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def ldu(tmp_path_factory) -> dict:
    """The three real LongDocURL records with generated PDFs of their page counts."""
    root = tmp_path_factory.mktemp("ldu")
    records = longdocurl_records()
    for r in records:
        write_pdf(root / "pdfs" / "4000-4999" / f"{r['doc_no']}.pdf", r["total_pages"], r["doc_no"])
    return {"root": root, "records": records, "jsonl": write_jsonl(root / "LongDocURL.jsonl", records)}


@pytest.fixture(scope="module")
def built(ldu, shared_cache, tmp_path_factory) -> dict:
    """The builder run through its command line on the LongDocURL records (summary captured)."""
    out = tmp_path_factory.mktemp("built") / "out"
    argv = [
        "longdocurl",
        "--jsonl",
        str(ldu["jsonl"]),
        "--pdf-dir",
        str(ldu["root"] / "pdfs"),
        "--out",
        str(out),
        "--val",
        "1",
        "--seed",
        "3",
        "--cache-dir",
        str(shared_cache),
        "--max-pixels-per-page",
        str(PIXELS),
    ]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = cli_main("python -m data_prep", "", COMMANDS, argv)
    return {"rc": rc, "out": out, "stdout": stdout.getvalue(), "argv": argv}


def read_split(out: Path, name: str, tmp: Path):
    """Read a split the way EasyR1's RLHFDataset does: datasets.load_dataset("parquet", data_files=...)."""
    import datasets

    return datasets.load_dataset("parquet", data_files=str(out / name), split="train", cache_dir=str(tmp / "hf"))


# ---------------------------------------------------------------------------------------------------- windows
@pytest.mark.parametrize(
    "evidence,n_pages,max_window,expected",
    [
        ((54,), 84, 30, (40, 69)),  # one page: 14 pages before, 15 after (odd spare page goes after)
        ((15, 16), 98, 30, (1, 30)),  # near the start: shifted to page 1
        ((42,), 84, 30, (28, 57)),  # middle of the document
        ((83,), 84, 30, (55, 84)),  # near the end: shifted back so the window ends on the last page
        ((3, 9), 12, 30, (1, 12)),  # document shorter than the window: the whole document
        ((10, 39), 84, 30, (10, 39)),  # evidence spans exactly the window
        ((10, 40), 84, 30, None),  # evidence spans 31 pages: cannot fit
        ((5, 6), 20, 5, (4, 8)),  # span 2 in a window of 5: one page before, two after
        ((1,), 1, 30, (1, 1)),  # one-page document
        ((7, 3, 5), 10, 4, None),  # unsorted evidence spanning 5 pages > 4
    ],
)
def test_window_placement(evidence, n_pages, max_window, expected):
    got = place_window(tuple(sorted(evidence)), n_pages, max_window)
    assert got == expected
    if got is not None:
        first, last = got
        assert first <= min(evidence) and max(evidence) <= last
        assert last - first + 1 == min(max_window, n_pages)


def test_window_placement_rejects_evidence_outside_the_document():
    with pytest.raises(ValueError, match="outside"):
        place_window((85,), 84, 30)


# ---------------------------------------------------------------------------------------------------- records
def test_real_longdocurl_records_load_with_their_answers_as_text(ldu):
    recs = load_records(ldu["jsonl"])
    assert [(r.qid, r.doc_no, r.total_pages, r.evidence_pages) for r in recs] == [
        ("free_gemini15_pro_4055915_42_71_8", "4055915", 84, (54,)),
        ("summary2title_4127644_8_37_8", "4127644", 98, (15, 16)),
        ("extract_fig2tab_4151603_24_53_2", "4151603", 84, (42,)),
    ]
    assert recs[0].answer == "5"  # an integer answer
    assert recs[1].answer == "Dywegy.Merger Transaction"
    assert json.loads(recs[2].answer) == [  # a list answer, kept as a JSON array
        "Table 4.15. Irish digestate samples tested for RBP and OUR for this study",
        "Figure 4.2. Relationship between RBP and OUR in Irish digestate samples(n=5).",
    ]
    assert recs[0].pdf_name == "4055915.pdf"


@pytest.mark.parametrize(
    "value,text",
    [
        (5, "5"),  # integer
        (2.5, "2.5"),  # float
        ("  Yes ", "Yes"),  # string, stripped
        (["a", "b"], '["a", "b"]'),  # list as JSON
        (None, ""),  # missing answer -> empty (skipped as empty_answer)
        (True, "yes"),  # boolean
    ],
)
def test_answer_text(value, text):
    assert answer_text(value) == text


def test_malformed_record_names_the_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"question_id": "q1", "doc_no": "1", "question": "q", "answer": "a", "evidence_pages": [1]}\n{oops\n'
    )
    with pytest.raises(InputError, match=r"bad.jsonl:2: not valid JSON"):
        load_records(path)
    path.write_text('{"question_id": "q1", "doc_no": "1", "answer": "a"}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:1: missing field\(s\) question, evidence_pages"):
        load_records(path)


# ---------------------------------------------------------------------------------------------------- end to end
def test_cli_builds_the_set_and_prints_the_summary(built):
    assert built["rc"] == 0
    text = built["stdout"]
    assert "questions kept" in text and "estimated prompt tokens" in text
    summary = json.loads((built["out"] / "summary.json").read_text())
    assert summary["questions_kept"] == 3 and summary["questions_skipped"] == 0
    assert summary["train_questions"] == 2 and summary["val_questions"] == 1
    assert summary["pages_per_window"] == {"min": 30, "median": 30, "max": 30}
    assert summary["images_per_sample"] == {"min": 30, "median": 30, "max": 30}
    assert summary["rendered_images"] == 90
    lo, hi = summary["estimated_prompt_tokens"]["min"], summary["estimated_prompt_tokens"]["max"]
    assert str(lo) in text and str(hi) in text


def test_parquet_read_by_datasets_has_the_easyr1_columns_and_consistent_rows(built, ldu, shared_cache, tmp_path):
    from data_prep.groundtruth import unpack_ground_truth

    out = built["out"]
    train, val = read_split(out, "train.parquet", tmp_path), read_split(out, "val.parquet", tmp_path)
    assert train.column_names == ["prompt", "images", "answer", "doc_key", "n_images"]
    assert (len(train), len(val)) == (2, 1)
    records = {r["question_id"]: r for r in ldu["records"]}
    expected_windows = {"4055915": (40, 69), "4127644": (1, 30), "4151603": (28, 57)}
    seen = set()
    for row in list(train) + list(val):
        gt = unpack_ground_truth(row["answer"])
        rec = records[gt.qid]
        seen.add(gt.qid)
        assert gt.question == rec["question"] and gt.doc_key == row["doc_key"]
        assert gt.pages == expected_windows[rec["doc_no"]]
        first, last = gt.pages
        assert all(first <= p <= last for p in rec["evidence_pages"])
        n = last - first + 1
        assert row["n_images"] == len(row["images"]) == row["prompt"].count("<image>") == n
        assert row["prompt"] == "<image>" * n + rec["question"]
        assert [Path(p).name.split("_")[0] for p in row["images"]] == [f"p{p:04d}" for p in range(first, last + 1)]
        cached = load_cache(shared_cache, row["doc_key"])
        assert cached.n_pages == rec["total_pages"]
        from PIL import Image

        with Image.open(out / row["images"][0]) as im:
            assert im.format == "JPEG" and im.size == fitted_size(*PAGE, PIXELS)
    assert seen == set(records)


def test_format_prompt_keeps_one_image_slot_per_page(built, tmp_path):
    """EasyR1 renders the format prompt with the prompt as ``content`` and cuts it at every <image>."""
    template = DEFAULT_FORMAT_PROMPT.read_text()
    assert "<image>" not in template
    row = read_split(built["out"], "train.parquet", tmp_path)[0]
    text = render_prompt_text(template, row["prompt"])
    pieces = text.split("<image>")
    assert len(pieces) - 1 == row["n_images"]
    assert '"quotes"' in pieces[-1] and row["prompt"].replace("<image>", "") in pieces[-1]


def test_reward_plugin_scores_a_response_against_a_built_row(built, shared_cache, tmp_path):
    """The loop closes: the reward unpacks a row's answer column and resolves quotes in the cache built here."""
    import importlib.util

    from data_prep.groundtruth import unpack_ground_truth

    row = read_split(built["out"], "train.parquet", tmp_path)[0]
    gt = unpack_ground_truth(row["answer"])
    evidence_page = next(r for r in longdocurl_records() if r["question_id"] == gt.qid)["evidence_pages"][0]
    block = next(b for b in load_cache(shared_cache, row["doc_key"]).blocks if b.page == evidence_page)
    spec = importlib.util.spec_from_file_location(
        "custom_reward_fn_ldu", Path(__file__).resolve().parents[2] / "reward" / "quote_reward.py"
    )
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    good = json.dumps({"answer": gt.answer, "quotes": [block.text]})
    inputs = [{"response": r, "response_length": 9, "ground_truth": row["answer"]} for r in (good, "no JSON")]
    out = plugin.compute_score(inputs, cache_dir=str(shared_cache), judge="lexical", max_crops=6, reward_form="gated")
    assert (out[0]["format_ok"], out[0]["n_citations"], out[0]["answer"]) == (1.0, 1.0, 5.0)
    assert out[0]["mean_similarity"] > 0.99  # the verbatim quote resolves to its own block
    assert (out[1]["format_ok"], out[1]["overall"]) == (0.0, 0.0)


def test_split_has_no_document_in_both_parts(built, tmp_path):
    train = read_split(built["out"], "train.parquet", tmp_path)
    val = read_split(built["out"], "val.parquet", tmp_path)
    assert set(train["doc_key"]).isdisjoint(val["doc_key"])


def test_rerun_does_no_rendering_work(built, monkeypatch):
    before = (built["out"] / "train.parquet").read_bytes()

    def no_render(*args, **kwargs):
        raise AssertionError("a finished document was rendered again")

    monkeypatch.setattr(Document, "render_page", no_render)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert cli_main("python -m data_prep", "", COMMANDS, built["argv"]) == 0
    summary = json.loads((built["out"] / "summary.json").read_text())
    assert summary["rendered_images"] == 0 and summary["documents_from_state"] == 3
    assert (built["out"] / "train.parquet").read_bytes() == before


def test_rerun_after_losing_an_image_renders_only_that_image(ldu, shared_cache, tmp_path):
    cfg = config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", shared_cache, val=1)
    first = quiet_build(cfg)
    lost = cfg.out / first.train_rows[0]["images"][5]
    lost.unlink()
    again = quiet_build(cfg)
    assert (again.rendered_images, again.docs_from_state) == (1, 2)
    assert lost.is_file()
    assert [r["answer"] for r in again.train_rows] == [r["answer"] for r in first.train_rows]


def test_budget_is_lowered_when_the_window_would_not_fit_the_prompt(ldu, shared_cache, tmp_path):
    budget = PromptBudget(max_prompt_length=4_000, max_pixels_per_page=200_000, headroom_tokens=1_024)
    res = quiet_build(config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", shared_cache, val=0, budget=budget))
    rows = res.train_rows
    assert len(rows) == 3 and res.lowered_budgets == 3
    for row in rows:
        assert row["pixels_per_page"] < 200_000
        assert row["prompt_tokens"] + 1_024 <= 4_000
        from PIL import Image

        with Image.open(tmp_path / "out" / row["images"][0]) as im:
            assert im.size == fitted_size(*PAGE, row["pixels_per_page"])


def test_skip_reasons_are_reported_not_raised(ldu, shared_cache, tmp_path):
    base = ldu["records"][0]  # 4055915: 84 pages, evidence page 54
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    shutil.copy(ldu["root"] / "pdfs" / "4000-4999" / "4055915.pdf", pdfs)  # same bytes: its cache entry is reused
    write_pdf(pdfs / "short.pdf", 40, "short")  # the record says 84 pages
    (pdfs / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a PDF body\n")

    def rec(qid, **kw):
        return {**base, "question_id": qid, **kw}

    records = [
        rec("ok"),
        rec("ok", question="a second record with the same id"),  # duplicate_qid
        rec("gone", doc_no="9999999", pdf_path="/x/9999999.pdf"),  # missing_pdf
        rec("short", doc_no="short", pdf_path="/x/short.pdf"),  # page_count_mismatch
        rec("broken", doc_no="broken", pdf_path="/x/broken.pdf"),  # unreadable_pdf
        rec("wide", evidence_pages=[10, 50]),  # evidence_span_exceeds_window
        rec("outside", evidence_pages=[85]),  # evidence_out_of_range
        rec("none", evidence_pages=[]),  # no_evidence_pages
        rec("noanswer", answer=""),  # empty_answer
    ]
    jsonl = write_jsonl(tmp_path / "records.jsonl", records)
    res = quiet_build(config(tmp_path, jsonl, pdfs, shared_cache, val=0))
    reasons = {s["qid"]: s["reason"] for s in res.skipped}
    assert reasons == {
        "ok": DUPLICATE_QID,
        "gone": MISSING_PDF,
        "short": PAGE_COUNT_MISMATCH,
        "broken": UNREADABLE_PDF,
        "wide": SPAN_EXCEEDS_WINDOW,
        "outside": EVIDENCE_OUT_OF_RANGE,
        "none": NO_EVIDENCE,
        "noanswer": EMPTY_ANSWER,
    }
    assert [r["qid"] for r in res.train_rows] == ["ok"]
    lines = (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()
    assert len(lines) == 8
    assert res.summary["skipped_by_reason"][MISSING_PDF] == 1


def test_prompt_too_long_is_a_skip_reason(ldu, shared_cache, tmp_path):
    # at the 65,536-pixel floor a tiny page still costs 82 tokens: 30 pages need 2,460 > 3,000 - 1,024
    budget = PromptBudget(max_prompt_length=3_000, max_pixels_per_page=PIXELS)
    cfg = config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", shared_cache, val=0, budget=budget)
    res = quiet_build(cfg)
    assert [s["reason"] for s in res.skipped] == [PROMPT_TOO_LONG] * 3
    assert not (cfg.out / "train.parquet").exists()


def test_overlap_with_evaluation_pdfs_excludes_text_and_near_duplicates(ldu, shared_cache, tmp_path):
    recs = {r["doc_no"]: r for r in ldu["records"]}
    evals = tmp_path / "eval"
    # the same text as 4055915 with other bytes (a title in the metadata): a whole-text fingerprint match
    write_pdf(evals / "same_text.pdf", 84, "4055915", title="re-saved copy")
    # 4127644 with five of its 98 pages edited: a near-duplicate
    write_pdf(evals / "edited.pdf", 98, "4127644", changed_pages=frozenset({3, 20, 40, 60, 90}))
    write_pdf(evals / "unrelated.pdf", 50, "someone-else")
    (evals / "sub").mkdir()
    (evals / "sub" / "broken.pdf").write_bytes(b"%PDF-1.4 not really a PDF")  # reported, not fatal
    assert (evals / "same_text.pdf").read_bytes() != (ldu["root"] / "pdfs/4000-4999/4055915.pdf").read_bytes()

    cfg = config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", shared_cache, val=0, eval_pdfs=evals)
    res = quiet_build(cfg)
    assert [r["doc_no"] for r in res.train_rows] == ["4151603"]
    assert {s["doc_no"]: s["reason"] for s in res.skipped} == {"4055915": EVAL_OVERLAP, "4127644": EVAL_OVERLAP}
    report = json.loads((cfg.out / "overlap_report.json").read_text())
    excluded = {e["doc_no"]: (Path(e["eval"]).name, e["kind"]) for e in report["excluded"]}
    assert excluded == {"4055915": ("same_text.pdf", "text"), "4127644": ("edited.pdf", "near")}
    near = next(e for e in report["excluded"] if e["kind"] == "near")
    assert 0.5 <= near["jaccard"] < 1.0
    assert report["eval_pdfs"] == 4 and report["train_docs_checked"] == 3
    assert [Path(u["path"]).name for u in report["eval_unreadable"]] == ["broken.pdf"]
    assert report["kept_max_jaccard"] < 0.5 and list(report["kept_max_jaccard_by_doc"]) == ["4151603"]
    assert report["excluded_questions"] == 2
    assert recs["4151603"]["question"] in res.train_rows[0]["prompt"]


def test_cache_failure_is_a_skip_and_the_next_run_retries_the_document(ldu, shared_cache, tmp_path, monkeypatch):
    from data_prep import longdocurl

    def embedder_down(self, pdf):
        raise ConnectionError("embedding server at http://127.0.0.1:9 refused the connection")

    cfg = config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", shared_cache, val=0)
    with monkeypatch.context() as m:
        m.setattr(longdocurl._Builder, "_build_cache", embedder_down)
        down = quiet_build(cfg)
    assert [s["reason"] for s in down.skipped] == [CACHE_FAILED] * 3
    assert "ConnectionError: embedding server" in down.skipped[0]["detail"]
    assert not (cfg.out / ".state" / "docs").exists()  # no done-marker: nothing is remembered as finished
    again = quiet_build(cfg)
    assert (len(again.train_rows), again.skipped, again.docs_from_state) == (3, [], 0)


def test_misspelt_encoder_fails_before_any_work(ldu, tmp_path):
    cfg = config(tmp_path, ldu["jsonl"], ldu["root"] / "pdfs", tmp_path / "cache", encoder="minilmm")
    with pytest.raises(KeyError, match="did you mean 'minilm'"):
        quiet_build(cfg)
    assert not (tmp_path / "out" / ".state").exists()


def test_val_larger_than_the_set_is_an_input_error():
    rows = [{"doc_key": "a"}, {"doc_key": "b"}]
    with pytest.raises(InputError, match="every one of the 2"):
        split_by_document(rows, 2, seed=0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_split_holds_out_whole_documents_until_no_remaining_document_fits(seed):
    sizes = {"a": 5, "b": 3, "c": 2, "d": 1, "e": 4}  # questions per document
    rows = [{"doc_key": d, "i": i} for d, n in sizes.items() for i in range(n)]
    train, val = split_by_document(rows, 6, seed)
    train_docs, val_docs = {r["doc_key"] for r in train}, {r["doc_key"] for r in val}
    assert train_docs.isdisjoint(val_docs) and len(train) + len(val) == 15
    assert len(val) <= 6
    # greedy over the shuffled documents: when 6 is not reached, no training document fits in the gap
    assert len(val) == 6 or all(sizes[d] > 6 - len(val) for d in train_docs)
    assert split_by_document(rows, 6, seed) == (train, val)  # seeded: the same split every time


# ---------------------------------------------------------------------------------------------------- MMLongBench
def test_mmlongbench_documents_and_their_page_level_questions(tmp_path):
    samples = json.loads(fixture_path("mayubo2333_MMLongBench-Doc", "samples_subset.json").read_text())
    pdf_dir = fixture_path("mayubo2333_MMLongBench-Doc", "samples_subset.json").parent
    records = [
        {
            "question_id": f"mmlb-{i}",
            "doc_no": Path(s["doc_id"]).stem,
            "question": s["question"],
            "answer": s["answer"],
            "evidence_pages": s["evidence_pages"],  # a string such as "[15, 16]" in this data set
            "pdf_path": s["doc_id"],
        }
        for i, s in enumerate(samples)
    ]
    jsonl = write_jsonl(tmp_path / "mmlb.jsonl", records)
    # blocks only (encoder "none"): embedding 700 real blocks with MiniLM would cost 20 s on 2 cores, and the
    # LongDocURL tests above already build embedded caches
    cfg = config(tmp_path, jsonl, pdf_dir, tmp_path / "cache", val=3, max_window=5, encoder="none")
    res = quiet_build(cfg)

    skipped = {s["qid"]: s["reason"] for s in res.skipped}
    assert skipped == {"mmlb-3": NO_EVIDENCE, "mmlb-7": SPAN_EXCEEDS_WINDOW}  # [] and [3, 4, 7, 15]
    windows = {r["qid"]: tuple(r["pages"]) for r in res.train_rows + res.val_rows}
    assert windows == {
        "mmlb-0": (13, 17),  # [15, 16] at the end of the 17 pages
        "mmlb-1": (3, 7),  # [4, 5, 6]
        "mmlb-2": (1, 5),  # [1]
        "mmlb-4": (13, 17),  # [16]
        "mmlb-5": (1, 5),  # [1, 2]
        "mmlb-6": (5, 9),  # [7]
        "mmlb-8": (5, 9),  # [6, 7]
        "mmlb-9": (8, 12),  # [10]
        "mmlb-10": (1, 5),
        "mmlb-11": (1, 5),
        "mmlb-12": (1, 5),
    }
    # the only document with at most 3 questions is the 3-question one: it is the validation split
    assert sorted(r["qid"] for r in res.val_rows) == ["mmlb-10", "mmlb-11", "mmlb-12"]
    for row in res.train_rows + res.val_rows:
        with Document.open(pdf_dir / f"{row['doc_no']}.pdf") as doc:
            size = doc.page_sizes[row["pages"][0] - 1]
        from PIL import Image

        with Image.open(cfg.out / row["images"][0]) as im:
            assert im.size == fitted_size(*size, PIXELS)
    cached = load_cache(tmp_path / "cache", res.train_rows[0]["doc_key"])
    assert cached.n_pages == 17 and len(cached.blocks) > 17  # real text blocks from the pdftext parser
    assert cached.embeddings is None
    assert CACHE_FAILED not in res.summary["skipped_by_reason"]
