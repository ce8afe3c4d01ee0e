"""A small hand-made knowledge base (no optional packages) for the mrag tests."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from mmreason.tasks.mrag.kb import write_index
from mmreason.tasks.mrag.sources import Item


def small_items(folder: Path) -> list[Item]:
    image = folder / "cat.png"
    Image.new("RGB", (56, 56), "orange").save(image)
    words = " ".join(f"filler{k}" for k in range(300))
    return [
        Item("text:Argon:0", "text", "Argon", "Argon was discovered by Lord Rayleigh and William Ramsay in 1894."),
        Item("text:Alaska:0", "text", "Alaska", "Alaska became the 49th state of the United States in 1959."),
        Item("text:Long:0", "text", "Long", f"A long passage about argon {words}"),
        Item("table:wheat:0", "table", "Wheat", "Table Wheat\nyear | wheat | wages\n1600 | 27 | 5.61"),
        Item("image:cat", "image", "chelsea", "Chelsea the cat, a tabby cat.", image=str(image)),
    ]


def small_index(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_index(folder / "index", small_items(folder))
