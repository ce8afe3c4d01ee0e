"""Real clinical video: the echocardiography cine of pydicom-data turned into an mp4 at run time, with questions
whose answers are measured from its pixels.

``color3d_jpeg_baseline.dcm`` (pydicom-data, MIT) holds 120 JPEG-baseline frames of 480 x 640 at 30 fps (a
4 s cine). The file is read from the installed package (``pip install pydicom pydicom-data``; pillow decodes
the frames), checked against its sha256 and written as an H.264 mp4 (320 x 240, 30 fps) into the cache, once.
Answers are measured from the decoded DICOM frames, not written by hand: the mean brightness of every frame
gives the brightest and darkest moments (evidence: the measured frame +- ``HALF_WINDOW`` seconds) and the
second of the clip in which the brightest frame falls.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from mmreason.media.video_write import write_mp4 as write
from mmreason.paths import cache_dir, generated_jsonl, write_jsonl

FILE = "color3d_jpeg_baseline.dcm"
SHA256 = "c8798b8abf8ae0a18e8c9952e7c7f75f3cc8465234b1b63f9e3ba3bebb9d5625"
FPS = 30
HALF_WINDOW = 0.2  # seconds either side of a measured frame
ROWS = 3


def dicom_path() -> Path:
    """The cine inside the installed pydicom-data, checked against its pinned sha256."""
    try:
        from pydicom.data import get_testdata_file
    except ImportError as err:
        raise ImportError("the echocardiography cine needs `pip install pydicom pydicom-data`") from err
    found = get_testdata_file(FILE)
    if found is None:
        raise ImportError(f"pydicom-data does not hold {FILE}; `pip install pydicom-data`")
    digest = hashlib.sha256(Path(found).read_bytes()).hexdigest()
    if digest != SHA256:
        raise ValueError(f"{found}: sha256 {digest} is not the pinned {SHA256}")
    return Path(found)


def read_frames(path: Path) -> np.ndarray:
    """[T, H, W, 3] uint8 RGB frames of the cine."""
    import pydicom

    ds = pydicom.dcmread(str(path))
    frames = ds.pixel_array  # pydicom converts the YBR_FULL_422 JPEG frames to RGB
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"{path}: expected [T, H, W, 3] colour frames, got {frames.shape}")
    return frames


def write_mp4(frames: np.ndarray, path: Path) -> Path:
    """The cine as an mp4 at half its size."""

    return write(path, frames, FPS, size=(frames.shape[2] // 2, frames.shape[1] // 2), crf=20)


def _window(index: int, total: int) -> list[float]:
    t = index / FPS
    return [round(max(0.0, t - HALF_WINDOW), 3), round(min(total / FPS, t + HALF_WINDOW + 1 / FPS), 3)]


def measured_rows(frames: np.ndarray, video: str) -> list[dict]:
    """Questions with answers measured from the frames' mean brightness."""
    brightness = frames.astype(np.float32).mean(axis=(1, 2, 3))  # [T]
    total = len(frames)
    bright, dark = int(brightness.argmax()), int(brightness.argmin())
    seconds = ["the first second", "the second second", "the third second", "the fourth second"]
    which = min(int(bright / FPS), len(seconds) - 1)
    common = {"video": video, "duration": total / FPS, "source": f"pydicom-data {FILE}"}
    return [
        {
            "id": "echo-brightest",
            "task_type": "temporal_grounding",
            "question": "When is the image at its brightest?",
            "answer": str(_window(bright, total)),
            "evidence_windows": [_window(bright, total)],
            "measured": {"frame": bright, "mean_brightness": float(brightness[bright])},
            **common,
        },
        {
            "id": "echo-darkest",
            "task_type": "temporal_grounding",
            "question": "When is the image at its darkest?",
            "answer": str(_window(dark, total)),
            "evidence_windows": [_window(dark, total)],
            "measured": {"frame": dark, "mean_brightness": float(brightness[dark])},
            **common,
        },
        {
            "id": "echo-brightest-second",
            "task_type": "grounded_qa",
            "question": "In which second of the clip is the image brightest?",
            "options": seconds,
            "answer": "ABCD"[which],
            "evidence_windows": [_window(bright, total)],
            "measured": {"frame": bright, "mean_brightness": float(brightness[bright])},
            **common,
        },
    ]


def echo_rows(out_dir: str | Path | None = None) -> Path:
    """``data.jsonl`` (and ``echo.mp4``) in ``out_dir`` (default: the cache), built once from the DICOM cine."""
    out = Path(out_dir) if out_dir is not None else cache_dir("medscope", "echo")
    done = generated_jsonl(out, ROWS)
    if done is not None and (out / "echo.mp4").exists():
        return done
    frames = read_frames(dicom_path())
    out.mkdir(parents=True, exist_ok=True)
    write_mp4(frames, out / "echo.mp4")
    return write_jsonl(out / "data.jsonl", measured_rows(frames, "echo.mp4"))
