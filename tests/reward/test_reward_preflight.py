"""``python -m reward check`` (reward/preflight.py) on a data set built by ``python -m data_prep longdocurl`` from
generated PDFs, against the scripted OpenAI server: a clean set passes; each breakage fails with its kind named."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.cli import main as cli_main
from data_prep.groundtruth import pack_ground_truth, unpack_ground_truth
from recipes.reader import apply_overrides, resolve_env
from reward.config import RewardConfig
from reward.preflight import FAILURE_PREFIX, check_training_set
from tests.data_prep.test_longdocurl import PAGE, PIXELS, write_jsonl, write_pdf
from tests.support.openai_server import Reply, ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[2]
COMMANDS = {"check": ("reward.cmd_check", "check")}
RECORDS = [  # LongDocURL-shaped; d1 has 6 pages, d2 4; windows of 3 pages
    {"question_id": "q1", "doc_no": "d1", "question": "What is on page 2?", "answer": "alpha",
     "evidence_pages": [2], "total_pages": 6},
    {"question_id": "q2", "doc_no": "d1", "question": "What is on page 5?", "answer": 3.5,
     "evidence_pages": [5], "total_pages": 6},
    {"question_id": "q3", "doc_no": "d2", "question": "What is on page 1?", "answer": "beta",
     "evidence_pages": [1], "total_pages": 4},
]  # fmt: skip


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The training set as `python -m data_prep longdocurl` writes it (block cache with MiniLM in OUT/cache)."""
    root = tmp_path_factory.mktemp("preflight")
    for r in RECORDS:
        write_pdf(root / "pdfs" / f"{r['doc_no']}.pdf", r["total_pages"], r["doc_no"])
    jsonl = write_jsonl(root / "ldu.jsonl", RECORDS)
    argv = ["longdocurl", "--jsonl", str(jsonl), "--pdf-dir", str(root / "pdfs"), "--out", str(root / "out"),
            "--val", "1", "--max-window", "3", "--max-pixels-per-page", str(PIXELS)]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli_main("python -m data_prep", "", {"longdocurl": ("data_prep.cmd_longdocurl", "")}, argv) == 0
    return root / "out"


@pytest.fixture
def data(built, tmp_path) -> Path:
    """A private copy of the built set (images, parquet, cache) that a test may break."""
    out = tmp_path / "out"
    shutil.copytree(built, out)
    for manifest in (out / "cache").glob("*/manifest.json"):
        assert manifest.parent.name == json.loads(manifest.read_text())["doc_key"]
    return out


def rows(out: Path) -> list[tuple[str, int, dict]]:
    return [(name, i, r) for name in ("train.parquet", "val.parquet")
            for i, r in enumerate(pq.read_table(out / name).to_pylist())]  # fmt: skip


def row_of(out: Path, qid: str) -> tuple[str, int, dict]:
    return next(x for x in rows(out) if unpack_ground_truth(x[2]["answer"]).qid == qid)


def rewrite(out: Path, qid: str, **changes) -> None:
    """Change columns of the row of ``qid`` (``pages=`` rewrites the packed ground truth's window)."""
    import dataclasses

    name, i, _ = row_of(out, qid)
    table = pq.read_table(out / name)
    data = table.to_pylist()
    if "pages" in changes:
        gt = unpack_ground_truth(data[i]["answer"])
        data[i]["answer"] = pack_ground_truth(dataclasses.replace(gt, pages=changes.pop("pages")))
    data[i].update(changes)
    pq.write_table(type(table).from_pylist(data, schema=table.schema), out / name)


def run_check(out: Path, *extra: str) -> tuple[int, str, str]:
    argv = ["check", "--data", str(out / "train.parquet"), "--data", str(out / "val.parquet"),
            "--cache-dir", str(out / "cache"), *extra]  # fmt: skip
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli_main("python -m reward", "", COMMANDS, argv)
    return rc, stdout.getvalue(), stderr.getvalue()


def failure_kinds(stderr: str) -> list[str]:
    return [
        line[len(FAILURE_PREFIX) :].split(":")[0] for line in stderr.splitlines() if line.startswith(FAILURE_PREFIX)
    ]


