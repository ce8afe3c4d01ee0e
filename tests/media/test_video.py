"""Video clips: frame plans worked by hand, decord and PyAV agreeing frame for frame, token counts that
match the video processor, and a clear error for every kind of bad input.

The fixture video is 3 s at 10 fps (30 frames, 64 x 48); frame i is a flat grey of level 8 * i, so the
decoded pixels say which frame was sampled.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from media_fixtures import frame_numbers, write_mp4
from transformers import Qwen2VLVideoProcessor

from mmreason.media import (
    MediaError,
    VideoInfo,
    load_video,
    plan_frames,
    probe_video,
    video_clip_tokens,
    video_metadata,
)

torch.set_num_threads(1)

# (arguments, expected source frame indices), worked out from the rules in mmreason/media/video.py
PLANS = [
    # default 2 fps over 3 s: 6 frames at round(linspace(0, 29, 6)) = round(0, 5.8, 11.6, 17.4, 23.2, 29)
    ({}, [0, 6, 12, 17, 23, 29]),
    # 5 frames round up to 6 (the temporal patch holds 2 frames)
    ({"num_frames": 5}, [0, 6, 12, 17, 23, 29]),
    # round(linspace(0, 29, 4)) = round(0, 9.67, 19.33, 29)
    ({"num_frames": 4}, [0, 10, 19, 29]),
    # [1, 2) s holds frames 10..19; 1 s at 4 fps = 4 frames: round(linspace(10, 19, 4)) = 10, 13, 16, 19
    ({"fps": 4, "start": 1.0, "end": 2.0}, [10, 13, 16, 19]),
    # [0.25, 1) s holds frames 3..9 (7); 10 fps wants 7, floored to 6: round(3, 4.2, 5.4, 6.6, 7.8, 9)
    ({"fps": 10, "start": 0.25, "end": 1.0}, [3, 4, 5, 7, 8, 9]),
    # a window of one frame gives it twice
    ({"start": 1.0, "end": 1.05}, [10, 10]),
    # max_frames caps the fps plan: round(linspace(20, 29, 4)) = 20, 23, 26, 29
    ({"fps": 10, "start": 2.0, "max_frames": 4}, [20, 23, 26, 29]),
    # an end up to one frame past the video is accepted (rounded annotations), the window stops at frame 29
    ({"num_frames": 2, "start": 2.5, "end": 3.05}, [25, 29]),
]


@pytest.mark.parametrize(("kwargs", "expected"), PLANS)
def test_both_backends_sample_the_planned_frames(mp4, kwargs, expected):
    clips = {backend: load_video(mp4, backend=backend, **kwargs) for backend in ("decord", "pyav")}
    for backend, clip in clips.items():
        assert clip.backend == backend
        assert clip.frame_indices == expected
        assert clip.timestamps == pytest.approx([i / 10 for i in expected])
        assert frame_numbers(clip.frames) == expected  # the decoded pixels are those frames
        assert clip.frames.dtype == torch.uint8 and clip.frames.shape == (len(expected), 3, 48, 64)
    assert plan_frames(probe_video(mp4), **kwargs) == expected
    # the two decoders convert YUV -> RGB each in its own way, but only by a few levels
    assert (clips["decord"].frames.int() - clips["pyav"].frames.int()).abs().max() <= 3


def test_clip_fields(mp4):
    clip = load_video(mp4, fps=4, start=1.0, end=2.0)
    assert (clip.source_fps, clip.total_frames, clip.duration) == (10.0, 30, 3.0)
    assert clip.window == (1.0, 2.0) and clip.window_frames == 10
    images = clip.to_pil()
    assert len(images) == 4 and images[0].size == (64, 48)
    assert np.asarray(images[1])[0, 0, 0] == clip.frames[1, 0, 0, 0]


def test_per_frame_budget_resizes_every_frame(mp4):
    clip = load_video(mp4, num_frames=4, max_pixels=28 * 28 * 4, min_pixels=28 * 28)
    # 48 x 64 rounds to 56 x 56 = 3136 <= 3136: every frame becomes 56 x 56
    assert clip.frames.shape == (4, 3, 56, 56)
    assert frame_numbers(clip.frames) == [0, 10, 19, 29]  # resizing a flat frame keeps its level


@pytest.mark.parametrize(
    ("kwargs", "limits"),
    [
        ({"fps": 2}, None),  # the processor resizes (its default minimum 128*28*28 upscales 64 x 48)
        ({"num_frames": 3, "start": 0.5}, None),  # 3 frames -> 4, no padding needed in the processor
        ({"fps": 4, "start": 1.0, "end": 2.0}, (28 * 28, 28 * 28 * 4)),
        ({"num_frames": 8, "end": 1.5}, (28 * 28 * 8, 28 * 28 * 20)),
    ],
)
def test_clip_tokens_before_decoding_match_processor(mp4, kwargs, limits):
    processor = (
        Qwen2VLVideoProcessor() if limits is None else Qwen2VLVideoProcessor(min_pixels=limits[0], max_pixels=limits[1])
    )
    low, high = int(processor.size["shortest_edge"]), int(processor.size["longest_edge"])
    predicted = video_clip_tokens(mp4, min_pixels=low, max_pixels=high, **kwargs)
    budget = {} if limits is None else {"min_pixels": low, "max_pixels": high}
    clip = load_video(mp4, **kwargs, **budget)
    out = processor(
        videos=[clip.frames],
        video_metadata=[video_metadata(clip)],
        return_tensors="pt",
        return_metadata=True,
        cap_pixels_per_frame=False,
    )
    grid = out["video_grid_thw"][0]
    assert predicted == int(grid.prod()) // 4
    if limits is not None:  # the loader's frames already had the processor's size
        assert (int(grid[1]) * 14, int(grid[2]) * 14) == tuple(clip.frames.shape[-2:])
    # the processor reads the true sampling rate of the window from the metadata
    assert out["video_metadata"][0].sampled_fps == pytest.approx(len(clip.frame_indices) / clip.window_frames * 10)


def test_metadata_for_the_processor(mp4):
    clip = load_video(mp4, fps=4, start=1.0, end=2.0, backend="pyav")
    assert video_metadata(clip) == {
        "total_num_frames": 10,  # frames in the window, so sampled_fps = 4 / 10 * 10 = 4
        "fps": 10.0,
        "frames_indices": [10, 13, 16, 19],
        "duration": 1.0,
        "height": 48,
        "width": 64,
        "video_backend": "pyav",
    }


# ---- backend choice ---------------------------------------------------------------------------------


def test_environment_variable_forces_the_backend(mp4, monkeypatch):
    monkeypatch.setenv("MMREASON_VIDEO_BACKEND", "pyav")
    assert load_video(mp4, num_frames=2).backend == "pyav"
    monkeypatch.setenv("MMREASON_VIDEO_BACKEND", "decord")
    assert load_video(mp4, num_frames=2).backend == "decord"
    assert load_video(mp4, num_frames=2, backend="pyav").backend == "pyav"  # the argument wins
    monkeypatch.setenv("MMREASON_VIDEO_BACKEND", "torchcodec")
    with pytest.raises(ValueError, match="unknown video backend 'torchcodec'; valid: auto, decord, pyav"):
        load_video(mp4)


def test_pyav_takes_over_when_decord_is_not_installed(mp4, monkeypatch):
    monkeypatch.setitem(sys.modules, "decord", None)  # `import decord` now raises ImportError
    clip = load_video(mp4, num_frames=4)
    assert clip.backend == "pyav" and frame_numbers(clip.frames) == [0, 10, 19, 29]


def test_pyav_takes_over_when_decord_fails_on_the_file(tmp_path, mp4_faststart):
    # With the index in front, a file cut at 90 % still lists all 30 frames: decord cannot open it,
    # PyAV decodes the frames that survived.
    data = mp4_faststart.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: int(len(data) * 0.9)])
    with pytest.raises(MediaError, match="cut.mp4"):
        load_video(cut, backend="decord")
    clip = load_video(cut, num_frames=4, end=1.0)
    assert clip.backend == "pyav" and frame_numbers(clip.frames) == clip.frame_indices == [0, 3, 6, 9]
    # the frames past the cut are missing: an error, not a short clip
    with pytest.raises(MediaError, match=r"cut\.mp4'.*pyav: RuntimeError: the stream ended before frame"):
        load_video(cut, num_frames=4)


# ---- bad input --------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(MediaError, match=r"cannot read video '.*gone\.mp4': file does not exist"):
        load_video(tmp_path / "gone.mp4")
    with pytest.raises(MediaError, match="file does not exist"):
        video_clip_tokens(tmp_path / "gone.mp4")


@pytest.mark.parametrize("keep", [0.3, 0.6])
def test_truncated_mp4(tmp_path, mp4, keep):
    data = mp4.read_bytes()  # index (moov) at the end: a cut file loses it
    cut = tmp_path / "truncated.mp4"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(MediaError, match=r"cannot read video '.*truncated\.mp4': not a decodable video") as info:
        load_video(cut)
    assert "decord:" in str(info.value) and "pyav:" in str(info.value)  # both were tried
    with pytest.raises(MediaError, match="truncated.mp4"):
        probe_video(cut)


def test_random_bytes_named_mp4(tmp_path):
    path = tmp_path / "noise.mp4"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(MediaError, match=r"'.*noise\.mp4': not a decodable video"):
        load_video(path)


@pytest.mark.parametrize("backend", ["decord", "pyav"])
@pytest.mark.parametrize(
    ("window", "message"),
    [
        ((12.0, 20.0), r"window \[12.00, 20.00\] s is outside the video \(length 3.00 s\)"),
        ((2.0, 3.5), r"window \[2.00, 3.50\] s is outside the video \(length 3.00 s\)"),
        ((3.0, None), r"window \[3.00, 3.00\] s is outside the video \(length 3.00 s\)"),
        ((2.0, 1.0), r"window \[2.00, 1.00\] s is not a time window"),
        ((-1.0, 1.0), r"window \[-1.00, 1.00\] s is not a time window"),
        ((2.95, 3.0), r"window \[2.95, 3.00\] s holds no frame"),
    ],
)
def test_window_outside_the_video(mp4, backend, window, message):
    with pytest.raises(MediaError, match=r"cannot read video '.*counter\.mp4': " + message):
        load_video(mp4, start=window[0], end=window[1], backend=backend)


def test_more_frames_than_the_window_holds(mp4):
    with pytest.raises(MediaError, match="asked for 12 frames but the window holds only 10"):
        load_video(mp4, num_frames=12, start=1.0, end=2.0)
    with pytest.raises(ValueError, match="either fps or num_frames"):
        load_video(mp4, fps=2, num_frames=4)


def test_a_datasets_num_frames_obeys_the_frame_cap(mp4, monkeypatch):
    """A fixed frame count from the data is held to ``max_frames`` like an fps plan, on the header alone."""
    info = VideoInfo("hour.mp4", num_frames=3600 * 30, fps=30.0, height=720, width=1280, backend="decord")
    with pytest.raises(MediaError, match=r"'hour.mp4'.*asked for 5000 frames, over the frame cap max_frames=768"):
        plan_frames(info, num_frames=5000)  # the default cap: no file, nothing decoded
    assert len(plan_frames(info, num_frames=5000, max_frames=None)) == 5000  # the cap can be lifted
    assert len(plan_frames(info, num_frames=8, max_frames=8)) == 8

    def no_decoding(*args, **kwargs):
        raise AssertionError("a frame was decoded before the cap was checked")

    for source in ("_DecordSource", "_PyAVSource"):
        monkeypatch.setattr(f"mmreason.media.video.{source}.read", no_decoding)
    with pytest.raises(MediaError, match="over the frame cap max_frames=6 .*video_max_frames"):
        load_video(mp4, num_frames=8, max_frames=6)

    from mmreason.rollout.prompts import load_sample_media
    from mmreason.types import Sample, VideoRef

    sample = Sample("v", [], videos=[VideoRef(mp4, num_frames=20)])
    with pytest.raises(MediaError, match="max_frames=16"):  # a run's data.video_max_frames reaches the check
        load_sample_media(sample, None, None, video_fps=2.0, video_max_frames=16)


def test_frames_over_the_decode_cap_are_refused_from_the_header(mp4, monkeypatch):
    huge = VideoInfo("huge.mp4", num_frames=60, fps=30.0, height=20_000, width=20_000, backend="decord")
    with pytest.raises(MediaError, match=r"'huge.mp4'.*20000x20000 px are over the decode cap of 64,000,000"):
        plan_frames(huge, num_frames=2)  # no file: nothing decoded
    monkeypatch.setenv("MMREASON_MAX_IMAGE_PIXELS", str(64 * 48 - 1))  # the fixture's frames are 64 x 48
    for source in ("_DecordSource", "_PyAVSource"):
        monkeypatch.setattr(f"mmreason.media.video.{source}.read", lambda *a, **k: pytest.fail("decoded"))
    with pytest.raises(MediaError, match="64x48 px are over the decode cap of 3,071 pixels .*MMREASON_MAX_IMAGE"):
        load_video(mp4, num_frames=2)


@pytest.mark.parametrize("backend", ["decord", "pyav"])
def test_every_backend_reads_the_frame_size_from_the_header_before_decoding(mp4, monkeypatch, backend):
    """decord used to decode frame 0 to learn the size (a 12000 x 12000 MJPEG frame took the probe from 0.5 to
    1.6 GB RSS before the cap refused it); now both backends refuse from the header, even in a bare probe."""
    import decord

    def decoded(*args, **kwargs):
        raise AssertionError("a frame was decoded before the decode cap was checked")

    monkeypatch.setattr(decord.VideoReader, "__getitem__", decoded)
    monkeypatch.setattr(decord.VideoReader, "get_batch", decoded)
    monkeypatch.setattr("mmreason.media.video._PyAVSource.read", decoded)
    monkeypatch.setenv("MMREASON_MAX_IMAGE_PIXELS", str(64 * 48 - 1))  # the fixture's frames are 64 x 48
    for call in (lambda: probe_video(mp4, backend=backend), lambda: load_video(mp4, num_frames=2, backend=backend)):
        with pytest.raises(MediaError, match=r"'.*\.mp4'.*64x48 px are over the decode cap of 3,071 pixels"):
            call()
    monkeypatch.delenv("MMREASON_MAX_IMAGE_PIXELS")
    info = probe_video(mp4, backend=backend)  # under the cap the header size is the one the backend reports
    assert (info.width, info.height, info.backend) == (64, 48, backend)


def test_a_video_of_another_size_and_rate(tmp_path):
    path = write_mp4(tmp_path / "wide.mp4", num_frames=25, fps=25, width=96, height=32)
    info = probe_video(path)
    assert (info.num_frames, info.fps, info.height, info.width) == (25, 25.0, 32, 96)
    clip = load_video(path, fps=8, backend="pyav")  # 1 s at 8 fps: round(linspace(0, 24, 8))
    assert clip.frame_indices == [0, 3, 7, 10, 14, 17, 21, 24]
    assert frame_numbers(clip.frames) == clip.frame_indices


def test_long_clip_is_decoded_in_chunks_and_resized(tmp_path):
    """40 frames cross the 32-frame decoding chunk; each chunk is resized to the per-frame budget."""
    path = write_mp4(tmp_path / "long.mp4", num_frames=40, fps=20, step=6)
    for backend in ("decord", "pyav"):
        clip = load_video(path, num_frames=40, max_pixels=28 * 28 * 4, min_pixels=28 * 28, backend=backend)
        assert clip.frames.shape == (40, 3, 56, 56)
        assert frame_numbers(clip.frames, step=6) == clip.frame_indices == list(range(40))


def test_frame_plan_of_an_hour_long_video_is_capped():
    info = VideoInfo("hour.mp4", num_frames=3600 * 30, fps=30.0, height=720, width=1280, backend="decord")
    plan = plan_frames(info, fps=2)  # 7,200 frames wanted, capped at 768
    assert len(plan) == 768 and (plan[0], plan[-1]) == (0, 107999)
    assert len(plan_frames(info, fps=2, max_frames=None)) == 7200
    # [600, 660) s at 1 fps: frames 18000..19799, 60 of them, ends included
    plan = plan_frames(info, fps=1, start=600, end=660)
    assert len(plan) == 60 and (plan[0], plan[-1]) == (18000, 19799)


def test_container_without_a_frame_count(tmp_path):
    """Matroska stores no frame count: PyAV counts packets instead, and both backends agree."""
    path = write_mp4(tmp_path / "counter.mkv")
    for backend in ("decord", "pyav"):
        assert probe_video(path, backend).num_frames == 30
        clip = load_video(path, fps=4, start=1.0, backend=backend)  # 2 s at 4 fps: round(linspace(10, 29, 8))
        assert frame_numbers(clip.frames) == clip.frame_indices == [10, 13, 15, 18, 21, 24, 26, 29]


def test_large_frames_are_decoded_a_few_at_a_time():
    from mmreason.media.video import read_chunk

    assert read_chunk(48, 64) == 32  # small frames: the whole chunk
    assert read_chunk(1080, 1920) == 17  # 1080p: 17 x 31 MiB under 512 MiB
    assert read_chunk(4320, 7680) == 1  # 8K: one frame (its float copy alone is 380 MiB)
    assert read_chunk(8640, 15360) == 1  # never fewer than one


def test_chunked_reading_gives_the_same_frames(tmp_path, monkeypatch):
    from mmreason.media import video as video_module

    path = write_mp4(tmp_path / "clip.mp4")
    whole = load_video(path, num_frames=10, max_pixels=56 * 56, min_pixels=56 * 56)
    monkeypatch.setattr(video_module, "_CHUNK_BYTES", 48 * 64 * 3 * 5 * 3)  # 3 frames per chunk
    assert video_module.read_chunk(48, 64) == 3
    chunked = load_video(path, num_frames=10, max_pixels=56 * 56, min_pixels=56 * 56)
    assert torch.equal(whole.frames, chunked.frames) and frame_numbers(chunked.frames) == frame_numbers(whole.frames)


def test_clip_cache_returns_the_decoded_clip_and_evicts_by_bytes(tmp_path, monkeypatch):
    import os

    from mmreason.media import video as video_module

    calls = []
    real = video_module.load_video
    monkeypatch.setattr(video_module, "load_video", lambda path, **kw: calls.append(path) or real(path, **kw))
    a, b = write_mp4(tmp_path / "a.mp4"), write_mp4(tmp_path / "b.mp4", step=4)
    one_clip = 10 * 3 * 56 * 56  # bytes of 10 uint8 frames at 56 x 56
    cache = video_module.clip_cache(max_bytes=one_clip)
    kwargs = {"num_frames": 10, "max_pixels": 56 * 56, "min_pixels": 56 * 56}
    first = cache.get(a, **kwargs)
    assert cache.get(a, **kwargs) is first and len(calls) == 1 and (cache.hits, cache.misses) == (1, 1)
    assert torch.equal(first.frames, real(a, **kwargs).frames)
    cache.get(a, num_frames=4, max_pixels=56 * 56, min_pixels=56 * 56)  # other arguments: another clip
    assert len(calls) == 2 and cache.used <= one_clip and len(cache.entries) == 1  # the first one was evicted
    cache.get(b, **kwargs)
    write_mp4(a, step=2)  # the file changes: decoded again
    os.utime(a, ns=(1, 1))
    again = cache.get(a, **kwargs)
    assert len(calls) == 4 and torch.equal(again.frames, real(a, **kwargs).frames)  # the new pixels
    assert not torch.equal(again.frames, first.frames)
    off = video_module.clip_cache(max_bytes=0)
    off.get(b, **kwargs)
    off.get(b, **kwargs)
    assert len(calls) == 6 and not off.entries


def test_prompts_built_twice_from_the_cache_are_identical(tmp_path, tiny):
    from mmreason.rollout.prompts import CLIP_CACHE, build_prompt
    from mmreason.types import Sample, VideoRef

    path = write_mp4(tmp_path / "clip.mp4")
    sample = Sample(
        "v",
        [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What?"}]}],
        videos=[VideoRef(str(path), num_frames=6)],
    )
    hits = CLIP_CACHE.hits
    first = build_prompt(tiny[1], sample, max_prompt_length=512, min_pixels=3136, max_pixels=3136)
    second = build_prompt(tiny[1], sample, max_prompt_length=512, min_pixels=3136, max_pixels=3136)
    assert CLIP_CACHE.hits == hits + 1  # the second build did not decode
    assert torch.equal(first.visual["pixel_values_videos"], second.visual["pixel_values_videos"])
