"""Can the model see it? Checks that the media a prompt names is the media it encodes.

Three counts must agree for every prompt (and every observation of a later turn):

1. the media the sample (or observation) names: ``{"type": "image"}`` / ``{"type": "video"}`` items in its
   chat against its images + pages / videos;
2. the placeholders the chat template rendered: ``processor.image_token`` / ``video_token`` in the text (a
   template that drops an image item renders none for it);
3. after encoding, the expanded placeholder tokens against the visual features fed: one grid row per image /
   video, and ``sum(t * h * w) / merge_size**2`` placeholder tokens (Qwen2-VL's patch merger, which the
   processor expands each placeholder to); for a tile family (InternVL, no grids) ``image_seq_length``
   placeholder tokens per tile fed and an ``<img>`` block per image or video.

A disagreement raises ``UnseenMedia`` (a ``ValueError``) carrying ``report``: the sample id, each count and
the media paths, for the trainer to dump and count (``count/unseen_media``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mmreason.models.families import family_of_processor

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from mmreason.types import Sample


class UnseenMedia(ValueError):
    """Media named by a prompt that the model would not see; ``report`` has the counts and paths."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        super().__init__(f"sample {report.get('sample_id')!r}: unseen media: {'; '.join(report['problems'])}")


def named_media(messages: list[dict[str, Any]]) -> tuple[int, int]:
    """Collect (image items, video items) in a chat's content lists."""
    images = videos = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            images += sum(isinstance(c, dict) and c.get("type") == "image" for c in content)
            videos += sum(isinstance(c, dict) and c.get("type") == "video" for c in content)
    return images, videos


def _tokens(processor: ProcessorMixin) -> tuple[str | None, str | None]:
    return getattr(processor, "image_token", None), getattr(processor, "video_token", None)


def check_rendered(
    processor: ProcessorMixin,
    text: str,
    n_images: int,
    n_videos: int,
    named: tuple[int, int] | None = None,
    *,
    sample_id: str = "",
    paths: list[str] | None = None,
) -> None:
    """Check before encoding that the rendered ``text`` holds one placeholder per image / video fed, and the chat names
    as many as are fed (``named``). Raises ``UnseenMedia``."""
    image_token, video_token = _tokens(processor)
    problems = []
    if named is not None and named != (n_images, n_videos):
        problems.append(
            f"the chat names {named[0]} image(s) and {named[1]} video(s) but the sample has "
            f"{n_images} image(s)/page(s) and {n_videos} video(s)"
        )
    for kind, token, fed in (("image", image_token, n_images), ("video", video_token, n_videos)):
        if token and text.count(token) != fed:
            problems.append(
                f"the chat template rendered {text.count(token)} {kind} placeholder(s) for {fed} {kind}(s) fed"
            )
    if problems:
        raise UnseenMedia(
            {
                "sample_id": sample_id,
                "problems": problems,
                "images": n_images,
                "videos": n_videos,
                "named": list(named) if named else None,
                "paths": paths or [],
            }
        )


def check_encoded(
    processor: ProcessorMixin,
    input_ids: torch.Tensor,
    visual: dict[str, torch.Tensor],
    n_images: int,
    n_videos: int,
    *,
    sample_id: str = "",
    paths: list[str] | None = None,
) -> None:
    """Check after encoding that grid rows equal the media fed and placeholder tokens equal the features' merged
    patches. ``input_ids`` [P]; ``visual`` the processor's ``image_grid_thw`` [I, 3] / ``video_grid_thw`` [V, 3]."""
    if not family_of_processor(processor).grids:
        return _check_tiles(processor, input_ids, visual, n_images, n_videos, sample_id=sample_id, paths=paths)
    image_token, video_token = _tokens(processor)
    merge = int(getattr(getattr(processor, "image_processor", None), "merge_size", 1) or 1)
    tokenizer = processor.tokenizer
    problems, counts = [], {}
    for kind, token, grid_key, fed in (
        ("image", image_token, "image_grid_thw", n_images),
        ("video", video_token, "video_grid_thw", n_videos),
    ):
        grid = visual.get(grid_key)
        rows = 0 if grid is None else int(grid.shape[0])
        features = 0 if grid is None else int(grid.prod(dim=-1).sum()) // (merge * merge)
        placed = int((input_ids == tokenizer.convert_tokens_to_ids(token)).sum()) if token else features
        counts[kind] = {"fed": fed, "grids": rows, "placeholder_tokens": placed, "feature_tokens": features}
        if rows != fed:
            problems.append(f"{fed} {kind}(s) fed but {rows} encoded")
        if placed != features:
            problems.append(f"{placed} {kind} placeholder token(s) for {features} {kind} feature token(s)")
    if problems:
        raise UnseenMedia({"sample_id": sample_id, "problems": problems, "counts": counts, "paths": paths or []})


def _check_tiles(
    processor: ProcessorMixin,
    input_ids: torch.Tensor,
    visual: dict[str, torch.Tensor],
    n_images: int,
    n_videos: int,
    *,
    sample_id: str = "",
    paths: list[str] | None = None,
) -> None:
    """Check a tile family (InternVL: no grids): every tile fed (``pixel_values`` [tiles, 3, H, W], a video's frames
    included) has ``image_seq_length`` placeholder tokens, and each image / video has at least one ``<img>`` block."""
    tokenizer = processor.tokenizer
    tiles = int(visual["pixel_values"].shape[0]) if "pixel_values" in visual else 0
    features = tiles * int(getattr(processor, "image_seq_length", 0))
    image_token: str = processor.image_token  # type: ignore[attr-defined]  # a tile family's processor
    placed = int((input_ids == tokenizer.convert_tokens_to_ids(image_token)).sum())
    blocks = int((input_ids == getattr(processor, "start_image_token_id", -1)).sum())
    problems = []
    if placed != features:
        problems.append(f"{placed} image placeholder token(s) for {features} feature token(s) ({tiles} tile(s))")
    if blocks < n_images + n_videos or (tiles == 0) != (n_images + n_videos == 0):
        problems.append(
            f"{n_images} image(s) and {n_videos} video(s) fed but {blocks} image block(s) and {tiles} tile(s) encoded"
        )
    if problems:
        raise UnseenMedia(
            {
                "sample_id": sample_id,
                "problems": problems,
                "paths": paths or [],
                "counts": {"tiles": tiles, "placeholder_tokens": placed, "blocks": blocks},
            }
        )


def media_paths(sample: Sample) -> list[str]:
    """List the files a sample names (images given as paths, pages, videos), for dumps and reports."""
    out = [str(i) if isinstance(i, str) or hasattr(i, "__fspath__") else f"<{type(i).__name__}>" for i in sample.images]
    out += [f"{p.source}#page={p.index}" for p in sample.pages]
    out += [str(v.path) for v in sample.videos]
    return out
