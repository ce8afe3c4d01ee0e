"""A small hand-made knowledge base (no optional packages) for the mrag tests."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from mmreason.tasks.mrag.kb import default_index_dir, write_index
from mmreason.tasks.mrag.sources import TABLES, Item


def small_items(folder: Path) -> list[Item]:
    image = folder / "cat.png"
    Image.new("RGB", (56, 56), "orange").save(image)
    words = " ".join(f"filler{k}" for k in range(300))
    return [
        Item("text:Argon:0", "text", "Argon", "Argon was discovered by Lord Rayleigh and William Ramsay in 1894."),
        Item("text:Alaska:0", "text", "Alaska", "Alaska became the 49th state of the United States in 1959."),
        Item("text:Long:0", "text", "Long", f"A long passage about argon {words}"),
        Item(
            "text:Aristotle:0", "text", "Aristotle", "Aristotle was a Greek philosopher and scientist born in Stagira."
        ),
        Item(
            "text:Anarchism:0",
            "text",
            "Anarchism",
            "Anarchism is a political philosophy that advocates self-governed societies.",
        ),
        Item(
            "table:wheat:0", "table", "Wheat", "Table Wheat\nyear | wheat | wages\n1600 | 27 | 5.61\n1605 | 33 | 5.69"
        ),
        Item("image:cat", "image", "chelsea", "Chelsea the cat, a tabby cat.", image=str(image)),
        Item("row:wheat:0", "row", TABLES["wheat"], "", fields={"year": "1600", "wheat": "27", "wages": "5.61"}),
        Item("row:wheat:1", "row", TABLES["wheat"], "", fields={"year": "1605", "wheat": "33", "wages": "5.69"}),
    ]


def small_index(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write_index(folder / "index", small_items(folder))


def small_default_index(cache: Path, monkeypatch) -> Path:
    """The small index as the default one: ``$MMREASON_CACHE`` points at ``cache``."""
    monkeypatch.setenv("MMREASON_CACHE", str(cache))
    cache.mkdir(parents=True, exist_ok=True)
    folder = default_index_dir()
    write_index(folder, small_items(cache))
    return folder
