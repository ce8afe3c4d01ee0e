"""Media as the field stores them, made ready for the media layer without decoding anything: paths relative
to the data file or absolute, ``{"bytes", "path"}`` dicts (``datasets.Image`` columns read undecoded), verl's
``{"image": path}``, raw bytes and base64 data URLs (``data:image/png;base64,...``); videos as paths.

``chat`` lays a row's turns out as chat messages: each ``<image>`` / ``<video>`` placeholder becomes that
medium's content part, in order; a row without any placeholder gets its media before the text of its first
user turn (as EasyR1 does). The placeholder count must equal the media count (``check_counts``).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from pathlib import Path
from typing import Any

from mmreason.tasks.generic.formats import IMAGE, VIDEO, Parts
from mmreason.types import VideoRef

_PLACEHOLDER = re.compile(f"({re.escape(IMAGE)}|{re.escape(VIDEO)})")
_DATA_URL = re.compile(r"^data:[\w/+.-]*;base64,", re.IGNORECASE)


def counts(parts: Parts) -> tuple[int, int]:
    """(image placeholders, video placeholders) over every turn of the row."""
    texts = [parts.text, *(str(t.get("content") or "") for t in parts.history)]
    return sum(t.count(IMAGE) for t in texts), sum(t.count(VIDEO) for t in texts)


def check_counts(parts: Parts) -> str | None:
    """None when the placeholders fit the media (or there is none), else the mismatch in words."""
    n_image, n_video = counts(parts)
    if n_image == 0 and n_video == 0:
        return None
    wrong = []
    if n_image != len(parts.images):
        wrong.append(f"{n_image} {IMAGE} placeholder(s) but {len(parts.images)} image(s)")
    if n_video != len(parts.videos):
        wrong.append(f"{n_video} {VIDEO} placeholder(s) but {len(parts.videos)} video(s)")
    return "; ".join(wrong) or None


def image_source(value: Any, base: Path | None) -> Any:
    """One image as the media layer takes it (path, bytes or a ``{"bytes", "path"}`` dict); ValueError for a
    value that is none of the stored forms."""
    if isinstance(value, str):
        if _DATA_URL.match(value):
            try:
                return base64.b64decode(value.split(",", 1)[1], validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("an image data URL whose base64 payload does not decode") from None
        return local_path(value, base)
    if isinstance(value, dict):
        data = value.get("bytes")
        if isinstance(data, str):  # base64 text belongs in a data URL; as 'bytes' it fails mid-step
            raise ValueError("an image dict whose 'bytes' is text (a str), not bytes (base64? give a data URL)")
        if data is not None and not isinstance(data, (bytes, bytearray)):
            raise ValueError(f"an image dict whose 'bytes' is a {type(data).__name__}, not bytes")
        if data is not None:
            return {"bytes": data, "path": value.get("path")}
        path = value.get("path") or value.get("image")
        if isinstance(path, str):
            return local_path(path, base)
        raise ValueError("an image dict with neither 'bytes' nor 'path'")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise ValueError(f"an image given as a {type(value).__name__} (expected a path, bytes or a dict)")


def form_problem(value: Any, kind: str) -> str | None:
    """What is wrong with how one image / video is stored (None: a form ``image_source`` / ``video_source``
    take), checked without building paths (every row is checked before training)."""
    if kind == "video":
        path = value.get("path") if isinstance(value, dict) else value
        return (
            None if isinstance(path, str) and path else f"a video given as a {type(value).__name__} (expected a path)"
        )
    if isinstance(value, str):
        if _DATA_URL.match(value):
            try:
                image_source(value, None)
            except ValueError as err:
                return str(err)
        return None
    if isinstance(value, (bytes, bytearray)):
        return None
    try:
        image_source(value, None)
    except ValueError as err:
        return str(err)
    return None


def video_source(value: Any, base: Path | None) -> VideoRef:
    path = value.get("path") if isinstance(value, dict) else value
    if not isinstance(path, str) or not path:
        raise ValueError(f"a video given as a {type(value).__name__} (expected a path)")
    return VideoRef(local_path(path, base))


def local_path(path: str, base: Path | None) -> str:
    """``path`` as written when absolute (or ``file://``), else relative to the data file's folder."""
    if path.startswith("file://"):
        path = path[len("file://") :]
    if os.path.isabs(path) or base is None:
        return path
    return str(base / path)


def chat(parts: Parts, user_text: str) -> list[dict[str, Any]]:
    """The row's chat messages (system, earlier turns, the last user turn with ``user_text``), each
    placeholder a content part; a row with no placeholder has its media first in its first user turn."""
    turns = [*parts.history, {"role": "user", "content": user_text}]
    n_image, n_video = counts(Parts(text=user_text, answer=None, history=parts.history))
    media_first = n_image == 0 and n_video == 0
    messages: list[dict[str, Any]] = [{"role": "system", "content": parts.system}] if parts.system else []
    first_user = True
    for turn in turns:
        content: list[dict[str, Any]] = []
        if media_first and first_user and turn["role"] == "user":
            content += [{"type": "image"} for _ in parts.images] + [{"type": "video"} for _ in parts.videos]
        for piece in _PLACEHOLDER.split(str(turn["content"])):
            if piece == IMAGE:
                content.append({"type": "image"})
            elif piece == VIDEO:
                content.append({"type": "video"})
            elif piece:
                content.append({"type": "text", "text": piece})
        first_user = first_user and turn["role"] != "user"
        if turn["role"] == "user":
            messages.append({"role": "user", "content": content})
        else:  # earlier assistant turns: text (an assistant turn shows no media)
            messages.append({"role": turn["role"], "content": "".join(c.get("text", "") for c in content)})
    return messages
