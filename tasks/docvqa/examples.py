"""DocVQA's example layout (``mmreason data examples --layouts docvqa``): the RRC annotation
``DocVQA/val/val_v1.0.json`` (``{"dataset_name", "dataset_split", "data": [{"questionId", "question",
"question_types", "image", "docId", "answers"}]}``) with pages drawn in ``documents/``: a coloured banner over
grey text lines; the question asks the banner's colour."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from mmreason.examples import COLOURS, Scene, write_json


def page(scene: Scene, width: int = 64, height: int = 84) -> Image.Image:
    """A page: a banner of the scene's colour, then ``scene.count + 2`` grey lines of text."""
    image = Image.new("RGB", (width, height), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    pen.rectangle((4, 4, width - 5, 16), fill=COLOURS[scene.colour])
    for k in range(scene.count + 2):
        y = 24 + 10 * k
        pen.rectangle((6, y, width - 6 - 8 * (k % 3), y + 3), fill=(150, 150, 150))
    return image


def docvqa(out: Path, drawn: list[Scene]) -> Path:
    val = out / "DocVQA" / "val"
    (val / "documents").mkdir(parents=True, exist_ok=True)
    rows = []
    for k, scene in enumerate(drawn):
        name = f"documents/doc_{k}.png"
        page(scene).save(val / name)
        rows.append(
            {
                "questionId": 1000 + k,
                "question": "What colour is the banner at the top of the page?",
                "question_types": ["layout"],
                "image": name,
                "docId": k,
                "answers": [scene.colour, f"{scene.colour} banner"],
            }
        )
    return write_json(val / "val_v1.0.json", {"dataset_name": "docvqa", "dataset_split": "val", "data": rows})


LAYOUTS = {"docvqa": docvqa}
