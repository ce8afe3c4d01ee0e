"""Test-only read-back of ``mmreason.examples``' drawings: the colour and count a picture shows, and a wrong answer
of the same kind as a gold one."""

from __future__ import annotations

import numpy as np
from PIL import Image

from mmreason.examples import COLOURS, LETTERS


def other_answer(answer: str) -> str:
    """A wrong answer of the same kind as an example's ``answer`` (another count, option letter or colour): what
    a reward or metric must score 0 where the gold answer scores 1."""
    if answer.isdigit():
        return str(int(answer) + 1)
    order = list(LETTERS if answer in LETTERS else COLOURS)
    return order[(order.index(answer) + 1) % len(order)]


def _coloured(image: Image.Image) -> np.ndarray:
    """[H, W] True where a pixel is coloured (not white, grey or black: channels at least 60 apart)."""
    pixels = np.asarray(image.convert("RGB"), dtype=int)
    return (pixels.max(axis=-1) - pixels.min(axis=-1)) > 60


def colour_shown(image: Image.Image) -> str | None:
    """The named colour nearest the mean of the picture's coloured pixels (None: none coloured); reads back
    what ``draw`` drew, through PNG or a video codec."""
    mask = _coloured(image)
    if not mask.any():
        return None
    mean = np.asarray(image.convert("RGB"), dtype=float)[mask].mean(axis=0)
    return min(COLOURS, key=lambda c: float(((np.asarray(COLOURS[c]) - mean) ** 2).sum()))


def shapes_shown(image: Image.Image) -> int:
    """How many separate (4-connected) blobs of coloured pixels the picture has."""
    mask = _coloured(image)
    seen = np.zeros_like(mask)
    blobs = 0
    for start in zip(*np.nonzero(mask)):
        if seen[start]:
            continue
        blobs += 1
        stack = [start]
        seen[start] = True
        while stack:
            y, x = stack.pop()
            for ny, nx in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if 0 <= ny < mask.shape[0] and 0 <= nx < mask.shape[1] and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
    return blobs
