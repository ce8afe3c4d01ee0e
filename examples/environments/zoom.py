"""A zoom tool over each row's image ("thinking with images", as DeepEyes trains it), written as a user writes
an environment: one file, one class, one tool. docs/extending.md "Write an environment" walks through it.

Attach it to any task with an image per row, here the generic pack (your own rows)::

    python examples/environments/zoom.py data runs/zoom-data          # 96 train + 32 held-out rows
    mmreason train configs/generic/zoom_grpo_tiny.yaml                 # the recipe names this file

The model sees the tool's schema in its system turn (the chat template's ``tools=``), writes
``<tool_call>{"name": "zoom", "arguments": {"box": [x0, y0, x1, y1]}}</tool_call>`` (fractions of the width and
height), and the next turn shows it the crop, enlarged to ``zoom_pixels`` (the engine fits it to the run's
``data.max_pixels``). Two rewards sit in the same file: ``zoom_iou``, the IoU of the model's last zoom box with the
row's ``box`` column (grounding), and ``zoom_used``, 1 when a zoom ran (a well-formed call the tool accepted).

``data`` writes the demo rows: a 224 x 224 grey canvas with a 12 px square of one of four colours somewhere
(the question asks its colour; at the tiny recipe's 112 x 112 prompt budget the square is 6 px), in EasyR1's
columns, with ``process`` holding a zoom-then-answer trajectory for the SFT warm-up.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path

from mmreason.media import load_image
from mmreason.rewarding import per_sample
from mmreason.rollout.tool_env import ToolEnvironment
from mmreason.rollout.tools import ToolError, ToolOutput, tool

BOX = {
    "type": "array",
    "items": {"type": "number", "minimum": 0, "maximum": 1},
    "minItems": 4,
    "maxItems": 4,
    "description": "[x0, y0, x1, y1] as fractions of the image's width and height (0 to 1)",
}


class ZoomEnvironment(ToolEnvironment):
    """One tool, ``zoom(box)``: the crop of the row's first image inside ``box``, enlarged."""

    def __init__(self, zoom_pixels: int = 112 * 112, max_calls: int = 2):
        if zoom_pixels < 28 * 28 or max_calls < 1:
            raise ValueError(f"zoom_pixels {zoom_pixels} must be >= 784 and max_calls {max_calls} >= 1")
        self.zoom_pixels = zoom_pixels
        self.max_tool_calls = max_calls  # then the model must answer (ToolEnvironment's budget)

    def setup(self, sample):
        if not sample.images:
            raise ValueError(f"sample {sample.id!r} has no image to zoom into")
        self.image = load_image(sample.images[0])  # full resolution: the prompt showed a smaller copy

    @tool(parameters={"type": "object", "properties": {"box": BOX}, "required": ["box"]})
    def zoom(self, box):
        """Zoom into a region of the image: box = [x0, y0, x1, y1], fractions of its width and height."""
        x0, y0, x1, y1 = box
        if not (x0 < x1 and y0 < y1):
            raise ToolError("box needs x0 < x1 and y0 < y1")
        w, h = self.image.size
        crop = self.image.crop((round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h)))
        if min(crop.size) < 4:
            raise ToolError(f"the box is {crop.width} x {crop.height} px of the image; zoom into at least 4 x 4")
        scale = (self.zoom_pixels / (crop.width * crop.height)) ** 0.5
        shown = crop.resize((max(28, round(crop.width * scale)), max(28, round(crop.height * scale))))
        return ToolOutput(text=f"zoom [{x0:.2f}, {y0:.2f}, {x1:.2f}, {y1:.2f}]", images=[shown])


@per_sample
def zoom_iou(sample, trajectory) -> float:
    """IoU of the last zoom box that ran with the row's ``box`` column (0 without a zoom or a box)."""
    target = sample.meta.get("box")
    boxes = [c["arguments"]["box"] for c in trajectory.tool_calls if c.get("name") == "zoom" and "error" not in c]
    if not boxes or not isinstance(target, list) or len(target) != 4:
        return 0.0
    return _iou([float(v) for v in boxes[-1]], [float(v) for v in target])


@per_sample
def zoom_used(sample, trajectory) -> float:
    """1 if a zoom call ran in the episode (a well-formed call with a box the tool accepted), else 0."""
    return float(any(c.get("name") == "zoom" and "error" not in c for c in trajectory.tool_calls))


def _iou(a: list[float], b: list[float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# ---- the demo rows -------------------------------------------------------------------------------------------

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 60, 220), "yellow": (230, 200, 20)}
QUESTION = "<image>What colour is the small square? Answer with one word."


def write_rows(out: Path, n_train: int = 96, n_eval: int = 32, seed: int = 0, size: int = 224, side: int = 12):
    """``out/train.jsonl`` and ``out/eval.jsonl`` (EasyR1 rows) with their images under ``out/images``."""
    from PIL import Image

    rng = random.Random(seed)
    (out / "images").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("eval", n_eval)):
        rows = []
        for k in range(n):
            colour = rng.choice(sorted(COLOURS))
            x, y = rng.randrange(8, size - side - 8), rng.randrange(8, size - side - 8)
            image = Image.new("RGB", (size, size), (128, 128, 128))
            image.paste(COLOURS[colour], (x, y, x + side, y + side))
            name = f"images/{split}-{k}.png"
            image.save(out / name)
            # the square's box widened to tenths (one decimal: fewer tokens for a small model to get right)
            box = [math.floor(x / size * 10) / 10, math.floor(y / size * 10) / 10]
            box += [math.ceil((x + side) / size * 10) / 10, math.ceil((y + side) / size * 10) / 10]
            call = json.dumps({"name": "zoom", "arguments": {"box": box}})
            process = (
                f"The square is small.</think>\n<tool_call>\n{call}\n</tool_call>\n<think>Zoomed in, it is {colour}."
            )
            rows.append({"problem": QUESTION, "answer": colour, "images": [name], "box": box, "process": process})
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    data = sub.add_parser("data", help="write the demo rows (train.jsonl, eval.jsonl, images/)")
    data.add_argument("out", type=Path)
    data.add_argument("--train", type=int, default=96)
    data.add_argument("--eval", type=int, default=32)
    data.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_rows(args.out, args.train, args.eval, args.seed)
    print(f"wrote {args.out}/train.jsonl ({args.train} rows) and {args.out}/eval.jsonl ({args.eval} rows)")


if __name__ == "__main__":
    main()
