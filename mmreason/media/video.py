"""Video clips: a time window sampled at a frame rate or to a fixed frame count, decoded by decord or PyAV.

Frame indices are those of the source stream (frame ``i`` starts at ``i / fps`` seconds, constant frame
rate assumed, as decord and the Qwen processors assume). A window ``[start, end]`` covers the frames
whose start time lies in ``[start, end)``; ``None`` means the start / end of the video.

Which frames and at what size (``plan_frames``, the visual-token count) is ``video_plan``'s job, from the
header alone; this module opens containers and decodes.

The frame size always comes from the container header, read by PyAV for either backend, and a frame over the
decode cap (``MMREASON_MAX_IMAGE_PIXELS``) is refused before any frame is decoded.

Backends: decord first, PyAV when decord is missing or fails on the file; ``backend="decord"|"pyav"`` or
the environment variable ``MMREASON_VIDEO_BACKEND`` forces one. Both give the same indices and
timestamps; pixel values may differ by a few levels (each does its own YUV -> RGB conversion).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from PIL import Image

from mmreason.media.budget import VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS, resolve_budget
from mmreason.media.errors import MediaError, describe, require_file
from mmreason.media.video_plan import (
    DEFAULT_MAX_FRAMES,
    FileCache,
    VideoInfo,
    check_frame_pixels,
    clip_tokens,
    frame_size,
    plan_frames,
    window_frames,
)

BACKEND_ENV = "MMREASON_VIDEO_BACKEND"
BACKENDS = ("decord", "pyav")
_READ_CHUNK = 32  # frames decoded at full size at a time, before the per-frame budget shrinks them
_CHUNK_BYTES = 512 * 2**20  # at most this much for a chunk's full-size float copy while it is resized
_KIND = "video"


@dataclass
class VideoClip:
    """Sampled frames of one window of a video.

    frames:        [T, 3, H, W] uint8, RGB, T even.
    frame_indices: [T] indices into the source stream (absolute, not relative to the window).
    timestamps:    [T] seconds from the start of the video, ``index / source_fps``.
    window:        the window in seconds, aligned to frames: ``(first / fps, (last + 1) / fps)`` of the
                   ``window_frames`` frames inside the requested ``[start, end)``.
    """

    path: str
    frames: torch.Tensor
    frame_indices: list[int]
    timestamps: list[float]
    source_fps: float
    total_frames: int
    window: tuple[float, float]
    window_frames: int
    backend: str

    @property
    def duration(self) -> float:
        """Length of the whole source video in seconds."""
        return self.total_frames / self.source_fps

    def to_pil(self) -> list:
        """The frames as a list of RGB PIL images."""
        return [Image.fromarray(frame.permute(1, 2, 0).numpy()) for frame in self.frames]

    def metadata(self) -> dict:
        """See ``video_metadata``."""
        return video_metadata(self)


def video_metadata(clip: VideoClip) -> dict:
    """The ``video_metadata`` entry transformers 5.x video processors take with already-sampled frames.

    Use as ``processor(text=..., videos=[clip.frames], video_metadata=[video_metadata(clip)])`` with
    ``do_sample_frames=False`` (the Qwen2-VL default). Following qwen-vl-utils, ``total_num_frames`` is
    the number of frames *in the window* and ``frames_indices`` are absolute, so that

        VideoMetadata.sampled_fps = T / total_num_frames * fps = the true sampling rate in the window,

    which Qwen2.5-VL turns into ``second_per_grid_ts = 2 / sampled_fps`` (the temporal M-RoPE step),
    and ``VideoMetadata.timestamps = frames_indices / fps`` are seconds from the start of the video.
    """
    return {
        "total_num_frames": clip.window_frames,
        "fps": clip.source_fps,
        "frames_indices": list(clip.frame_indices),
        "duration": clip.window_frames / clip.source_fps,
        "height": int(clip.frames.shape[-2]),
        "width": int(clip.frames.shape[-1]),
        "video_backend": clip.backend,
    }


# ---- backends ---------------------------------------------------------------------------------------


def header_frame_size(path: str) -> tuple[int, int]:
    """(width, height) of the first video stream, from the container header through PyAV: nothing is decoded.

    decord has no header-only size (its only way is to decode frame 0, which for a 12000 x 12000 frame costs
    over a GiB), so every backend asks PyAV first. Raises RuntimeError when the header gives no size.
    """
    import av

    with av.open(path) as container:
        if not container.streams.video:
            raise RuntimeError("the file has no video stream")
        ctx = container.streams.video[0].codec_context
        if not ctx.width or not ctx.height:
            raise RuntimeError("the video header gives no frame size")
        return int(ctx.width), int(ctx.height)


T = TypeVar("T")


class _DecordSource:
    """decord.VideoReader on the CPU; ``read`` returns [T, H, W, 3] uint8."""

    name = "decord"

    def __init__(self, path: str) -> None:
        import decord

        width, height = header_frame_size(path)  # decord can only tell the size by decoding a frame
        check_frame_pixels(path, width, height)
        self.reader = decord.VideoReader(path, ctx=decord.cpu(0))
        self.info = VideoInfo(path, len(self.reader), float(self.reader.get_avg_fps()), height, width, self.name)

    def read(self, indices: Sequence[int]) -> np.ndarray:
        return self.reader.get_batch(list(indices)).asnumpy()

    def close(self) -> None:
        del self.reader


class _PyAVSource:
    """PyAV (FFmpeg) decoding, seeking to the first wanted frame; ``read`` returns [T, H, W, 3] uint8."""

    name = "pyav"

    def __init__(self, path: str) -> None:
        import av

        self.container = av.open(path)
        if not self.container.streams.video:
            self.container.close()
            raise RuntimeError("the file has no video stream")
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"
        rate = self.stream.average_rate or self.stream.guessed_rate
        if not rate:
            self.container.close()
            raise RuntimeError("the video stream has no frame rate")
        ctx = self.stream.codec_context
        try:
            check_frame_pixels(path, ctx.width, ctx.height)
        except MediaError:
            self.container.close()
            raise
        count = self.stream.frames or self._count_frames()
        self.info = VideoInfo(path, count, float(rate), ctx.height, ctx.width, self.name)

    def _count_frames(self) -> int:
        # Some containers (webm, mkv) store no frame count; counting packets decodes nothing.
        count = sum(1 for packet in self.container.demux(self.stream) if packet.size)
        self.container.seek(0)
        return count

    def read(self, indices: Sequence[int]) -> np.ndarray:
        wanted = set(indices)
        first, last = min(wanted), max(wanted)
        base = self.stream.start_time or 0
        time_base = self.stream.time_base
        fps = self.info.fps
        if first > 0:
            target = base + int(first / fps / time_base)  # type: ignore[operator]  # PyAV types it Optional
            self.container.seek(target, stream=self.stream, backward=True, any_frame=False)
        decoded: dict[int, np.ndarray] = {}
        counter = 0
        for frame in self.container.decode(self.stream):
            index = round(float((frame.pts - base) * time_base) * fps) if frame.pts is not None else counter  # type: ignore[operator]
            counter += 1
            if index in wanted:
                decoded[index] = frame.to_ndarray(format="rgb24")
            if index >= last:
                break
        missing = sorted(wanted - decoded.keys())
        if missing:
            raise RuntimeError(
                f"the stream ended before frame {missing[0]} of {self.info.num_frames} (file truncated?)"
            )
        return np.stack([decoded[i] for i in indices])

    def close(self) -> None:
        self.container.close()


_Source = _DecordSource | _PyAVSource


_SOURCES: dict[str, type[_Source]] = {"decord": _DecordSource, "pyav": _PyAVSource}


def _backend_order(backend: str | None) -> tuple[str, ...]:
    choice = backend or os.environ.get(BACKEND_ENV) or "auto"
    if choice == "auto":
        return BACKENDS
    if choice not in _SOURCES:
        raise ValueError(f"unknown video backend {choice!r}; valid: auto, {', '.join(BACKENDS)}")
    return (choice,)


def _with_source(path: str, backend: str | None, work: Callable[[_Source], T]) -> T:
    """Run ``work(source)`` with the first backend that can open and decode ``path``.

    A MediaError raised by ``work`` (a bad request such as a window outside the video) is final; any other
    failure moves on to the next backend, and when all fail the MediaError lists each one's reason.
    """
    path = require_file(path, _KIND)
    reasons = []
    for name in _backend_order(backend):
        source: _Source | None = None
        try:
            source = _SOURCES[name](path)
            return work(source)
        except MediaError:
            raise
        except Exception as err:  # decord/FFmpeg errors, missing module, truncated stream
            reasons.append(f"{name}: {describe(err)}")
        finally:
            if source is not None:
                source.close()
    raise MediaError(path, "not a decodable video (" + "; ".join(reasons) + ")", _KIND)


def probe_video(path: str | os.PathLike, backend: str | None = None) -> VideoInfo:
    """Frame count, frame rate and frame size of ``path``, as the backend that will decode it sees them."""
    return _with_source(str(path), backend, lambda source: source.info)


def _resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """[T, 3, h, w] uint8 -> [T, 3, height, width] uint8, bicubic with antialiasing (as the processor)."""
    if frames.shape[-2:] == (height, width):
        return frames
    resized = torch.nn.functional.interpolate(
        frames.float(), size=(height, width), mode="bicubic", antialias=True, align_corners=False
    )
    return resized.round().clamp(0, 255).to(torch.uint8)


def load_video(
    path: str | os.PathLike,
    *,
    fps: float | None = None,
    num_frames: int | None = None,
    start: float | None = None,
    end: float | None = None,
    max_pixels: int | None = None,
    min_pixels: int | None = None,
    max_frames: int | None = DEFAULT_MAX_FRAMES,
    backend: str | None = None,
) -> VideoClip:
    """Decode the frames ``plan_frames`` picks from ``[start, end]`` seconds of ``path``.

    ``fps`` or ``num_frames`` (not both; default 2 fps) set the frame count, always even (module doc).
    With ``max_pixels`` / ``min_pixels`` (the other limit defaults to the video processor's: 128*28*28 and
    768*28*28) every frame is smart-resized to that per-frame budget, so the processor keeps the size.
    Raises ``MediaError`` naming the file for a missing or undecodable file, or a window outside it.
    """
    budget = resolve_budget(min_pixels, max_pixels, VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS)

    def work(source: _Source) -> VideoClip:
        info = source.info
        indices = plan_frames(info, fps=fps, num_frames=num_frames, start=start, end=end, max_frames=max_frames)
        window = window_frames(info, start, end)
        size = None if budget is None else frame_size(info, budget.min_pixels, budget.max_pixels)
        chunks, per_chunk = [], read_chunk(info.height, info.width)
        for i in range(0, len(indices), per_chunk):
            chunk = torch.from_numpy(source.read(indices[i : i + per_chunk])).permute(0, 3, 1, 2)  # [t, 3, H, W]
            chunks.append(chunk if size is None else _resize_frames(chunk, *size))
        frames = torch.cat(chunks).contiguous()  # [T, 3, H, W]
        return VideoClip(
            path=info.path,
            frames=frames,
            frame_indices=indices,
            timestamps=[i / info.fps for i in indices],
            source_fps=info.fps,
            total_frames=info.num_frames,
            window=(window.start / info.fps, window.stop / info.fps),
            window_frames=len(window),
            backend=info.backend,
        )

    return _with_source(str(path), backend, work)


def read_chunk(height: int, width: int) -> int:
    """Frames decoded at once: 32, fewer for large frames, so that the chunk's float copy made while resizing
    stays under 512 MiB (an 8K frame, 7680 x 4320, is read one at a time)."""
    per_frame = height * width * 3 * 5  # uint8 frame + its float32 copy
    return max(1, min(_READ_CHUNK, _CHUNK_BYTES // max(per_frame, 1)))


def clip_cache(max_bytes: int | None = None) -> FileCache:
    """Decoded clips kept across steps: ``cache.get(path, **load_video_kwargs)`` returns what ``load_video``
    would decode, least recently used first out, at most ``max_bytes`` of frames. The key holds every argument
    that changes the frames; callers must not modify the returned frames in place. ``max_bytes`` defaults to
    ``$MMREASON_VIDEO_CACHE_MB`` (256) MiB; 0 turns the cache off."""
    if max_bytes is None:
        max_bytes = int(float(os.environ.get("MMREASON_VIDEO_CACHE_MB", "256")) * 2**20)
    return FileCache(
        lambda path, **kwargs: load_video(path, **kwargs),
        max_bytes,
        cost=lambda clip: clip.frames.numel() * clip.frames.element_size(),
    )


def header_cache(max_entries: int = 4096) -> FileCache:
    """``probe_video`` results kept per file: ``cache.get(path)``, least recently used out."""
    return FileCache(probe_video, max_entries)


def video_clip_tokens(path: str | os.PathLike, *, backend: str | None = None, **limits: Any) -> int:
    """Visual tokens the Qwen video processor will produce for this clip: ``clip_tokens`` of its header
    (``limits``: fps, num_frames, start, end, max_frames, min_pixels, max_pixels, cap_pixels_per_frame)."""
    return clip_tokens(probe_video(path, backend), **limits)


def add_frame_noise(frames: torch.Tensor, std: float, seed: int) -> torch.Tensor:
    """[T, 3, H, W] uint8 -> the same frames plus N(0, std) noise in [0, 1] pixel units, clamped, uint8."""
    if std <= 0:
        return frames
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(frames.shape, generator=gen) * std  # [T, 3, H, W]
    noisy = frames.float() / 255.0 + noise
    return (noisy.clamp(0, 1) * 255.0).round().to(torch.uint8)
