"""What a training run and a ``mmreason vllm-serve`` server send each other: JSON only, never pickle.

A request is the colocate path's vLLM request (``vllm_engine.engine_request``: collapsed prompt ids, the
decoded images and video frames with their metadata) with every array written as raw bytes in base64 beside
its dtype and shape, and every image as its mode, size and raw pixels. Decoding rebuilds the same arrays and
images bit for bit, so the server's engine gets exactly what a colocated one would (and the prompt-id check
of ``checked_rows`` still runs in the trainer). Bounds are checked on the way in: a dtype outside a short
list, a shape whose size disagrees with the bytes, or an image mode PIL does not know is a ``WireError``.
"""

from __future__ import annotations

import base64
import math
from dataclasses import asdict
from typing import Any

import numpy as np
from PIL import Image

from mmreason.rollout.generate import GenerationSettings

DTYPES = ("uint8", "int32", "int64", "float16", "float32", "float64")
IMAGE_MODES = ("RGB", "RGBA", "L", "LA", "P", "I", "F", "I;16", "CMYK", "YCbCr")


class WireError(ValueError):
    """A payload that is not what the project's client sends."""


def encode_array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    if str(a.dtype) not in DTYPES:
        raise WireError(f"array dtype {a.dtype} cannot be sent (allowed: {', '.join(DTYPES)})")
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: dict) -> np.ndarray:
    dtype, shape = d.get("dtype"), d.get("shape")
    if dtype not in DTYPES or not isinstance(shape, list) or not all(isinstance(x, int) and x >= 0 for x in shape):
        raise WireError(f"bad array header: dtype={dtype!r} shape={shape!r}")
    raw = base64.b64decode(d.get("data", ""), validate=True)
    if len(raw) != math.prod(shape) * np.dtype(dtype).itemsize:
        raise WireError(f"array of shape {shape} and dtype {dtype} does not fit its {len(raw)} bytes")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def encode_image(image: Image.Image) -> dict:
    if image.mode not in IMAGE_MODES:
        image = image.convert("RGB")
    return {"mode": image.mode, "size": list(image.size), "data": base64.b64encode(image.tobytes()).decode("ascii")}


def decode_image(d: dict) -> Image.Image:
    mode, size = d.get("mode"), d.get("size")
    if mode not in IMAGE_MODES or not (isinstance(size, list) and len(size) == 2
                                       and all(isinstance(x, int) and 0 < x <= 1 << 15 for x in size)):
        raise WireError(f"bad image header: mode={mode!r} size={size!r}")
    try:
        return Image.frombytes(mode, tuple(size), base64.b64decode(d.get("data", ""), validate=True))
    except ValueError as exc:
        raise WireError(f"image {mode} {size}: {exc}") from None


def encode_request(req: dict) -> dict:
    """A vLLM request (``engine_request``) as JSON-safe data."""
    out: dict[str, Any] = {"prompt_token_ids": [int(t) for t in req["prompt_token_ids"]]}
    media = req.get("multi_modal_data") or {}
    if media.get("image"):
        out["images"] = [encode_image(im) for im in media["image"]]
    if media.get("video"):
        out["videos"] = [{"frames": encode_array(frames), "metadata": _plain(meta)} for frames, meta in media["video"]]
    if req.get("mm_processor_kwargs"):
        out["mm_processor_kwargs"] = dict(req["mm_processor_kwargs"])
    return out


def decode_request(d: dict) -> dict:
    """The vLLM request ``encode_request`` wrote."""
    ids = d.get("prompt_token_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and t >= 0 for t in ids):
        raise WireError("prompt_token_ids must be a non-empty list of token ids")
    req: dict[str, Any] = {"prompt_token_ids": ids}
    media: dict[str, Any] = {}
    if d.get("images"):
        media["image"] = [decode_image(x) for x in d["images"]]
    if d.get("videos"):
        media["video"] = [(decode_array(v["frames"]), dict(v.get("metadata") or {})) for v in d["videos"]]
    if media:
        req["multi_modal_data"] = media
    kwargs = d.get("mm_processor_kwargs")
    if kwargs:
        if not isinstance(kwargs, dict) or set(kwargs) - {"do_sample_frames"}:
            raise WireError(f"mm_processor_kwargs: only do_sample_frames is taken, got {kwargs!r}")
        req["mm_processor_kwargs"] = kwargs
    return req


def encode_settings(settings: GenerationSettings) -> dict:
    out = asdict(settings)
    out["stop_strings"] = list(out.get("stop_strings") or ())
    return out


def decode_settings(d: dict) -> GenerationSettings:
    known = set(GenerationSettings.__dataclass_fields__)
    if not isinstance(d, dict) or set(d) - known:
        raise WireError(f"settings: unknown keys {sorted(set(d) - known) if isinstance(d, dict) else d!r}")
    d = dict(d)
    if "stop_strings" in d:
        d["stop_strings"] = tuple(str(s) for s in d["stop_strings"])
    return GenerationSettings(**d)


def _plain(meta: Any) -> dict:
    """Video metadata (a dict of numbers, lists and strings) as JSON-safe data."""
    if not isinstance(meta, dict):
        meta = dict(vars(meta))
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in meta.items()}
