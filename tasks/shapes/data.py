"""Data of the shapes pack: a deterministic generator and a JSONL loader in the same shape.

Row shape (JSONL): {"id": str, "image": path, "question": str, "answer": str, "shape": str}.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from mmreason.paths import cache_dir, generated_jsonl, write_jsonl
from mmreason.rewards.textmatch import vqa_normalize
from mmreason.rows import read_rows
from mmreason.types import Sample

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 220), "yellow": (235, 200, 20)}
SHAPES = ("circle", "square", "triangle")
QUESTION = "What colour is the shape? Answer with one word."
TRAIN_SIZE, EVAL_SIZE = 256, 64
DATA_VERSION = 3  # in the cache folder name: bump when the generator draws different images


def default_cache() -> Path:
    return cache_dir("shapes")


Draw = tuple[str, str, int, int, int]  # colour, shape, radius, centre x, centre y


def draws(n: int, seed: int, size: int = 56, avoid: frozenset[Draw] = frozenset()) -> list[Draw]:
    """``n`` distinct image parameters, none of them in ``avoid``; the same arguments give the same list."""
    rng = random.Random(seed)
    seen, out = set(avoid), []
    while len(out) < n:
        colour, shape = rng.choice(sorted(COLOURS)), rng.choice(SHAPES)
        r = rng.randint(size // 4, size // 2 - 2)
        d = (colour, shape, r, rng.randint(r, size - r), rng.randint(r, size - r))
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


def generate(out_dir: str | Path, n: int, seed: int = 0, size: int = 56, avoid: frozenset[Draw] = frozenset()) -> Path:
    """Write ``n`` distinct images (none drawn as in ``avoid``) and ``data.jsonl``; the same arguments give
    the same files."""
    from PIL import Image, ImageDraw

    out = Path(out_dir)
    done = generated_jsonl(out, n)
    if done is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (colour, shape, r, cx, cy) in enumerate(draws(n, seed, size, avoid)):
        img = Image.new("RGB", (size, size), (245, 245, 245))
        draw = ImageDraw.Draw(img)
        box = (cx - r, cy - r, cx + r, cy + r)
        if shape == "circle":
            draw.ellipse(box, fill=COLOURS[colour])
        elif shape == "square":
            draw.rectangle(box, fill=COLOURS[colour])
        else:
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=COLOURS[colour])
        path = out / f"{i:05d}.png"
        img.save(path)
        rows.append({"id": f"shapes-{i}", "image": str(path), "question": QUESTION, "answer": colour, "shape": shape})
    return write_jsonl(out / "data.jsonl", rows)


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


def shapes_metric_accuracy(sample: Sample, completion: str) -> float:
    """1 if the whole answer, VQA-normalised, is the colour (as the ``vqa_exact`` reward scores it)."""
    return float(vqa_normalize(completion) == vqa_normalize(str(sample.answer)))
