"""ChartQA's example layout (``mmreason data examples --layouts chartqa``): the repository's
``ChartQA Dataset/test/test_human.json`` and ``test_augmented.json`` (``{"imgname", "query", "label"}``) with
bar charts drawn in ``test/png/``: the human rows ask the bars' colour, the augmented ones how many bars."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from mmreason.examples import COLOURS, Scene, write_json


def bar_chart(scene: Scene, size: int = 64) -> Image.Image:
    """``scene.count + 1`` bars of the scene's colour, of rising heights, on an axis."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    bars = scene.count + 1
    width = (size - 8) // bars
    for k in range(bars):
        top = size - 6 - (k + 1) * (size - 16) // bars
        pen.rectangle((6 + k * width + 2, top, 6 + (k + 1) * width - 2, size - 6), fill=COLOURS[scene.colour])
    pen.line((4, size - 5, size - 2, size - 5), fill=(0, 0, 0))
    return image


def chartqa(out: Path, drawn: list[Scene]) -> Path:
    test = out / "ChartQA Dataset" / "test"
    (test / "png").mkdir(parents=True, exist_ok=True)
    human, augmented = [], []
    for k, scene in enumerate(drawn):
        name = f"{k}.png"
        bar_chart(scene).save(test / "png" / name)
        if k % 2 == 0:
            human.append({"imgname": name, "query": "What colour are the bars?", "label": scene.colour})
        else:
            augmented.append({"imgname": name, "query": "How many bars are there?", "label": str(scene.count + 1)})
    write_json(test / "test_human.json", human)
    write_json(test / "test_augmented.json", augmented)
    return test


LAYOUTS = {"chartqa": chartqa}
