"""Video-MME read as published (two clips, one with an .srt) and scored by its option-letter rule."""

from __future__ import annotations

import json

import pytest
from published_files import videomme_set, write_parquet

from mmreason.eval.rescore import rescore
from mmreason.tasks.videomme.data import videomme_load
from mmreason.tasks.videomme.scoring import option_letter


@pytest.mark.parametrize(
    "response, letter",
    [
        ("B", "B"),
        ("The best answer is C.", "C"),
        ("(D) 3-3", "D"),
        ("The answer is: a", ""),
        ("I think it is option B", "B"),
        ("it is clearly the second one here, I would say without doubt", ""),
    ],
)
def test_option_letter_rule(response, letter):
    assert option_letter(response) == letter


def test_the_rule_takes_the_first_capital_a_to_d_as_the_benchmark_does():
    assert option_letter("Answer: B") == "A"  # the "A" of "Answer": Video-MME's rule, kept as it is


def test_two_clips_with_subtitles_on_one(tmp_path):
    annotation = videomme_set(tmp_path / "Video-MME")
    plain = videomme_load(str(annotation))
    assert [s.id for s in plain] == ["001-1", "001-2", "002-1"]
    assert plain[0].videos[0].path == str((tmp_path / "Video-MME" / "data" / "vidA.mp4").resolve())
    assert plain[0].messages[0]["content"][1]["text"] == (
        "Select the best answer to the following multiple-choice question based on the video. Respond with only "
        "the letter (A, B, C, or D) of the correct option.\nHow many balls?\nA. 1\nB. 2\nC. 3\nD. 4\n"
        "The best answer is:"
    )
    subs = videomme_load(str(annotation), subtitles="true")
    text = subs[0].messages[0]["content"][1]["text"]
    assert text.startswith(
        "This video's subtitles are listed below:\nthe red ball rolls\nthen it stops\n"
        "Select the best answer to the following multiple-choice question based on the video and "
        "the subtitles."
    )
    assert (
        subs[2]
        .messages[0]["content"][1]["text"]
        .startswith("This video's subtitles are listed below:\nNo subtitles available\n")
    )
    assert subs.notes == ["with subtitles: 1 of 2 videos have a .srt"]


def test_breakdowns_by_duration_domain_and_task_type(tmp_path):
    annotation = videomme_set(tmp_path / "Video-MME")
    preds = tmp_path / "answers.json"
    preds.write_text(json.dumps({"001-1": "A", "001-2": "The best answer is C", "002-1": "D. 3-3"}))
    results, _ = rescore(f"videomme:{annotation}", str(preds), output_path=str(tmp_path / "out"))
    task = next(iter(results["results"].values()))
    assert task["accuracy,none"] == pytest.approx(2 / 3)
    assert task["accuracy_duration_short,none"] == 0.5 and task["accuracy_duration_long,none"] == 1.0
    assert task["accuracy_domain_knowledge,none"] == 0.5
    assert task["accuracy_task_type_ocr_problems,none"] == 1.0 and task["accuracy_task_type_action_reasoning,none"] == 0


@pytest.mark.parametrize(
    "change, message",
    [
        ({"duration": "extra-long"}, "duration 'extra-long' is not one of short, medium, long"),
        ({"options": "A. 1, B. 2"}, "options 'A. 1, B. 2' does not parse as a list of options"),
        ({"answer": "E"}, "answer 'E' is not one of the option letters"),
    ],
)
def test_a_bad_row_is_one_line(tmp_path, change, message):
    row = {
        "video_id": "1",
        "duration": "short",
        "domain": "d",
        "sub_category": "s",
        "videoID": "v",
        "question_id": "1-1",
        "task_type": "t",
        "question": "q",
        "options": ["A. x", "B. y"],
        "answer": "A",
    }
    path = write_parquet(tmp_path / "bad.parquet", [{**row, **change}])
    with pytest.raises(ValueError) as err:
        videomme_load(str(path))
    assert str(err.value) == f"{path}: row 0 (id '1-1'): {message}"
