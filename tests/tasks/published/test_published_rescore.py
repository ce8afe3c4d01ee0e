"""`mmreason eval score`: the shapes saved answers come in, and what it does with answers that do not fit."""

from __future__ import annotations

import json

import pytest
from published_files import mathvista_repo

from mmreason.cli import main
from mmreason.eval.predictions import Prediction, read_predictions
from mmreason.eval.rescore import rescore


def test_the_shapes_a_predictions_file_comes_in(tmp_path):
    cases = {
        "plain.json": json.dumps({"1": "A", "2": "B"}),
        "mathvista.json": json.dumps(
            {"1": {"pid": "1", "response": "A", "extraction": "a"}, "2": {"pid": "2", "response": "B"}}
        ),
        "records.json": json.dumps([{"id": "1", "answer": "gold!", "response": "A"}, {"id": "2", "response": "B"}]),
        "records.jsonl": '{"question_id": "1", "prediction": "A"}\n{"question_id": "2", "prediction": "B"}\n',
        # lmms-eval: doc_id is its row index; the benchmark's id is in doc; the response in resps / filtered_resps
        "lmms.jsonl": "".join(
            json.dumps({"doc_id": k, "doc": {"pid": str(k + 1)}, "resps": [[r]], "filtered_resps": [r]}) + "\n"
            for k, r in enumerate("AB")
        ),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        got = read_predictions(tmp_path / name)
        assert {k: v.response for k, v in got.items()} == {"1": "A", "2": "B"}, name
    assert read_predictions(tmp_path / "mathvista.json")["1"] == Prediction("A", "a")


@pytest.mark.parametrize(
    "text, message",
    [
        ('[{"response": "A"}]', "record 0: no id field"),
        ('[{"id": 1, "score": 2}]', "record 0 (id 1): no response field"),
        ('{"id": "1", "response": "A"}\n{"id": 1, "response": "B"}\n', "line 2: id '1' occurs twice"),
        ("not json\n", "line 1 is not JSON"),
        ("{}", "holds no predictions"),
    ],
)
def test_a_bad_predictions_file_is_one_line(tmp_path, text, message):
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(ValueError) as err:
        read_predictions(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_ids_that_match_no_doc_are_an_error_naming_both(tmp_path):
    data = mathvista_repo(tmp_path)
    preds = tmp_path / "other.json"
    preds.write_text(json.dumps({"validation_Art_1": "A", "validation_Art_2": "B"}))
    with pytest.raises(
        ValueError,
        match=r"none of its 2 ids \('validation_Art_1', 'validation_Art_2'\) is a doc "
        r"of task 'mathvista:testmini' \(doc ids like '1', '2', '3'\)",
    ):
        rescore(f"mathvista:{data}", str(preds), output_path=str(tmp_path / "out"))


def test_missing_answers_are_failed_docs_and_extra_ones_are_counted(tmp_path, capsys):
    data = mathvista_repo(tmp_path)
    preds = tmp_path / "partial.json"
    preds.write_text(json.dumps({"1": "The answer is 1.2", "2": "7", "999": "stray"}))
    assert (
        main(
            [
                "eval",
                "score",
                "--tasks",
                f"mathvista:{data}",
                "--predictions",
                str(preds),
                "--output_path",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    results = json.loads(next((tmp_path / "out" / "partial").glob("*_results.json")).read_text())
    task = results["results"]["mathvista:testmini"]
    assert (task["n"], task["n_failed"], task["failed_ids"]) == (2, 3, ["3", "4", "5"])
    assert task["accuracy,none"] == 1.0 and task["accuracy_n,none"] == 2  # never a 0 for the missing three
    assert (
        task["predictions_unmatched"] == 1
        and "1 predictions match no doc ('999')" in results["configs"]["mathvista:testmini"]["note"]
    )
    samples = next((tmp_path / "out" / "partial").glob("*_samples_*.jsonl")).read_text().splitlines()
    assert json.loads(samples[2]) == {
        "doc_id": "3",
        "doc_index": 2,
        "target": "the circle",
        "error": f"no prediction for this doc in {preds}",
    }
    assert "results:" in capsys.readouterr().out


def test_use_extraction_without_the_field_fails_those_docs(tmp_path):
    data = mathvista_repo(tmp_path)
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"1": {"response": "x", "extraction": "1.2"}, "2": {"response": "7"}}))
    results, _ = rescore(f"mathvista:{data}", str(preds), output_path=str(tmp_path / "o"), use_extraction=True, limit=2)
    task = results["results"]["mathvista:testmini"]
    assert (task["n"], task["failed_ids"], task["accuracy,none"]) == (1, ["2"], 1.0)