# --------------------------------------------------------------------------------------------- the command
def test_clean_set_passes_and_the_judge_probe_carries_one_small_crop(data):
    with ScriptedOpenAIServer() as srv:
        rc, out, err = run_check(data, "--judge-url", srv.url, "--judge-model", "judge-model")
        chats = [body for path, body in srv.requests if path == "/v1/chat/completions"]
    assert (rc, err) == (0, ""), out + err
    assert "reward check: 3 rows in 2 data file(s), 2 documents" in out
    assert "cache encoders: minilm (2 documents)" in out
    assert "embed probe: minilm (in-process): ok, 384-d unit vector" in out
    assert f"judge probe: {srv.url}/chat/completions (model 'judge-model'): ok, answer=4 relevance=4 coverage=4" in out
    assert out.rstrip().endswith("reward check: ok")
    assert len(chats) == 1  # one real request, through the reward's own client
    parts = chats[0]["messages"][1]["content"]
    images = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
    from PIL import Image

    with Image.open(io.BytesIO(base64.b64decode(images[0].split(",", 1)[1]))) as im:
        # a crop of one block, far smaller than the page at the judge's 150 dpi
        assert im.format == "PNG" and im.width * im.height < (PAGE[0] * 150 / 72) * (PAGE[1] * 150 / 72) / 4
    gt_questions = {r["question"] for r in RECORDS}
    assert parts[0]["text"].count("What is on page") == 1 and any(q in parts[0]["text"] for q in gt_questions)


def _delete_cache_entry(out: Path) -> str:
    key = unpack_ground_truth(row_of(out, "q1")[2]["answer"]).doc_key
    shutil.rmtree(out / "cache" / key)
    return "cache: 2 rows, 1 document: " + str(out / "cache" / key) + f": no cache entry for doc_key {key!r}"


def _window_past_the_end(out: Path) -> str:
    rewrite(out, "q2", pages=[5, 7])  # still 3 pages, so the image count agrees: only the window is wrong
    key = unpack_ground_truth(row_of(out, "q2")[2]["answer"]).doc_key
    return f"window: 1 row, 1 document: page window [5, 7] exceeds document {key} (6 pages)"


def _missing_image(out: Path) -> str:
    img = out / row_of(out, "q3")[2]["images"][1]
    img.unlink()
    return f"missing_image: 1 row, 1 document: {img} does not exist"


def _extra_placeholder(out: Path) -> str:
    rewrite(out, "q1", prompt="<image>" + row_of(out, "q1")[2]["prompt"])
    return "image_count: 1 row, 1 document: 3 images but 4 (<image> placeholders)"


def _short_image_list(out: Path) -> str:
    r = row_of(out, "q1")[2]
    rewrite(out, "q1", images=r["images"][:2])
    return "image_count: 1 row, 1 document: 2 images but 3 (window [1, 3]), 3 (<image> placeholders), 3 (n_images)"


def _garbled_ground_truth(out: Path) -> str:
    rewrite(out, "q3", answer='{"qid": "q3"}')
    return "ground_truth: 1 row: ground_truth is missing field(s) doc_key, question, answer, pages"


def _moved_pdf(out: Path) -> str:
    key = unpack_ground_truth(row_of(out, "q3")[2]["answer"]).doc_key
    manifest = json.loads((out / "cache" / key / "manifest.json").read_text())
    Path(manifest["pdf_path"]).rename(manifest["pdf_path"] + ".moved")
    return f"pdf: 1 row, 1 document: {manifest['pdf_path']}"


@pytest.mark.parametrize(
    "breakage",
    [
        _delete_cache_entry,  # a document first sampled at step 90 would raise there
        _window_past_the_end,  # the reward raises on a window past the document's end
        _missing_image,  # EasyR1's dataloader would fail on the row
        _extra_placeholder,  # "Image features and image tokens do not match"
        _short_image_list,  # images, window, placeholders and n_images must all agree
        _garbled_ground_truth,  # the reward raises on a ground truth that does not unpack
        _moved_pdf,  # the judge's crops are cut from the PDF the cache names
    ],
)
def test_each_breakage_fails_with_its_kind_named(data, breakage):
    expected = breakage(data)
    try:
        rc, out, err = run_check(data)
    finally:
        for moved in data.parent.parent.glob("**/*.pdf.moved"):
            moved.rename(str(moved)[: -len(".moved")])  # the built fixture's PDFs are shared
    assert rc == 1, out
    lines = [x for x in err.splitlines() if x.startswith(FAILURE_PREFIX)]
    assert len(lines) == 1, err
    assert lines[0].startswith(FAILURE_PREFIX + expected), lines[0]
    kind = expected.split(":")[0]
    assert f"\n  {kind} (" in out and "problems:" in out


