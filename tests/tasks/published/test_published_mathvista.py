"""MathVista read as published and scored by its calculate_score.py rules; saved answers re-scored."""

from __future__ import annotations

import json

import pytest
from published_files import MATHVISTA_ROWS, mathvista_parquet, mathvista_repo

from mmreason.eval.paired import paired
from mmreason.eval.rescore import rescore
from mmreason.tasks.mathvista.data import mathvista_load
from mmreason.tasks.mathvista.scoring import mathvista_accuracy, normalize_extracted_answer


def _norm(extraction, question_type="free_form", answer_type="float", precision=None, choices=None):
    return normalize_extracted_answer(
        extraction, choices=choices, question_type=question_type, answer_type=answer_type, precision=precision
    )


@pytest.mark.parametrize(
    "extraction, precision, expected",
    [
        ("1.25", 1, "1.2"),  # round() of the binary float 1.25 (round-half-even): 1.2
        ("1.35", 1, "1.4"),  # 1.35 is stored as 1.3500000000000000888...: up
        ("2.675", 2, "2.67"),  # 2.675 is stored as 2.67499999...: down
        ("3", 1, "3.0"),  # str(round(3.0, 1))
        ("0.3333", 2, "0.33"),
        ("about 1.2", 1, None),  # float() fails: None, never equal to an answer
    ],
)
def test_float_answers_round_to_the_precision(extraction, precision, expected):
    assert _norm(extraction, precision=precision) == expected


@pytest.mark.parametrize("extraction, expected", [("3.7", "3"), ("-2.0", "-2"), ("1e3", "1000"), ("seven", None)])
def test_integer_answers_go_through_int_of_float(extraction, expected):
    assert _norm(extraction, answer_type="integer") == expected


def test_lists_compare_as_text():
    assert _norm("[1, 2, 3]", answer_type="list") == "[1, 2, 3]"
    assert _norm("[1,2,3]", answer_type="list") == "[1,2,3]"  # so it does not equal "[1, 2, 3]"


CHOICES = ["the square", "the circle", "the triangle", "a"]


@pytest.mark.parametrize(
    "extraction, expected",
    [
        ("B", "the circle"),  # a letter within the options
        (" C ", "the triangle"),  # stripped first
        ("(c) the square", "the triangle"),  # a bracketed letter anywhere wins, upper-cased
        ("the circel", "the circle"),  # the closest option by edit distance
        ("b", "a"),  # a lower-case letter is no letter: closest option ("a", distance 1)
        ("", "a"),  # empty: the shortest option is the closest
        ("(E)", "a"),  # a letter past the options: closest to "E"
    ],
)
def test_multiple_choice_maps_a_letter_or_the_closest_option(extraction, expected):
    assert _norm(extraction, "multi_choice", "text", choices=CHOICES) == expected


def test_closest_option_ties_go_to_the_first():
    assert _norm("ab", "multi_choice", "text", choices=["aa", "bb"]) == "aa"


# ---- reading the published files --------------------------------------------------------------------------


def test_testmini_json_reads_with_its_images_and_builds_the_zero_shot_query(tmp_path):
    samples = {s.id: s for s in mathvista_load(str(mathvista_repo(tmp_path)))}
    assert list(samples) == ["1", "2", "3", "4", "5"]
    one = samples["1"]
    assert one.images == [str((tmp_path / "data" / "images" / "1.png").resolve())]
    assert one.messages[0]["content"][1]["text"] == (
        "Question: What is the length of the segment? (Unit: cm)\nHint: Please answer the question requiring a "
        "floating-point number with one decimal place and provide the final value, e.g., 1.2, 1.3, 1.4, at the "
        "end.\nSolution: "
    )
    assert samples["3"].messages[0]["content"][1]["text"].split("\n")[1:4] == [
        "Choices:",
        "(A) the square",
        "(B) the circle",
    ]
    assert samples["2"].meta["skills"] == ["arithmetic reasoning", "statistical reasoning"]


