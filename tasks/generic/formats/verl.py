"""verl's rows: ``data_source``, ``prompt`` (chat messages with ``<image>`` placeholders), ``images``
(``{"bytes"}`` / ``{"image": path}``), ``videos``, ``ability``, ``reward_model`` (``{"style": "rule",
"ground_truth": ...}``), ``extra_info``. The reference is ``reward_model.ground_truth``."""

from __future__ import annotations

import json
from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import Inline, as_list, choices_column, column, media_of, split_chat

ROLES = {
    "prompt": ("prompt",),
    "answer": ("reward_model",),
    "images": ("images",),
    "videos": ("videos",),
    "choices": ("choices", "options"),
    "kind": ("answer_type", "problem_type"),
}


def _image(value: Any) -> Any:
    """verl's ``{"image": path}`` as the path (``{"bytes"}`` and paths stay as they are)."""
    if isinstance(value, dict) and value.get("bytes") is None and isinstance(value.get("image"), str):
        return value["image"]
    return value


def _video(value: Any) -> Any:
    return value.get("video") if isinstance(value, dict) and isinstance(value.get("video"), str) else value


def ground_truth(value: Any, name: str) -> Any:
    if isinstance(value, str):  # some exports keep the struct as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(f"column {name!r} is text that is not a JSON object") from None
    if not isinstance(value, dict) or "ground_truth" not in value:
        raise ValueError(
            f'column {name!r} has no \'ground_truth\' (expected {{"style": "rule", "ground_truth": ...}}}})'
        )
    return value["ground_truth"]


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    what, inline = f"column {cols['prompt']!r}", Inline()
    system, history, text = split_chat(column(row, cols, "prompt"), what, inline)
    images, videos = as_list(column(row, cols, "images")), as_list(column(row, cols, "videos"))
    images, videos = media_of(inline, images, videos, what)
    return Parts(
        text=text,
        answer=ground_truth(column(row, cols, "answer"), cols["answer"]),
        images=[_image(v) for v in images],
        videos=[_video(v) for v in videos],
        choices=choices_column(row, cols),
        kind=column(row, cols, "kind"),
        history=history,
        system=system,
    )


FORMAT = register_format(
    Format(
        "verl",
        ROLES,
        ("prompt", "answer"),
        to_parts,
        "verl: prompt messages / images / reward_model.ground_truth",
        marks=("reward_model",),
    )
)