def test_a_judge_that_answers_404_fails_naming_the_status(data):
    with ScriptedOpenAIServer(handler=lambda path, body, n: Reply(status=404, json={"error": "no such model"})
                              if path == "/v1/chat/completions" else None) as srv:  # fmt: skip
        rc, out, err = run_check(data, "--judge-url", srv.url, "--judge-model", "wrong/model")
        sent = srv.count("/v1/chat/completions")
    assert rc == 1 and failure_kinds(err) == ["judge"], err
    assert (
        FAILURE_PREFIX + f"judge: 1 problem: {srv.url}/chat/completions (model 'wrong/model'): http_4xx: HTTP 404: "
        in err
    )
    assert sent == 1  # a 4xx is never retried
    assert "judge probe: " in out and ": failed" in out


def test_a_judge_reply_without_scores_is_unparseable(data):
    with ScriptedOpenAIServer(handler=lambda path, body, n: {"choices": [{"message": {"content": "I cannot."}}]}
                              if path == "/v1/chat/completions" else None) as srv:  # fmt: skip
        rc, _, err = run_check(data, "--judge-url", srv.url)
    assert rc == 1 and failure_kinds(err) == ["judge"] and "unparseable: I cannot." in err


def test_several_problems_give_one_line_per_kind_in_report_order(data):
    _missing_image(data)
    _window_past_the_end(data)
    _delete_cache_entry(data)
    rc, _, err = run_check(data)
    assert rc == 1 and failure_kinds(err) == ["cache", "missing_image"]  # q2's window is in the deleted document


def test_recipe_supplies_the_data_files_the_keys_and_the_format_prompt(data, monkeypatch):
    # The real recipe: paths from ${oc.env:...}, the format prompt relative to the repository (EasyR1's cwd).
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("QUOTECITE_DATA_DIR", str(data))
    monkeypatch.setenv("QUOTECITE_CACHE_DIR", str(data / "cache"))
    for name in ("QUOTECITE_JUDGE_URL", "QUOTECITE_EMBED_URL"):
        monkeypatch.delenv(name, raising=False)
    argv = ["check", "--recipe", str(REPO / "recipes" / "qwen3vl_8b_grpo.yaml")]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli_main("python -m reward", "", COMMANDS, argv)
    out = stdout.getvalue()
    assert rc == 0, out + stderr.getvalue()
    assert f"{data}/train.parquet: 2 rows" in out and f"{data}/val.parquet: 1 rows" in out
    assert "judge_url: env QUOTECITE_JUDGE_URL is not set here (the launch sets it)" in out
    assert "judge probe: not run (no judge URL: give --judge-url)" in out


def _check_recipe(recipe: Path, *overrides: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli_main("python -m reward", "", COMMANDS, ["check", "--recipe", str(recipe), "--", *overrides])
    return rc, stdout.getvalue(), stderr.getvalue()


RECIPE = """\
data: {train_files: /nowhere/train.parquet}
worker: {reward: {reward_function: ./reward/quote_reward.py:compute_score,
                  reward_function_kwargs: {cache_dir: '${oc.env:QC_TEST_UNSET_CACHE}', judge: lexical%s}}}
"""


def test_trainer_overrides_apply_to_the_recipe_before_the_check(data, tmp_path):
    # What the launch passes: the trainer's key=value overrides (data files, reward settings).
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE % "")
    rc, out, err = _check_recipe(recipe, f"data.train_files={data / 'train.parquet'}", "trainer.max_steps=8",
                                 f"worker.reward.reward_function_kwargs.cache_dir={data / 'cache'}")  # fmt: skip
    assert (rc, err) == (0, ""), out
    assert f"{data / 'train.parquet'}: 2 rows" in out and "/nowhere" not in out


def test_unknown_reward_setting_and_unset_env_are_config_problems(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE % ", concurency: 4")
    rc, out, err = _check_recipe(recipe)
    assert rc == 1
    assert err.splitlines() == [
        FAILURE_PREFIX + "config: 2 problems: ${oc.env:QC_TEST_UNSET_CACHE}: env QC_TEST_UNSET_CACHE is not set "
        "(and 1 more)"
    ]
    assert "    - reward settings: unknown reward setting 'concurency'; did you mean 'concurrency'?" in out


