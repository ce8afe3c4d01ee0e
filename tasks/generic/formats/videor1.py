"""Video-R1's rows: ``problem_type`` (multiple choice / numerical / OCR / free-form / regression), ``problem``,
``options``, ``solution`` (``<answer>...</answer>``; ``answer`` too), ``path`` (the image or video),
``data_type`` (image / video).

The user text is the problem, then the options one per line (as Video-R1 builds its prompts). Rows converted
for verl (its video test data) also carry ``prompt``: chat messages whose parts hold the clip (``{"type":
"video", "video": PATH}``) and the full instruction; then those messages are the prompt and their media the
row's. A row whose ``data_type`` names a medium it does not give is refused."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import (
    Inline,
    as_list,
    choices_column,
    column,
    media_of,
    split_chat,
    strip_answer_tag,
    text_column,
)

ROLES = {
    "prompt": ("problem",),
    "answer": ("solution", "answer"),
    "kind": ("problem_type",),
    "media": ("path",),
    "media_type": ("data_type",),
    "choices": ("options",),
    "reasoning": ("process",),
    "messages": ("prompt",),
}
KINDS = {
    "multiple choice": "mcq",
    "numerical": "numeric",
    "regression": "numeric",
    "ocr": "ocr",
    "free-form": "free-form",
    "math": "math",
}
MEDIA_TYPES = ("image", "video")


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    kind = str(column(row, cols, "kind") or "").strip().lower()
    options = choices_column(row, cols) or []
    media = as_list(column(row, cols, "media"))
    declared = column(row, cols, "media_type")
    media_type = str(declared or "image").strip().lower()
    if media_type not in MEDIA_TYPES:
        raise ValueError(f"field {cols['media_type']!r} is {declared!r}, not one of {', '.join(MEDIA_TYPES)}")
    video = media_type == "video"
    images, videos = ([], media) if video else (media, [])
    system, history = None, []
    if column(row, cols, "messages") is not None:  # verl's conversion: the messages are the prompt
        what, inline = f"column {cols['messages']!r}", Inline()
        system, history, text = split_chat(column(row, cols, "messages"), what, inline)
        images, videos = media_of(inline, images, videos, what)
    else:
        text = text_column(row, cols, "prompt")
        if options:
            text += "\nOptions:\n" + "\n".join(options)
    if declared is not None and not (videos if video else images):
        given = f"no {cols['media']!r}" if "media" in cols else "no media column"
        raise ValueError(f"field {cols['media_type']!r} is {declared!r} but the row gives no {media_type} ({given})")
    return Parts(
        text=text,
        answer=strip_answer_tag(column(row, cols, "answer")),
        images=images,
        videos=videos,
        kind=KINDS.get(kind, kind or None),
        choices=options or None,
        history=history,
        system=system,
        target=_target(row, cols),
    )


def _target(row: dict[str, Any], cols: dict[str, str]) -> str | None:
    """Video-R1's CoT rows: ``<think>process</think>`` + solution, the SFT text; None without a process."""
    process = column(row, cols, "reasoning")
    if not isinstance(process, str) or not process.strip():
        return None
    solution = column(row, cols, "answer")
    body = process if "<think>" in process else f"<think>{process}</think>"
    return f"{body}\n{solution}" if isinstance(solution, str) else None


FORMAT = register_format(
    Format(
        "videor1",
        ROLES,
        ("kind", "prompt", "answer"),
        to_parts,
        "Video-R1: problem_type / problem / options / solution / path / data_type",
        marks=("problem_type",),
    )
)
