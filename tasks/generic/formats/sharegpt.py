"""LLaVA / ShareGPT conversations: ``conversations`` (``from`` human / gpt (or system), ``value`` with
``<image>``), ``image`` (a path or a list; ``images`` too); TRL's SFT ``messages`` (``role`` / ``content`` as
a list of ``{"type": "text" | "image"}`` parts) beside ``images``. The last gpt turn is the reference for RL
and the SFT target; ``turns=all`` makes every gpt turn an SFT target (with the conversation before it)."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import Inline, as_list, choices_column, column, content_text, media_of

ROLES = {
    "prompt": ("conversations", "messages"),
    "images": ("image", "images"),
    "videos": ("video", "videos"),
    "system": ("system",),
    "choices": ("choices", "options"),
}
SPEAKERS = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def _turns(value: Any, name: str, inline: Inline) -> list[dict[str, str]]:
    """The turns as {"role", "content": text with placeholders}; a turn's content may be TRL's list of parts
    (``{"type": "text", "text"}`` / ``{"type": "image"}``), whose media, when the parts carry them, go to
    ``inline``."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"column {name!r} is not a non-empty list of turns")
    out = []
    for k, turn in enumerate(value):
        speaker = turn.get("from", turn.get("role")) if isinstance(turn, dict) else None
        text = turn.get("value", turn.get("content")) if isinstance(turn, dict) else None
        if speaker not in SPEAKERS or not isinstance(text, (str, list)):
            raise ValueError(f"column {name!r}: turn {k} is not {{'from': human|gpt|system, 'value': text}}")
        try:
            text = content_text(text, inline)
        except ValueError as err:
            raise ValueError(f"column {name!r}: turn {k}: {err}") from None
        out.append({"role": SPEAKERS[speaker], "content": text})
    return out


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    inline = Inline()
    turns = _turns(column(row, cols, "prompt"), cols["prompt"], inline)
    images, videos = as_list(column(row, cols, "images")), as_list(column(row, cols, "videos"))
    images, videos = media_of(inline, images, videos, f"column {cols['prompt']!r}")
    system = column(row, cols, "system")
    if turns[0]["role"] == "system":
        system, turns = turns[0]["content"], turns[1:]
    replies = [k for k, t in enumerate(turns) if t["role"] == "assistant" and k > 0 and turns[k - 1]["role"] == "user"]
    if not replies:
        raise ValueError(f"column {cols['prompt']!r} has no gpt turn after a human turn (nothing to answer)")
    last = replies[-1]
    pairs = [(turns[: k - 1], turns[k - 1]["content"], turns[k]["content"]) for k in replies]
    return Parts(
        text=turns[last - 1]["content"],
        answer=turns[last]["content"],
        images=images,
        videos=videos,
        choices=choices_column(row, cols),
        history=turns[: last - 1],
        system=system,
        target=turns[last]["content"],
        turns=pairs,
    )


FORMAT = register_format(
    Format("sharegpt", ROLES, ("prompt",), to_parts, "LLaVA / ShareGPT: conversations (from / value) / image")
)