def test_a_recipe_without_the_quote_reward_has_nothing_to_check(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("trainer: {max_steps: 4}\n")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        rc = cli_main("python -m reward", "", COMMANDS, ["check", "--recipe", str(recipe)])
    assert rc == 0
    assert (
        stdout.getvalue() == f"reward check: recipe {recipe} does not use reward/quote_reward.py; nothing to check\n"
    )


# --------------------------------------------------------------------------------------------- the function
def test_cache_of_another_encoder_is_an_encoder_problem(data):
    files = [data / "train.parquet", data / "val.parquet"]
    cfg = RewardConfig(cache_dir=str(data / "cache"), judge="lexical", encoder="qwen3-vl-embedding")
    report = check_training_set(files, cfg, probe=False)
    assert [p.kind for p in report.problems] == ["encoder", "encoder"]
    assert report.problems[0].message.startswith("reward setting encoder is 'qwen3-vl-embedding' but cache ")
    assert report.problems[0].message.endswith("was embedded with 'minilm'")
    assert report.probes["judge"] == "not needed (judge 'lexical' runs in the reward)"


def test_lexical_resolver_needs_no_embeddings_and_lexical_judge_no_pdf(data):
    files = [data / "train.parquet", data / "val.parquet"]
    cfg = RewardConfig(cache_dir=str(data / "cache"), judge="lexical", resolver="bm25")
    report = check_training_set(files, cfg)
    assert report.ok, report.format()
    assert (report.rows, report.documents) == ({str(files[0]): 2, str(files[1]): 1}, 2)
    assert report.probes["embed"] == "not needed (resolver 'bm25' reads block text)"


def test_missing_cache_dir_is_a_config_problem_and_rows_are_still_read(data, tmp_path):
    cfg = RewardConfig(cache_dir=str(tmp_path / "nope"), judge="lexical")
    report = check_training_set([data / "train.parquet", tmp_path / "absent.parquet"], cfg)
    assert [p.kind for p in report.problems] == ["config", "data"]
    assert report.problems[0].message == f"reward setting cache_dir: {tmp_path / 'nope'} is not a directory"
    assert report.problems[1].message == f"{tmp_path / 'absent.parquet'}: no such file"
    assert report.rows == {str(data / "train.parquet"): 2}


@pytest.mark.parametrize(
    "value,env,expected",
    [
        ("${oc.env:A}", {"A": "x"}, "x"),  # set: replaced
        ("${oc.env:A}/train.parquet", {"A": "/d"}, "/d/train.parquet"),  # inside a path
        ("${oc.env:A,Qwen/Qwen3.5-9B}", {}, "Qwen/Qwen3.5-9B"),  # unset with a default
        ("${oc.env:A,'q'}", {}, "q"),  # a quoted default
        ("plain", {}, "plain"),  # no interpolation
        (12, {}, 12),  # not a string
    ],
)
def test_resolve_env(value, env, expected):
    assert resolve_env(value, env) == expected


def test_resolve_env_marks_an_unset_variable_without_default():
    assert repr(resolve_env("${oc.env:QC_NOPE}/x", {})) == "${oc.env:QC_NOPE}"


def test_overrides_parse_values_as_yaml_scalars():
    got = apply_overrides({}, ["worker.reward.reward_function_kwargs.max_crops=4", "data.x=null", "novalue"])
    assert got == {"worker": {"reward": {"reward_function_kwargs": {"max_crops": 4}}}, "data": {"x": None}}


def test_a_format_prompt_or_reward_file_that_does_not_resolve_fails_the_check(data, tmp_path, monkeypatch):
    # Run from another folder, the recipe's relative paths point nowhere: EasyR1 would only print "not found" and
    # train without our prompt, so the check fails naming each path.
    monkeypatch.chdir(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.replace("data: {", "data: {format_prompt: ./recipes/prompts/language_interface.jinja, ")
                      % "")  # fmt: skip
    rc, out, err = _check_recipe(recipe, f"data.train_files={data / 'train.parquet'}",
                                 f"worker.reward.reward_function_kwargs.cache_dir={data / 'cache'}")  # fmt: skip
    assert rc == 1 and failure_kinds(err) == ["config"], out + err
    assert "data.format_prompt" in out and "worker.reward.reward_function" in out
    assert f"resolved to {tmp_path}/recipes/prompts/language_interface.jinja" in out
    # the absolute paths the launch passes resolve from anywhere
    rc, out, err = _check_recipe(
        recipe, f"data.train_files={data / 'train.parquet'}",
        f"worker.reward.reward_function_kwargs.cache_dir={data / 'cache'}",
        f"data.format_prompt={REPO}/recipes/prompts/language_interface.jinja",
        f"worker.reward.reward_function={REPO}/reward/quote_reward.py:compute_score",
    )  # fmt: skip
    assert (rc, err) == (0, ""), out
