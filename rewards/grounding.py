"""Visual grounding: IoU of the boxes the model draws with the gold boxes, in the original image's pixels.

Qwen2.5-VL answers in absolute pixel coordinates of the image *the processor fed it*, which
``smart_resize`` scaled so both sides are multiples of 28 within the pixel limits; Qwen2-VL answers on a
0-1000 grid. Gold boxes are in the original image's pixels. This reward maps the predicted boxes back
to the original image before comparing, so a correct box is scored correct whatever resize happened:

    x_orig = x * W / W_resized,  y_orig = y * H / H_resized   (coords="resized", the default)
"""

from __future__ import annotations

import math
import re
from typing import Any

from mmreason.media import image_size
from mmreason.media.budget import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, smart_resize
from mmreason.parsing import clip, last_tag_body, squeeze_space
from mmreason.rewarding import column, per_sample, reward

Box = tuple[float, float, float, float]
_NUM = r"-?\d+(?:\.\d+)?"
_LIST_BOX = re.compile(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*,\s*({_NUM})\s*\]")
_QWEN2_BOX = re.compile(rf"\(\s*({_NUM})\s*,\s*({_NUM})\s*\)\s*,?\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)")
COORDS = ("resized", "original", "norm1000", "norm1")


def box_iou(a: Box, b: Box) -> float:
    """IoU of two [x1, y1, x2, y2] boxes; a box with x2 <= x1 or y2 <= y1 has area 0."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


def parse_boxes(text: str, limit: int = 32) -> list[Box]:
    """Boxes written in the answer: ``[x1, y1, x2, y2]`` lists (Qwen2.5-VL's ``{"bbox_2d": [...]}`` JSON
    included) or Qwen2-VL's ``(x1,y1),(x2,y2)``. Reads the last ``<answer>`` body, else the completion."""
    text = clip(text, 20_000)
    region = squeeze_space(last_tag_body(text, "answer") or text)  # the box patterns chain \s* runs
    found = [(m.start(), m.groups()) for m in _LIST_BOX.finditer(region)]
    found += [(m.start(), m.groups()) for m in _QWEN2_BOX.finditer(region)]
    found.sort(key=lambda item: item[0])
    boxes = [tuple(float(v) for v in groups) for _, groups in found[:limit]]
    return [b for b in boxes if all(math.isfinite(v) for v in b)]  # type: ignore[misc]


def gold_boxes(value: Any) -> list[Box]:
    """The ``gt_boxes`` column: one [x1, y1, x2, y2] or a list of them."""
    if not isinstance(value, (list, tuple)) or not value:
        return []
    boxes = [value] if not isinstance(value[0], (list, tuple)) else value
    out = []
    for box in boxes:
        if isinstance(box, (list, tuple)) and len(box) == 4:
            try:
                out.append(tuple(float(v) for v in box))
            except (TypeError, ValueError):
                continue
    return out  # type: ignore[return-value]


def _size(value: Any) -> tuple[int, int] | None:
    if isinstance(value, dict):
        value = (value.get("height"), value.get("width"))
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
        return int(value[0]), int(value[1])
    return None


def original_size(sample: Any, image_index: int = 0) -> tuple[int, int] | None:
    """(height, width) of the original image: the ``image_size`` column, else the image file's header."""
    size = _size(column(sample, "image_size"))
    if size is None and len(sample.images) > image_index:
        size = image_size(sample.images[image_index])
    return size


def resized_size(height: int, width: int, factor: int, min_pixels: int | None, max_pixels: int | None):
    """(height, width) the Qwen2-VL processor feeds the model (``mmreason.media.smart_resize``)."""

    return smart_resize(height, width, factor, min_pixels or IMAGE_MIN_PIXELS, max_pixels or IMAGE_MAX_PIXELS)


def to_original(box: Box, coords: str, size: tuple[int, int] | None, fed: tuple[int, int] | None) -> Box:
    """Map one predicted box into original-image pixels."""
    x1, y1, x2, y2 = box
    if coords == "original":
        return box
    if size is None:
        raise ValueError(f"coords={coords!r} needs the original image size (column image_size, or an image)")
    height, width = size
    if coords == "norm1000":
        sx, sy = width / 1000.0, height / 1000.0
    elif coords == "norm1":
        sx, sy = float(width), float(height)
    else:
        assert fed is not None
        sx, sy = width / fed[1], height / fed[0]
    return (x1 * sx, y1 * sy, x2 * sx, y2 * sy)


def match_score(pred: list[Box], gold: list[Box], threshold: float | None = None) -> float:
    """Greedy one-to-one matching by IoU; sum of matched IoUs (or of hits >= threshold) / max(|P|, |G|).

    One box each: plain IoU. Extra or missing boxes lower the score.
    """
    if not pred or not gold:
        return 0.0
    pairs = sorted(((box_iou(p, g), i, j) for i, p in enumerate(pred) for j, g in enumerate(gold)), reverse=True)
    used_p, used_g, total = set(), set(), 0.0
    for iou, i, j in pairs:
        if iou <= 0 or i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        total += iou if threshold is None else float(iou >= threshold)
    return total / max(len(pred), len(gold))


@reward("bbox_iou")
@per_sample
def bbox_iou(
    sample,
    trajectory,
    *,
    coords: str = "resized",
    threshold: float | None = None,
    factor: int = 28,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    image_index: int = 0,
):
    """IoU of predicted boxes with gt_boxes in original-image pixels (maps from the resized image Qwen saw).

    Columns: ``gt_boxes`` ([x1, y1, x2, y2] original pixels, or a list), ``image_size`` ([height, width]
    of the original; else read from ``Sample.images[image_index]``), ``resized_size`` ([height, width]
    the processor fed; else ``smart_resize`` with ``factor`` / ``min_pixels`` / ``max_pixels``, default
    the processor's 56*56 .. 28*28*1280). kwargs: ``coords`` "resized" (Qwen2.5-VL), "norm1000"
    (Qwen2-VL), "norm1", "original"; ``threshold``: count a box as 1 when IoU >= threshold.
    Several boxes: greedy matching, see ``match_score``. None without gold boxes; 0 without a box.
    """
    if coords not in COORDS:
        raise ValueError(f"coords must be one of {COORDS}, got {coords!r}")
    gold = gold_boxes(column(sample, "gt_boxes"))
    if not gold:
        return None
    pred = parse_boxes(trajectory.completion_text)
    if not pred:
        return 0.0
    size = original_size(sample, image_index) if coords != "original" else None
    fed = None
    if coords == "resized" and size is not None:
        fed = _size(column(sample, "resized_size")) or resized_size(*size, factor, min_pixels, max_pixels)
    return match_score([to_original(b, coords, size, fed) for b in pred], gold, threshold)
