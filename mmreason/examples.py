"""`mmreason data examples --out DIR [--layouts NAME,...] [--rows N] [--force]`: a few rows in every published
layout a pack reads, with pictures and clips drawn here (nothing downloaded), so the docs' commands run as
written. A file already under ``DIR`` with the name of one it would write stops it before anything is written
(``--force`` replaces them).

A pack offers its layouts in ``tasks/<pack>/examples.py``: ``LAYOUTS = {name: write}``, where
``write(out, scenes)`` writes the layout's files under ``out`` (at the paths the benchmark or tool publishes them)
and returns the main one. The engine finds those modules by name, never by import (tests/test_layering.py).

Every picture is a ``Scene`` whose answers are drawn in it: ``count`` shapes of one ``colour`` on white, so the
colour, the count or the colour's option letter is checkable and a tiny run's reward means something.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from mmreason.media.video_write import write_mp4
from mmreason.registry import pack_modules

COLOURS = {"red": (220, 40, 40), "green": (40, 160, 60), "blue": (40, 80, 220), "yellow": (230, 190, 20)}
SHAPES = ("square", "circle", "triangle")
LETTERS = "ABCD"
MAX_COUNT = 3


@dataclass(frozen=True)
class Scene:
    """``count`` shapes of one ``colour`` on white: the picture, and the answers it shows."""

    colour: str
    shape: str
    count: int

    @property
    def name(self) -> str:
        """A file stem naming what is drawn (the same scene, the same file)."""
        return f"{self.colour}_{self.shape}_{self.count}"

    @property
    def letter(self) -> str:
        """The colour's letter among ``colour_options()``."""
        return LETTERS[list(COLOURS).index(self.colour)]


def colour_options() -> list[str]:
    """The colours in option order (A red, B green, C blue, D yellow)."""
    return list(COLOURS)


def scenes(rows: int, seed: int = 0) -> list[Scene]:
    """``rows`` scenes drawn with ``seed`` (which orders the colours, shapes and counts): the even rows alone, and
    the odd ones alone, show every colour and every count when ``rows`` allows (layouts ask one on each)."""
    rng = random.Random(seed)
    colours, shapes, counts = list(COLOURS), list(SHAPES), list(range(1, MAX_COUNT + 1))
    for order in (colours, shapes, counts):
        rng.shuffle(order)
    return [
        Scene(colours[k // 2 % len(colours)], shapes[(k // 4 + k) % len(shapes)], counts[k % len(counts)])
        for k in range(rows)
    ]


def draw(scene: Scene, size: int = 64, *, shift: int = 0) -> Image.Image:
    """The scene as an RGB picture ``size`` px square; ``shift`` moves every shape right (a clip's frames)."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    pen = ImageDraw.Draw(image)
    cell = size // scene.count
    side = max(4, int(cell * 0.6))
    for k in range(scene.count):
        x0 = k * cell + (cell - side) // 2 + shift
        y0 = (size - side) // 2
        box = (x0, y0, x0 + side - 1, y0 + side - 1)
        fill = COLOURS[scene.colour]
        if scene.shape == "square":
            pen.rectangle(box, fill=fill)
        elif scene.shape == "circle":
            pen.ellipse(box, fill=fill)
        else:
            pen.polygon([(x0 + side // 2, y0), (x0, y0 + side - 1), (x0 + side - 1, y0 + side - 1)], fill=fill)
    return image


def png(scene: Scene, size: int = 64) -> bytes:
    """The scene's picture as PNG bytes."""
    out = io.BytesIO()
    draw(scene, size).save(out, format="PNG")
    return out.getvalue()


def write_png(folder: Path, scene: Scene, size: int = 64) -> Path:
    """``folder/<scene>.png``; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{scene.name}.png"
    path.write_bytes(png(scene, size))
    return path


def write_clip(path: Path, scene: Scene, *, frames: int = 8, size: int = 32, fps: int = 4) -> Path:
    """A short mp4 of the scene, its shapes moving right a pixel every second frame."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_mp4(path, (np.asarray(draw(scene, size, shift=k // 2)) for k in range(frames)), fps=fps)


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as one parquet file (nested values as Arrow structs and lists, bytes as binary)."""
    import pyarrow as pa  # heavy: only the parquet layouts need it
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_json(path: Path, data: Any) -> Path:
    """``data`` as one JSON document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path


Writer = Callable[[Path, list[Scene]], Path]


def layouts() -> dict[str, Writer]:
    """Every pack's example layouts, by name."""
    out: dict[str, Writer] = {}
    for pack, module in sorted(pack_modules("examples").items()):
        for name, write in importlib.import_module(module).LAYOUTS.items():
            if name in out:
                raise ValueError(f"example layout {name!r} is offered twice (again by tasks/{pack}/examples.py)")
            out[name] = write
    return out


def write_examples(
    out: str | Path, names: list[str] | None = None, *, rows: int = 8, seed: int = 0, force: bool = False
) -> dict[str, Path]:
    """Write the ``names`` layouts (default: all) with ``rows`` rows each under ``out``; name -> main path.

    Every file is written to a hidden folder inside ``out`` first and moved into place only when none of them
    would replace a file already there (``force``: replace them): ``--out data`` must not overwrite the user's
    own ``data/train.jsonl``."""
    known = layouts()
    unknown = [n for n in names or [] if n not in known]
    if unknown:
        raise ValueError(f"--layouts: no layout {', '.join(map(repr, unknown))}; layouts: {', '.join(known)}")
    if rows < 1:
        raise ValueError(f"--rows {rows}: at least 1")
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".examples-", dir=out))
    except OSError as err:
        raise ValueError(f"--out {str(out)!r}: cannot write there ({err.strerror or type(err).__name__})") from None
    try:
        drawn = scenes(rows, seed)
        written = {name: known[name](staging, drawn) for name in names or known}
        files = sorted(p.relative_to(staging) for p in staging.rglob("*") if p.is_file())
        taken = [f for f in files if (out / f).exists() or (out / f).is_symlink()]
        if taken and not force:
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            raise ValueError(
                f"--out {str(out)!r}: {str(out / taken[0])!r} already exists{more}; nothing was written "
                "(choose another --out, or add --force to replace them)"
            )
        for f in files:
            (out / f).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / f, out / f)
        return {name: out / path.relative_to(staging) for name, path in written.items()}
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the folder the layouts' files go under (their own paths)")
    parser.add_argument(
        "--layouts",
        default=None,
        help="comma-separated layout names (default: all; an unknown name lists them)",
    )
    parser.add_argument("--rows", type=int, default=8, help="rows per layout")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--force", action="store_true", help="replace files of the same names already under --out")


def run(args: argparse.Namespace) -> int:
    names = [n.strip() for n in args.layouts.split(",") if n.strip()] if args.layouts else None
    written = write_examples(args.out, names, rows=args.rows, seed=args.seed, force=args.force)
    for name, path in written.items():
        print(f"{name}: {path}")
    return 0
