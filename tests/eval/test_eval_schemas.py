"""Gold and prediction records and their JSONL IO (eval/schemas.py)."""

from __future__ import annotations

import json

import pytest

from core.errors import InputError
from eval.schemas import (
    append_jsonl,
    gold_from_json,
    prediction_from_json,
    read_gold,
    read_predictions,
    repair_jsonl_tail,
    write_jsonl,
)

GOOD_GOLD = {
    "index": 7,
    "doc_key": "doc",
    "question": "q",
    "answer": "a",
    "language": "en",
    "qtype": "Factual Retrieval",
    "gt_necessary": [[1, 0, 0, 10, 10]],
    "gt_all": [[1, 0, 0, 10, 10], [2, 5, 5, 6, 6]],
    "gt_types": ["table"],
}


def test_gold_record_round_trips_with_extra_fields_kept():
    g = gold_from_json({**GOOD_GOLD, "alignment": "verified"})
    assert g.key == "7"
    assert g.gt_necessary[0].page == 1 and g.gt_necessary[0].bbox == (0.0, 0.0, 10.0, 10.0)
    assert len(g.gt_all) == 2 and g.gt_types == ("table",)
    d = g.to_json()
    assert d["alignment"] == "verified" and d["gt_all"][1] == [2, 5.0, 5.0, 6.0, 6.0]


def test_reversed_gold_box_is_normalised_and_flagged():
    g = gold_from_json({**GOOD_GOLD, "gt_necessary": [[1, 10, 10, 0, 0]]})
    assert g.gt_necessary[0].bbox == (0.0, 0.0, 10.0, 10.0)
    assert g.gt_necessary[0].malformed


BAD_GOLD = [
    ({"gt_necessary": []}, "gt_necessary is empty"),  # recall has no denominator
    ({"gt_necessary": [[0, 0, 0, 1, 1]]}, "pages are 1-based"),  # 0-based page
    ({"gt_necessary": [[1.5, 0, 0, 1, 1]]}, "integer"),  # fractional page
    ({"gt_necessary": [[1, 0, 0, 1]]}, r"\[page, x0, y0, x1, y1\]"),  # box without page
    ({"gt_necessary": [[1, 0, 0, "1", 1]]}, "finite numbers"),  # a string coordinate
    ({"gt_all": "none"}, "must be a list"),  # wrong type
    ({"gt_types": ["text", "text"]}, "one type per gt_necessary"),  # length mismatch
    ({"gt_types": ["chart"]}, "'chart'"),  # unknown type
]


@pytest.mark.parametrize(("patch", "message"), BAD_GOLD)
def test_bad_gold_records_raise_input_error_naming_the_problem(patch, message):
    with pytest.raises(InputError, match=message):
        gold_from_json({**GOOD_GOLD, **patch}, "gold.jsonl:3")


def test_gold_record_missing_fields_names_them():
    d = dict(GOOD_GOLD)
    del d["doc_key"], d["gt_all"]
    with pytest.raises(InputError, match=r"gold.jsonl:3: gold record lacks 'doc_key', 'gt_all'"):
        gold_from_json(d, "gold.jsonl:3")


BAD_PRED = [
    ({"interface": "pixels"}, "interface must be one of"),
    ({"citations": [{"page": 1}]}, "lacks 'bbox'"),
    ({"citations": [{"page": 1, "bbox": [0, 0, 1, 1], "similarity": "high"}]}, "similarity must be a finite number"),
    ({"citations": {"page": 1}}, "citations must be a list"),
]


@pytest.mark.parametrize(("patch", "message"), BAD_PRED)
def test_bad_predictions_raise_input_error(patch, message):
    with pytest.raises(InputError, match=message):
        prediction_from_json({"index": 1, "response": "", **patch})


def test_prediction_defaults_and_malformed_citation_flag():
    p = prediction_from_json({"index": "1", "citations": [{"page": 2, "bbox": [5, 5, 1, 1], "quote": "x"}]})
    assert p.interface == "language" and p.answer == "" and p.key == "1"
    assert p.citations[0].bbox == (1.0, 1.0, 5.0, 5.0) and p.citations[0].malformed


def test_reading_files_reports_the_line_of_bad_json_and_duplicates(tmp_path):
    f = tmp_path / "gold.jsonl"
    f.write_text(json.dumps(GOOD_GOLD) + "\n\n{not json\n")
    with pytest.raises(InputError, match=r"gold.jsonl:3: not valid JSON"):
        read_gold(f)
    f.write_text(json.dumps(GOOD_GOLD) + "\n" + json.dumps(GOOD_GOLD) + "\n")
    with pytest.raises(InputError, match="index 7 appears twice"):
        read_gold(f)
    with pytest.raises(InputError, match="no such file"):
        read_predictions(tmp_path / "missing.jsonl")
    f.write_text("[1, 2]\n")
    with pytest.raises(InputError, match="expected a JSON object"):
        read_predictions(f)


def test_append_then_repair_drops_only_a_partial_last_line(tmp_path):
    f = tmp_path / "p.jsonl"
    append_jsonl(f, {"index": 1})
    append_jsonl(f, {"index": 2})
    assert repair_jsonl_tail(f) == 0
    with open(f, "ab") as fh:
        fh.write(b'{"index": 3, "resp')  # a crash in the middle of a write
    assert repair_jsonl_tail(f) == 1
    assert [json.loads(x)["index"] for x in f.read_text().splitlines()] == [1, 2]
    with open(f, "ab") as fh:
        fh.write(b'{"index": \n')  # a whole but broken last line
    assert repair_jsonl_tail(f) == 1
    assert f.read_text().count("\n") == 2


def test_repair_refuses_damage_in_the_middle(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"index": 1}\n{broken\n{"index": 2')  # a partial tail and a broken line before it
    with pytest.raises(InputError, match=r"p.jsonl:2: not valid JSON in the middle"):
        repair_jsonl_tail(f)
    f.write_text('{"index": 1}\n{broken\n{"index": 2}\n')  # whole tail: repair leaves it, reading reports it
    assert repair_jsonl_tail(f) == 0
    with pytest.raises(InputError, match=r"p.jsonl:2: not valid JSON"):
        read_predictions(f)


def test_write_jsonl_is_atomic_and_leaves_no_temporary_file(tmp_path):
    out = write_jsonl(tmp_path / "sub" / "x.jsonl", [{"a": 1}, {"b": "中文"}])
    assert out.read_text(encoding="utf-8") == '{"a": 1}\n{"b": "中文"}\n'
    assert [p.name for p in out.parent.iterdir()] == ["x.jsonl"]
