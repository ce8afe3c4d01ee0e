"""The media and prompt limits of a run or an eval, declared once (``MediaLimits``).

Training (``data.*`` in a run config), evaluation (``--model_args``) and the eval's prompt builder
(``PromptOptions``) all hold these eleven settings under the same flat names, by taking their fields from
``MediaLimits``; ``limits.video`` is the clip-level view the video planner reads (``VideoLimits``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from mmreason.media.video_plan import VideoLimits

# What happens to a prompt over ``max_prompt_length``: filtered (skipped / a failed doc), or rebuilt at
# lower pixel budgets.
PromptOverflow = Literal["filter", "downscale"]


@dataclass
class MediaLimits:
    """Pixel budgets of images and video frames, frames per clip, and the prompt's length and system text."""

    min_pixels: int | None = None  # per image / page; None = the processor's own limits
    max_pixels: int | None = None
    video_fps: float = 2.0
    video_max_frames: int = 16
    video_min_pixels: int | None = None  # per video frame; None = min_pixels (then the processor's)
    video_max_pixels: int | None = None  # per video frame; None = max_pixels (then the processor's)
    video_total_pixels: int | None = None  # per clip, all frames (qwen-vl-utils' total_pixels); None = no cap
    max_prompt_length: int = 32768  # text + visual tokens; a prompt is never cut (see ``PromptOverflow``)
    system_prompt: str | None = None
    max_images: int = 64  # images a prompt may hold (document pages apart), counted before any is decoded
    max_videos: int = 8  # videos a prompt may hold, counted before any is opened

    RANGES: ClassVar[dict[str, str]] = {
        "min_pixels": "[1, inf)",
        "max_pixels": "[1, inf)",
        "video_fps": "(0, inf)",
        "video_max_frames": "[1, inf)",
        "video_min_pixels": "[1, inf)",
        "video_max_pixels": "[1, inf)",
        "video_total_pixels": "[1, inf)",
        "max_prompt_length": "[1, inf)",
        "max_images": "[1, inf)",
        "max_videos": "[1, inf)",
    }

    @property
    def video(self) -> VideoLimits:
        """The clips' limits (``None`` pixel limits: the image limits, then the processor's)."""
        return VideoLimits(
            fps=self.video_fps,
            max_frames=self.video_max_frames,
            min_pixels=self.video_min_pixels,
            max_pixels=self.video_max_pixels,
            total_pixels=self.video_total_pixels,
        )

    def media_limits(self) -> MediaLimits:
        """These settings alone, as a plain ``MediaLimits`` (from a config that holds more)."""
        return MediaLimits(**media_fields(self))


def media_fields(obj: Any) -> dict[str, Any]:
    """``obj``'s ``MediaLimits`` settings by name (``PromptOptions(**media_fields(cfg.data), ...)``)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(MediaLimits)}
