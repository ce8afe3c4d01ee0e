"""Broken inputs for the videoqa tests, all written by the tests: a cut mp4, an empty file, an audio-only file."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

from mmreason.tasks.videoqa import synth


def good_video(path: Path, seconds: int = 3) -> Path:
    s = synth.Scenario(seconds, 4, 0.0, 1.5, 1.0, "red", "blue", "right", (1.5,), 500)
    return synth.write_video(path, s, 64)


def truncated_video(path: Path) -> Path:
    data = good_video(path.with_name("whole-" + path.name)).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def empty_video(path: Path) -> Path:
    path.write_bytes(b"")
    return path


def audio_only(path: Path) -> Path:
    """An mp4 holding one AAC stream and no video stream."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("aac", rate=8000)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
        frame.sample_rate = 8000
        for packet in stream.encode(frame):
            container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
