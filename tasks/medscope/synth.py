"""Generated "procedure" videos: minutes of an uneventful field of view with three short events at known times.

Each video (``size`` x ``size`` px, 2 fps, ``seconds`` long) shows a pink, textured field that drifts slowly
(nothing happens in most of it) and three events that last 3 to 6 s each, never overlapping, at whole seconds:

- **instrument**: a dark bar enters the field from one edge and leaves again (``instrument_in .. _out``);
- **marker**: the grey marker in the top-left corner turns one colour for a few seconds, then grey again;
- **count**: the white dots at the bottom (1 to 3 of them) become more for a few seconds, then fewer again.

Every event is transient, so a sparse global look (16 frames over minutes: one frame every ~10 s) usually
misses it; the answer needs the moment. Each video gets three questions, one per task type, with the event's
window as its evidence::

    temporal_grounding  "When is the instrument in the field of view?"     -> "[t_in, t_out]"
    grounded_qa         "What colour does the corner marker turn?"         -> option letter, + its window
    qa                  "How many dots are there while their number is changed?" -> a number

The same (n, seed, seconds, size, scale, avoid) gives the same videos (x264 runs single-threaded) and the same rows.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmreason.media.video_write import write_mp4
from mmreason.paths import generated_jsonl, write_jsonl

FPS = 2
COLOURS = {"red": (225, 30, 30), "green": (30, 180, 60), "blue": (30, 70, 230), "yellow": (240, 210, 20)}
GREY = (120, 120, 120)
TISSUE = np.array((200, 130, 130), np.float32)
LETTERS = "ABCD"
TASK_TYPES = ("temporal_grounding", "grounded_qa", "qa")
QUESTIONS_PER_VIDEO = len(TASK_TYPES)


@dataclass(frozen=True)
class Procedure:
    """Everything that decides a video's pixels (times in whole seconds)."""

    seconds: int
    texture_seed: int
    instrument: tuple[int, int]  # [in, out) seconds
    instrument_side: str  # "left" | "right": the edge it enters from
    marker: tuple[int, int]
    marker_colour: str
    count: tuple[int, int]
    dots_before: int
    dots_during: int


def _windows(rng: random.Random, seconds: int, k: int) -> list[tuple[int, int]]:
    """``k`` disjoint windows of 3..6 s inside [2, seconds - 2) with at least 4 s between them, shuffled."""
    lengths = [rng.randint(3, 6) for _ in range(k)]
    spare = seconds - 4 - sum(lengths) - 4 * (k - 1)
    if spare < 0:
        raise ValueError(f"medscope: a {seconds} s video is too short for {k} events")
    cuts = sorted(rng.randint(0, spare) for _ in range(k))
    out = []
    for j, (cut, length) in enumerate(zip(cuts, lengths)):
        start = 2 + cut + sum(lengths[:j]) + 4 * j
        out.append((start, start + length))
    rng.shuffle(out)
    return out


def draw_procedure(rng: random.Random, seconds: int) -> Procedure:
    instrument, marker, count = _windows(rng, seconds, 3)
    before = rng.randint(1, 3)
    return Procedure(
        seconds,
        rng.randint(0, 2**31 - 1),
        instrument,
        rng.choice(("left", "right")),
        marker,
        rng.choice(sorted(COLOURS)),
        count,
        before,
        before + rng.randint(1, 3),
    )


