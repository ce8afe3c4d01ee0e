"""MMMU / MMMU-Pro read as published and scored by MMMU's eval_utils.py rules."""

from __future__ import annotations

import json
import random

import pytest
from published_files import mmmu_folder, mmmu_rows, png, write_parquet

from mmreason.eval.rescore import rescore
from mmreason.tasks.mmmu.data import mmmu_load
from mmreason.tasks.mmmu.scoring import (
    eval_open,
    mmmu_random_fallback,
    parse_multi_choice_response,
    parse_open_response,
)

OPTIONS = ["Paris", "London", "Berlin", "Madrid"]


@pytest.mark.parametrize(
    "response, expected",
    [
        ("(B)", "B"),
        ("The answer is (C).", "C"),
        ("B", "B"),  # trailing/leading punctuation stripped, then " B "
        ("A.", "A"),
        ("(A) is wrong, the answer is (D)", "D"),  # several bracketed: the last one in the response
        ("I pick A but maybe C is right", "C"),  # several bare letters: the last one
        ("The capital of Germany is Berlin as everyone knows", "C"),  # > 5 words: an option's text
        ("Berlin or Madrid, I'd say Madrid is correct here", "D"),  # several texts: the one found last
    ],
)
def test_multiple_choice_parser_cases(response, expected):
    letter, fell_back = parse_multi_choice_response(response, OPTIONS, random.Random(0))
    assert (letter, fell_back) == (expected, False)


def test_option_text_counts_only_in_responses_over_five_words():
    _, fell_back = parse_multi_choice_response("Berlin", OPTIONS, random.Random(0))
    assert fell_back  # one word, no letter: MMMU falls back to a random letter


def test_the_random_fallback_is_seeded_per_question_and_counted(tmp_path):
    folder = mmmu_folder(tmp_path / "MMMU")
    samples = {s.id: s for s in mmmu_load(str(folder))}
    sample = samples["validation_Art_1"]
    assert mmmu_random_fallback(sample, "no idea") == 1.0
    assert mmmu_random_fallback(sample, "(B)") == 0.0
    assert mmmu_random_fallback(samples["validation_Math_1"], "no idea") != mmmu_random_fallback(
        samples["validation_Math_1"], "no idea"
    )  # NaN: open questions never fall back
    preds = {
        "validation_Art_1": "no idea",
        "validation_Art_2": "no idea at all",
        "validation_Math_1": "12.5",
        "validation_Math_2": "x",
    }
    draws = set()
    for k in range(2):
        path = tmp_path / f"p{k}.json"
        path.write_text(json.dumps(preds if k == 0 else dict(reversed(list(preds.items())))))
        results, _ = rescore(f"mmmu:{folder}", str(path), output_path=str(tmp_path / f"o{k}"))
        task = results["results"]["mmmu:MMMU"]
        assert (task["random_fallback,none"], task["random_fallback_n,none"]) == (1.0, 2)  # 2 of 2 MC answers
        draws.add(task["accuracy,none"])
    assert len(draws) == 1  # the same letters whatever order the answers come in


@pytest.mark.parametrize(
    "response, gold, right",
    [
        ("So the area is 12.50 square units.", "12.5", True),  # numbers rounded to 2 decimals
        ("The result is 1,234", "1234", True),  # commas dropped
        ("Therefore the answer is Pythagoras' theorem.", "Pythagoras", True),  # the reference inside the text
        ("It is 12.6", "12.5", False),
        ("x = 3", "3", True),  # "=" counts in the last sentence
        ("a", "A", True),  # one character is padded on both sides
        ("the answer is 5", ["5", "five"], True),  # a list of references
    ],
)
def test_open_answer_cases(response, gold, right):
    assert eval_open(gold, parse_open_response(response)) is right


def test_folder_per_subject_reads_with_images_interleaved_at_their_tags(tmp_path):
    samples = {s.id: s for s in mmmu_load(str(mmmu_folder(tmp_path / "MMMU")))}
    assert sorted(samples) == ["validation_Art_1", "validation_Art_2", "validation_Math_1", "validation_Math_2"]
    two = samples["validation_Art_1"]
    content = two.messages[0]["content"]
    assert [c["type"] for c in content] == ["text", "image", "text", "image", "text"]
    assert content[0]["text"] == "Compare " and content[2]["text"] == " with "
    assert content[4]["text"].endswith("D. Unknown\nAnswer with the option's letter from the given choices directly.")
    assert len(two.images) == 2 and two.images[0] != two.images[1]
    assert two.meta["subject"] == "Art" and two.meta["discipline"] == "Art and Design"
    assert (
        samples["validation_Math_1"]
        .messages[0]["content"][-1]["text"]
        .endswith("Answer the question using a single word or phrase.")
    )