def test_hf_parquet_uses_decoded_image_and_the_query_field(tmp_path):
    samples = mathvista_load(str(mathvista_parquet(tmp_path / "testmini.parquet")))
    assert [s.id for s in samples] == ["1", "2", "3", "4", "5"]
    assert isinstance(samples[0].images[0], bytes) and samples[0].images[0].startswith(b"\x89PNG")
    assert samples[0].messages[0]["content"][1]["text"].startswith("Hint: answer it.\nQuestion:")
    assert samples[0].meta["precision"] == 1  # parquet writes it as a float


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("answer_type", "fraction", "answer_type 'fraction' is not one of text, integer, float, list"),
        ("question_type", "essay", "question_type 'essay' is not one of multi_choice, free_form"),
        ("precision", None, "answer_type 'float' needs a precision"),
    ],
)
def test_a_bad_row_is_one_line_naming_file_row_and_field(tmp_path, field, value, message):
    rows = json.loads(json.dumps(MATHVISTA_ROWS))
    rows["1"][field] = value
    path = tmp_path / "testmini.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(ValueError) as err:
        mathvista_load(str(path))
    assert str(err.value).startswith(f"{path}: row 0 (id '1'): ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_multi_choice_without_choices_is_refused(tmp_path):
    rows = json.loads(json.dumps(MATHVISTA_ROWS))
    rows["3"]["choices"] = None
    path = tmp_path / "testmini.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=r"row 2 \(id '3'\): a multi_choice question needs a non-empty 'choices'"):
        mathvista_load(str(path))


# ---- scores and breakdowns -----------------------------------------------------------------------------------

RESPONSES = {
    "1": "The segment measures 1.24 cm. The answer is 1.24",  # phrase -> 1.24 -> 1.2: right
    "2": "Counting them gives 7.0 bars",  # last number 7 -> "7": right
    "3": "Looking at the colours, \\boxed{the circel}",  # boxed, closest option: right
    "4": "The answer is [1,2,3]",  # list as text "[1,2,3]": wrong
    "5": "The answer is 0.3",  # "0.3" != "0.33": wrong
}

# What MathVista's scores file holds for these answers, worked out by hand from the rows' metadata:
# right = pids 1, 2, 3.
EXPECTED = {
    "accuracy": (3 / 5, 5),
    "accuracy_question_type_free_form": (2 / 4, 4),
    "accuracy_question_type_multi_choice": (1.0, 1),
    "accuracy_answer_type_float": (1 / 2, 2),
    "accuracy_answer_type_integer": (1.0, 1),
    "accuracy_answer_type_text": (1.0, 1),
    "accuracy_answer_type_list": (0.0, 1),
    "accuracy_category_math_targeted_vqa": (1 / 3, 3),
    "accuracy_category_general_vqa": (1.0, 2),
    "accuracy_skills_geometry_reasoning": (1.0, 1),
    "accuracy_skills_arithmetic_reasoning": (2 / 3, 3),
    "accuracy_skills_statistical_reasoning": (1 / 2, 2),
    "accuracy_skills_numeric_commonsense": (1.0, 1),
    "accuracy_language_english": (3 / 4, 4),
    "accuracy_language_chinese": (0.0, 1),
    "accuracy_source_figureqa": (1 / 2, 2),
    "accuracy_grade_high_school": (1 / 2, 2),
    "accuracy_grade_elementary_school": (1.0, 2),
    "accuracy_grade_college": (0.0, 1),
    "accuracy_context_bar_chart": (1 / 2, 2),
    "accuracy_task_figure_question_answering": (1 / 2, 2),
}


def _output_file(path, responses, extractions=None):
    """MathVista's output_*.json: the rows keyed by pid, with response (and extraction)."""
    out = {
        pid: {
            **row,
            "query": "q",
            "response": responses[pid],
            **({"extraction": extractions[pid]} if extractions else {}),
        }
        for pid, row in MATHVISTA_ROWS.items()
        if pid in responses
    }
    path.write_text(json.dumps(out))
    return path


def test_rescoring_an_output_file_gives_the_scores_file_breakdowns(tmp_path):
    data = mathvista_repo(tmp_path)
    results, path = rescore(
        f"mathvista:{data}",
        str(_output_file(tmp_path / "output_model.json", RESPONSES)),
        output_path=str(tmp_path / "out"),
    )
    task = results["results"]["mathvista:testmini"]
    for metric, (value, n) in EXPECTED.items():
        assert task[f"{metric},none"] == pytest.approx(value), metric
        assert task[f"{metric}_n,none"] == n, metric
    groups = [k for k in task if k.startswith("accuracy_") and k.endswith("_n,none")]
    assert len(groups) == 2 + 4 + 2 + 4 + 2 + 4 + 3 + 5 + 4  # every value of every field the file holds
    samples = path.parent / path.name.replace("_results.json", "_samples_mathvista_testmini.jsonl")
    records = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [r["doc_id"] for r in records] == ["1", "2", "3", "4", "5"]  # the benchmark's pid
    assert "rule" in results["configs"]["mathvista:testmini"]["note"]


def test_use_extraction_scores_the_files_extraction_field(tmp_path):
    data = mathvista_repo(tmp_path)
    extractions = {"1": "1.2", "2": "7", "3": "(B)", "4": "[1, 2, 3]", "5": "0.334"}
    noise = {pid: "no answer here" for pid in MATHVISTA_ROWS}
    preds = _output_file(tmp_path / "output_x.json", noise, extractions)
    results, _ = rescore(f"mathvista:{data}", str(preds), output_path=str(tmp_path / "a"), use_extraction=True)
    assert results["results"]["mathvista:testmini"]["accuracy,none"] == 1.0  # all five normalize to the answer
    assert "extraction field" in results["configs"]["mathvista:testmini"]["note"]
    again, _ = rescore(f"mathvista:{data}", str(preds), output_path=str(tmp_path / "b"))
    assert again["results"]["mathvista:testmini"]["accuracy,none"] < 1.0  # the responses themselves say nothing


def test_rescored_runs_compare_doc_by_doc(tmp_path):
    data = mathvista_repo(tmp_path)
    _, a = rescore(
        f"mathvista:{data}", str(_output_file(tmp_path / "a.json", RESPONSES)), output_path=str(tmp_path / "out")
    )
    better = {**RESPONSES, "5": "The answer is 0.33"}
    _, b = rescore(
        f"mathvista:{data}", str(_output_file(tmp_path / "b.json", better)), output_path=str(tmp_path / "out")
    )
    result = paired(a.parent, b.parent, "accuracy")
    assert (result["n"], result["up"], result["down"]) == (5, 1, 0)


def test_the_metric_is_the_reward_rule(tmp_path):
    samples = {s.id: s for s in mathvista_load(str(mathvista_repo(tmp_path)))}
    assert [mathvista_accuracy(samples[p], RESPONSES[p]) for p in RESPONSES] == [1.0, 1.0, 1.0, 0.0, 0.0]
