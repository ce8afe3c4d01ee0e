"""A video clip's frames, frame size and visual-token count, planned from the container header alone, and
the one cache of the media layer (``FileCache``: headers and decoded clips kept per file).

The limits follow qwen-vl-utils / EasyR1 (``video_fps``, ``video_max_frames``, ``video_min_pixels``,
``video_max_pixels``, ``video_total_pixels``), separate from the image limits:

- frames: ``plan_frames`` (``fps`` or a fixed ``num_frames``, at most ``max_frames``, always even);
- per-frame pixels: within ``[min_pixels, max_pixels]``; with ``total_pixels`` (the whole clip's pixel
  budget) the per-frame ceiling becomes qwen-vl-utils' ``max(min(max_pixels, total_pixels / T * 2),
  1.05 * min_pixels)`` (its ``FRAME_FACTOR`` 2: the total counts one frame per temporal patch);
- tokens: ``video_tokens`` of that plan.

How many frames (T is always even, because the Qwen vision tower groups 2 consecutive frames into one
temporal patch and would otherwise repeat the last frame):

- ``num_frames=n``: ``T = n`` rounded *up* to even. Asking for more frames than the window holds, or more
  than ``max_frames``, is an error (rounding up may repeat one frame when ``n`` is odd and equals the
  window's frame count). The cap is checked on the container's header, before any frame is decoded.
- ``fps=r`` (default 2.0, Qwen's): ``T = floor_even(min(window seconds * r, window frames, max_frames))``,
  at least 2 (a one-frame window gives that frame twice); ``max_frames`` defaults to 768, the Qwen
  processors' cap, so an hour at 2 fps does not become 7,200 frames.

The T indices are ``round(linspace(first, last, T))`` over the window's frames, both ends included (the
qwen-vl-utils rule, so a clip sampled here matches one sampled there).

``ClipPlan`` holds all of it before one frame is decoded, so a prompt whose text + visual tokens would
exceed ``max_prompt_length`` is filtered or downscaled without decoding; ``load_video`` with the plan's
``min_pixels`` / ``max_pixels`` then decodes exactly those frames at exactly that size.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mmreason.media.budget import VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS, smart_resize, video_tokens
from mmreason.media.errors import MediaError
from mmreason.media.image import max_decode_pixels

DEFAULT_FPS = 2.0
DEFAULT_MAX_FRAMES = 768
_KIND = "video"


@dataclass(frozen=True)
class VideoInfo:
    """What the container says, before any frame is decoded."""

    path: str
    num_frames: int
    fps: float
    height: int
    width: int
    backend: str

    @property
    def duration(self) -> float:
        """Seconds, as ``num_frames / fps`` (the clock every frame index is placed on)."""
        return self.num_frames / self.fps


def _even_up(n: float) -> int:
    return 2 * math.ceil(n / 2)


def _even_down(n: float) -> int:
    return 2 * math.floor(n / 2)


def window_frames(info: VideoInfo, start: float | None = None, end: float | None = None) -> range:
    """The source frame indices inside ``[start, end)`` seconds; raises MediaError if none are."""
    length = info.duration
    lo = 0.0 if start is None else float(start)
    hi = length if end is None else float(end)
    window = f"window [{lo:.2f}, {hi:.2f}] s"
    if lo < 0 or (end is not None and hi <= lo):
        raise MediaError(info.path, f"{window} is not a time window (need 0 <= start < end)", _KIND)
    # One frame of slack past the end: annotations rounded to the second often overshoot by a little.
    if lo >= length or hi > length + 1.0 / info.fps:
        raise MediaError(info.path, f"{window} is outside the video (length {length:.2f} s)", _KIND)
    eps = 1e-6  # a window edge that falls on a frame time includes that frame despite float error
    first = math.ceil(lo * info.fps - eps)
    stop = min(info.num_frames, math.ceil(hi * info.fps - eps))
    if stop <= first:
        raise MediaError(info.path, f"{window} holds no frame (one every {1.0 / info.fps:.3f} s)", _KIND)
    return range(first, stop)


def check_frame_pixels(path: str, width: int, height: int) -> None:
    """Raise MediaError when a ``width`` x ``height`` frame is over the decode cap (``MMREASON_MAX_IMAGE_PIXELS``,
    as for images)."""

    cap = max_decode_pixels()
    if height * width > cap:
        raise MediaError(
            path,
            f"frames of {width}x{height} px are over the decode cap of {cap:,} pixels (MMREASON_MAX_IMAGE_PIXELS)",
            _KIND,
        )


def plan_frames(
    info: VideoInfo,
    *,
    fps: float | None = None,
    num_frames: int | None = None,
    start: float | None = None,
    end: float | None = None,
    max_frames: int | None = DEFAULT_MAX_FRAMES,
) -> list[int]:
    """The source frame indices ``load_video`` decodes, without decoding anything (see the module doc).
    Frames over the decode cap (``MMREASON_MAX_IMAGE_PIXELS``, as for images) are refused from the header."""
    check_frame_pixels(info.path, info.width, info.height)
    if fps is not None and num_frames is not None:
        raise ValueError("give either fps or num_frames, not both")
    frames = window_frames(info, start, end)
    count = len(frames)
    if num_frames is not None:
        if num_frames < 1:
            raise ValueError(f"num_frames must be at least 1, got {num_frames}")
        if max_frames is not None and num_frames > max_frames:  # a dataset's num_frames obeys the cap too
            raise MediaError(
                info.path,
                f"asked for {num_frames} frames, over the frame cap max_frames={max_frames} "
                "(data.video_max_frames in a run config)",
                _KIND,
            )
        if num_frames > count:
            raise MediaError(info.path, f"asked for {num_frames} frames but the window holds only {count}", _KIND)
        n = _even_up(num_frames)
    else:
        rate = DEFAULT_FPS if fps is None else float(fps)
        if rate <= 0:
            raise ValueError(f"fps must be positive, got {fps}")
        wanted = min(count / info.fps * rate, count, max_frames if max_frames is not None else count)
        n = max(2, _even_down(wanted))
    return np.linspace(frames.start, frames.stop - 1, n).round().astype(int).tolist()


def frame_size(info: VideoInfo, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    try:
        return smart_resize(info.height, info.width, min_pixels=min_pixels, max_pixels=max_pixels)
    except ValueError as err:  # aspect ratio above 200
        raise MediaError(info.path, str(err), _KIND) from err


def clip_tokens(
    info: VideoInfo,
    *,
    fps: float | None = None,
    num_frames: int | None = None,
    start: float | None = None,
    end: float | None = None,
    max_frames: int | None = DEFAULT_MAX_FRAMES,
    min_pixels: int = VIDEO_MIN_PIXELS,
    max_pixels: int = VIDEO_MAX_PIXELS,
    cap_pixels_per_frame: bool = False,
) -> int:
    """Visual tokens the Qwen video processor (with these limits) will produce for this clip.

    Plans the frames from the container's header exactly as ``load_video`` does, without decoding the clip. ``cap_pixels_per_frame`` mirrors the processor option of that name.
    """
    indices = plan_frames(info, fps=fps, num_frames=num_frames, start=start, end=end, max_frames=max_frames)
    frame_size(info, min_pixels, max_pixels)  # the aspect-ratio check, as a MediaError
    return video_tokens(
        len(indices),
        info.height,
        info.width,
        min_pixels,
        max_pixels,
        cap_pixels_per_frame=cap_pixels_per_frame,
    )


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


def frame_pixel_limits(num_frames: int, min_pixels: int, max_pixels: int, total_pixels: int | None) -> tuple[int, int]:
    """Per-frame ``(min_pixels, max_pixels)`` of a ``num_frames`` clip under a clip-wide ``total_pixels``."""
    if total_pixels is None:
        return min_pixels, max_pixels
    high = max(min(max_pixels, total_pixels * 2 // max(num_frames, 1)), int(min_pixels * 1.05))
    return min(min_pixels, high), high


def plan_clip(
    info: VideoInfo,
    *,
    fps: float | None,
    num_frames: int | None,
    start: float | None,
    end: float | None,
    max_frames: int | None,
    min_pixels: int,
    max_pixels: int,
    total_pixels: int | None = None,
) -> ClipPlan:
    """The plan of one clip from its header (raises MediaError naming the file, as ``load_video`` would)."""
    indices = plan_frames(info, fps=fps, num_frames=num_frames, start=start, end=end, max_frames=max_frames)
    low, high = frame_pixel_limits(len(indices), min_pixels, max_pixels, total_pixels)
    height, width = frame_size(info, low, high)
    tokens = video_tokens(len(indices), info.height, info.width, low, high)
    return ClipPlan(info.path, indices, [i / info.fps for i in indices], height, width, low, high, tokens)


class FileCache:
    """Values computed from a file, kept per (path, size, modification time, arguments), least recently used
    first out, at most ``budget`` of ``cost`` (1 per entry by default); a changed file misses. ``budget`` 0
    turns the cache off. The one cache of the media layer: video headers (``video.header_cache``) and decoded
    clips (``video.clip_cache``)."""

    def __init__(self, compute: Callable[..., Any], budget: int, cost: Callable[[Any], int] = lambda value: 1) -> None:
        self.compute, self.budget, self.cost = compute, budget, cost
        self.entries: OrderedDict[tuple, Any] = OrderedDict()
        self.used = 0
        self.hits = self.misses = 0

    def get(self, path: str | os.PathLike, **kwargs: Any) -> Any:
        """``compute(path, **kwargs)``, from the cache when the same file and arguments were seen before."""
        if self.budget <= 0:
            return self.compute(path, **kwargs)
        try:
            stat = os.stat(path)
        except OSError:
            return self.compute(path, **kwargs)  # raises the MediaError naming the file
        key = (str(path), stat.st_size, stat.st_mtime_ns, tuple(sorted(kwargs.items())))
        if key in self.entries:
            self.entries.move_to_end(key)
            self.hits += 1
            return self.entries[key]
        self.misses += 1
        value = self.compute(path, **kwargs)
        size = self.cost(value)
        if size <= self.budget:
            self.entries[key] = value
            self.used += size
            while self.used > self.budget:
                _, old = self.entries.popitem(last=False)
                self.used -= self.cost(old)
        return value
