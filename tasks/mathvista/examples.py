"""MathVista's example layout (``mmreason data examples --layouts mathvista``): the repository's
``MathVista/data/testmini.json`` (an object keyed by pid) and ``images/{pid}.png``; even rows a multi_choice
question on the shapes' colour, odd rows a free_form integer question on their count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmreason.examples import Scene, colour_options, png, write_json


def _metadata(task: str, skills: list[str]) -> dict[str, Any]:
    return {
        "split": "testmini",
        "language": "english",
        "img_width": 64,
        "img_height": 64,
        "source": "mmreason examples",
        "category": "general-vqa",
        "task": task,
        "context": "synthetic scene",
        "grade": "elementary school",
        "skills": skills,
    }


def _row(pid: str, scene: Scene, k: int) -> dict[str, Any]:
    row = {"image": f"images/{pid}.png", "unit": None, "precision": None, "pid": pid}
    if k % 2 == 0:
        return row | {
            "question": "What colour are the shapes?",
            "choices": colour_options(),
            "answer": scene.colour,
            "question_type": "multi_choice",
            "answer_type": "text",
            "metadata": _metadata("visual question answering", ["numeric commonsense"]),
        }
    return row | {
        "question": "How many shapes are there?",
        "choices": None,
        "answer": str(scene.count),
        "question_type": "free_form",
        "answer_type": "integer",
        "metadata": _metadata("figure question answering", ["arithmetic reasoning"]),
    }


def mathvista(out: Path, drawn: list[Scene]) -> Path:
    data = out / "MathVista" / "data"
    (data / "images").mkdir(parents=True, exist_ok=True)
    rows = {}
    for k, scene in enumerate(drawn):
        pid = str(k + 1)
        (data / "images" / f"{pid}.png").write_bytes(png(scene))
        rows[pid] = _row(pid, scene, k)
    return write_json(data / "testmini.json", rows)


LAYOUTS = {"mathvista": mathvista}
