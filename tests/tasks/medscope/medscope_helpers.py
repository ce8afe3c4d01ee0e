"""Small generated MedScope data for the pack's tests (two one-minute procedure videos, 16 px blocks)."""

from __future__ import annotations

from pathlib import Path


def make_data(folder: Path, videos: int = 2, seconds: tuple[int, int] = (60, 60), seed: int = 0) -> Path:
    from mmreason.tasks.medscope.synth import generate

    return generate(folder, videos, seed, seconds, 32)
