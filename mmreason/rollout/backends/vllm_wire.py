"""What a training run and a ``mmreason vllm-serve`` server send each other: JSON only, never pickle.

A request is the colocate path's vLLM request (``vllm_engine.engine_request``: collapsed prompt ids, the
decoded images and video frames with their metadata) with every array written as raw bytes in base64 beside
its dtype and shape, and every image as its mode, size and raw pixels. Decoding rebuilds the same arrays and
images bit for bit, so the server's engine gets exactly what a colocated one would (and the prompt-id check
of ``checked_rows`` still runs in the trainer). Bounds are checked on the way in: a dtype outside a short
list, a shape whose size disagrees with the bytes, or an image mode PIL does not know is a ``WireError``.

The server decodes what any local process may send it, so ``decode_generate`` takes nothing on trust: the
body's shape is bounded before it is parsed (``check_body_shape``: a count of JSON containers and items, one
pass over the bytes, so parsing costs a small multiple of the body whatever it holds), every key must be one
the client writes, and every number, list and setting is checked for type and range against the server's
limits (``WireLimits``, from its flags). Each refusal is a ``WireError`` naming the field (the server answers
400).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mmreason.rollout.generate import GenerationSettings

DTYPES = ("uint8", "int32", "int64", "float16", "float32", "float64")
IMAGE_MODES = ("RGB", "RGBA", "L", "LA", "P", "I", "F", "I;16", "CMYK", "YCbCr")


MAX_TOKEN_ID = 1 << 31
MAX_STOP_STRINGS, MAX_STOP_CHARS = 64, 1024
MAX_METADATA_ITEMS = 4096  # a video's metadata: a few numbers and one index per frame


class WireError(ValueError):
    """A payload that is not what the project's client sends."""


@dataclass(frozen=True)
class WireLimits:
    """What one ``/generate`` call may ask of the server (its flags: docs/vllm.md, "Server mode")."""

    max_requests: int = 64  # prompts per call
    max_rows: int = 1024  # prompts x n
    max_n: int = 64  # rows per prompt
    max_new_tokens: int = 4096
    max_prompt_tokens: int = 32768  # the engine's context
    limit_images: int = 16  # per prompt, as the engine's limit_mm_per_prompt
    limit_videos: int = 4
    vocab_size: int = MAX_TOKEN_ID  # token ids are below this (the engine's vocabulary)
    # the collapsed image placeholder id: one run of it per image (Qwen's pads)
    image_token: int | None = None
    video_token: int | None = None  # the same for videos

    def max_containers(self) -> int:
        """Count the JSON objects and arrays a valid body can hold: a few per request, per image and per video."""
        return 64 + self.max_requests * (8 + 3 * self.limit_images + 12 * self.limit_videos)

    def max_items(self) -> int:
        """Count the commas a valid body can hold: prompt ids, seeds, video metadata and headers."""
        per_request = self.max_prompt_tokens + 64 * self.limit_images + self.limit_videos * (MAX_METADATA_ITEMS + 64)
        return 1024 + self.max_rows + MAX_STOP_STRINGS + self.max_requests * per_request


def check_body_shape(raw: bytes, limits: WireLimits) -> None:
    """Refuse a body with more JSON containers or items than any valid call has, before ``json.loads``
    builds them (a 40 MiB body of ``[],`` would be 13 M lists): two byte counts, linear and fast."""
    containers = raw.count(b"[") + raw.count(b"{")
    if containers > limits.max_containers():
        raise WireError(
            f"request body holds {containers} JSON arrays/objects; a call within the server's limits "
            f"holds at most {limits.max_containers()}"
        )
    items = raw.count(b",")
    if items > limits.max_items():
        raise WireError(
            f"request body holds {items} items; a call within the server's limits holds at most {limits.max_items()}"
        )


