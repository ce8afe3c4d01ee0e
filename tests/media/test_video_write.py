"""write_mp4: frames in, a decodable mp4 of the asked size out; nothing left behind on failure."""

from __future__ import annotations

import numpy as np
import pytest

from mmreason.media.video import probe_video
from mmreason.media.video_write import write_mp4


def test_frames_become_an_mp4_of_the_asked_size(tmp_path):
    frames = (np.full((64, 96, 3), c, dtype=np.uint8) for c in range(0, 240, 10))  # a generator: 24 frames
    path = write_mp4(tmp_path / "a.mp4", frames, fps=8, size=(48, 32))
    info = probe_video(path)
    assert (info.width, info.height, info.num_frames) == (48, 32, 24)
    assert info.fps == pytest.approx(8)
    assert [p.name for p in tmp_path.iterdir()] == ["a.mp4"]  # no temporary file left


def test_no_frames_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no frames"):
        write_mp4(tmp_path / "b.mp4", [], fps=8)
    assert not list(tmp_path.iterdir())
