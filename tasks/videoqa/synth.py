"""Generated videos with events at known times, and questions whose answers the generator knows.

Each video (``size`` x ``size`` px, 4, 6 or 8 fps, a whole number of seconds) shows on a light background:

- a **square** that enters at ``t_in`` and leaves at ``t_out`` (visible while ``t_in <= t < t_out``), moving
  left or right at constant speed, and changing from ``colour_before`` to ``colour_after`` at ``t_change``;
- a **disc** in the bottom half that flashes ``flashes`` times, each flash 1 s long with at least 0.5 s
  between flashes.

All event times are multiples of 0.5 s, so they fall on frame boundaries at every frame rate used.

Style ``events`` (the default): the square is visible for at most half the video (an answer "the whole
video" has tIoU below 0.5); four questions per video, one per answer type::

    mcq      "What colour does the square change to?"  or  "Which way does the square move?"  (lettered options)
    numeric  "How many times does the disc flash?"
    free     "What colour is the square when it appears?"  or  "... when it leaves?"  (one word)
    span     "When is the square visible?"  ->  "[t_in, t_out]" seconds

Style ``basic`` (what a small model can learn from a few hundred videos): a larger square in view the whole
time, changing colour once near the middle, no disc; three one-word questions per video whose answers are
uniform over their values: the colour at the start, the colour at the end, the direction (left / right).
A model that ignores the video scores 1/4, 1/4 and 1/2 on them; one that sees a single frame, at most 1/2 on
the colours.

The same (n, seed, seconds, size, avoid, style) gives the same videos (x264 runs single-threaded) and rows.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mmreason.media.video_write import write_mp4
from mmreason.paths import generated_jsonl, write_jsonl

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (30, 60, 220), "yellow": (235, 200, 20)}
DISC_COLOUR = (40, 40, 40)
BACKGROUND = (235, 235, 235)
FRAME_RATES = (4, 6, 8)
FLASH_SECONDS, FLASH_GAP = 1.0, 0.5
ANSWER_TYPES = ("mcq", "numeric", "free", "span")
LETTERS = "ABCD"
BASIC_SIDES = (563, 625, 688)  # square sides of the ``basic`` style, fractions of 1000 of the frame


@dataclass(frozen=True)
class Scenario:
    """Everything that decides a video's pixels (times in seconds, multiples of 0.5)."""

    seconds: int
    fps: int
    t_in: float
    t_out: float
    t_change: float
    colour_before: str
    colour_after: str
    direction: str  # "left" | "right": where the square is heading
    flash_starts: tuple[float, ...]
    disc_x: int  # the disc's centre column, as a fraction of 1000 of the width
    side: int = 250  # the square's side, as a fraction of 1000 of the frame size

    @property
    def flashes(self) -> int:
        return len(self.flash_starts)


def _halves(rng: random.Random, lo: float, hi: float) -> float:
    """A multiple of 0.5 in [lo, hi]."""
    return rng.randint(round(2 * lo), round(2 * hi)) / 2


