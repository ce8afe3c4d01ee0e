"""What an environment served over HTTP (``mmreason env-serve``) and its client send each other: JSON only,
never pickle (docs/extending.md, "Serve an environment over HTTP").

A sample goes to the server on ``/reset``: its id, messages, answer, meta and task as JSON (values JSON cannot
hold become their text), its images as encoded image files (a PIL image as PNG, a path or bytes as the file's
own bytes), its video and page references as their fields (the paths must be readable where the server runs).
An observation comes back from ``/step``: its text, its images as PNG, its video frames as raw arrays beside
their dtype and shape (``vllm_wire.encode_array``), their metadata, and ``info`` as JSON.

Both sides decode what the other sends as untrusted (``MediaBounds``): a body's JSON containers are counted
before it is parsed, every key must be one this module writes, an image's format and size are read from its
header and checked before its pixels are decoded, frames must be ``[T, 3, H, W]`` within the bounds, and text
is bounded in characters. Each refusal is a ``WireError`` naming the field.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from mmreason.rollout.backends.vllm_wire import WireError, _b64, _keys, decode_array, decode_metadata, encode_array
from mmreason.rollout.environment import Observation
from mmreason.types import PageRef, Sample, VideoRef

IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF")  # what a sample's image file may be
MAX_DEPTH = 32  # nesting of JSON values in messages, meta, answer and info


@dataclass(frozen=True)
class MediaBounds:
    """What one payload (a sample on ``/reset``, an observation from ``/step``) may hold."""

    max_images: int = 16  # images per sample / observation
    max_image_pixels: int = 4096 * 4096  # width x height of one image or one video frame
    max_videos: int = 4  # videos per observation (references per sample)
    max_frames: int = 512  # frames of one video
    max_video_pixels: int = 1 << 28  # frames x height x width of one video
    max_text_chars: int = 1 << 20  # an observation's text, an action's text
    max_containers: int = 200_000  # JSON objects and arrays in one body


def check_containers(raw: bytes, bounds: MediaBounds, what: str) -> None:
    """Refuse a body with more JSON containers than ``bounds`` allows before ``json.loads`` builds them."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > bounds.max_containers:
        raise WireError(f"{what} holds {containers} JSON arrays/objects (at most {bounds.max_containers})")


def jsonable(value: Any, depth: int = 0) -> Any:
    """Turn ``value`` into JSON-safe data: containers walked (to ``MAX_DEPTH``), numpy scalars as numbers, tensors and
    arrays as lists, anything else as its text."""
    if depth > MAX_DEPTH:
        raise WireError(f"a value nested deeper than {MAX_DEPTH} levels cannot be sent")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, np.generic):
        return jsonable(value.item(), depth)
    if isinstance(value, np.ndarray) and value.size <= 4096:
        return jsonable(value.tolist(), depth)
    if isinstance(value, torch.Tensor) and value.numel() <= 4096:
        return jsonable(value.tolist(), depth)
    return str(value)


# ---- images and frames ---------------------------------------------------------------------------


def encode_png(image: Image.Image) -> dict:
    """Encode a PIL image as ``{"png": base64}`` (lossless, so the receiver sees the sender's pixels)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return {"png": base64.b64encode(buffer.getvalue()).decode("ascii")}


def encode_sample_image(image: Any) -> dict:
    """Encode a sample's image (a PIL image, a path or the bytes of an image file) as ``{"png"|"file": base64}``."""
    if isinstance(image, Image.Image):
        return encode_png(image)
    data = image if isinstance(image, (bytes, bytearray)) else Path(image).read_bytes()
    return {"file": base64.b64encode(bytes(data)).decode("ascii")}


def decode_image(d: Any, bounds: MediaBounds, what: str) -> Image.Image:
    """Decode the image ``encode_png`` / ``encode_sample_image`` wrote, its format and size checked from its header
    before any pixel is decoded (``WireError`` otherwise)."""
    if not isinstance(d, dict) or len(d) != 1 or not set(d) <= {"png", "file"}:
        raise WireError(f'{what} must be {{"png": base64}} or {{"file": base64}}')
    (kind,) = d
    raw = _b64(d[kind], what)
    formats = ("PNG",) if kind == "png" else IMAGE_FORMATS
    try:
        image = Image.open(io.BytesIO(raw), formats=list(formats))
        width, height = image.size
        if width * height > bounds.max_image_pixels or min(width, height) < 1:
            raise WireError(f"{what}: {width}x{height} pixels (at most {bounds.max_image_pixels} in all)")
        image.load()
    except WireError:
        raise
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise WireError(f"{what}: not a readable {'/'.join(formats)} image ({str(exc)[:200]})") from None
    return image


def encode_frames(frames: Any) -> dict:
    """Encode a video's frames ``[T, 3, H, W]`` (a tensor or an array) as raw bytes beside dtype and shape."""
    array = frames.detach().cpu().numpy() if isinstance(frames, torch.Tensor) else np.asarray(frames)
    return encode_array(array)


