"""Video clips planned from the container header: frames, per-frame limits under a clip-wide total, tokens
equal to what the processor gives after decoding; an over-long video prompt filtered or downscaled before
any frame is decoded; header reads and decoding counted as video decode time."""

from __future__ import annotations

import av
import numpy as np
import pytest

from mmreason.media import probe_video
from mmreason.media.video_plan import VideoLimits, frame_pixel_limits, plan_clip
from mmreason.rollout import prompts
from mmreason.rollout.prompts import PromptTooLong, build_prompt
from mmreason.types import Sample, VideoRef


def _mp4(path, frames=16, size=(224, 112), rate=4):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=rate, options={"threads": "1"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), 10 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode())
    return path


def _sample(path) -> Sample:
    return Sample(
        id="v",
        messages=[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "?"}]}],
        videos=[VideoRef(str(path))],
    )


def test_total_pixels_lowers_the_per_frame_ceiling():
    assert frame_pixel_limits(8, 3136, 50176, None) == (3136, 50176)
    # 8 frames under 40,000 total pixels: 10,000 a frame (qwen-vl-utils' total / T * 2), never below 1.05 * min
    assert frame_pixel_limits(8, 3136, 50176, 40_000) == (3136, 10_000)
    low, high = frame_pixel_limits(64, 3136, 50176, 40_000)
    assert high == int(3136 * 1.05) and low <= high


def test_plan_tokens_equal_the_processor_grid(tiny, tmp_path):
    processor = tiny[1]
    path = _mp4(tmp_path / "a.mp4")
    limits = VideoLimits(fps=2.0, max_frames=6, min_pixels=3136, max_pixels=12544, total_pixels=3 * 12544)
    plan = plan_clip(
        probe_video(path),
        fps=2.0,
        num_frames=None,
        start=None,
        end=None,
        max_frames=6,
        min_pixels=3136,
        max_pixels=12544,
        total_pixels=3 * 12544,
    )
    assert len(plan.indices) == 6 and plan.max_pixels == 12544  # 3 * 12544 * 2 / 6 = 12544
    built = build_prompt(processor, _sample(path), max_prompt_length=4096, video_limits=limits)
    t, h, w = built.visual["video_grid_thw"][0].tolist()
    assert plan.tokens == t * h * w // 4 == int((built.mm_token_type_ids == 2).sum())
    assert (plan.height, plan.width) == (h * 14, w * 14)
    tight = VideoLimits(2.0, 6, 3136, 12544, total_pixels=3 * 3136)  # a quarter of the pixels a frame
    small = build_prompt(processor, _sample(path), max_prompt_length=4096, video_limits=tight)
    assert int((small.mm_token_type_ids == 2).sum()) < plan.tokens


def test_over_long_video_prompt_is_refused_before_decoding(tiny, tmp_path):
    processor = tiny[1]
    path = _mp4(tmp_path / "b.mp4")
    limits = VideoLimits(fps=2.0, max_frames=8, min_pixels=3136, max_pixels=12544)
    misses = prompts.CLIP_CACHE.misses
    with pytest.raises(PromptTooLong, match="nothing decoded"):
        build_prompt(processor, _sample(path), max_prompt_length=40, video_limits=limits)
    assert prompts.CLIP_CACHE.misses == misses  # no clip was decoded
    # downscale: the video is planned smaller until it fits, then decoded once
    built = build_prompt(processor, _sample(path), max_prompt_length=60, video_limits=limits, overflow="downscale")
    assert built.length <= 60 and prompts.CLIP_CACHE.misses == misses + 1


def test_decode_time_is_counted(tiny, tmp_path):
    path = _mp4(tmp_path / "c.mp4")
    before = prompts.MEDIA_SECONDS["video_decode"]
    build_prompt(tiny[1], _sample(path), max_prompt_length=4096, video_limits=VideoLimits(2.0, 4, 3136, 3136))
    assert prompts.MEDIA_SECONDS["video_decode"] > before
