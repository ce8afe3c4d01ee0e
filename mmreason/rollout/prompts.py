"""Sample -> model inputs for one prompt: chat template, media under pixel budgets, the processor.

A prompt is built once per Sample and shared by its G rollouts (``PromptInputs`` holds the visual
tensors once), so later speed work can encode the vision tower once per group.
Prompts are never truncated: a prompt whose text + visual tokens exceed ``max_prompt_length`` is
filtered (``PromptTooLong``) or, with ``prompt_overflow: downscale``, re-built at lower pixel budgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from mmreason.media.video import ClipCache, add_frame_noise
from mmreason.paths import cache_dir
from mmreason.types import PageRef, Sample

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

    @property
    def length(self) -> int:
        return int(self.input_ids.numel())

    @property
    def visual_tokens(self) -> int:
        return int((self.mm_token_type_ids != 0).sum())


# Decoded video clips kept across steps (and across the prompt rebuilds of ``prompt_overflow: downscale``).
CLIP_CACHE = ClipCache()


def load_sample_media(sample: Sample, min_pixels: int | None, max_pixels: int | None,
                      video_fps: float, video_max_frames: int) -> tuple[list, list, list]:
    """Images (incl. document pages) and videos of a sample, resized to their budgets.

    Raises mmreason.media.MediaError naming the file when something cannot be read.
    """
    from mmreason import media

    images = [media.load_image(src, max_pixels=max_pixels, min_pixels=min_pixels) for src in sample.images]
    for page in sample.pages:
        images.append(load_page(page, min_pixels, max_pixels))
    videos, metadata = [], []
    for ref in sample.videos:
        clip = CLIP_CACHE.load(
            ref.path, fps=ref.fps or (None if ref.num_frames else video_fps), num_frames=ref.num_frames,
            start=ref.start, end=ref.end, max_pixels=max_pixels, min_pixels=min_pixels,
            max_frames=video_max_frames,
        )
        frames = clip.frames  # [T, 3, H, W], shared with the cache: never changed in place
        if ref.noise_std > 0:
            frames = add_frame_noise(frames, ref.noise_std, ref.noise_seed)
        videos.append(frames)
        metadata.append(media.video_metadata(clip))
    return images, videos, metadata


def load_page(page: PageRef, min_pixels: int | None, max_pixels: int | None):
    """A document page at its own budget (resolution allocation), never above the global one (which
    ``prompt_overflow: downscale`` lowers): a PDF page rendered through the on-disk cache, or an image."""
    from mmreason import media

    budgets = [b for b in (page.max_pixels, max_pixels) if b]
    budget = min(budgets) if budgets else None
    floor = min_pixels if (min_pixels is None or budget is None or min_pixels <= budget) else None
    if str(page.source).lower().endswith(".pdf"):
        return media.render_pages(page.source, pages=[page.index], max_pixels=budget, min_pixels=floor,
                                  cache_dir=cache_dir("pages"))[0]
    return media.load_image(page.source, max_pixels=budget, min_pixels=floor)


def render_chat(processor, messages: list[dict[str, Any]], system_prompt: str | None = None) -> str:
    if system_prompt and (not messages or messages[0].get("role") != "system"):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def encode(processor, text: str, images: list, videos: list, metadata: list) -> dict[str, torch.Tensor]:
    kwargs: dict[str, Any] = {"text": [text], "return_tensors": "pt"}
    if images:
        kwargs["images"] = images
    if videos:
        kwargs["videos"] = videos
        kwargs["video_metadata"] = metadata
        kwargs["do_sample_frames"] = False  # frames are already sampled by the media layer
    return dict(processor(**kwargs))


def build_prompt(processor, sample: Sample, *, max_prompt_length: int, min_pixels: int | None = None,
                 max_pixels: int | None = None, video_fps: float = 2.0, video_max_frames: int = 16,
                 overflow: str = "filter", system_prompt: str | None = None) -> PromptInputs:
    """Build the model inputs of one prompt; raise PromptTooLong (filter) or shrink budgets (downscale)."""
    text = render_chat(processor, sample.messages, system_prompt)
    budget = max_pixels
    for _attempt in range(6):
        images, videos, metadata = load_sample_media(sample, min_pixels, budget, video_fps, video_max_frames)
        out = encode(processor, text, images, videos, metadata)
        ids = out["input_ids"][0]
        if ids.numel() <= max_prompt_length:
            types = out.get("mm_token_type_ids")
            types = types[0] if types is not None else torch.zeros_like(ids)
            visual = {k: out[k] for k in VISUAL_KEYS if k in out}
            return PromptInputs(sample, ids, types.to(torch.long), visual, text)
        if overflow != "downscale" or not (images or videos):
            break
        current = budget or processor.image_processor.size["longest_edge"]
        budget = max(current // 2, 4 * 28 * 28)
    raise PromptTooLong(
        f"sample {sample.id!r}: prompt has {ids.numel()} tokens (text + visual) > max_prompt_length "
        f"{max_prompt_length}"
    )
