"""MedScope data: generated procedure videos show their events exactly in the windows the rows name (and a
sparse global look mostly misses them), user rows load with their evidence windows or fail naming the row,
the pydicom-data echocardiography cine becomes a video with measured answers, and the data command works."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from medscope_helpers import make_data  # noqa: I001

from mmreason.cli import main
from mmreason.media import load_video
from mmreason.tasks.medscope import synth
from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.medscope.env import MedScopeEnv


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_events_happen_exactly_in_their_evidence_windows(tmp_path):
    path = make_data(tmp_path, videos=1, seconds=(90, 90))
    rows = _rows(path)
    p = rows[0]["procedure"]
    clip = load_video(tmp_path / rows[0]["video"], fps=2.0, max_frames=None)
    frames = clip.frames.permute(0, 2, 3, 1).numpy().astype(int)  # [T, H, W, 3]
    assert len(frames) == 180
    marker = frames[:, 2:5, 2:5].mean(axis=(1, 2))  # [T, 3] the corner marker
    grey = np.abs(marker - np.array(synth.GREY)).max(axis=1) < 25
    inside = np.array([p["marker"][0] <= i / 2 < p["marker"][1] for i in range(180)])
    assert (grey == ~inside).all()  # coloured exactly while the evidence window lasts
    bar = frames[:, 16, :, :].mean(axis=(1, 2)) < 110  # the dark instrument across the middle row
    inside = np.array([p["instrument"][0] <= i / 2 < p["instrument"][1] for i in range(180)])
    assert (bar == inside).all()
    by_type = {r["task_type"]: r for r in rows}
    assert by_type["temporal_grounding"]["evidence_windows"] == [p["instrument"]]
    assert by_type["qa"]["answer"] == str(p["dots_during"]) and p["dots_during"] > p["dots_before"]
    assert by_type["grounded_qa"]["options"]["ABCD".index(by_type["grounded_qa"]["answer"])] == p["marker_colour"]


def test_generation_is_deterministic_and_events_are_short_and_apart():
    a, b = synth.procedures(50, 3, (120, 300)), synth.procedures(50, 3, (120, 300))
    assert a == b
    for p in a:
        windows = sorted([p.instrument, p.marker, p.count])
        assert all(3 <= e - s <= 6 for s, e in windows) and windows[-1][1] <= p.seconds - 2
        assert all(w2[0] - w1[1] >= 4 for w1, w2 in zip(windows, windows[1:]))
    # a 16-frame global look over minutes misses most 3-6 s events
    seen = [any(s <= t < e for t in np.linspace(0, p.seconds - 0.5, 16)) for p in a for s, e in [p.marker]]
    assert sum(seen) < 0.5 * len(seen)


def test_event_scale_enlarges_the_marker_and_the_instrument():
    (p,) = synth.procedures(1, 0, (40, 40))
    texture = synth._texture(p.texture_seed, 32)

    def event_pixels(scale: int, window: tuple[int, int], colour) -> int:
        frame = synth.render_frame(p, texture, 2 * window[0], 32, scale).astype(int)
        return int((np.abs(frame - np.array(colour)).max(axis=2) < 10).sum())

    marker = synth.COLOURS[p.marker_colour]
    assert event_pixels(1, p.marker, marker) == 4 * 4 and event_pixels(3, p.marker, marker) == 12 * 12
    assert event_pixels(3, p.instrument, (40, 40, 50)) == 3 * event_pixels(1, p.instrument, (40, 40, 50))
    with pytest.raises(ValueError, match="event scale 9 must be 1..4"):
        synth.generate("unused", 1, scale=9, size=32)


def test_rows_become_samples_with_the_global_view_and_the_evidence(tmp_path):
    path = make_data(tmp_path, videos=1)
    by_type = {s.meta["task_type"]: s for s in medscope_load(str(path), "eval")}
    grounding = by_type["temporal_grounding"]
    text = grounding.messages[0]["content"][1]["text"]
    assert "The video is 60.0 s long; you see 16 frames of it at t = 0.0, 4.0," in text
    assert grounding.videos[0].num_frames == 16 and grounding.meta["answer_kind"] == "span"
    assert grounding.meta["span"] == [[float(v) for v in json.loads(grounding.answer)]]
    assert (
        by_type["grounded_qa"].meta["answer_kind"] == "mcq"
        and "(D)" in by_type["grounded_qa"].messages[0]["content"][1]["text"]
    )
    assert by_type["qa"].meta["answer_kind"] == "numeric"
    assert "<tool_call>" in by_type["qa"].meta["target"]


def test_the_trajectory_takes_its_numbers_from_the_global_frames_that_show_the_event(tmp_path):
    path = make_data(tmp_path, videos=4, seconds=(40, 48))
    shown_somewhere = 0
    for s in medscope_load(str(path), "eval"):
        stamps = [round(t, 1) for t in s.meta["global_times"]]
        start, end = s.meta["span"][0]
        calls = [json.loads(body) for body in re.findall(r"<tool_call>(.*?)</tool_call>", s.meta["target"])]
        crop, frame = calls[0]["arguments"], calls[1]["arguments"]["t"]
        assert crop["start"] <= start and end <= crop["end"]  # the whole event is inside the crop
        shown = [t for t in stamps if start <= t < end]
        if not shown:
            continue
        shown_somewhere += 1
        # every number is a time the first turn wrote (or the video's ends) ...
        assert {crop["start"], crop["end"], frame} <= set(stamps) | {0.0, s.meta["duration"]}
        # ... the frame shows the event, and the crop is the tightest bracket of global frames around it
        assert frame in shown
        assert [t for t in stamps if crop["start"] < t < crop["end"]] == shown
    assert shown_somewhere >= 11  # 40-48 s videos: 16 frames at most 3.2 s apart catch (almost) every event


def test_the_frames_view_puts_each_global_frame_after_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path / "cache"))
    path = make_data(tmp_path, videos=1, seconds=(40, 40))
    (sample, *_) = medscope_load(str(path), "eval", global_view="frames")
    content = sample.messages[0]["content"]
    assert [c["type"] for c in content] == ["text", "image"] * 16 + ["text"] and not sample.videos
    stamps = sample.meta["global_times"]
    assert [c["text"] for c in content[:-1:2]] == [f"{t:.1f} s" for t in stamps]
    assert "each after its time" in content[-1]["text"] and "t = 0.0," not in content[-1]["text"]
    clip = load_video(tmp_path / "00000.mp4", num_frames=16, max_frames=None)
    from PIL import Image

    for file, frame in zip(sample.images, clip.to_pil()):  # the image after time t is the frame at t
        assert np.array_equal(np.asarray(Image.open(file)), np.asarray(frame))
    before = [os.stat(f).st_mtime_ns for f in sample.images]
    again = medscope_load(str(path), "eval", global_view="frames")[0]
    assert again.images == sample.images and [os.stat(f).st_mtime_ns for f in again.images] == before  # cached
    env = MedScopeEnv()  # the environment finds the video without a video in the prompt
    env.reset(sample)
    obs = env.step('<tool_call>{"name": "crop_video", "arguments": {"start": 4, "end": 8}}</tool_call>')
    assert obs.videos and not obs.info.get("error")
    with pytest.raises(ValueError, match="global_view 'clip' is not one of video, frames"):
        medscope_load(str(path), "eval", global_view="clip")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"task_type": "caption"}, "task_type 'caption' is not one of"),
        ({"evidence_windows": None}, r"row 0 \(id 'r'\) has no 'evidence_windows'"),
        ({"evidence_windows": [[5, 2]]}, r"evidence window \[5.0, 2.0\] is not a time window"),
        ({"evidence_windows": "soon"}, "not a JSON list"),
        ({"options": ["red"], "answer": "A"}, "options must be a list of 2..10"),
        ({"options": ["red", "blue"], "answer": "green"}, "neither an option letter"),
        ({"task_type": "temporal_grounding", "answer": "later"}, "is not \\[start, end\\]"),
        ({"video": "gone.mp4"}, "does not exist"),
    ],
)
def test_bad_rows_name_the_file_and_row(tmp_path, change, message):
    make_data(tmp_path, videos=1)
    row = {
        "id": "r",
        "video": "00000.mp4",
        "question": "q?",
        "answer": "3",
        "task_type": "qa",
        "evidence_windows": [[1, 2]],
        **change,
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=message) as info:
        medscope_load(str(path), "eval")
    assert str(path) in str(info.value)


def test_the_data_command_writes_minutes_long_videos(tmp_path):
    assert main(["data", "medscope", "--out", str(tmp_path), "--videos", "1", "--minutes", "1..1", "--size", "32"]) == 0
    (row, *_) = _rows(tmp_path / "data.jsonl")
    assert row["duration"] == 60.0 and (tmp_path / row["video"]).exists()
    with pytest.raises(SystemExit, match="--minutes"):
        main(["data", "medscope", "--out", str(tmp_path), "--minutes", "a..b"])


def test_the_echocardiography_cine_becomes_a_video_with_measured_answers(tmp_path):
    pytest.importorskip("pydicom")
    pytest.importorskip("data_store", reason="pydicom-data is not installed")
    from mmreason.tasks.medscope.echo import FPS, dicom_path, echo_rows, read_frames

    path = echo_rows(tmp_path)
    samples = {s.id: s for s in medscope_load(str(path), "eval")}
    frames = read_frames(dicom_path())
    brightness = frames.astype(np.float32).mean(axis=(1, 2, 3))
    brightest = samples["echo-brightest"].meta["span"][0]
    assert brightest[0] <= int(brightness.argmax()) / FPS <= brightest[1]
    assert samples["echo-brightest-second"].answer == "ABCD"[int(brightness.argmax()) // FPS]
    clip = load_video(tmp_path / "echo.mp4", num_frames=4)
    assert clip.total_frames == 120 and clip.source_fps == 30 and clip.frames.shape[-2:] == (240, 320)
    assert samples["echo-darkest"].meta["duration"] == 4.0
