"""Writing generated videos: H.264 mp4 from RGB frames, complete or absent (temporary name, then rename)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np


def write_mp4(
    path: str | os.PathLike,
    frames: Iterable[np.ndarray],
    fps: int,
    *,
    size: tuple[int, int] | None = None,
    crf: int = 20,
) -> Path:
    """``frames`` ([H, W, 3] uint8 RGB, any iterable) as an H.264 mp4 at ``fps``; ``size`` (width, height)
    rescales every frame (default: the first frame's size). Readers never see a half-written file."""
    import av

    path = Path(path)
    frames = iter(frames)
    first = next(frames, None)
    if first is None:
        raise ValueError(f"{path}: no frames to write")
    width, height = size or (first.shape[1], first.shape[0])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.mp4")
    with av.open(str(tmp), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"threads": "1", "crf": str(crf)})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for frame in itertools.chain([first], frames):
            image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            if (frame.shape[1], frame.shape[0]) != (width, height):
                image = image.reformat(width, height)
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    tmp.replace(path)
    return path