def parse_json(raw: bytes) -> Any:
    """Parse ``raw`` as JSON; ``WireError`` for what is not JSON, not UTF-8, or nested too deep."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"request body is not JSON: {str(exc)[:200]}") from None


MAX_SAFETENSORS_HEADER = 100 << 20  # bytes of a safetensors header (the format's own bound)


def check_safetensors(path: Path, shapes: dict[str, list | None] | None = None) -> None:
    """Refuse (``WireError``) a ``model.safetensors`` whose header does not parse, whose tensors' byte ranges do
    not fit the file, or (``shapes``: the served checkpoint's, ``safetensors_shapes``) that gives a tensor of
    the served model another shape, before any engine reads it: vLLM's reload of a wrong shape fails half-way
    and leaves the engine unable to take any weights again (seen on vLLM 0.32's CPU build)."""
    entries = _safetensors_header(path)
    wrong = [k for k, v in entries.items() if k in (shapes or {}) and v.get("shape") != shapes[k]]  # type: ignore[index]
    if wrong:
        k = wrong[0]
        raise WireError(
            f"reload_weights: {path.name}: {len(wrong)} tensor(s) of another shape than the served model's, "
            f"e.g. {k[:120]} {entries[k].get('shape')} (served: {shapes[k]})"  # type: ignore[index]
        )


def safetensors_shapes(model_dir: str | Path) -> dict[str, list | None]:
    """Map tensor name -> shape of every ``*.safetensors`` file of a checkpoint folder (headers only); {} when it has
    none or one does not parse."""
    out: dict[str, list | None] = {}
    try:
        for file in sorted(Path(model_dir).glob("*.safetensors")):
            out.update({k: v.get("shape") for k, v in _safetensors_header(file).items()})
    except (OSError, WireError):
        return {}
    return out


def _safetensors_header(path: Path) -> dict[str, dict]:
    """Read the tensor entries of a safetensors file's header, each checked to lie inside the file."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= length <= min(MAX_SAFETENSORS_HEADER, size - 8):
            raise WireError(f"reload_weights: {path.name} is not a safetensors file (header of {length} bytes)")
        try:
            header = json.loads(f.read(length))
        except (ValueError, RecursionError):
            header = None
    entries = {k: v for k, v in header.items() if k != "__metadata__"} if isinstance(header, dict) else None
    ok = (
        entries is not None
        and bool(entries)
        and all(
            isinstance(v, dict)
            and isinstance(v.get("data_offsets"), list)
            and len(v["data_offsets"]) == 2
            and all(isinstance(x, int) and 0 <= x <= size - 8 - length for x in v["data_offsets"])
            for v in entries.values()
        )
    )
    if not ok or entries is None:
        raise WireError(f"reload_weights: {path.name}: its header does not describe tensors inside the file")
    return entries


def _keys(d: Any, what: str, allowed: AbstractSet[str], required: AbstractSet[str] = frozenset()) -> dict:
    if not isinstance(d, dict):
        raise WireError(f"{what} must be an object, got {type(d).__name__}")
    if set(d) - allowed:
        raise WireError(f"{what}: unknown keys {sorted(set(d) - allowed)} (allowed: {sorted(allowed)})")
    if required - set(d):
        raise WireError(f"{what}: missing {sorted(required - set(d))}")
    return d


def _int(v: Any, what: str, lo: int, hi: int) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise WireError(f"{what} must be an integer in [{lo}, {hi}], got {_show(v)}")
    return v


def _number(v: Any, what: str, lo: float, hi: float, *, open_low: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or not (lo < v if open_low else lo <= v) or v > hi:
        raise WireError(f"{what} must be a number in {'(' if open_low else '['}{lo}, {hi}], got {_show(v)}")
    return float(v)


def _list(v: Any, what: str, most: int) -> list:
    if not isinstance(v, list) or len(v) > most:
        raise WireError(
            f"{what} must be a list of at most {most} items, got "
            f"{f'{len(v)} items' if isinstance(v, list) else _show(v)}"
        )
    return v


def _b64(v: Any, what: str) -> bytes:
    if not isinstance(v, str):
        raise WireError(f"{what} must be a base64 string, got {type(v).__name__}")
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise WireError(f"{what}: not base64 ({exc})") from None


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def encode_array(a: np.ndarray) -> dict:
    a = np.ascontiguousarray(a)
    if str(a.dtype) not in DTYPES:
        raise WireError(f"array dtype {a.dtype} cannot be sent (allowed: {', '.join(DTYPES)})")
    return {"dtype": str(a.dtype), "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode("ascii")}


def decode_array(d: dict) -> np.ndarray:
    _keys(d, "array", {"dtype", "shape", "data"}, {"dtype", "shape", "data"})
    dtype, shape = d["dtype"], d["shape"]
    if (
        dtype not in DTYPES
        or not isinstance(shape, list)
        or len(shape) > 5
        or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 1 << 24 for x in shape)
    ):
        raise WireError(f"bad array header: dtype={_show(dtype)} shape={_show(shape)}")
    raw = _b64(d["data"], "array data")
    if len(raw) != math.prod(shape) * np.dtype(dtype).itemsize:
        raise WireError(f"array of shape {shape} and dtype {dtype} does not fit its {len(raw)} bytes")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise WireError(f"array of shape {shape} holds NaN or infinite values")
    return array


def encode_image(image: Image.Image) -> dict:
    if image.mode not in IMAGE_MODES:
        image = image.convert("RGB")
    return {"mode": image.mode, "size": list(image.size), "data": base64.b64encode(image.tobytes()).decode("ascii")}


def decode_image(d: dict) -> Image.Image:
    _keys(d, "image", {"mode", "size", "data"}, {"mode", "size", "data"})
    mode, size = d["mode"], d["size"]
    if mode not in IMAGE_MODES or not (
        isinstance(size, list)
        and len(size) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 1 << 15 for x in size)
    ):
        raise WireError(f"bad image header: mode={_show(mode)} size={_show(size)}")
    try:
        image = Image.frombytes(mode, tuple(size), _b64(d["data"], "image data"))
    except ValueError as exc:
        raise WireError(f"image {mode} {size}: {exc}") from None
    if mode == "F" and not np.isfinite(np.asarray(image)).all():
        raise WireError(f"image {mode} {size} holds NaN or infinite values")
    return image


def encode_request(req: dict) -> dict:
    """Encode a vLLM request (``engine_request``) as JSON-safe data."""
    out: dict[str, Any] = {"prompt_token_ids": [int(t) for t in req["prompt_token_ids"]]}
    media = req.get("multi_modal_data") or {}
    if media.get("image"):
        out["images"] = [encode_image(im) for im in media["image"]]
    if media.get("video"):
        out["videos"] = [{"frames": encode_array(frames), "metadata": _plain(meta)} for frames, meta in media["video"]]
    if req.get("mm_processor_kwargs"):
        out["mm_processor_kwargs"] = dict(req["mm_processor_kwargs"])
    return out


def decode_request(d: dict, limits: WireLimits | None = None) -> dict:
    """Decode the vLLM request ``encode_request`` wrote; every key and value checked (``WireError``)."""
    limits = limits or WireLimits()
    _keys(d, "request", {"prompt_token_ids", "images", "videos", "mm_processor_kwargs"}, {"prompt_token_ids"})
    ids = _list(d["prompt_token_ids"], "prompt_token_ids", limits.max_prompt_tokens)
    if not ids or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < MAX_TOKEN_ID for t in ids):
        raise WireError("prompt_token_ids must be a non-empty list of token ids")
    if max(ids) >= limits.vocab_size:
        raise WireError(f"prompt_token_ids: id {max(ids)} is outside the vocabulary of {limits.vocab_size}")
    req: dict[str, Any] = {"prompt_token_ids": ids}
    media: dict[str, Any] = {}
    images = _list(d.get("images") or [], "images", limits.limit_images)
    if images:
        media["image"] = [decode_image(x) for x in images]
    videos = _list(d.get("videos") or [], "videos", limits.limit_videos)
    if videos:
        media["video"] = [
            (
                decode_array(_keys(v, "video", {"frames", "metadata"}, {"frames"})["frames"]),
                decode_metadata(v.get("metadata")),
            )
            for v in videos
        ]
    _check_placeholders(ids, len(images), limits.image_token, "image")
    _check_placeholders(ids, len(videos), limits.video_token, "video")
    if media:
        req["multi_modal_data"] = media
    kwargs = d.get("mm_processor_kwargs")
    if kwargs:
        _keys(kwargs, "mm_processor_kwargs", {"do_sample_frames"})
        if not isinstance(kwargs.get("do_sample_frames", False), bool):
            raise WireError("mm_processor_kwargs.do_sample_frames must be true or false")
        req["mm_processor_kwargs"] = kwargs
    return req


def _check_placeholders(ids: list[int], given: int, token: int | None, what: str) -> None:
    """Check for one run of the ``token`` placeholder per image (video) given: the engine expands each run into that
    item's tokens, and a count that differs fails inside the engine."""
    if token is None:
        return
    runs = sum(1 for k, t in enumerate(ids) if t == token and (k == 0 or ids[k - 1] != token))
    if runs != given:
        raise WireError(f"{given} {what}(s) for {runs} {what} placeholder(s) in prompt_token_ids")


def decode_metadata(meta: Any) -> dict:
    """Decode a video's metadata: string keys; numbers, strings, booleans, nulls or flat lists of them."""
    if meta is None:
        return {}
    if not isinstance(meta, dict) or len(meta) > 64:
        raise WireError(f"video metadata must be an object of at most 64 keys, got {_show(meta)}")
    scalar = (int, float, str, bool, type(None))
    for k, v in meta.items():
        items = _list(v, f"video metadata {k!r}", MAX_METADATA_ITEMS) if isinstance(v, list) else [v]
        if not all(isinstance(x, scalar) for x in items) or any(isinstance(x, str) and len(x) > 256 for x in items):
            raise WireError(f"video metadata {k!r}: numbers, short strings or flat lists of them, got {_show(v)}")
    return dict(meta)


def decode_generate(body: Any, limits: WireLimits) -> tuple[list[dict], int, GenerationSettings, list[int]]:
    """Decode a ``/generate`` body -> (vLLM requests, n, settings, one seed per row), within ``limits``."""
    _keys(body, "body", {"requests", "n", "settings", "seeds"}, {"requests", "n", "settings", "seeds"})
    n = _int(body["n"], "n", 1, limits.max_n)
    raw = _list(body["requests"], "requests", limits.max_requests)
    if not raw or len(raw) * n > limits.max_rows:
        raise WireError(f"{len(raw)} requests x n={n} rows: 1 to {limits.max_rows} rows a call (--max_rows)")
    seeds = _list(body["seeds"], "seeds", limits.max_rows)
    if len(seeds) != len(raw) * n:
        raise WireError(f"n={n} and {len(seeds)} seeds do not fit {len(raw)} requests (one seed a row)")
    seeds = [_int(s, "seeds[]", 0, MAX_TOKEN_ID - 1) for s in seeds]
    settings = decode_settings(body["settings"], limits)
    return [decode_request(r, limits) for r in raw], n, settings, seeds


def encode_settings(settings: GenerationSettings) -> dict:
    out = asdict(settings)
    out["stop_strings"] = list(out.get("stop_strings") or ())
    return out


def decode_settings(d: dict, limits: WireLimits | None = None) -> GenerationSettings:
    """Decode sampling settings, each of its type and in its range (``max_new_tokens`` up to ``limits``)."""
    limits = limits or WireLimits()
    _keys(d, "settings", set(GenerationSettings.__dataclass_fields__), {"max_new_tokens"})
    out: dict[str, Any] = {
        "max_new_tokens": _int(d["max_new_tokens"], "settings.max_new_tokens", 1, limits.max_new_tokens)
    }
    if "temperature" in d:
        out["temperature"] = _number(d["temperature"], "settings.temperature", 0.0, 100.0)
    if "top_p" in d:
        out["top_p"] = _number(d["top_p"], "settings.top_p", 0.0, 1.0, open_low=True)
    if d.get("top_k") is not None:
        out["top_k"] = _int(d["top_k"], "settings.top_k", 0, MAX_TOKEN_ID)
    if "stop_strings" in d:
        stops = _list(d["stop_strings"], "settings.stop_strings", MAX_STOP_STRINGS)
        if not all(isinstance(x, str) and 0 < len(x) <= MAX_STOP_CHARS for x in stops):
            raise WireError(
                f"settings.stop_strings must be non-empty strings of at most {MAX_STOP_CHARS} "
                f"characters, got {_show(stops)}"
            )
        out["stop_strings"] = tuple(stops)
    return GenerationSettings(**out)


def _plain(meta: Any) -> dict:
    """Turn video metadata (a dict of numbers, lists and strings) into JSON-safe data."""
    if not isinstance(meta, dict):
        meta = dict(vars(meta))
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in meta.items()}


class Refused(Exception):
    """A request answered with ``code`` before it reaches the engine."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