def test_mmmu_pro_standard_and_vision_rows(tmp_path):
    ten = str([f"option {k}" for k in range(10)])
    standard = {
        "id": "test_History_1",
        "question": "Which trend? <image 1>",
        "options": ten,
        "explanation": "?",
        "image_1": {"bytes": png(), "path": "x.png"},
        "img_type": "['Diagrams']",
        "answer": "J",
        "topic_difficulty": "Medium",
        "subject": "History",
    }
    vision = {
        "id": "test_Art_3",
        "image": {"bytes": png(), "path": "s.png"},
        "options": ten,
        "answer": "B",
        "subject": "Art",
    }
    s, v = (
        mmmu_load(str(write_parquet(tmp_path / "standard.parquet", [standard])))[0],
        mmmu_load(str(write_parquet(tmp_path / "vision.parquet", [vision])))[0],
    )
    assert s.answer == "J" and s.meta["question_type"] == "multiple-choice" and len(s.meta["options"]) == 10
    assert v.meta["setting"] == "vision" and [c["type"] for c in v.messages[0]["content"]] == ["image", "text"]
    assert "Answer: $LETTER" in v.messages[0]["content"][1]["text"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"options": "['a', 'b'"}, "options \"['a', 'b'\" does not parse as a list of options"),
        ({"question_type": " "}, "question_type ' ' is not multiple-choice, open or short-answer"),
        ({"answer": "AB"}, "answer 'AB' is not an option letter A to Z"),
    ],
)
def test_a_bad_row_is_one_line(tmp_path, change, message):
    row = {**mmmu_rows()[0], **change}
    path = write_parquet(tmp_path / "bad.parquet", [row])
    with pytest.raises(ValueError) as err:
        mmmu_load(str(path))
    assert str(err.value) == f"{path}: row 0 (id 'validation_Art_1'): {message}"


def test_breakdowns_by_subject_subfield_and_difficulty(tmp_path):
    folder = mmmu_folder(tmp_path / "MMMU")
    preds = [
        {"id": "validation_Art_1", "response": "(B)"},
        {"id": "validation_Art_2", "response": "(C)"},
        {"id": "validation_Math_1", "response": "12.5"},
        {"id": "validation_Math_2", "response": "Euclid"},
    ]
    path = tmp_path / "output.json"  # MMMU's per-subject output.json: records with id and response
    path.write_text(json.dumps(preds))
    results, _ = rescore(f"mmmu:{folder}", str(path), output_path=str(tmp_path / "out"))
    task = results["results"]["mmmu:MMMU"]
    expected = {
        "accuracy": 2 / 4,
        "accuracy_subject_art": 1 / 2,
        "accuracy_subject_math": 1 / 2,
        "accuracy_discipline_art_and_design": 1 / 2,
        "accuracy_discipline_science": 1 / 2,
        "accuracy_subfield_fine_arts": 1 / 2,
        "accuracy_subfield_geometry": 1 / 2,
        "accuracy_topic_difficulty_easy": 1 / 2,
        "accuracy_topic_difficulty_hard": 0.0,
        "accuracy_topic_difficulty_medium": 1.0,
        "accuracy_question_type_open": 1 / 2,
    }
    for metric, value in expected.items():
        assert task[f"{metric},none"] == pytest.approx(value), metric


def test_an_answer_past_the_options_is_kept_wrong_and_counted(tmp_path):
    rows = [{**mmmu_rows()[1], "answer": "E"}]  # three options: E is never a parse
    samples = mmmu_load(str(write_parquet(tmp_path / "odd.parquet", rows)))
    assert samples[0].answer == "E" and samples.notes == [
        "1 questions whose answer letter is past their options, never right as the benchmark scores them "
        "(validation_Art_2)"
    ]


@pytest.mark.parametrize(
    "response, mmmu, pro",
    [
        ("Reasoning: Answer: B", "B", "B"),  # Pro: the one letter after the last "Answer:"; MMMU: " B "
        ("C. Berlin", None, "C"),  # Pro's "C." rule; MMMU: no " C ", two words: a random fallback
        ("so D.", "D", "D"),  # stripped of the final "." first: " so D " in both
        ("B.Berlin", None, "B"),  # Pro's "B." rule; MMMU: no letter, a random fallback
    ],
)
def test_mmmu_pro_parser_differs_where_its_evaluate_py_does(response, mmmu, pro):
    m, m_fell = parse_multi_choice_response(response, OPTIONS, random.Random(0))
    p, p_fell = parse_multi_choice_response(response, OPTIONS, random.Random(0), pro=True)
    assert (p, p_fell) == (pro, False)
    assert m_fell if mmmu is None else (m, m_fell) == (mmmu, False)
