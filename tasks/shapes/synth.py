"""The shapes pack's generator: one shape per image in one of four colours, drawn deterministically.

Row shape it writes (``data.jsonl`` beside the images): {"id": str, "image": path, "question": str, "answer": str,
"shape": str}.
"""

from __future__ import annotations

import random
from pathlib import Path

from mmreason.paths import generated_jsonl, write_jsonl

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 220), "yellow": (235, 200, 20)}
SHAPES = ("circle", "square", "triangle")
QUESTION = "What colour is the shape? Answer with one word."


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