def draw_scenario(rng: random.Random, seconds: int) -> Scenario:
    duration = float(seconds)
    visible = _halves(rng, 1.5, duration / 2)  # at most half the video, at least 3 half-seconds
    t_in = _halves(rng, 0.0, duration - visible)
    t_out = t_in + visible
    t_change = _halves(rng, t_in + 0.5, t_out - 0.5)  # both colours shown for at least 0.5 s
    before, after = rng.sample(sorted(COLOURS), 2)
    # flashes: k one-second flashes with gaps of at least 0.5 s, placed by spreading the spare half-seconds
    most = int((duration + FLASH_GAP) // (FLASH_SECONDS + FLASH_GAP))
    k = rng.randint(1, min(3, most))
    spare = round(2 * (duration - k * FLASH_SECONDS - (k - 1) * FLASH_GAP))
    cuts = sorted(rng.randint(0, spare) for _ in range(k))
    starts, t = [], 0.0
    for j, cut in enumerate(cuts):
        t = (cut / 2) + j * (FLASH_SECONDS + FLASH_GAP)
        starts.append(t)
    return Scenario(
        seconds,
        rng.choice(FRAME_RATES),
        t_in,
        t_out,
        t_change,
        before,
        after,
        rng.choice(("left", "right")),
        tuple(starts),
        rng.randint(250, 750),
    )


def square_state(s: Scenario, t: float, size: int) -> tuple[str, int] | None:
    """(colour, left column) of the square at time ``t``, or None when it is not in the picture."""
    if not s.t_in <= t < s.t_out:
        return None
    side = size * s.side // 1000
    travel = size - side - 4
    progress = (t - s.t_in) / (s.t_out - s.t_in)  # 0 .. <1
    x = 2 + round(travel * (progress if s.direction == "right" else 1 - progress))
    return (s.colour_before if t < s.t_change else s.colour_after), x


def disc_on(s: Scenario, t: float) -> bool:
    return any(start <= t < start + FLASH_SECONDS for start in s.flash_starts)


def render_frame(s: Scenario, i: int, size: int) -> np.ndarray:
    """Frame ``i`` ([size, size, 3] uint8 RGB): it shows the scene at t = i / fps."""
    t = i / s.fps
    frame = np.empty((size, size, 3), np.uint8)
    frame[:] = BACKGROUND
    side = size * s.side // 1000
    state = square_state(s, t, size)
    if state is not None:
        colour, x = state
        top = size // 8
        frame[top : top + side, x : x + side] = COLOURS[colour]
    if disc_on(s, t):
        yy, xx = np.mgrid[:size, :size]
        cx, cy, r = s.disc_x * size // 1000, 3 * size // 4, size // 8
        frame[(xx - cx) ** 2 + (yy - cy) ** 2 <= r * r] = DISC_COLOUR
    return frame


def write_video(path: Path, s: Scenario, size: int) -> Path:
    """H.264 mp4 of the scenario (``write_mp4``: complete or absent)."""
    return write_mp4(path, (render_frame(s, i, size) for i in range(s.seconds * s.fps)), s.fps, crf=18)


def _options(rng: random.Random, correct: str, pool: list[str]) -> tuple[list[str], str]:
    options = list(pool)
    rng.shuffle(options)
    return options, LETTERS[options.index(correct)]


def questions(s: Scenario, rng: random.Random) -> list[dict[str, Any]]:
    """One question per answer type (without id / video), answers from the scenario."""
    if rng.random() < 0.5:
        options, letter = _options(rng, s.colour_after, sorted(COLOURS))
        mcq = {"question": "What colour does the square change to?", "options": options, "answer": letter}
        free = {"question": "What colour is the square when it appears?", "answer": s.colour_before}
    else:
        options, letter = _options(rng, s.direction, ["left", "right"])
        mcq = {"question": "Which way does the square move?", "options": options, "answer": letter}
        free = {"question": "What colour is the square when it leaves?", "answer": s.colour_after}
    return [
        {**mcq, "answer_type": "mcq"},
        {"question": "How many times does the disc flash?", "answer": str(s.flashes), "answer_type": "numeric"},
        {**free, "answer_type": "free"},
        # a string: every answer of the file one type (parquet needs that; the loader reads both forms)
        {"question": "When is the square visible?", "answer": f"[{s.t_in}, {s.t_out}]", "answer_type": "span"},
    ]


def draw_basic(rng: random.Random, seconds: int) -> Scenario:
    """A ``basic`` video: a large square in view the whole time, moving left or right, changing colour once
    near the middle (colours, direction and size drawn uniformly); no disc."""
    duration = float(seconds)
    t_change = _halves(rng, 0.4 * duration, 0.6 * duration)
    before, after = rng.sample(sorted(COLOURS), 2)
    return Scenario(
        seconds,
        rng.choice(FRAME_RATES),
        0.0,
        duration,
        t_change,
        before,
        after,
        rng.choice(("left", "right")),
        (),
        500,
        rng.choice(BASIC_SIDES),
    )


def basic_questions(s: Scenario, rng: random.Random) -> list[dict[str, Any]]:
    """Three one-word questions whose answers each frame pair shows: the colour in the first frames, in the
    last frames, and the direction (answers uniform: 4 colours, 2 directions)."""
    del rng  # the same three questions for every video
    return [
        {
            "question": "What colour is the square at the start of the video?",
            "answer": s.colour_before,
            "answer_type": "free",
        },
        {
            "question": "What colour is the square at the end of the video?",
            "answer": s.colour_after,
            "answer_type": "free",
        },
        {"question": "Which way does the square move, left or right?", "answer": s.direction, "answer_type": "free"},
    ]


STYLES = {
    "events": (draw_scenario, questions, ANSWER_TYPES),
    "basic": (draw_basic, basic_questions, ("start", "end", "direction")),
}


def scenarios(
    n: int,
    seed: int,
    seconds: tuple[int, int] = (3, 8),
    avoid: frozenset[Scenario] = frozenset(),
    style: str = "events",
) -> list[Scenario]:
    """``n`` distinct scenarios, none in ``avoid``; the same arguments give the same list."""
    lo, hi = seconds
    if not 3 <= lo <= hi:
        raise ValueError(f"videoqa: seconds {lo}..{hi} must satisfy 3 <= MIN <= MAX")
    if style not in STYLES:
        raise ValueError(f"videoqa: style {style!r} is not one of {', '.join(STYLES)}")
    draw = STYLES[style][0]
    rng = random.Random(seed)
    seen, out = set(avoid), []
    for _ in range(100 * n + 100):
        if len(out) == n:
            return out
        s = draw(rng, rng.randint(lo, hi))
        if s not in seen:
            seen.add(s)
            out.append(s)
    raise ValueError(f"videoqa: could not draw {n} distinct videos of {lo}..{hi} s (try a longer range)")


def generate(
    out_dir: str | Path,
    n: int,
    seed: int = 0,
    seconds: tuple[int, int] = (3, 8),
    size: int = 64,
    avoid: frozenset[Scenario] = frozenset(),
    style: str = "events",
) -> Path:
    """Write ``n`` videos and ``data.jsonl`` (video paths relative to the file): ``style`` ``events``, 4
    questions per video (one per answer type); ``basic``, 3 (``basic_questions``).

    Each row also carries ``duration`` and ``scenario`` (the event times the answers come from)."""
    if size < 32 or size % 8:
        raise ValueError(f"videoqa: size {size} must be a multiple of 8, at least 32")
    out = Path(out_dir)
    if style not in STYLES:
        raise ValueError(f"videoqa: style {style!r} is not one of {', '.join(STYLES)}")
    _, ask, kinds = STYLES[style]
    done = generated_jsonl(out, len(kinds) * n)
    if done is not None:
        return done
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, s in enumerate(scenarios(n, seed, seconds, avoid, style)):
        name = f"{i:05d}.mp4"
        write_video(out / name, s, size)
        rng = random.Random(f"{seed}/{i}/questions")
        for kind, q in zip(kinds, ask(s, rng)):
            rows.append(
                {
                    "id": f"videoqa-{seed}-{i}-{kind}",
                    "video": name,
                    **q,
                    "duration": float(s.seconds),
                    "scenario": {**asdict(s), "flash_starts": list(s.flash_starts)},
                }
            )
    return write_jsonl(out / "data.jsonl", rows)
