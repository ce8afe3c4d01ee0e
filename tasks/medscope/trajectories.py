"""The tool trajectory SFT imitates: global look -> crop around the evidence -> get_frame to verify -> answer.

The first turn already shows the global view, so the trajectory starts with the crop, and every number in it
is one the model can get from what it has seen:

- the evidence shows in some global frames: the crop runs from the global frame before the first of them to
  the one after the last (the whole event lies between two frames that do not show it), and get_frame looks
  at the middle frame that shows it -- all three numbers are timestamps the first turn wrote;
- it shows in none (an event shorter than the global frames' spacing): the window between two global frames
  that holds it, found by no rule the model could follow, so the trajectory falls back to the evidence window
  widened by 1..4 s a side (drawn per sample, seeded by its id) and get_frame at its middle.

The answer gives the evidence span, which the crop's frames show. Turns end at the environment's stop
strings, which is where the SFT replay cuts them to insert the real observations.
"""

from __future__ import annotations

import json
import random

from mmreason.types import Sample


def _call(name: str, **arguments: float) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def crop_window(sample: Sample, rng: random.Random) -> tuple[float, float]:
    """The evidence window widened by 1..4 s on each side (whole seconds), inside the video."""
    start, end = sample.meta["span"][0]
    duration = float(sample.meta.get("duration") or end)
    lo = max(0.0, float(int(start) - rng.randint(1, 4)))
    hi = min(duration, float(int(end + 0.999) + rng.randint(1, 4)))
    return lo, max(hi, lo + 1.0)


def seen_look(sample: Sample) -> tuple[float, float, float] | None:
    """(crop start, crop end, frame time) from the global frames that show the evidence, or None if none does."""
    stamps = [round(float(t), 1) for t in sample.meta.get("global_times") or ()]
    start, end = sample.meta["span"][0]
    seen = [k for k, t in enumerate(stamps) if start <= t < end]
    if not seen:
        return None
    duration = round(float(sample.meta.get("duration") or stamps[-1]), 1)
    lo = stamps[seen[0] - 1] if seen[0] > 0 else 0.0
    hi = stamps[seen[-1] + 1] if seen[-1] + 1 < len(stamps) else duration
    return lo, hi, stamps[seen[len(seen) // 2]]


def gold_trajectory(sample: Sample) -> str:
    """Assistant text of every turn, concatenated (observations are inserted between them at replay)."""
    start, end = sample.meta["span"][0]
    look = seen_look(sample)
    if look is None:
        lo, hi = crop_window(sample, random.Random(f"medscope-trajectory/{sample.id}"))
        middle = round((start + end) / 2, 1)
    else:
        lo, hi, middle = look
    span = f"[{start:g}, {end:g}]"
    if sample.meta["answer_kind"] == "span":
        answer = f"<answer>{span}</answer>"
    else:
        answer = f"<span>{span}</span><answer>{sample.answer}</answer>"  # </answer> ends the turn
    return _call("crop_video", start=lo, end=hi) + _call("get_frame", t=middle) + answer
