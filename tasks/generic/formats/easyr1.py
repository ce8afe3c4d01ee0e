"""EasyR1's rows: ``problem`` (text with ``<image>`` / ``<video>`` placeholders, or none: media first),
``answer``, ``images`` (paths or ``{"bytes", "path"}`` dicts; an imagefolder's ``image`` too), ``videos``."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import as_list, choices_column, column, text_column

ROLES = {
    "prompt": ("problem",),
    "answer": ("answer",),
    "images": ("images", "image"),
    "videos": ("videos", "video"),
    "choices": ("choices", "options"),
    "kind": ("answer_type", "problem_type"),
}


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    return Parts(
        text=text_column(row, cols, "prompt"),
        answer=column(row, cols, "answer"),
        images=as_list(column(row, cols, "images")),
        videos=as_list(column(row, cols, "videos")),
        kind=column(row, cols, "kind"),
        choices=choices_column(row, cols),
    )


FORMAT = register_format(
    Format("easyr1", ROLES, ("prompt", "answer"), to_parts, "EasyR1: problem / answer / images / videos")
)
