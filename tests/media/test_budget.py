"""Visual-token arithmetic against hand-worked numbers and against what the transformers processors produce."""

from __future__ import annotations

import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from transformers import Qwen2VLImageProcessor, Qwen2VLVideoProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize as hf_smart_resize

from mmreason.media import (
    MediaError,
    PixelBudget,
    frame_pixel_cap,
    image_tokens,
    pixels_for_tokens,
    smart_resize,
    video_tokens,
)

torch.set_num_threads(1)

SMALL = (56 * 56, 28 * 28 * 64)  # min 3136 px, max 50176 px = 64 tokens


# ---- hand-worked ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "limits", "expected"),
    [
        # 10 x 10: rounds to 0 x 0 < min, so beta = sqrt(3136 / 100) = 5.6 and each side ceil(56 / 28) * 28.
        ((10, 10), SMALL, (56, 56)),
        # 42 / 28 = 1.5 and 70 / 28 = 2.5 both round (half to even) to 2 sides of 28.
        ((42, 42), SMALL, (56, 56)),
        ((70, 70), SMALL, (56, 56)),
        # 224 x 224 is exactly the 50176 cap: kept.
        ((224, 224), SMALL, (224, 224)),
        # 238 / 28 = 8.5 rounds to 8: still 224 x 224, within the cap.
        ((238, 224), SMALL, (224, 224)),
        # 239 / 28 = 8.54 rounds to 9: 252 x 224 = 56448 > 50176, so beta = sqrt(239 * 224 / 50176) = 1.0330,
        # h = floor(239 / 1.0330 / 28) * 28 = 8 * 28, w = floor(224 / 1.0330 / 28) * 28 = 7 * 28.
        ((239, 224), SMALL, (224, 196)),
        # 1 x 200 (aspect exactly 200 is allowed): beta = sqrt(3136 / 200) = 3.96, h = ceil(0.14) * 28,
        # w = ceil(200 * 3.96 / 28) * 28 = ceil(28.28) * 28 = 812.
        ((1, 200), SMALL, (28, 812)),
    ],
)
def test_smart_resize_hand_worked(size, limits, expected):
    assert smart_resize(*size, min_pixels=limits[0], max_pixels=limits[1]) == expected


def test_tokens_hand_worked():
    assert image_tokens(224, 224, *SMALL) == 64  # (224 / 14)^2 / 4
    assert image_tokens(239, 224, *SMALL) == 56  # 224 x 196 -> 16 * 14 / 4
    # 5 frames pad to 6 -> 3 temporal patches; 48 x 64 -> 56 x 56 -> 4 x 4 patches -> 3 * 16 / 4 = 12.
    assert video_tokens(5, 48, 64, *SMALL) == 12
    assert video_tokens(6, 48, 64, *SMALL) == 12
    assert video_tokens(7, 48, 64, *SMALL) == 16
    assert pixels_for_tokens(64) == 50176
    assert image_tokens(1000, 700, max_pixels=pixels_for_tokens(100)) <= 100


def test_aspect_ratio_above_200_is_rejected_like_the_processor():
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(1, 201)
    with pytest.raises(ValueError, match="aspect ratio"):
        hf_smart_resize(1, 201)


@settings(max_examples=300, deadline=None)
@given(
    height=st.integers(1, 6000),
    width=st.integers(1, 6000),
    min_tokens=st.integers(1, 300),
    extra_tokens=st.integers(0, 20000),
)
def test_smart_resize_equals_transformers(height, width, min_tokens, extra_tokens):
    min_pixels = pixels_for_tokens(min_tokens)
    max_pixels = pixels_for_tokens(min_tokens + extra_tokens)
    try:
        expected = hf_smart_resize(height, width, 28, min_pixels, max_pixels)
    except ValueError:
        with pytest.raises(ValueError):
            smart_resize(height, width, 28, min_pixels, max_pixels)
        return
    assert smart_resize(height, width, 28, min_pixels, max_pixels) == expected


@settings(max_examples=200, deadline=None)
@given(height=st.integers(1, 4000), width=st.integers(1, 4000), max_tokens=st.integers(4, 5000))
def test_smart_resize_is_a_fixed_point_within_limits(height, width, max_tokens):
    """A smart-resized size inside the limits is kept by a second resize (no double resize)."""
    budget = PixelBudget.for_tokens(max_tokens)
    if max(height, width) / min(height, width) > 200:
        return
    h, w = budget.resize(height, width)
    assert h % 28 == 0 and w % 28 == 0
    if budget.min_pixels <= h * w <= budget.max_pixels:
        assert budget.resize(h, w) == (h, w)


