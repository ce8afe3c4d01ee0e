"""TRL's vision rows: ``prompt`` (a string, or conversational messages whose content parts are
``{"type": "image"}`` / ``{"type": "text", "text": ...}``, or parts carrying their medium: ``{"type": "image",
"image": PATH}``), ``image`` or ``images``, ``solution``."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import Inline, as_list, choices_column, column, media_of, split_chat

ROLES = {
    "prompt": ("prompt",),
    "answer": ("solution",),
    "images": ("images", "image"),
    "videos": ("videos", "video"),
    "choices": ("choices", "options"),
    "kind": ("answer_type", "problem_type"),
}


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    what, inline = f"column {cols['prompt']!r}", Inline()
    system, history, text = split_chat(column(row, cols, "prompt"), what, inline)
    images, videos = media_of(inline, as_list(column(row, cols, "images")), as_list(column(row, cols, "videos")), what)
    return Parts(
        text=text,
        answer=column(row, cols, "answer"),
        images=images,
        videos=videos,
        kind=column(row, cols, "kind"),
        choices=choices_column(row, cols),
        history=history,
        system=system,
    )


FORMAT = register_format(
    Format("trl", ROLES, ("prompt", "answer"), to_parts, "TRL: prompt (text or messages) / image(s) / solution")
)
