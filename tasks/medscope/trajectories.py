"""The tool trajectory SFT imitates: global look -> crop around the evidence -> get_frame to verify -> answer.

The first turn already shows the global view, so the trajectory starts with the crop. The crop window is the
evidence window widened by a margin drawn per sample (seeded by its id: the same sample always gets the same
trajectory), so the model learns to look around the moment rather than to copy exact numbers; get_frame
verifies at the middle of the evidence; the answer gives the span for grounded questions. Turns end at the
environment's stop strings, which is where the SFT replay cuts them to insert the real observations.
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


def gold_trajectory(sample: Sample) -> str:
    """Assistant text of every turn, concatenated (observations are inserted between them at replay)."""
    rng = random.Random(f"medscope-trajectory/{sample.id}")
    lo, hi = crop_window(sample, rng)
    start, end = sample.meta["span"][0]
    middle = round((start + end) / 2, 1)
    span = f"[{start:g}, {end:g}]"
    if sample.meta["answer_kind"] == "span":
        answer = f"<answer>{span}</answer>"
    else:
        answer = f"<span>{span}</span><answer>{sample.answer}</answer>"  # </answer> ends the turn
    return _call("crop_video", start=lo, end=hi) + _call("get_frame", t=middle) + answer
