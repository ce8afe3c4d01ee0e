"""What the built-in row formats share: list-or-one media columns, chat messages to text with placeholders,
``<answer>`` tags around a reference."""

from __future__ import annotations

import re
from typing import Any

from mmreason.tasks.generic.formats import IMAGE, VIDEO

_ANSWER_TAG = re.compile(r"^\s*<answer>(.*)</answer>\s*$", re.DOTALL)


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


def strip_answer_tag(value: Any) -> Any:
    """``"<answer>B</answer>"`` -> ``"B"`` (Video-R1's ``solution``); any other value as it is."""
    if isinstance(value, str):
        m = _ANSWER_TAG.match(value)
        if m:
            return m.group(1).strip()
    return value


def content_text(content: Any) -> str:
    """A chat message's content as text with placeholders: a string as it is; a list of parts with
    ``{"type": "image"}`` / ``{"type": "video"}`` as ``<image>`` / ``<video>`` and text parts' text."""
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
        if kind in ("image", "image_url"):
            out.append(IMAGE)
        elif kind == "video":
            out.append(VIDEO)
        elif kind == "text":
            out.append(str(part.get("text") or ""))
        else:
            raise ValueError(f"a content part of type {kind!r} (expected text, image or video)")
    return "".join(out)


def split_chat(messages: Any, what: str) -> tuple[str | None, list[dict[str, Any]], str]:
    """(system text, earlier turns, the last user turn's text) of a list of chat messages (``role`` /
    ``content``); ValueError naming ``what`` when it is not one."""
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
            turns.append({"role": str(message["role"]), "content": content_text(message.get("content"))})
    users = [k for k, t in enumerate(turns) if t["role"] == "user"]
    if not users:
        raise ValueError(f"{what} has no user message")
    last = users[-1]
    return system, turns[:last], turns[last]["content"]
