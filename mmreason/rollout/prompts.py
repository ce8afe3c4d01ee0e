"""Sample -> model inputs for one prompt: chat template, media under pixel budgets, the processor.

A prompt is built once per Sample and shared by its G rollouts (``PromptInputs`` holds the visual
tensors once), so later speed work can encode the vision tower once per group.
Prompts are never truncated: a prompt whose text + visual tokens exceed ``max_prompt_length`` is
filtered (``PromptTooLong``) or, with ``prompt_overflow: downscale``, re-built at lower pixel budgets.
A video's frames, frame size and tokens are planned from its container header first
(``mmreason.media.video_plan``), so a prompt that its videos alone put over the limit is filtered or
downscaled before any frame is decoded. Time spent reading video headers and decoding frames adds up in the
``MediaTime`` a caller passes as ``clock`` (a run owns one: the trainer reports it per step as
``time/video_decode``), else in ``MEDIA_SECONDS``, the tally of prompts built outside a run.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from mmreason import media
from mmreason.media.budget import VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS, resolve_budget
from mmreason.media.limits import PromptOverflow
from mmreason.media.video import add_frame_noise, clip_cache, header_cache
from mmreason.media.video_plan import ClipPlan, VideoLimits, plan_clip
from mmreason.models.families import family_of_processor
from mmreason.paths import cache_dir
from mmreason.rollout.tool_prompt import render_with_tools
from mmreason.rollout.visibility import check_encoded, check_rendered, media_paths, named_media
from mmreason.types import PageRef, Sample

if TYPE_CHECKING:
    from PIL import Image
    from transformers import ProcessorMixin

# Keys of processor outputs that describe visual inputs (concatenated across samples in a batch).
VISUAL_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


class PromptTooLong(ValueError):
    """A prompt exceeds max_prompt_length (text + visual tokens)."""


@dataclass
class PromptInputs:
    """One prompt, tokenized with its visual placeholders expanded.

    input_ids:          [P] token ids (visual pad tokens already expanded to their count)
    mm_token_type_ids:  [P] 0 text / 1 image / 2 video (drives Qwen's M-RoPE positions)
    visual:             processor tensors for this prompt's images / videos (may be empty)
    """

    sample: Sample
    input_ids: torch.Tensor
    mm_token_type_ids: torch.Tensor
    visual: dict[str, torch.Tensor] = field(default_factory=dict)
    text: str = ""
    video_frames: list[list[float]] = field(default_factory=list)  # per video: the seconds of the frames shown
    # The decoded media the processor was given (already at their budgets), for a rollout backend that runs
    # its own processor on them (vLLM): images (PIL), videos ([T, 3, H, W] frames) and their metadata.
    images: list = field(default_factory=list)
    videos: list = field(default_factory=list)
    video_metadata: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return int(self.input_ids.numel())

    @property
    def visual_tokens(self) -> int:
        return int((self.mm_token_type_ids != 0).sum())


# Decoded video clips kept across steps (and across the prompt rebuilds of ``prompt_overflow: downscale``);
# video headers (frame count, rate, size) kept per file, so planning a clip again opens nothing.
CLIP_CACHE = clip_cache()
HEADERS = header_cache()


@dataclass
class MediaTime:
    """Seconds spent on media while prompts were built, summed: ``video_decode`` = video header reads and frame
    decoding (cache hits cost ~0). A run owns one (``Run.media_time``); ``MEDIA_SECONDS`` serves other callers."""

    video_decode: float = 0.0

    def __getitem__(self, key: str) -> float:
        """Read a tally by name: ``MEDIA_SECONDS["video_decode"]``."""
        return float(getattr(self, key))


# the tally of prompts built without a ``clock`` (the eval, a script)
MEDIA_SECONDS = MediaTime()


def plan_videos(
    sample: Sample,
    limits: VideoLimits,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    fallback: tuple[int, int] = (VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS),
    *,
    clock: MediaTime | None = None,
) -> list[ClipPlan]:
    """Plan the sample's clips from their headers: frames, frame size and tokens, nothing decoded.

    Per-frame pixel limits: ``limits``' own, else the image limits ``min_pixels`` / ``max_pixels``, else
    ``fallback`` (the video processor's, which then resizes the frames). Header reads add to ``clock`` (default
    ``MEDIA_SECONDS``). Raises MediaError naming the file."""
    low = limits.min_pixels if limits.min_pixels is not None else min_pixels
    high = limits.max_pixels if limits.max_pixels is not None else max_pixels
    # one limit set: the other is the media layer's default (as load_video resolves it); none: the frames keep
    # their size and the processor's own limits (``fallback``) decide the tokens
    budget = resolve_budget(low, high, VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS) or resolve_budget(*fallback, *fallback)
    assert budget is not None  # the processor's own limits are set
    resize = low is not None or high is not None
    plans = []
    t = time.perf_counter()
    try:
        for ref in sample.videos:
            plans.append(
                plan_clip(
                    HEADERS.get(ref.path),
                    fps=ref.fps or (None if ref.num_frames else limits.fps),
                    num_frames=ref.num_frames,
                    start=ref.start,
                    end=ref.end,
                    max_frames=limits.max_frames,
                    min_pixels=budget.min_pixels,
                    max_pixels=budget.max_pixels,
                    total_pixels=limits.total_pixels,
                )
            )
            if not resize and limits.total_pixels is None:
                plans[-1] = dataclasses.replace(plans[-1], resize=False)
    finally:
        (clock or MEDIA_SECONDS).video_decode += time.perf_counter() - t
    return plans


def load_sample_media(
    sample: Sample,
    min_pixels: int | None,
    max_pixels: int | None,
    video_fps: float,
    video_max_frames: int,
    *,
    video: VideoLimits | None = None,
    plans: list[ClipPlan] | None = None,
    clock: MediaTime | None = None,
) -> tuple[list, list, list]:
    """Load the images (incl. document pages) and videos of a sample, resized to their budgets.

    ``video`` (default: ``video_fps`` / ``video_max_frames`` and the image pixel limits) sets the clips'
    limits; ``plans`` (from ``plan_videos``) skips planning them again. Each clip is decoded at its plan's
    frame size; decoding adds to ``clock`` (default ``MEDIA_SECONDS``). Raises mmreason.media.MediaError naming
    the file when something cannot be read.
    """
    images = [media.load_image(src, max_pixels=max_pixels, min_pixels=min_pixels) for src in sample.images]
    for page in sample.pages:
        images.append(load_page(page, min_pixels, max_pixels))
    limits = video or VideoLimits(video_fps, video_max_frames)
    if plans is None:
        plans = plan_videos(sample, limits, min_pixels, max_pixels, clock=clock)
    videos, metadata = [], []
    for ref, plan in zip(sample.videos, plans):
        t = time.perf_counter()
        try:
            clip = CLIP_CACHE.get(
                ref.path,
                fps=ref.fps or (None if ref.num_frames else limits.fps),
                num_frames=ref.num_frames,
                start=ref.start,
                end=ref.end,
                max_pixels=plan.max_pixels if plan.resize else None,
                min_pixels=plan.min_pixels if plan.resize else None,
                max_frames=limits.max_frames,
            )
        finally:
            (clock or MEDIA_SECONDS).video_decode += time.perf_counter() - t
        # [T, 3, H, W], shared with the cache: never changed in place
        frames = clip.frames
        if ref.noise_std > 0:
            frames = add_frame_noise(frames, ref.noise_std, ref.noise_seed)
        videos.append(frames)
        metadata.append(media.video_metadata(clip))
    return images, videos, metadata


def load_page(page: PageRef, min_pixels: int | None, max_pixels: int | None) -> Image.Image:
    """Load a document page at its own budget (resolution allocation), never above the global one (which
    ``prompt_overflow: downscale`` lowers): a PDF page rendered through the on-disk cache, or an image."""
    budgets = [b for b in (page.max_pixels, max_pixels) if b]
    budget = min(budgets) if budgets else None
    floor = min_pixels if (min_pixels is None or budget is None or min_pixels <= budget) else None
    if str(page.source).lower().endswith(".pdf"):
        return media.render_pages(
            page.source, pages=[page.index], max_pixels=budget, min_pixels=floor, cache_dir=cache_dir("pages")
        )[0]
    return media.load_image(page.source, max_pixels=budget, min_pixels=floor)


def frame_times(metadata: list[dict]) -> list[list[float]]:
    """Return, per video, the time in seconds of each frame the model is shown (from ``video_metadata``)."""
    return [[round(i / m["fps"], 3) for i in m["frames_indices"]] for m in metadata]


def render_chat(
    processor: ProcessorMixin,
    messages: list[dict[str, Any]],
    system_prompt: str | None = None,
    tools: list[dict] | None = None,
) -> str:
    """Render the prompt text with the checkpoint's chat template; ``tools``: their schemas shown too
    (``tool_prompt``)."""
    if system_prompt and (not messages or messages[0].get("role") != "system"):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if tools:
        return render_with_tools(processor, messages, tools)
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def encode(processor: ProcessorMixin, text: str, images: list, videos: list, metadata: list) -> dict[str, torch.Tensor]:
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt", "return_mm_token_type_ids": True}
    if images:
        kwargs["images"] = images
    if videos:
        kwargs["videos"] = videos
        kwargs["video_metadata"] = metadata
        kwargs["do_sample_frames"] = False  # frames are already sampled by the media layer
    return dict(processor(**kwargs))


def processor_video_limits(processor: ProcessorMixin) -> tuple[int, int]:
    """Return the video processor's own per-frame ``(min_pixels, max_pixels)`` (the transformers defaults if unset)."""
    size = getattr(getattr(processor, "video_processor", None), "size", None) or {}
    try:
        return int(size["shortest_edge"]), int(size["longest_edge"])
    except (KeyError, TypeError, ValueError):
        return VIDEO_MIN_PIXELS, VIDEO_MAX_PIXELS


def text_tokens(processor: ProcessorMixin, text: str) -> int:
    """Count the tokens of the rendered chat before the processor expands each visual placeholder (one token each)."""
    return len(processor.tokenizer(text, add_special_tokens=False)["input_ids"])


def build_prompt(
    processor: ProcessorMixin,
    sample: Sample,
    *,
    max_prompt_length: int,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    video_fps: float = 2.0,
    video_max_frames: int = 16,
    overflow: PromptOverflow = "filter",
    system_prompt: str | None = None,
    video_limits: VideoLimits | None = None,
    clock: MediaTime | None = None,
    max_images: int | None = None,
    max_videos: int | None = None,
) -> PromptInputs:
    """Build the model inputs of one prompt; raise PromptTooLong (filter) or shrink budgets (downscale).

    ``video_limits`` (default: ``video_fps`` / ``video_max_frames`` and the image pixel limits) are the
    clips' limits. Videos are planned from their headers first: when the text and the videos' tokens alone
    exceed ``max_prompt_length``, the prompt is filtered or downscaled before any frame is decoded. Video header
    reads and decoding add to ``clock`` (default ``MEDIA_SECONDS``). Before anything is read the media are counted
    (``check_media_count``) and the text's tokens: text alone over ``max_prompt_length`` decodes nothing."""
    check_media_count(sample, max_images, max_videos)
    text = render_chat(processor, sample.messages, system_prompt, sample.tools)
    budget = max_pixels
    limits = video_limits or VideoLimits(video_fps, video_max_frames)
    fallback = processor_video_limits(processor)
    family = family_of_processor(processor)
    # tiles: a smaller pixel budget gives the same tokens, so an over-long prompt is skipped
    downscale = overflow == "downscale" and family.budget == "pixels"
    n_text = text_tokens(processor, text) if sample.videos or sample.images or sample.pages else 0
    # no budget makes the text shorter: filtered before any medium is read
    if n_text > max_prompt_length:
        raise PromptTooLong(
            f"sample {sample.id!r}: its text alone has {n_text} tokens (nothing decoded) > max_prompt_length "
            f"{max_prompt_length}"
        )
    for _attempt in range(6):
        plans = plan_videos(sample, limits, min_pixels, budget, fallback, clock=clock)
        planned = n_text + sum(p.tokens - 1 for p in plans)  # a lower bound: images still count 1 each
        if plans and family.video_plan and planned > max_prompt_length:
            if not downscale:
                raise PromptTooLong(
                    f"sample {sample.id!r}: prompt has at least {planned} tokens (text + video, from the video "
                    f"headers, nothing decoded) > max_prompt_length {max_prompt_length}"
                )
            budget, limits = _smaller(processor, budget, limits, plans, family.pixels_per_token)
            continue
        images, videos, metadata = load_sample_media(
            sample, min_pixels, budget, limits.fps, limits.max_frames, video=limits, plans=plans, clock=clock
        )
        paths = media_paths(sample)
        named = named_media(sample.messages)
        check_rendered(processor, text, len(images), len(videos), named, sample_id=sample.id, paths=paths)
        out = encode(processor, text, images, videos, metadata)
        ids = out["input_ids"][0]
        check_encoded(processor, ids, out, len(images), len(videos), sample_id=sample.id, paths=paths)
        if ids.numel() <= max_prompt_length:
            types = out.get("mm_token_type_ids")
            types = types[0] if types is not None else torch.zeros_like(ids)
            visual = {k: out[k] for k in VISUAL_KEYS if k in out}
            return PromptInputs(
                sample, ids, types.to(torch.long), visual, text, frame_times(metadata), images, videos, metadata
            )
        if not downscale or not (images or videos):
            break
        budget, limits = _smaller(processor, budget, limits, plans, family.pixels_per_token)
    raise PromptTooLong(
        f"sample {sample.id!r}: prompt has {ids.numel()} tokens (text + visual) > max_prompt_length {max_prompt_length}"
    )


def check_media_count(sample: Sample, max_images: int | None, max_videos: int | None) -> None:
    """Refuse a sample with more images (pages apart: they have their own cap) or videos than the limits, before
    any is read (300 images of one row decoded took 8 GB); ValueError naming the sample, the count and the key."""
    for what, items, cap in (("images", sample.images, max_images), ("videos", sample.videos, max_videos)):
        if cap is not None and len(items) > cap:
            raise ValueError(
                f"sample {sample.id!r}: {len(items):,} {what}, over max_{what} = {cap} (counted before any is read)"
            )


def _smaller(
    processor: ProcessorMixin,
    budget: int | None,
    limits: VideoLimits,
    plans: list[ClipPlan],
    pixels_per_token: int = 28 * 28,
) -> tuple[int, VideoLimits]:
    """Halve the image budget and each video frame's (and the clips' total), not below 4 tokens' worth
    (``pixels_per_token``: the family's, 28 x 28 for Qwen2/2.5-VL, 32 x 32 for Qwen3-VL)."""
    floor = 4 * pixels_per_token
    current = budget or processor.image_processor.size["longest_edge"]
    if plans and limits.max_pixels is None:
        limits = VideoLimits(
            limits.fps, limits.max_frames, limits.min_pixels, max(p.max_pixels for p in plans), limits.total_pixels
        )
    return max(current // 2, floor), limits.scaled(0.5, floor)
