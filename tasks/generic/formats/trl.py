"""TRL's vision rows: ``prompt`` (a string, or conversational messages whose content parts are
``{"type": "image"}`` / ``{"type": "text", "text": ...}``), ``image`` or ``images``, ``solution``."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import as_list, column, split_chat

ROLES = {
    "prompt": ("prompt",),
    "answer": ("solution",),
    "images": ("images", "image"),
    "videos": ("videos", "video"),
    "choices": ("choices", "options"),
    "kind": ("answer_type", "problem_type"),
}


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    system, history, text = split_chat(column(row, cols, "prompt"), f"column {cols['prompt']!r}")
    return Parts(
        text=text,
        answer=column(row, cols, "answer"),
        images=as_list(column(row, cols, "images")),
        videos=as_list(column(row, cols, "videos")),
        kind=column(row, cols, "kind"),
        choices=column(row, cols, "choices"),
        history=history,
        system=system,
    )


FORMAT = register_format(
    Format("trl", ROLES, ("prompt", "answer"), to_parts, "TRL: prompt (text or messages) / image(s) / solution")
)
