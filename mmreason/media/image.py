"""Images from a path, raw bytes, a PIL image, or a Hugging Face ``datasets`` image dict.

``load_image`` decodes fully (so a truncated file fails here, not inside the processor), converts to
RGB the way the Qwen processors do (transparency composited onto white), and, when a pixel budget is
given, resizes to ``smart_resize`` of that budget so the processor will not resize again.
EXIF orientation is not applied: neither the transformers processors nor qwen-vl-utils apply it, and
the header size (``image_size``) must describe the same pixels the model sees.
"""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
from PIL import Image

from mmreason.media.budget import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, image_tokens, resolve_budget
from mmreason.media.errors import MediaError, describe, require_file

ImageSource = Any  # str | os.PathLike | bytes | PIL.Image.Image | {"bytes": ..., "path": ...}

_KIND = "image"
# Pixels an image may have before it is decoded (its header is read first): far above any budget, far below
# what would exhaust memory. Override with MMREASON_MAX_IMAGE_PIXELS.
MAX_DECODE_PIXELS = 64_000_000


def max_decode_pixels() -> int:
    return int(os.environ.get("MMREASON_MAX_IMAGE_PIXELS") or MAX_DECODE_PIXELS)


def _name(src: ImageSource) -> str:
    """How an error message refers to an in-memory source."""
    if isinstance(src, (str, os.PathLike)):
        return str(src)
    if isinstance(src, dict):
        return str(src.get("path") or "<bytes>")
    if isinstance(src, (bytes, bytearray, memoryview)):
        return "<bytes>"
    return getattr(src, "filename", "") or f"<{type(src).__name__}>"  # a PIL image opened from a file


def _open(src: ImageSource) -> Image.Image:
    """Open lazily (header only): PIL decodes pixels on ``load()``."""
    if isinstance(src, Image.Image):
        return src
    if isinstance(src, dict):
        data = src.get("bytes")
        if data is not None and not isinstance(data, (bytes, bytearray, memoryview)):
            # bytes("...") fails with "string argument without an encoding", which names nothing
            kind = "text (a str)" if isinstance(data, str) else f"a {type(data).__name__}"
            raise MediaError(_name(src), f"the image dict's 'bytes' is {kind}, not bytes", _KIND)
        if data is not None:
            return _open_bytes(bytes(data), _name(src))
        if src.get("path"):
            return _open(src["path"])
        raise MediaError(_name(src), "image dict has neither 'bytes' nor 'path'", _KIND)
    if isinstance(src, (bytes, bytearray, memoryview)):
        return _open_bytes(bytes(src), "<bytes>")
    if isinstance(src, (str, os.PathLike)):
        path = require_file(src, _KIND)
        try:
            return Image.open(path)
        except Exception as err:  # UnidentifiedImageError, DecompressionBombError, OSError
            raise MediaError(path, f"not a readable image ({describe(err)})", _KIND) from err
    raise TypeError(f"cannot load an image from {type(src).__name__}; give a path, bytes, a PIL image or a dict")


def _open_bytes(data: bytes, name: str) -> Image.Image:
    if len(data) == 0:
        raise MediaError(name, "image data is empty", _KIND)
    try:
        return Image.open(io.BytesIO(data))
    except Exception as err:
        raise MediaError(name, f"not a readable image ({describe(err)})", _KIND) from err


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to 8-bit RGB.

    Transparency is composited onto white (as transformers' ``convert_to_rgb`` and qwen-vl-utils do).
    16-bit and float images (common for scans and medical stills) are min-max scaled to 0..255, because
    PIL's own conversion clips everything above 255 to white.
    """
    if image.mode == "RGB":
        return image
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        values = np.asarray(image, dtype=np.float64)  # [H, W]
        low, high = float(values.min()), float(values.max())
        scaled = (values - low) * (255.0 / (high - low)) if high > low else np.zeros_like(values)
        return Image.fromarray(scaled.round().astype(np.uint8), mode="L").convert("RGB")
    if "A" in image.getbands() or "transparency" in image.info:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def load_image(src: ImageSource, max_pixels: int | None = None, min_pixels: int | None = None) -> Image.Image:
    """Decode ``src`` into an RGB PIL image, resized to the budget when one is given.

    ``src``: a path, bytes, a PIL image, or a dict ``{"bytes": ..., "path": ...}`` (the Hugging Face
    ``datasets`` Image feature). With ``max_pixels`` and/or ``min_pixels`` (the other limit defaults to
    the image processor's: 56*56 and 28*28*1280) the result is ``smart_resize``-d (bicubic), so its sides
    are multiples of 28 and the processor, given the same limits, keeps it as it is.
    Raises ``MediaError`` naming the source for a missing, empty, corrupt or truncated file.
    """
    image = _open(src)
    cap = max_decode_pixels()
    if image.width * image.height > cap:  # from the header: nothing decoded yet
        raise MediaError(
            _name(src),
            f"{image.width}x{image.height} px is over the decode cap of {cap:,} pixels (MMREASON_MAX_IMAGE_PIXELS)",
            _KIND,
        )
    try:
        image.load()  # decodes now: truncated data fails here
        image = to_rgb(image)
    except MediaError:
        raise
    except Exception as err:
        raise MediaError(_name(src), f"image data is corrupt or truncated ({describe(err)})", _KIND) from err
    budget = resolve_budget(min_pixels, max_pixels, IMAGE_MIN_PIXELS, IMAGE_MAX_PIXELS)
    if budget is None:
        return image.copy() if image is src else image
    try:
        height, width = budget.resize(image.height, image.width)
    except ValueError as err:  # aspect ratio above 200
        raise MediaError(_name(src), str(err), _KIND) from err
    if (height, width) == (image.height, image.width):
        return image.copy() if image is src else image
    return image.resize((width, height), Image.Resampling.BICUBIC)


def image_size(src: ImageSource) -> tuple[int, int]:
    """(height, width) in pixels, read from the header without decoding the pixels."""
    image = _open(src)
    try:
        return image.height, image.width
    finally:
        if image is not src:
            image.close()  # a lazily opened file keeps its handle until closed


def image_file_tokens(src: ImageSource, min_pixels: int = IMAGE_MIN_PIXELS, max_pixels: int = IMAGE_MAX_PIXELS) -> int:
    """Visual tokens the Qwen image processor (with these limits) will produce for ``src``.

    Reads the header only. Equal to the count for ``load_image(src, max_pixels, min_pixels)``.
    """
    height, width = image_size(src)
    try:
        return image_tokens(height, width, min_pixels, max_pixels)
    except ValueError as err:
        raise MediaError(_name(src), str(err), _KIND) from err
