"""Synthetic multi-domain items with numeric answers: counting, colour, chart reading, simple geometry.

Each item is one PNG and one row in the pack's data shape (see ``data.py``), with a short reasoning
trace that states what the image shows, so SFT has a thought to imitate (and TON a thought to drop).

    counting  (perception): "How many shapes are in the image?"            n shapes, 1..6
    colour    (perception): "How many red shapes are in the image?"         0..4 of one colour among others
    chart     (chart):      "What is the value of bar C?"                   3-5 labelled bars on a 0..9 grid
    geometry  (reasoning):  "... What is the area of the rectangle?"        w x h unit cells, 1..6 each

The same (n, seed, size, kinds) gives byte-identical files.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from mmreason.paths import generated_jsonl, write_jsonl

KINDS = ("counting", "colour", "chart", "geometry")
DOMAIN_OF_KIND = {"counting": "perception", "colour": "perception", "chart": "chart", "geometry": "reasoning"}
PALETTE = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (230, 200, 30)}
BACKGROUND = (250, 250, 250)


def _place(rng: random.Random, size: int, boxes: list[tuple[int, int, int, int]], r: int):
    """A free spot for a shape of radius r (no overlap with ``boxes``), or None after 200 tries."""
    for _ in range(200):
        cx, cy = rng.randint(r + 1, size - r - 2), rng.randint(r + 1, size - r - 2)
        box = (cx - r, cy - r, cx + r, cy + r)
        if all(box[2] + 2 < b[0] or b[2] + 2 < box[0] or box[3] + 2 < b[1] or b[3] + 2 < box[1] for b in boxes):
            return box
    return None


def _draw_shapes(draw, rng: random.Random, size: int, colours: list[str]) -> int:
    boxes: list[tuple[int, int, int, int]] = []
    for colour in colours:
        box = _place(rng, size, boxes, rng.randint(size // 14, size // 9))
        if box is None:
            break
        boxes.append(box)
        kind = rng.choice(("circle", "square", "triangle"))
        fill = PALETTE[colour]
        if kind == "circle":
            draw.ellipse(box, fill=fill)
        elif kind == "square":
            draw.rectangle(box, fill=fill)
        else:
            draw.polygon([((box[0] + box[2]) // 2, box[1]), (box[0], box[3]), (box[2], box[3])], fill=fill)
    return len(boxes)


def counting_item(draw, rng: random.Random, size: int) -> dict[str, Any]:
    colours = [rng.choice(sorted(PALETTE)) for _ in range(rng.randint(1, 6))]
    n = _draw_shapes(draw, rng, size, colours)
    return {
        "question": "How many shapes are in the image?",
        "answer": str(n),
        "trace": f"I count the shapes one by one: there are {n}.",
    }


def colour_item(draw, rng: random.Random, size: int) -> dict[str, Any]:
    target = rng.choice(sorted(PALETTE))
    others = [c for c in sorted(PALETTE) if c != target]
    k = rng.randint(0, 4)
    colours = [target] * k + [rng.choice(others) for _ in range(rng.randint(1, 6 - min(k, 5)))]
    rng.shuffle(colours)
    placed = _draw_shapes(draw, rng, size, colours)
    n = colours[:placed].count(target)
    return {
        "question": f"How many {target} shapes are in the image?",
        "answer": str(n),
        "trace": f"Of the {placed} shapes, {n} are {target}.",
    }


def chart_item(draw, rng: random.Random, size: int) -> dict[str, Any]:
    labels = "ABCDE"[: rng.randint(3, 5)]
    values = [rng.randint(1, 9) for _ in labels]
    left, bottom, top = size // 8, size - size // 8, size // 10
    unit = (bottom - top) / 9
    for v in range(10):  # grid lines at every unit so a value can be read off
        y = round(bottom - v * unit)
        draw.line((left, y, size - 2, y), fill=(215, 215, 215))
    draw.line((left, top, left, bottom), fill=(0, 0, 0))
    width = (size - left - 4) / len(labels)
    for k, (label, v) in enumerate(zip(labels, values)):
        x0 = round(left + 2 + k * width + width * 0.2)
        x1 = round(left + 2 + (k + 1) * width - width * 0.2)
        draw.rectangle((x0, round(bottom - v * unit), x1, bottom), fill=PALETTE[sorted(PALETTE)[k % 4]])
        draw.text((x0, bottom + 1), label, fill=(0, 0, 0))
    k = rng.randrange(len(labels))
    return {
        "question": f"What is the value of bar {labels[k]} in the chart?",
        "answer": str(values[k]),
        "trace": f"Bar {labels[k]} reaches the grid line {values[k]}.",
    }


def geometry_item(draw, rng: random.Random, size: int) -> dict[str, Any]:
    cells = 8
    step = (size - 8) / cells
    for i in range(cells + 1):  # the unit grid
        p = round(4 + i * step)
        draw.line((4, p, size - 4, p), fill=(200, 200, 200))
        draw.line((p, 4, p, size - 4), fill=(200, 200, 200))
    w, h = rng.randint(1, 6), rng.randint(1, 6)
    x, y = rng.randint(0, cells - w), rng.randint(0, cells - h)
    draw.rectangle(
        (round(4 + x * step), round(4 + y * step), round(4 + (x + w) * step), round(4 + (y + h) * step)),
        outline=(40, 80, 220),
        width=2,
    )
    return {
        "question": "Each grid cell is 1 by 1. What is the area of the blue rectangle?",
        "answer": str(w * h),
        "trace": f"The rectangle spans {w} cells by {h} cells, so its area is {w} x {h} = {w * h}.",
    }


ITEMS = {"counting": counting_item, "colour": colour_item, "chart": chart_item, "geometry": geometry_item}


def generate(
    out_dir: str | Path, n: int, seed: int = 0, size: int = 112, kinds: tuple[str, ...] | list[str] = KINDS
) -> Path:
    """Write ``n`` images (kinds in turn) and ``data.jsonl`` under ``out_dir``; returns the JSONL path."""
    from PIL import Image, ImageDraw

    unknown = [k for k in kinds if k not in ITEMS]
    if unknown or not kinds:
        raise ValueError(f"synthetic kinds {unknown or kinds!r}: valid kinds are {', '.join(KINDS)}")
    out = Path(out_dir)
    done = generated_jsonl(out, n)
    if done is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        img = Image.new("RGB", (size, size), BACKGROUND)
        item = ITEMS[kind](ImageDraw.Draw(img), rng, size)
        name = f"{i:05d}.png"
        img.save(out / name)
        rows.append(
            {
                "id": f"synth-{seed}-{i}",
                "image": name,
                **item,
                "answer_type": "numeric",
                "domain": DOMAIN_OF_KIND[kind],
                "kind": kind,
                "source": "synthetic",
            }
        )
    return write_jsonl(out / "data.jsonl", rows)
