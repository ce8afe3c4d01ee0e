"""ChartQA (relaxed accuracy, 5 % edges) and DocVQA / InfographicVQA (ANLS at the 0.5 edge) as published."""

from __future__ import annotations

import json

import pytest
from published_files import chartqa_repo, docvqa_json, png, write_parquet

from mmreason.eval.rescore import rescore
from mmreason.rewards.benchmark_rules import docvqa_anls
from mmreason.tasks.chartqa.data import chartqa_load
from mmreason.tasks.chartqa.scoring import chartqa_relaxed_accuracy
from mmreason.tasks.docvqa.data import docvqa_load
from mmreason.tasks.docvqa.scoring import docvqa_anls_metric
from mmreason.types import Sample


def _chart(answer):
    return Sample(id="x", messages=[], answer=answer, meta={"split": "human"})


@pytest.mark.parametrize(
    "prediction, reference, right",
    [
        ("105", "100", 1.0),  # 5 % exactly: right
        ("95", "100", 1.0),
        ("105.01", "100", 0.0),  # just over 5 %
        ("94.99", "100", 0.0),
        ("0.125", "12%", 1.0),  # "12%" reads as 0.12; 0.125 is within 5 %
        ("12", "12%", 0.0),  # ... so 12 is 100 times off
        ("japan", "Japan", 1.0),  # text: equal ignoring case
        ("Japan.", "Japan", 0.0),  # but otherwise exact
        ("0", "0", 1.0),  # a reference of 0 compares as text
        ("0.0", "0", 0.0),
    ],
)
def test_relaxed_accuracy_edges(prediction, reference, right):
    assert chartqa_relaxed_accuracy(_chart(reference), prediction) == right


def test_chartqa_repository_layout_both_splits_and_their_breakdown(tmp_path):
    test = chartqa_repo(tmp_path / "ChartQA Dataset")
    samples = chartqa_load(str(test))
    assert [s.id for s in samples] == ["human_0", "human_1", "augmented_0"]
    assert samples[0].images == [str((test / "png" / "h1.png").resolve())]
    assert samples[0].messages[0]["content"][1]["text"] == (
        "What is the peak value?\nAnswer the question with a single word."
    )
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(
            json.dumps({"question_id": i, "response": r}) + "\n"
            for i, r in (("human_0", "104"), ("human_1", "China"), ("augmented_0", "<answer>0.12</answer>"))
        )
    )
    results, _ = rescore(f"chartqa:{test}", str(preds), output_path=str(tmp_path / "out"))
    task = results["results"]["chartqa:test"]
    assert task["relaxed_accuracy,none"] == pytest.approx(2 / 3)
    assert task["relaxed_accuracy_split_human,none"] == 0.5 and task["relaxed_accuracy_split_human_n,none"] == 2
    assert task["relaxed_accuracy_split_augmented,none"] == 1.0


def test_chartqa_hf_parquet(tmp_path):
    rows = [{"image": {"bytes": png(), "path": None}, "query": "How many?", "label": ["3"], "human_or_machine": 1}]
    samples = chartqa_load(str(write_parquet(tmp_path / "test.parquet", rows)))
    assert samples[0].id == "augmented_0" and samples[0].answer == "3" and isinstance(samples[0].images[0], bytes)


# ---- DocVQA ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prediction, references, expected",
    [
        ("abcd", ["abcd"], 1.0),
        ("abce", ["abcd"], 0.75),  # NL 1/4
        ("abxy", ["abcd"], 0.0),  # NL exactly 0.5: 0 (the rule is NL < 0.5)
        ("abcxy", ["abcde"], 0.6),  # NL 2/5 < 0.5
        ("ABCD ", ["abcd"], 1.0),  # lower-cased, whitespace collapsed
        ("abxy", ["zzzz", "abxd"], 0.75),  # the best reference counts
    ],
)
def test_anls_at_the_half_edge(prediction, references, expected):
    assert docvqa_anls(prediction, references) == pytest.approx(expected)


def test_docvqa_json_reads_and_counts_the_test_split_rows(tmp_path):
    path = docvqa_json(tmp_path / "val")
    samples = docvqa_load(str(path))
    assert [s.id for s in samples] == ["101", "102"]
    assert samples.skipped == {"no answers (test split: scored by the RRC server)": 1}
    assert samples[0].images == [str((tmp_path / "val" / "documents" / "d1.png").resolve())]
    assert docvqa_anls_metric(samples[0], "may 1, 1999") == 1.0


def test_docvqa_rescore_uses_question_id_and_breaks_down_by_question_type(tmp_path):
    path = docvqa_json(tmp_path / "val")
    preds = tmp_path / "answers.json"
    preds.write_text(
        json.dumps(
            [
                {"questionId": 101, "answer_text": "x", "response": "1 May 1999"},
                {"questionId": 102, "response": "J. Smyth"},
            ]
        )
    )
    results, out = rescore(f"docvqa:{path}", str(preds), output_path=str(tmp_path / "out"))
    task = results["results"]["docvqa:val_v1.0"]
    assert task["anls,none"] == pytest.approx((1.0 + 7 / 8) / 2)
    assert task["anls_question_types_layout,none"] == 1.0 and task["anls_question_types_handwritten,none"] == 7 / 8
    assert "1 data rows skipped" in out.with_name(out.name.replace(".json", ".md")).read_text()


def test_infographicvqa_json_and_lmms_lab_parquet(tmp_path):
    png(tmp_path / "infographicsvqa_images" / "i.jpeg")
    info = {
        "data": [
            {
                "questionId": 9,
                "question": "How many?",
                "image_local_name": "i.jpeg",
                "answers": ["4"],
                "answer_type": ["single span"],
                "operation/reasoning": ["counting"],
            }
        ]
    }
    path = tmp_path / "infographicsVQA_val_v1.0.json"
    path.write_text(json.dumps(info))
    sample = docvqa_load(str(path))[0]
    assert sample.images == [str((tmp_path / "infographicsvqa_images" / "i.jpeg").resolve())]
    assert sample.meta["answer_type"] == ["single span"]
    rows = [
        {
            "questionId": "q1",
            "question": "Date?",
            "answers": ["1999"],
            "image": {"bytes": png(), "path": None},
            "question_types": ["layout"],
            "data_split": "validation",
        }
    ]
    assert docvqa_load(str(write_parquet(tmp_path / "docvqa.parquet", rows)))[0].id == "q1"


def test_a_file_of_test_rows_only_is_an_error_not_an_empty_score(tmp_path):
    path = tmp_path / "test_v1.0.json"
    path.write_text(json.dumps({"data": [{"questionId": 1, "question": "q", "image": "documents/a.png"}]}))
    with pytest.raises(ValueError, match="no row has answers"):
        docvqa_load(str(path))
