"""A run's state is declared and typed on ``Run`` (nothing is added to it at run time, no field is ``Any``), and
the video decode time a step reports comes from the run's own clock, not from a process-wide counter."""

from __future__ import annotations

import typing

import av
import numpy as np

from mmreason.media.video_plan import VideoLimits
from mmreason.parallel.agree import hold, stopping
from mmreason.rollout import prompts
from mmreason.rollout.prompts import MediaTime, build_prompt
from mmreason.train.async_rollouts import AsyncRollouts
from mmreason.train.setup import Run
from mmreason.types import Sample, VideoRef


def test_every_field_of_a_run_is_declared_with_a_real_type():
    # the producer's type is imported for type checking only (it imports the round's phases, which take a Run)
    hints = typing.get_type_hints(Run, localns={"AsyncRollouts": AsyncRollouts})
    assert {"pending_stop", "media_time", "rollout_backend", "anchor_buffer"} <= set(hints)
    assert [name for name, tp in hints.items() if tp is typing.Any] == []


def test_hold_and_stopping_use_the_declared_field():
    run = Run.__new__(Run)  # the agreement helpers read and write pending_stop only
    run.pending_stop = None
    assert not stopping(run)
    first, later = RuntimeError("first"), RuntimeError("its consequence")
    hold(run, first)
    hold(run, later)
    assert stopping(run) and run.pending_stop is first


def _mp4(path, frames=8, size=(112, 56)):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=4, options={"threads": "1"})
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), 20 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode())
    return path


def test_a_runs_clock_takes_its_decode_time_and_the_shared_tally_does_not(tiny, tmp_path):
    sample = Sample(
        id="clock",
        messages=[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "?"}]}],
        videos=[VideoRef(str(_mp4(tmp_path / "c.mp4")))],
    )
    clock, shared = MediaTime(), prompts.MEDIA_SECONDS.video_decode
    limits = VideoLimits(2.0, 4, 3136, 3136)
    build_prompt(tiny[1], sample, max_prompt_length=4096, video_limits=limits, clock=clock)
    assert clock.video_decode > 0 and prompts.MEDIA_SECONDS.video_decode == shared