def decode_frames(d: Any, bounds: MediaBounds, what: str) -> torch.Tensor:
    """Decode a video's frames as a tensor ``[T, 3, H, W]``, its shape checked against ``bounds`` before decoding."""
    if not isinstance(d, dict):
        raise WireError(f"{what} must be an array object")
    shape = d.get("shape")
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(x, int) and x > 0 for x in shape)) or (
        shape[1] != 3
    ):
        raise WireError(f"{what}: frames must have shape [T, 3, H, W], got {str(shape)[:60]}")
    t, _, h, w = shape
    if t > bounds.max_frames or h * w > bounds.max_image_pixels or t * h * w > bounds.max_video_pixels:
        raise WireError(
            f"{what}: {t} frames of {h}x{w} (at most {bounds.max_frames} frames, {bounds.max_image_pixels} "
            f"pixels each, {bounds.max_video_pixels} in all)"
        )
    return torch.from_numpy(decode_array(d))


def _text(v: Any, what: str, most: int) -> str:
    if not isinstance(v, str):
        raise WireError(f"{what} must be a string, got {type(v).__name__}")
    if len(v) > most:
        raise WireError(f"{what}: {len(v)} characters (at most {most})")
    return v


def _items(v: Any, what: str, most: int) -> list:
    if not isinstance(v, list):
        raise WireError(f"{what} must be a list, got {type(v).__name__}")
    if len(v) > most:
        raise WireError(f"{what}: {len(v)} items (at most {most})")
    return v


# ---- samples (client -> server) -------------------------------------------------------------------

SAMPLE_KEYS = {"id", "messages", "answer", "images", "videos", "pages", "meta", "task"}


def encode_sample(sample: Sample) -> dict:
    """Encode ``sample`` as JSON-safe data (the module doc says how each field travels)."""
    return {
        "id": str(sample.id),
        "messages": jsonable(sample.messages),
        "answer": jsonable(sample.answer),
        "images": [encode_sample_image(im) for im in sample.images],
        "videos": [asdict(v) for v in sample.videos],
        "pages": [asdict(p) for p in sample.pages],
        "meta": jsonable(sample.meta),
        "task": str(sample.task),
    }


def decode_sample(d: Any, bounds: MediaBounds) -> Sample:
    """Decode the ``Sample`` ``encode_sample`` wrote; images arrive as PIL images, every field checked."""
    _keys(d, "sample", SAMPLE_KEYS, {"id", "messages"})
    sid = _text(d["id"], "sample.id", 1024)
    messages = _items(d["messages"], f"sample {sid!r}: messages", 4096)
    if not all(isinstance(m, dict) for m in messages):
        raise WireError(f"sample {sid!r}: messages must be objects")
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise WireError(f"sample {sid!r}: meta must be an object")
    images = _items(d.get("images") or [], f"sample {sid!r}: images", bounds.max_images)
    return Sample(
        id=sid,
        messages=messages,
        answer=d.get("answer"),
        images=[decode_image(im, bounds, f"sample {sid!r}: images[{k}]") for k, im in enumerate(images)],
        videos=[_ref(VideoRef, v, f"sample {sid!r}: videos[{k}]") for k, v in enumerate(_refs(d, "videos", sid))],
        pages=[_ref(PageRef, p, f"sample {sid!r}: pages[{k}]") for k, p in enumerate(_refs(d, "pages", sid))],
        meta=meta,
        task=_text(d.get("task", ""), f"sample {sid!r}: task", 256),
    )


def _refs(d: dict, key: str, sid: str) -> list:
    return _items(d.get(key) or [], f"sample {sid!r}: {key}", 4096)


def _ref(cls: Any, v: Any, what: str) -> Any:
    fields = set(cls.__dataclass_fields__)
    _keys(v, what, fields)
    try:
        return cls(**v)
    except TypeError as exc:
        raise WireError(f"{what}: {exc}") from None


# ---- observations (server -> client) --------------------------------------------------------------

OBSERVATION_KEYS = {"text", "images", "videos", "video_metadata", "info"}


def encode_observation(obs: Observation) -> dict:
    """Encode an ``Observation`` as JSON-safe data: images as PNG, frames as raw arrays, ``info`` as JSON."""
    return {
        "text": str(obs.text),
        "images": [encode_png(im) for im in obs.images],
        "videos": [encode_frames(v) for v in obs.videos],
        "video_metadata": [jsonable(m) for m in obs.video_metadata],
        "info": jsonable(obs.info),
    }


def decode_observation(d: Any, done: Any, bounds: MediaBounds) -> Observation:
    """Decode the ``Observation`` ``encode_observation`` wrote (``done`` beside it, as OpenEnv's step answer has it),
    every field checked against ``bounds``."""
    _keys(d, "observation", OBSERVATION_KEYS, {"text"})
    if not isinstance(done, bool):
        raise WireError(f"done must be true or false, got {type(done).__name__}")
    images = _items(d.get("images") or [], "observation.images", bounds.max_images)
    videos = _items(d.get("videos") or [], "observation.videos", bounds.max_videos)
    metadata = _items(d.get("video_metadata") or [], "observation.video_metadata", bounds.max_videos)
    if metadata and len(metadata) != len(videos):
        raise WireError(f"observation: {len(metadata)} video_metadata for {len(videos)} videos")
    info = d.get("info") or {}
    if not isinstance(info, dict):
        raise WireError(f"observation.info must be an object, got {type(info).__name__}")
    return Observation(
        text=_text(d["text"], "observation.text", bounds.max_text_chars),
        images=[decode_image(im, bounds, f"observation.images[{k}]") for k, im in enumerate(images)],
        videos=[decode_frames(v, bounds, f"observation.videos[{k}]") for k, v in enumerate(videos)],
        video_metadata=[decode_metadata(m) for m in metadata],
        done=done,
        info=info,
    )
