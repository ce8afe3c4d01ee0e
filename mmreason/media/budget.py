"""Visual-token arithmetic of the Qwen2-VL / Qwen2.5-VL processors, computed before any pixel is loaded.

The vision tower cuts an image into 14 x 14 patches and merges 2 x 2 neighbouring patches into one token,
so each side is first resized to a multiple of 28 (``smart_resize``), keeping the pixel count within
``[min_pixels, max_pixels]``. Then

    image tokens = (H / 14) * (W / 14) / 4 = H * W / 784.

A video additionally groups 2 consecutive frames (temporal patch): T frames are padded to a multiple of 2
by repeating the last one, and

    video tokens = (T / 2) * (H / 14) * (W / 14) / 4.

Source: transformers 5.x ``models/qwen2_vl/image_processing_qwen2_vl.py`` (``smart_resize``,
``get_number_of_image_patches``) and ``video_processing_qwen2_vl.py`` (``resize``, ``patchify``); the
tests compare every count here with the ``image_grid_thw`` / ``video_grid_thw`` the processors return.
Note qwen-vl-utils' own resize can land one step below the processor's at exact boundaries: these
functions follow the processor, which is what the model is fed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PATCH_SIZE = 14
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2

# Defaults of the transformers processor classes; a checkpoint's preprocessor_config.json may override
# them, so pass the limits of the processor you will actually feed (see ``PixelBudget.from_processor``).
IMAGE_MIN_PIXELS = 56 * 56
IMAGE_MAX_PIXELS = 28 * 28 * 1280
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 28 * 28 * 768
MAX_VIDEO_TOKENS = 128000  # Qwen2VLVideoProcessor.max_video_tokens, used only with cap_pixels_per_frame


def smart_resize(
    height: int,
    width: int,
    factor: int = PATCH_SIZE * MERGE_SIZE,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
) -> tuple[int, int]:
    """The (height, width) the Qwen2-VL processors resize an image or frame to.

    Both sides become multiples of ``factor``; the aspect ratio is kept as closely as possible; the
    pixel count is pulled into ``[min_pixels, max_pixels]`` by one common scale ``beta``:

        h, w = round(H / f) * f, round(W / f) * f
        if h * w > max_pixels: beta = sqrt(H * W / max_pixels); h, w = floor(H / beta / f) * f, ... (>= f)
        if h * w < min_pixels: beta = sqrt(min_pixels / (H * W)); h, w = ceil(H * beta / f) * f, ...

    A copy of transformers' ``smart_resize`` (same float operations, Python's half-to-even ``round``),
    including its ValueError for an aspect ratio above 200.

    A result whose area lies in ``[min_pixels, max_pixels]`` is a fixed point: resizing it again with the
    same limits keeps it, which is why the loaders' pre-resized images pass through the processor
    unchanged. The result can leave that range (the ``ceil`` of the upscaling branch or the 28-pixel
    floor of the downscaling one overshoots ``max_pixels`` for extreme aspect ratios or when
    ``min_pixels`` is close to ``max_pixels``); then a second resize changes it again.
    """
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_tokens(
    height: int,
    width: int,
    min_pixels: int = IMAGE_MIN_PIXELS,
    max_pixels: int = IMAGE_MAX_PIXELS,
    merge_size: int = MERGE_SIZE,
    *,
    patch_size: int = PATCH_SIZE,
) -> int:
    """Visual tokens of one image of ``height x width`` pixels: ``(H'/14) * (W'/14) / 4`` after smart_resize."""
    h, w = smart_resize(height, width, patch_size * merge_size, min_pixels, max_pixels)
    return (h // patch_size) * (w // patch_size) // (merge_size * merge_size)


def frame_pixel_cap(
    num_frames: int,
    min_pixels: int,
    max_pixels: int,
    factor: int = PATCH_SIZE * MERGE_SIZE,
    temporal_patch_size: int = TEMPORAL_PATCH_SIZE,
    *,
    max_video_tokens: int = MAX_VIDEO_TOKENS,
) -> int:
    """Per-frame ``max_pixels`` under the processor's ``cap_pixels_per_frame=True``.

    Each frame gets an even share of 90 % of ``max_video_tokens`` tokens' worth of pixels, but never
    less than ``1.05 * min_pixels``:

        cap = max(min(max_pixels, int(max_video_tokens * f^2 * 0.9) * t // T), int(1.05 * min_pixels))

    Source: ``Qwen2VLVideoProcessor.resize`` (transformers 5.x), after qwen-vl-utils.
    """
    total_pixels = int(max_video_tokens * factor * factor * 0.9)
    return max(min(max_pixels, total_pixels * temporal_patch_size // num_frames), int(min_pixels * 1.05))


def video_tokens(
    num_frames: int,
    height: int,
    width: int,
    min_pixels: int = VIDEO_MIN_PIXELS,
    max_pixels: int = VIDEO_MAX_PIXELS,
    *,
    temporal_patch_size: int = TEMPORAL_PATCH_SIZE,
    merge_size: int = MERGE_SIZE,
    patch_size: int = PATCH_SIZE,
    cap_pixels_per_frame: bool = False,
    max_video_tokens: int = MAX_VIDEO_TOKENS,
) -> int:
    """Visual tokens of a clip of ``num_frames`` frames of ``height x width`` pixels.

    ``T`` frames are padded to ``ceil(T / 2) * 2`` (the processor repeats the last frame), every frame is
    smart-resized to ``H' x W'``, and tokens = ``(T'/2) * (H'/14) * (W'/14) / 4``. With
    ``cap_pixels_per_frame`` (a Qwen2VLVideoProcessor option, off by default in transformers 5.24) the
    per-frame ``max_pixels`` shrinks with the frame count, see ``frame_pixel_cap``.
    """
    if num_frames < 1:
        raise ValueError(f"a video needs at least one frame, got num_frames={num_frames}")
    factor = patch_size * merge_size
    if cap_pixels_per_frame:
        max_pixels = frame_pixel_cap(
            num_frames, min_pixels, max_pixels, factor, temporal_patch_size, max_video_tokens=max_video_tokens
        )
    h, w = smart_resize(height, width, factor, min_pixels, max_pixels)
    grid_t = -(-num_frames // temporal_patch_size)
    return grid_t * (h // patch_size) * (w // patch_size) // (merge_size * merge_size)


def pixels_for_tokens(tokens: int, patch_size: int = PATCH_SIZE, merge_size: int = MERGE_SIZE) -> int:
    """The pixel area one image may have to cost ``tokens`` visual tokens: ``tokens * 28 * 28``.

    Use it as ``max_pixels`` when a resolution allocator has decided on a token count per image/page.
    """
    return tokens * (patch_size * merge_size) ** 2


@dataclass(frozen=True)
class PixelBudget:
    """The ``[min_pixels, max_pixels]`` limits of one image, page or video frame."""

    min_pixels: int = IMAGE_MIN_PIXELS
    max_pixels: int = IMAGE_MAX_PIXELS

    def __post_init__(self) -> None:
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(
                f"PixelBudget needs 0 < min_pixels <= max_pixels, got min_pixels={self.min_pixels}, "
                f"max_pixels={self.max_pixels}"
            )

    @classmethod
    def for_tokens(cls, max_tokens: int, min_tokens: int = 4) -> PixelBudget:
        """The budget of at most ``max_tokens`` (and at least ``min_tokens``) visual tokens per image."""
        return cls(pixels_for_tokens(min_tokens), pixels_for_tokens(max_tokens))

    @classmethod
    def from_processor(cls, processor: Any) -> PixelBudget:
        """Read the limits of a Qwen2-VL image or video processor (``size`` = shortest/longest edge)."""
        size = processor.size
        return cls(int(size["shortest_edge"]), int(size["longest_edge"]))

    def resize(self, height: int, width: int) -> tuple[int, int]:
        """``smart_resize`` within this budget."""
        return smart_resize(height, width, min_pixels=self.min_pixels, max_pixels=self.max_pixels)

    def image_tokens(self, height: int, width: int) -> int:
        return image_tokens(height, width, self.min_pixels, self.max_pixels)

    def video_tokens(self, num_frames: int, height: int, width: int) -> int:
        return video_tokens(num_frames, height, width, self.min_pixels, self.max_pixels)


def resolve_budget(
    min_pixels: int | None, max_pixels: int | None, default_min: int, default_max: int
) -> PixelBudget | None:
    """``None`` when neither limit is given (keep the native size), else a budget with the missing
    limit taken from the processor default of that modality."""
    if min_pixels is None and max_pixels is None:
        return None
    low = default_min if min_pixels is None else min_pixels
    high = default_max if max_pixels is None else max_pixels
    # A tight max_pixels below the default minimum means "at most this much"; keep the pair valid.
    return PixelBudget(min(low, high), high)
