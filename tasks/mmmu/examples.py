"""MMMU's example layout (``mmreason data examples --layouts mmmu``): one folder per subject of
``MMMU/<Subject>/validation-00000-of-00001.parquet`` with the Hugging Face columns (``image_1`` .. ``image_7``
as ``{"bytes", "path"}`` structs, ``options`` as the text of a Python list); ``Art``: multiple-choice questions on
the shapes' colour (the answer a letter), ``Math``: open questions on their count. ``mmmu_pro``: MMMU-Pro's vision
setting, ``MMMU_Pro/vision/test-00000-of-00001.parquet`` (``id``, ``image``: the question as a screenshot,
``options``, ``answer``, ``subject``)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from mmreason.examples import Scene, colour_options, draw, png, write_parquet

IMAGES = 7


def _row(scene: Scene, k: int, subject: str) -> dict[str, Any]:
    row: dict[str, Any] = {f"image_{n}": None for n in range(1, IMAGES + 1)}
    row |= {"id": f"validation_{subject}_{k + 1}", "explanation": "", "img_type": "['Diagrams']"}
    row |= {"image_1": {"bytes": png(scene), "path": f"{scene.name}.png"}, "topic_difficulty": "Easy"}
    if subject == "Art":
        return row | {
            "question": "<image 1> What colour are the shapes?",
            "options": str(colour_options()),
            "answer": scene.letter,
            "question_type": "multiple-choice",
            "subfield": "Colour",
        }
    return row | {
        "question": "<image 1> How many shapes are there?",
        "options": "[]",
        "answer": str(scene.count),
        "question_type": "open",
        "subfield": "Counting",
    }


def mmmu(out: Path, drawn: list[Scene]) -> Path:
    folder = out / "MMMU"
    for subject, parity in (("Art", 0), ("Math", 1)):
        rows = [_row(scene, k, subject) for k, scene in enumerate(drawn) if k % 2 == parity]
        if rows:
            write_parquet(folder / subject / "validation-00000-of-00001.parquet", rows)
    return folder


def screenshot(scene: Scene) -> bytes:
    """MMMU-Pro's vision setting: the question, its options and the picture in one image (PNG bytes)."""
    image = Image.new("RGB", (200, 112), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    pen.text((4, 2), "What colour are the shapes?", fill=(0, 0, 0))
    for k, colour in enumerate(colour_options()):
        pen.text((136, 24 + 14 * k), f"{'ABCD'[k]}. {colour}", fill=(0, 0, 0))
    image.paste(draw(scene), (4, 24))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def mmmu_pro(out: Path, drawn: list[Scene]) -> Path:
    rows = [
        {
            "id": f"test_Art_{k + 1}",
            "image": {"bytes": screenshot(scene), "path": f"{scene.name}.png"},
            "options": str(colour_options()),
            "answer": scene.letter,
            "subject": "Art",
        }
        for k, scene in enumerate(drawn)
    ]
    return write_parquet(out / "MMMU_Pro" / "vision" / "test-00000-of-00001.parquet", rows)


LAYOUTS = {"mmmu": mmmu, "mmmu_pro": mmmu_pro}
