"""Video-R1's rows: ``problem_type`` (multiple choice / numerical / OCR / free-form / regression), ``problem``,
``options``, ``solution`` (``<answer>...</answer>``), ``path`` (the image or video), ``data_type`` (image / video).

The user text is the problem, then the options one per line (as Video-R1 builds its prompts)."""

from __future__ import annotations

from typing import Any

from mmreason.tasks.generic.formats import Format, Parts, register_format
from mmreason.tasks.generic.formats.common import as_list, column, strip_answer_tag

ROLES = {
    "prompt": ("problem",),
    "answer": ("solution",),
    "kind": ("problem_type",),
    "media": ("path",),
    "media_type": ("data_type",),
    "choices": ("options",),
    "reasoning": ("process",),
}
KINDS = {
    "multiple choice": "mcq",
    "numerical": "numeric",
    "regression": "numeric",
    "ocr": "ocr",
    "free-form": "free-form",
    "math": "math",
}


def to_parts(row: dict[str, Any], cols: dict[str, str]) -> Parts:
    kind = str(column(row, cols, "kind") or "").strip().lower()
    options = [str(o) for o in as_list(column(row, cols, "choices"))]
    text = str(column(row, cols, "prompt") or "")
    if options:
        text += "\nOptions:\n" + "\n".join(options)
    media = as_list(column(row, cols, "media"))
    video = str(column(row, cols, "media_type") or "image").strip().lower() == "video"
    return Parts(
        text=text,
        answer=strip_answer_tag(column(row, cols, "answer")),
        images=[] if video else media,
        videos=media if video else [],
        kind=KINDS.get(kind, kind or None),
        choices=options or None,
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
