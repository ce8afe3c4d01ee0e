"""The videoqa loader: row shapes, relative paths, windows, and bad rows / bad videos named by file and row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from videoqa_helpers import audio_only, empty_video, good_video, truncated_video

from mmreason.media import MediaError
from mmreason.rollout.prompts import build_prompt, load_sample_media
from mmreason.tasks.videoqa.data import videoqa_load


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(i: int, kind: str = "free", answer="red", **extra) -> dict:
    return {
        "id": f"r{i}",
        "video": "clips/a.mp4",
        "question": "What colour?",
        "answer": answer,
        "answer_type": kind,
        **extra,
    }


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "clips").mkdir()
    good_video(tmp_path / "clips" / "a.mp4")
    return tmp_path


def test_rows_become_samples_with_the_video_resolved_against_the_file(folder):
    rows = [
        _row(0, "mcq", "green", options=["red", "green"]),
        _row(1, "numeric", "2"),
        _row(2, "free", "red"),
        _row(3, "span", "[0.5, 1.5]", window=[0.0, 2.5]),
    ]
    samples = videoqa_load(str(_write(folder / "rows.jsonl", rows)))
    assert [s.meta["answer_type"] for s in samples] == ["mcq", "numeric", "free", "span"]
    mcq, numeric, _free, span = samples
    assert mcq.answer == "B" and mcq.meta["choices"] == ["red", "green"]  # option text -> its letter
    assert "(A) red (B) green" in mcq.prompt_text and "option's letter" in mcq.prompt_text
    assert numeric.prompt_text.endswith("Answer with a number.")
    assert span.meta["span"] == [0.5, 1.5] and span.answer == "[0.5, 1.5]" and span.meta["target"] == "[0.5, 1.5]"
    assert span.messages[0]["content"][0] == {"type": "video"}
    video = span.videos[0]
    assert Path(video.path) == folder / "clips" / "a.mp4" and (video.start, video.end) == (0.0, 2.5)
    assert mcq.videos[0].start is None and mcq.task == "videoqa"


def test_parquet_and_span_answers_as_lists(folder):
    import pandas as pd

    rows = [_row(0, "span", [1.0, 2.0]), _row(1, "span", [0.0, 0.5])]
    pd.DataFrame(rows).to_parquet(folder / "rows.parquet")
    samples = videoqa_load(str(folder / "rows.parquet"))
    assert [s.meta["span"] for s in samples] == [[1.0, 2.0], [0.0, 0.5]]


def test_the_window_limits_the_frames_the_model_sees(folder):
    (sample,) = videoqa_load(str(_write(folder / "rows.jsonl", [_row(0, window=[1.0, 2.0])])))
    _images, videos, metadata = load_sample_media(sample, 3136, 3136, video_fps=2.0, video_max_frames=16)
    assert [i / 4 for i in metadata[0]["frames_indices"]] == [1.0, 1.75]  # 4 fps source, window [1, 2) s
    assert videos[0].shape == (2, 3, 56, 56)


@pytest.mark.parametrize(
    "row,message",
    [
        ({"answer": None}, r"row 1 \(id 'r1'\) has no 'answer' column"),
        ({"answer_type": "bool"}, "answer_type 'bool' is not one of mcq, numeric, free, span"),
        ({"answer_type": "mcq", "answer": "C", "options": ["red", "blue"]}, "neither an option letter"),
        ({"answer_type": "mcq", "answer": "A"}, "mcq needs 2..10 options"),
        ({"answer_type": "numeric", "answer": "many"}, "numeric answer 'many' is not a number"),
        ({"answer_type": "span", "answer": "[3, 1]"}, r"span answer \[3.0, 1.0\] is not a time window"),
        ({"answer_type": "span", "answer": "soon"}, "span answer 'soon' is not \\[start, end\\]"),
        ({"window": [-1, 2]}, "window"),
        ({"video": ""}, "has no 'video' column"),
    ],
)
def test_bad_rows_name_the_file_and_row(folder, row, message):
    path = _write(folder / "bad.jsonl", [_row(0), {**_row(1), **row}])
    with pytest.raises(ValueError, match=message) as info:
        videoqa_load(str(path))
    assert str(path) in str(info.value) and "row 1" in str(info.value)


def test_a_broken_data_file_is_named(folder):
    path = folder / "broken.jsonl"
    path.write_text(json.dumps(_row(0)) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"videoqa data file '.*broken.jsonl': line 2 is not JSON"):
        videoqa_load(str(path))


BAD_VIDEOS = {
    "truncated": (truncated_video, "not a decodable video"),
    "empty": (empty_video, "file is empty"),
    "audio_only": (audio_only, "no video stream"),
    "missing": (lambda p: p, "file does not exist"),
}


@pytest.mark.parametrize("kind", sorted(BAD_VIDEOS))
def test_bad_videos_are_loader_errors_with_probe_and_media_errors_when_built(folder, kind, tiny):
    make, reason = BAD_VIDEOS[kind]
    make(folder / "clips" / "bad.mp4")
    path = _write(folder / "rows.jsonl", [_row(0), {**_row(1), "video": "clips/bad.mp4"}])
    with pytest.raises(ValueError, match=reason) as info:
        videoqa_load(str(path), probe=True)
    assert str(path) in str(info.value) and "row 1 (id 'r1')" in str(info.value) and "bad.mp4" in str(info.value)
    # without probing, the sample loads and its prompt fails with a MediaError (a counted skip in a run)
    _, processor = tiny
    good, bad = videoqa_load(str(path))
    build_prompt(processor, good, max_prompt_length=512, min_pixels=3136, max_pixels=3136)
    with pytest.raises(MediaError, match=reason):
        build_prompt(processor, bad, max_prompt_length=512, min_pixels=3136, max_pixels=3136)


def test_a_window_outside_the_video(folder, tiny):
    path = _write(folder / "rows.jsonl", [_row(0, window=[5.0, 9.0])])  # the video is 3 s long
    with pytest.raises(ValueError, match=r"row 0 \(id 'r0'\).*outside the video \(length 3.00 s\)"):
        videoqa_load(str(path), probe=True)
    (sample,) = videoqa_load(str(path))
    with pytest.raises(MediaError, match="outside the video"):
        build_prompt(tiny[1], sample, max_prompt_length=512, min_pixels=3136, max_pixels=3136)


def test_answer_types_and_n_select_samples(folder):
    rows = [_row(i, kind, ans) for i, (kind, ans) in enumerate([("free", "red"), ("numeric", "1"), ("free", "x")])]
    path = str(_write(folder / "rows.jsonl", rows))
    assert [s.id for s in videoqa_load(path, answer_types=["free"])] == ["r0", "r2"]
    assert [s.id for s in videoqa_load(path, n=1)] == ["r0"]
    with pytest.raises(ValueError, match="answer_types"):
        videoqa_load(path, answer_types=["bool"])
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        videoqa_load(str(folder / "nope.jsonl"))


def test_the_held_out_data_command_writes_the_eval_split_a_run_draws(tmp_path, monkeypatch):
    """The README's learning block evaluates ``--tasks videoqa:$H``; its own commands now create ``H``
    (``--held-out``), and it is the split a run's eval draws: the same questions in the same order."""
    import json

    from mmreason.cli import main
    from mmreason.tasks.videoqa.data import generated_split

    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path / "cache"))
    args = [
        "data",
        "videoqa",
        "--out",
        str(tmp_path / "heldout"),
        "--videos",
        "2",
        "--seconds",
        "3..5",
        "--size",
        "32",
        "--style",
        "basic",
        "--held-out",
    ]
    assert main(args) == 0
    mine = [json.loads(line) for line in (tmp_path / "heldout" / "data.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in generated_split("eval", 2, 0, (3, 5), 32, "basic").read_text().splitlines()]
    keys = ("id", "question", "answer", "answer_type", "scenario")
    assert [[r[k] for k in keys] for r in mine] == [[r[k] for k in keys] for r in theirs] and len(mine) == 6
    args[3] = str(tmp_path / "train")
    assert main(args[:-1]) == 0  # without --held-out: the training videos of seed 0, which the split avoids
    train = [json.loads(line) for line in (tmp_path / "train" / "data.jsonl").read_text().splitlines()]
    assert not {json.dumps(r["scenario"]) for r in train} & {json.dumps(r["scenario"]) for r in mine}
