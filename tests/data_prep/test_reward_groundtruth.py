"""Ground truth packed into the dataset's answer column and unpacked by the reward."""

from __future__ import annotations

import json

import pytest

from core.errors import InputError
from data_prep.groundtruth import GroundTruth, pack_ground_truth, unpack_ground_truth


@pytest.mark.parametrize(
    "gt",
    [
        GroundTruth("q1", "abc-123", "How much did revenue grow?", "12%", (3, 5)),  # a window
        GroundTruth("q2", "abc-123", "营收增长了多少？", "百分之十二", None),  # whole document, CJK kept
        GroundTruth("q3", "k", 'Quotes "and" {braces}?', "a\nb", (1, 1)),  # JSON-special characters, one page
    ],
)
def test_pack_unpack_round_trip(gt):
    packed = pack_ground_truth(gt)
    assert "\n" not in packed  # one line in a JSONL / parquet cell
    assert unpack_ground_truth(packed) == gt


def test_packed_form_is_plain_json_with_the_five_fields():
    packed = pack_ground_truth(GroundTruth("q1", "k", "Q?", "A", (2, 4)))
    assert json.loads(packed) == {"qid": "q1", "doc_key": "k", "question": "Q?", "answer": "A", "pages": [2, 4]}
    assert "营" in pack_ground_truth(GroundTruth("q", "k", "营收", "A", None))  # not \\u-escaped


def test_unpack_accepts_a_dict_and_numeric_ids():
    gt = unpack_ground_truth({"qid": 7, "doc_key": "k", "question": "Q?", "answer": 12, "pages": None})
    assert (gt.qid, gt.answer) == ("7", "12")


BAD = [
    # (packed value, a fragment the message must contain)
    ("not json", "not a packed JSON object"),  # raw text in the answer column
    ("[1, 2]", "not a JSON object"),  # JSON but a list
    ('{"qid": "q", "question": "Q", "answer": "A", "pages": null}', "doc_key"),  # missing field named
    ('{"doc_key": "k", "answer": "A"}', "qid, question, pages"),  # every missing field named
    ('{"qid": "q", "doc_key": "", "question": "Q", "answer": "A", "pages": null}', "'doc_key'"),  # empty
    ('{"qid": "q", "doc_key": "k", "question": 3, "answer": "A", "pages": null}', "'question'"),  # wrong type
    ('{"qid": "q", "doc_key": "k", "question": "Q", "answer": "A", "pages": [3]}', "'pages'"),  # one number
    ('{"qid": "q", "doc_key": "k", "question": "Q", "answer": "A", "pages": [0, 2]}', "1-based"),  # 0-based
    ('{"qid": "q", "doc_key": "k", "question": "Q", "answer": "A", "pages": [5, 2]}', "1-based"),  # reversed
    ('{"qid": "q", "doc_key": "k", "question": "Q", "answer": "A", "pages": [1.5, 2]}', "'pages'"),  # floats
]


@pytest.mark.parametrize(("packed", "fragment"), BAD)
def test_unpack_names_the_bad_field(packed, fragment):
    with pytest.raises(InputError) as e:
        unpack_ground_truth(packed)
    assert fragment in str(e.value)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (12, "12"),  # an integer gold answer
        (3.5, "3.5"),  # a float gold answer (LongDocURL's Float answers)
        ("3.5", "3.5"),  # already text
    ],
)
def test_numeric_gold_answers_become_text(answer, expected):
    gt = unpack_ground_truth({"qid": "q", "doc_key": "k", "question": "Q?", "answer": answer, "pages": None})
    assert gt.answer == expected


@pytest.mark.parametrize(
    "packed",
    [
        '{"qid": "q", "doc_key": "k", "question": "Q", "answer": NaN, "pages": null}',  # Python's json reads NaN
        '{"qid": "q", "doc_key": "k", "question": "Q", "answer": true, "pages": null}',  # a bool is not a number here
    ],
)
def test_non_finite_and_boolean_gold_answers_are_rejected(packed):
    with pytest.raises(InputError, match="'answer'"):
        unpack_ground_truth(packed)
