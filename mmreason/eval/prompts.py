"""The prompts of one batch of docs from a single processor call, split back into per-doc PromptInputs.

The Qwen processor costs about 2 ms of Python per call whatever the input size, three times the cost
of its actual work on a small image; a per-doc call was most of the harness's overhead over a bare
loop (see bench.py). One call per batch gives the same tensors: images are processed one by one
inside it, and each doc's tokens are the unpadded part of its row. A doc whose media cannot be loaded
fails alone; a prompt over ``max_prompt_length`` (and any batch the processor rejects as a whole) is
rebuilt doc by doc through ``build_prompt``, which downscales it or raises the doc's own error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mmreason.media.limits import MediaLimits, PromptOverflow
from mmreason.models.families import family_of_processor
from mmreason.rollout.prompts import (
    PromptInputs,
    build_prompt,
    check_media_count,
    frame_times,
    load_sample_media,
    render_chat,
)
from mmreason.types import Sample

if TYPE_CHECKING:
    from transformers import ProcessorMixin


@dataclass
class PromptOptions(MediaLimits):
    """How prompts are built: the media and prompt limits (``MediaLimits``, as ``--model_args`` or the run's
    ``data.*`` give them) and what a too-long prompt does; every field moves a score and is recorded."""

    overflow: PromptOverflow = "filter"  # filter: a too-long prompt fails its doc; downscale: lower pixel budgets


def build_one(processor: ProcessorMixin, sample: Sample, opts: PromptOptions) -> PromptInputs:
    return build_prompt(
        processor,
        sample,
        max_prompt_length=opts.max_prompt_length,
        min_pixels=opts.min_pixels,
        max_pixels=opts.max_pixels,
        overflow=opts.overflow,
        system_prompt=opts.system_prompt,
        video_limits=opts.video,
        max_images=opts.max_images,
        max_videos=opts.max_videos,
    )


def _split(out: dict[str, torch.Tensor], key: str, grid_key: str, counts: list[int]) -> list[torch.Tensor | None]:
    """Per-doc slices of a flat visual tensor: ``pixel_values*`` have one row per patch (t*h*w of the
    item's grid), ``*_grid_thw`` / ``second_per_grid_ts`` one row per item; ``counts`` = items per doc."""
    if key not in out:
        return [None] * len(counts)
    grid = out[grid_key]  # [n_items, 3]
    rows = grid.prod(-1).tolist() if key.startswith("pixel_values") else [1] * len(grid)
    pieces, start, item = [], 0, 0
    for n in counts:
        size = sum(rows[item : item + n])
        pieces.append(out[key][start : start + size] if n else None)
        start, item = start + size, item + n
    return pieces


def split_visual(
    out: dict[str, torch.Tensor], n_images: list[int], n_videos: list[int]
) -> list[dict[str, torch.Tensor]]:
    """The batch's visual tensors cut back into each doc's (docs in batch order)."""
    columns = {
        "pixel_values": _split(out, "pixel_values", "image_grid_thw", n_images),
        "image_grid_thw": _split(out, "image_grid_thw", "image_grid_thw", n_images),
        "pixel_values_videos": _split(out, "pixel_values_videos", "video_grid_thw", n_videos),
        "video_grid_thw": _split(out, "video_grid_thw", "video_grid_thw", n_videos),
        "second_per_grid_ts": _split(out, "second_per_grid_ts", "video_grid_thw", n_videos),
    }
    return [{k: piece for k, v in columns.items() if (piece := v[j]) is not None} for j in range(len(n_images))]


def encode_batch(
    processor: ProcessorMixin, samples: list[Sample], opts: PromptOptions, errors: tuple[type[BaseException], ...]
) -> list[PromptInputs | BaseException]:
    """One PromptInputs per sample, or the exception its media (or its rebuild alone) raised."""
    results: dict[int, PromptInputs | BaseException] = {}
    if not family_of_processor(processor).grids:  # visual tensors cannot be cut per doc: each doc alone
        for k, sample in enumerate(samples):
            try:
                results[k] = build_one(processor, sample, opts)
            except errors as exc:
                results[k] = exc
        return [results[k] for k in range(len(samples))]
    docs, texts, n_images, n_videos, shown = [], [], [], [], []
    images: list[Any] = []  # every doc's images and videos, in doc order, for one processor call
    videos: list[Any] = []
    metadata: list[Any] = []
    media: list[tuple[list[Any], list[Any], list[Any]]] = []
    for k, sample in enumerate(samples):
        try:
            check_media_count(sample, opts.max_images, opts.max_videos)  # before any medium is decoded
            ims, vids, meta = load_sample_media(
                sample, opts.min_pixels, opts.max_pixels, opts.video_fps, opts.video_max_frames, video=opts.video
            )
        except errors as exc:
            results[k] = exc
            continue
        docs.append(k)
        texts.append(render_chat(processor, sample.messages, opts.system_prompt, sample.tools))
        images, videos, metadata = images + ims, videos + vids, metadata + meta
        n_images.append(len(ims))
        n_videos.append(len(vids))
        shown.append(frame_times(meta))
        media.append((ims, vids, meta))
    out = _call(processor, texts, images, videos, metadata, errors=errors) if docs else None
    visuals = split_visual(out, n_images, n_videos) if out is not None else [{} for _ in docs]
    for j, k in enumerate(docs):
        prompt = _unpadded(samples[k], texts[j], out, j, visuals[j], opts=opts)
        if prompt is not None:
            prompt.video_frames = shown[j]
            prompt.images, prompt.videos, prompt.video_metadata = media[j]  # for a vLLM engine
            results[k] = prompt
        else:  # over max_prompt_length, or the batch call failed: this doc alone
            try:
                results[k] = build_one(processor, samples[k], opts)
            except errors as exc:
                results[k] = exc
    return [results[k] for k in range(len(samples))]


def _call(
    processor: ProcessorMixin,
    texts: list[str],
    images: list[Any],
    videos: list[Any],
    metadata: list[Any],
    *,
    errors: tuple[type[BaseException], ...],
) -> dict[str, torch.Tensor] | None:
    kwargs: dict[str, Any] = {"text": texts, "padding": True, "return_tensors": "pt", "return_mm_token_type_ids": True}
    if images:
        kwargs["images"] = images
    if videos:
        kwargs.update(videos=videos, video_metadata=metadata, do_sample_frames=False)
    try:
        return dict(processor(**kwargs))
    except errors:
        return None  # one doc spoils the batch call; each is then built alone to find it


def _unpadded(
    sample: Sample,
    text: str,
    out: dict[str, torch.Tensor] | None,
    j: int,
    visual: dict[str, torch.Tensor],
    *,
    opts: PromptOptions,
) -> PromptInputs | None:
    if out is None:
        return None
    keep = out["attention_mask"][j].bool()  # [P] the row without its left padding
    ids = out["input_ids"][j][keep]
    if ids.numel() > opts.max_prompt_length:
        return None
    types = out["mm_token_type_ids"][j][keep] if "mm_token_type_ids" in out else torch.zeros_like(ids)
    return PromptInputs(sample, ids, types.to(torch.long), visual, text)