def _texture(seed: int, size: int) -> np.ndarray:
    """A smooth random field [2 size, 2 size] in [-1, 1] (the tissue; it drifts across the frame)."""
    gen = np.random.default_rng(seed)
    coarse = gen.standard_normal((size // 8 + 2, size // 8 + 2)).astype(np.float32)
    fine = np.kron(coarse, np.ones((16, 16), np.float32))[: 2 * size, : 2 * size]
    return np.tanh(fine)


def render_frame(p: Procedure, texture: np.ndarray, i: int, size: int, scale: int = 1) -> np.ndarray:
    """Frame ``i`` ([size, size, 3] uint8 RGB), showing the procedure at t = i / FPS; ``scale`` multiplies the
    corner marker's side and the instrument's width (a larger event for models that see coarsely)."""
    t = i / FPS
    drift = int(t / 4) % size  # one pixel every 4 s: a slow pan, never an event
    field = texture[drift : drift + size, drift // 2 : drift // 2 + size]
    frame = (TISSUE[None, None, :] + 25.0 * field[..., None]).clip(0, 255).astype(np.uint8)
    side = min(size // 2, scale * max(4, size // 8))
    in_window = lambda w: w[0] <= t < w[1]  # noqa: E731
    frame[2 : 2 + side, 2 : 2 + side] = COLOURS[p.marker_colour] if in_window(p.marker) else GREY
    if in_window(p.instrument):
        width, length = min(size // 3, scale * max(3, size // 12)), size // 2
        row = size // 2 - width // 2
        cols = slice(0, length) if p.instrument_side == "left" else slice(size - length, size)
        frame[row : row + width, cols] = (40, 40, 50)
    dots = p.dots_during if in_window(p.count) else p.dots_before
    radius, y = max(2, size // 20), size - size // 6
    yy, xx = np.mgrid[:size, :size]
    for d in range(dots):
        cx = (d + 1) * size // (p.dots_during + 1)
        frame[(xx - cx) ** 2 + (yy - y) ** 2 <= radius * radius] = (250, 250, 250)
    return frame


def write_video(path: Path, p: Procedure, size: int, scale: int = 1) -> Path:
    """H.264 mp4 of the procedure (``write_mp4``: complete or absent)."""
    texture = _texture(p.texture_seed, size)
    frames = (render_frame(p, texture, i, size, scale) for i in range(p.seconds * FPS))
    return write_mp4(path, frames, FPS, crf=20)


def questions(p: Procedure, rng: random.Random) -> list[dict[str, Any]]:
    """One question per task type (without id / video), answers and evidence windows from the procedure."""
    options = sorted(COLOURS)
    rng.shuffle(options)
    return [
        {
            "task_type": "temporal_grounding",
            "question": "When is the instrument in the field of view?",
            "answer": f"[{p.instrument[0]}, {p.instrument[1]}]",
            "evidence_windows": [list(p.instrument)],
        },
        {
            "task_type": "grounded_qa",
            "question": "What colour does the corner marker turn?",
            "options": options,
            "answer": LETTERS[options.index(p.marker_colour)],
            "evidence_windows": [list(p.marker)],
        },
        {
            "task_type": "qa",
            "question": "How many white dots are there while their number is changed?",
            "answer": str(p.dots_during),
            "evidence_windows": [list(p.count)],
        },
    ]


def procedures(
    n: int, seed: int, seconds: tuple[int, int], avoid: frozenset[Procedure] = frozenset()
) -> list[Procedure]:
    """``n`` distinct procedures, none in ``avoid``; the same arguments give the same list."""
    lo, hi = seconds
    if not 40 <= lo <= hi:
        raise ValueError(f"medscope: video length {lo}..{hi} s must satisfy 40 <= MIN <= MAX")
    rng = random.Random(seed)
    seen, out = set(avoid), []
    while len(out) < n:
        p = draw_procedure(rng, rng.randint(lo, hi))
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def generate(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    seconds: tuple[int, int] = (120, 300),
    size: int = 64,
    avoid: frozenset[Procedure] = frozenset(),
    scale: int = 1,
) -> Path:
    """Write ``n`` videos and ``data.jsonl`` (3 questions per video, video paths relative to the file).

    Each row also carries ``duration`` and ``procedure`` (the event times the answers come from)."""
    if size < 32 or size % 16:
        raise ValueError(f"medscope: size {size} must be a multiple of 16, at least 32")
    if not 1 <= scale <= 4:
        raise ValueError(f"medscope: event scale {scale} must be 1..4")
    out = Path(out_dir)
    done = generated_jsonl(out, QUESTIONS_PER_VIDEO * n)
    if done is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, p in enumerate(procedures(n, seed, seconds, avoid)):
        name = f"{i:05d}.mp4"
        write_video(out / name, p, size, scale)
        for q in questions(p, random.Random(f"{seed}/{i}/questions")):
            rows.append(
                {
                    "id": f"medscope-{seed}-{i}-{q['task_type']}",
                    "video": name,
                    **q,
                    "duration": float(p.seconds),
                    "procedure": asdict(p),
                }
            )
    return write_jsonl(out / "data.jsonl", rows)