def test_smart_resize_can_overshoot_max_pixels():
    """The documented exception: 1 x 200 at a 4-token budget upscales to 28 x 812 (29 tokens), past the
    3136-pixel cap, and a second resize shrinks it to 28 x 280."""
    budget = PixelBudget.for_tokens(4)
    assert budget.resize(1, 200) == (28, 812)
    assert budget.resize(28, 812) == (28, 280)


# ---- against the processors -------------------------------------------------------------------------

IMAGE_SIZES = [
    (1, 1),
    (10, 10),
    (27, 29),
    (28, 28),
    (42, 42),
    (70, 70),
    (224, 224),
    (238, 224),
    (239, 224),
    (1, 200),
    (200, 1),
    (5, 900),
    (1000, 1000),
    (1000, 700),
    (3000, 20),
    (333, 517),
    (56, 5600),
]


@pytest.fixture(scope="module")
def image_processors():
    return [
        Qwen2VLImageProcessor(min_pixels=SMALL[0], max_pixels=SMALL[1]),
        Qwen2VLImageProcessorPil(min_pixels=SMALL[0], max_pixels=SMALL[1]),
        Qwen2VLImageProcessor(min_pixels=28 * 28 * 16, max_pixels=28 * 28 * 1000),
    ]


@pytest.mark.parametrize("size", IMAGE_SIZES)
def test_image_tokens_match_processor(image_processors, size):
    height, width = size
    image = Image.new("RGB", (width, height), (120, 60, 30))
    for processor in image_processors:
        budget = PixelBudget.from_processor(processor)
        grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0].tolist()
        assert grid[0] == 1
        assert budget.resize(height, width) == (grid[1] * 14, grid[2] * 14)
        assert image_tokens(height, width, budget.min_pixels, budget.max_pixels) == grid[0] * grid[1] * grid[2] // 4


@settings(max_examples=20, deadline=None)
@given(height=st.integers(1, 700), width=st.integers(1, 700), max_tokens=st.integers(4, 600))
def test_image_tokens_match_processor_random(height, width, max_tokens):
    if max(height, width) / min(height, width) > 200:
        return
    budget = PixelBudget.for_tokens(max_tokens)
    processor = Qwen2VLImageProcessor(min_pixels=budget.min_pixels, max_pixels=budget.max_pixels)
    grid = processor(images=[Image.new("RGB", (width, height))], return_tensors="pt")["image_grid_thw"][0]
    assert budget.image_tokens(height, width) == int(grid.prod()) // 4


VIDEO_CASES = [  # (frames, height, width)
    (1, 48, 64),
    (2, 48, 64),
    (3, 48, 64),
    (5, 10, 10),
    (8, 100, 30),
    (4, 2, 300),
    (6, 480, 640),
]


@pytest.mark.parametrize("cap", [False, True])
@pytest.mark.parametrize("case", VIDEO_CASES)
def test_video_tokens_match_processor(case, cap):
    num_frames, height, width = case
    # a small max_video_tokens makes the per-frame cap bite at these sizes
    processor = Qwen2VLVideoProcessor(min_pixels=SMALL[0], max_pixels=SMALL[1], max_video_tokens=40)
    video = torch.zeros(num_frames, 3, height, width, dtype=torch.uint8)
    out = processor(videos=[video], return_tensors="pt", cap_pixels_per_frame=cap)
    grid = out["video_grid_thw"][0]
    expected = int(grid.prod()) // 4
    assert video_tokens(num_frames, height, width, *SMALL, cap_pixels_per_frame=cap, max_video_tokens=40) == expected


def test_frame_pixel_cap_hand_worked():
    # 20 frames, 1000 tokens: int(1000 * 784 * 0.9) * 2 // 20 = 70560 < max, but the floor
    # int(1.05 * 100352) = 105369 wins.
    assert frame_pixel_cap(20, 100352, 602112, max_video_tokens=1000) == 105369
    # 2 frames: 705600 * 2 // 2 = 705600 > max 602112, so the per-frame max stands.
    assert frame_pixel_cap(2, 100352, 602112, max_video_tokens=1000) == 602112


def test_pixel_budget_validation_and_processor_defaults():
    with pytest.raises(ValueError, match="min_pixels <= max_pixels"):
        PixelBudget(5000, 100)
    assert PixelBudget.from_processor(Qwen2VLImageProcessor()) == PixelBudget(56 * 56, 28 * 28 * 1280)
    assert PixelBudget.from_processor(Qwen2VLVideoProcessor()) == PixelBudget(128 * 28 * 28, 768 * 28 * 28)


def test_media_error_names_file_and_survives_pickling():
    err = MediaError("clips/x.mp4", "window [12.0, 20.0] s is outside the video (length 10.0 s)", "video")
    assert str(err) == "cannot read video 'clips/x.mp4': window [12.0, 20.0] s is outside the video (length 10.0 s)"
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(err))
    assert (back.path, back.reason, back.kind, str(back)) == (err.path, err.reason, err.kind, str(err))
