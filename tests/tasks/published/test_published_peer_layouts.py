"""Benchmark files as the benchmarks' own code writes them, and the values their readers used to pass without a
word: MMMU rows whose ``question_type`` is ``short-answer`` (MMMU's ``answer_dict_val.json`` and its README's
prediction format; its ``eval_utils.py`` scores every type but multiple-choice as open), DocVQA rows whose
``answers`` is written but empty, and JSON that Python's reader takes but JSON has not (a key written twice,
``NaN``)."""

from __future__ import annotations

import json

import pytest
from published_files import docvqa_json, mmmu_rows, png

from mmreason.examples import write_parquet
from mmreason.tasks.docvqa.data import docvqa_load
from mmreason.tasks.mmmu.data import mmmu_load
from mmreason.tasks.mmmu.scoring import mmmu_accuracy, mmmu_random_fallback


def test_mmmu_short_answer_rows_are_open_questions(tmp_path):
    # the HF parquet row of MMMU's validation_Architecture_and_Engineering_14, question_type as MMMU's
    # answer_dict_val.json writes it ({"question_type": "short-answer", "ground_truth": "1.06"})
    row = {
        **mmmu_rows()[2],
        "id": "validation_Architecture_and_Engineering_14",
        "question": "<image 1> What is the deflection, in inches?",
        "answer": "1.06",
        "question_type": "short-answer",
    }
    path = write_parquet(tmp_path / "Architecture_and_Engineering" / "validation-00000-of-00001.parquet", [row])
    (sample,) = mmmu_load(str(path))
    assert sample.meta["question_type"] == "short-answer" and sample.answer == "1.06"
    assert sample.messages[0]["content"][-1]["text"].endswith("Answer the question using a single word or phrase.")
    # scored by eval_open, as MMMU's main_eval_only.py does for every type but multiple-choice
    assert mmmu_accuracy(sample, "The deflection is 1.06 inches.") == 1.0
    assert mmmu_accuracy(sample, "The deflection is 2.5 inches.") == 0.0
    assert mmmu_random_fallback(sample, "no idea") != mmmu_random_fallback(sample, "no idea")  # NaN: not MC


@pytest.mark.parametrize("answers", [[], [""], ["  "]], ids=["empty", "blank", "spaces"])
def test_docvqa_answers_written_but_empty_are_one_line(tmp_path, answers):
    # the RRC val_v1.0.json layout ({"data": [{"questionId", "question", "image", "answers", ...}]})
    path = docvqa_json(tmp_path)
    data = json.loads(path.read_text())
    data["data"][1]["answers"] = answers
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError) as err:
        docvqa_load(str(path))
    assert str(err.value) == (
        f"{path}: row 1 (id 102): answers is {answers!r}: no answer to score against (every response would score 0)"
    )


def test_docvqa_test_rows_without_answers_are_still_counted_skips(tmp_path):
    loaded = docvqa_load(str(docvqa_json(tmp_path)))
    assert len(loaded) == 2 and loaded.skipped == {"no answers (test split: scored by the RRC server)": 1}


def test_a_key_written_twice_in_a_benchmark_json_is_one_line(tmp_path):
    png(tmp_path / "documents" / "d1.png")
    row = '{"questionId": 1, "question": "Date?", "image": "documents/d1.png", "answers": ["1999"], "answers": []}'
    path = tmp_path / "val_v1.0.json"
    path.write_text('{"dataset_name": "docvqa", "data": [' + row + "]}")
    with pytest.raises(ValueError) as err:
        docvqa_load(str(path))
    assert str(err.value) == (
        f"docvqa data file {str(path)!r}: an object: key 'answers' is written twice in one object "
        "(a reader keeps only the last)"
    )


def test_nan_in_a_benchmark_json_is_one_line_naming_the_field(tmp_path):
    png(tmp_path / "documents" / "d1.png")
    path = tmp_path / "val_v1.0.json"
    path.write_text(
        '{"data": [{"questionId": 1, "question": "Total?", "image": "documents/d1.png", "answers": [NaN]}]}'
    )
    with pytest.raises(ValueError) as err:
        docvqa_load(str(path))
    assert str(err.value) == (
        f"docvqa data file {str(path)!r}: row 0: field 'answers[0]' is NaN, which is not JSON "
        "(write null, a number or a string)"
    )
