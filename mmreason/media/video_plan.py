"""A video clip's frames, frame size and visual-token count, planned from the container header alone.

The limits follow qwen-vl-utils / EasyR1 (``video_fps``, ``video_max_frames``, ``video_min_pixels``,
``video_max_pixels``, ``video_total_pixels``), separate from the image limits:

- frames: ``plan_frames`` (``fps`` or a fixed ``num_frames``, at most ``max_frames``, always even);
- per-frame pixels: within ``[min_pixels, max_pixels]``; with ``total_pixels`` (the whole clip's pixel
  budget) the per-frame ceiling becomes qwen-vl-utils' ``max(min(max_pixels, total_pixels / T * 2),
  1.05 * min_pixels)`` (its ``FRAME_FACTOR`` 2: the total counts one frame per temporal patch);
- tokens: ``video_tokens`` of that plan.

``ClipPlan`` holds all of it before one frame is decoded, so a prompt whose text + visual tokens would
exceed ``max_prompt_length`` is filtered or downscaled without decoding; ``load_video`` with the plan's
``min_pixels`` / ``max_pixels`` then decodes exactly those frames at exactly that size.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass

from mmreason.media.budget import smart_resize, video_tokens
from mmreason.media.errors import MediaError
from mmreason.media.video import VideoInfo, plan_frames, probe_video


@dataclass(frozen=True)
class VideoLimits:
    """Video limits of a run or an eval (``None`` pixel limits: the image limits, then the processor's)."""

    fps: float = 2.0
    max_frames: int = 16
    min_pixels: int | None = None  # per frame
    max_pixels: int | None = None  # per frame
    total_pixels: int | None = None  # per clip (all frames); None = no clip-wide cap

    def scaled(self, factor: float, floor: int) -> VideoLimits:
        """The same limits with the per-frame ceiling (and the clip's total) times ``factor``, not below
        ``floor`` pixels a frame (``prompt_overflow: downscale``)."""
        high = None if self.max_pixels is None else max(int(self.max_pixels * factor), floor)
        total = None if self.total_pixels is None else max(int(self.total_pixels * factor), floor)
        low = None if self.min_pixels is None else min(self.min_pixels, high or self.min_pixels)
        return VideoLimits(self.fps, self.max_frames, low, high, total)


@dataclass(frozen=True)
class ClipPlan:
    """What decoding a clip under limits will give: indices [T], frame size, per-frame limits, tokens."""

    path: str
    indices: list[int]
    timestamps: list[float]  # seconds from the start of the video, one per planned frame
    height: int
    width: int
    min_pixels: int
    max_pixels: int
    tokens: int
    resize: bool = True  # False: no pixel limit was set, frames are decoded at their own size (the processor
    # then resizes them within its limits, which ``min_pixels`` / ``max_pixels`` here are)


def frame_pixel_limits(num_frames: int, min_pixels: int, max_pixels: int,
                       total_pixels: int | None) -> tuple[int, int]:
    """Per-frame ``(min_pixels, max_pixels)`` of a ``num_frames`` clip under a clip-wide ``total_pixels``."""
    if total_pixels is None:
        return min_pixels, max_pixels
    high = max(min(max_pixels, total_pixels * 2 // max(num_frames, 1)), int(min_pixels * 1.05))
    return min(min_pixels, high), high


def plan_clip(info: VideoInfo, *, fps: float | None, num_frames: int | None, start: float | None,
              end: float | None, max_frames: int | None, min_pixels: int, max_pixels: int,
              total_pixels: int | None = None) -> ClipPlan:
    """The plan of one clip from its header (raises MediaError naming the file, as ``load_video`` would)."""
    indices = plan_frames(info, fps=fps, num_frames=num_frames, start=start, end=end, max_frames=max_frames)
    low, high = frame_pixel_limits(len(indices), min_pixels, max_pixels, total_pixels)
    try:
        height, width = smart_resize(info.height, info.width, min_pixels=low, max_pixels=high)
    except ValueError as err:  # aspect ratio above 200
        raise MediaError(info.path, str(err), "video") from err
    tokens = video_tokens(len(indices), info.height, info.width, low, high)
    return ClipPlan(info.path, indices, [i / info.fps for i in indices], height, width, low, high, tokens)


class HeaderCache:
    """``probe_video`` results kept per file (path, size, modification time), least recently used out."""

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self.infos: OrderedDict[tuple, VideoInfo] = OrderedDict()

    def info(self, path: str | os.PathLike) -> VideoInfo:
        try:
            stat = os.stat(path)
        except OSError:
            return probe_video(path)  # raises the MediaError naming the file
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key in self.infos:
            self.infos.move_to_end(key)
            return self.infos[key]
        info = self.infos[key] = probe_video(path)
        while len(self.infos) > self.max_entries:
            self.infos.popitem(last=False)
        return info
