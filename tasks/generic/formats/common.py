"""What the built-in row formats share: list-or-one media columns, chat messages to text with placeholders
(and the media content parts carry inline), ``<think>`` / ``<answer>`` tags around a reference."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mmreason.tasks.generic.formats import IMAGE, VIDEO

_ANSWER_TAG = re.compile(r"^\s*(?:<think>.*?</think>\s*)?<answer>(.*)</answer>\s*$", re.DOTALL)
_THINK = re.compile(r"^\s*<think>", re.DOTALL)


def as_list(value: Any) -> list[Any]:
    """A media column as a list: None -> [], one value -> [value], a list (or tuple) as it is."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [v for v in value if v is not None]
    return [value]


def column(row: dict[str, Any], cols: dict[str, str], role: str, default: Any = None) -> Any:
    """The value of ``role``'s column in ``row`` (``default`` when the file has no such column)."""
    name = cols.get(role)
    return row.get(name, default) if name is not None else default


def text_column(row: dict[str, Any], cols: dict[str, str], role: str) -> str:
    """``role``'s column as text: a string as written (a JSON number as its text); ValueError naming the column
    for a list, an object, null or a boolean (which would otherwise reach the prompt as Python text)."""
    value = column(row, cols, role)
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    shown = "null" if value is None else f"a {type(value).__name__}"
    raise ValueError(f"field {cols.get(role, role)!r} is {shown}, not a string")


def choices_column(row: dict[str, Any], cols: dict[str, str]) -> list[str] | None:
    """The option texts of a multiple-choice row (None when there are none); ValueError naming the column when
    it is not a list of strings (numbers are written back as text)."""
    value = column(row, cols, "choices")
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    ok = isinstance(value, (list, tuple)) and all(
        isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in value
    )
    if not ok:
        raise ValueError(f"field {cols['choices']!r} is not a list of option texts")
    return [str(v) for v in value]


def strip_answer_tag(value: Any) -> Any:
    """``"<answer>B</answer>"`` and ``"<think>...</think><answer>B</answer>"`` -> ``"B"`` (a reference written
    as a whole R1-style completion: Video-R1's ``solution``, many TRL / EasyR1 sets); any other value as it is."""
    if isinstance(value, str):
        m = _ANSWER_TAG.match(value)
        if m:
            return m.group(1).strip()
    return value


def has_reasoning(value: Any) -> bool:
    """Whether a reference is a whole completion with its reasoning (``<think>...</think><answer>...</answer>``)."""
    return isinstance(value, str) and bool(_THINK.match(value)) and _ANSWER_TAG.match(value) is not None


@dataclass
class Inline:
    """The media a row's content parts carry themselves (verl / qwen-vl-utils ``{"type": "video", "video":
    PATH}``, ``{"type": "image", "image": PATH}``, OpenAI ``{"type": "image_url", "image_url": {"url": ...}}``),
    in placeholder order, and how many image / video parts carry none (bare placeholders: the media column's)."""

    images: list[Any] = field(default_factory=list)
    videos: list[Any] = field(default_factory=list)
    bare: int = 0

    def any(self) -> bool:
        return bool(self.images or self.videos)


def _part_source(part: dict[str, Any], kind: str) -> Any:
    """The medium an image / video content part carries (None: a bare placeholder)."""
    if kind == "image_url":
        url = part.get("image_url")
        return url.get("url") if isinstance(url, dict) else url
    value = part.get(kind)
    if value is None and part.get("bytes") is not None:  # verl's {"type": "image", **{"bytes", "path"}}
        return {"bytes": part["bytes"], "path": part.get("path")}
    if value is None and isinstance(part.get("path"), str):
        return part["path"]
    if kind == "video" and isinstance(value, (list, tuple)):
        raise ValueError("a video content part given as a list of frames (give the video file's path)")
    return value


def content_text(content: Any, inline: Inline | None = None) -> str:
    """A chat message's content as text with placeholders: a string as it is; a list of parts with
    ``{"type": "image"}`` / ``{"type": "video"}`` as ``<image>`` / ``<video>`` and text parts' text. A part that
    carries its medium (``_part_source``) adds it to ``inline``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"content is a {type(content).__name__}, not text or a list of parts")
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("image", "image_url", "video"):
            source = _part_source(part, kind)
            out.append(VIDEO if kind == "video" else IMAGE)
            if inline is None:
                continue
            if source is None:
                inline.bare += 1
            else:
                (inline.videos if kind == "video" else inline.images).append(source)
        elif kind == "text":
            text = part.get("text")
            if text is not None and not isinstance(text, str):
                raise ValueError(f"a text content part whose 'text' is a {type(text).__name__}, not a string")
            out.append(text or "")
        else:
            raise ValueError(f"a content part of type {kind!r} (expected text, image or video)")
    return "".join(out)


def media_of(inline: Inline, images: list[Any], videos: list[Any], where: str) -> tuple[list[Any], list[Any]]:
    """(images, videos) of a row: the content parts' own media, else the media columns'; ValueError when a row
    gives media both ways (which placeholder is which medium would be a guess)."""
    if not inline.any():
        return images, videos
    if images or videos:
        raise ValueError(f"{where} carries media in its content parts and the row has a media column too")
    if inline.bare:
        raise ValueError(f"{where}: {inline.bare} image / video part(s) without a source beside parts that have one")
    return inline.images, inline.videos


def split_chat(messages: Any, what: str, inline: Inline | None = None) -> tuple[str | None, list[dict[str, Any]], str]:
    """(system text, earlier turns, the last user turn's text) of a list of chat messages (``role`` /
    ``content``); ValueError naming ``what`` when it is not one. Media the parts carry go to ``inline``."""
    if isinstance(messages, str):
        return None, [], messages
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{what} is not a string or a non-empty list of chat messages")
    system, turns = None, []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"{what} holds an item that is not a chat message with a 'role'")
        if message["role"] == "system":
            system = content_text(message.get("content"))
        else:
            turns.append({"role": str(message["role"]), "content": content_text(message.get("content"), inline)})
    users = [k for k, t in enumerate(turns) if t["role"] == "user"]
    if not users:
        raise ValueError(f"{what} has no user message")
    last = users[-1]
    return system, turns[:last], turns[last]["content"]
