"""Data of the shapes pack: a JSONL loader, and the generated set (``synth.py``) when no file is given.

Row shape (JSONL): {"id": str, "image": path, "question": str, "answer": str, "shape": str}.
"""

from __future__ import annotations

import os
from pathlib import Path

from mmreason.paths import cache_dir
from mmreason.rows import read_rows
from mmreason.tasks.shapes.synth import draws, generate
from mmreason.types import Sample

TRAIN_SIZE, EVAL_SIZE = 256, 64
DATA_VERSION = 3  # in the cache folder name: bump when the generator draws different images


def default_cache() -> Path:
    return cache_dir("shapes")


def row_to_sample(row: dict, source: str) -> Sample:
    for key in ("id", "image", "question", "answer"):
        if key not in row:
            raise ValueError(f"{source}: row {row.get('id', '?')!r} has no {key!r} column")
    image = row["image"]
    if isinstance(image, str) and not os.path.isabs(image):
        image = str(Path(source).parent / image)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": row["question"]}]}]
    meta = {k: v for k, v in row.items() if k not in ("id", "image", "question", "answer")}
    return Sample(id=str(row["id"]), messages=messages, answer=row["answer"], images=[image], meta=meta, task="shapes")


def shapes_load(path: str | None = None, split: str = "train", n: int | None = None, seed: int = 0) -> list[Sample]:
    """The pack's data: ``path`` (JSONL/parquet in the row shape above) or the generated set."""
    if path is None:
        count = n or (TRAIN_SIZE if split == "train" else EVAL_SIZE)
        if split == "train":
            path = str(generate(default_cache() / f"v{DATA_VERSION}-train-{count}-{seed}", count, seed))
        else:  # held out: never an image of the default training set
            avoid = frozenset(draws(TRAIN_SIZE, seed))
            folder = default_cache() / f"v{DATA_VERSION}-{split}-{count}-{seed + 10_000}"
            path = str(generate(folder, count, seed + 10_000, avoid=avoid))
    rows = read_rows(path, "shapes")  # values as written
    samples = [row_to_sample(row, str(path)) for row in rows]
    return samples[:n] if n else samples
