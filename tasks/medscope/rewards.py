"""MedScope's rewards: the pack's default list (``REWARDS``: the answer and format rules of ``scoring.py`` and the
grounding reward) and its own reward ``tool_grounding``, the tool-localisation reward over ``crop_video`` /
``get_frame`` calls (registered under that name when the pack's rewards load). It reads the gold windows and scores spans with
the shared temporal helpers of ``rewards/evidence.py``; docs/methods/packs.md#medscope gives the formulas
([proposed])."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from mmreason.parsing import all_tag_bodies, clip, finite_number
from mmreason.rewarding import column, per_sample, reward
from mmreason.rewards.evidence import Span, decay, decay_tau, gold_spans, seconds, tiou, video_duration
from mmreason.rewards.format import parse_tool_call
from mmreason.types import Trajectory

SCORING = "mmreason.tasks.medscope.scoring"
# R = 1.0 answer + 0.5 grounding + 0.2 format; crop / frame / fidelity are logged (fidelity feeds ga_grpo)
REWARDS = [
    {"name": f"{SCORING}:medscope_accuracy", "weight": 1.0},
    {"name": "tool_grounding", "weight": {"ground": 0.5, "crop": 0.0, "frame": 0.0, "fidelity": 0.0}},
    {"name": f"{SCORING}:medscope_format", "weight": 0.2},
]


def tool_calls_of(trajectory: Trajectory, limit: int = 64) -> list[dict]:
    """The trajectory's tool calls: the rollout's parsed ``tool_calls``, else the completion's
    ``<tool_call>`` bodies. Malformed calls are dropped."""
    calls: Iterable[Any] = trajectory.tool_calls or [
        parse_tool_call(b) for b in all_tag_bodies(clip(trajectory.completion_text), "tool_call", limit)
    ]
    out = []
    for call in list(calls)[:limit]:
        if isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict):
            out.append(call)
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if not isinstance(value, str):
        return finite_number(value)
    try:
        number = seconds(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def crop_window(arguments: dict) -> Span | None:
    """(start, end) of a crop call: ``start``/``end`` or ``window: [s, e]``."""
    if "window" in arguments and isinstance(arguments["window"], (list, tuple)) and len(arguments["window"]) == 2:
        s, e = (_number(v) for v in arguments["window"])
    else:
        s, e = _number(arguments.get("start")), _number(arguments.get("end"))
    return None if s is None or e is None or e <= s else (s, e)


def frame_time(arguments: dict) -> float | None:
    """The time point of a frame call: ``t``, ``time`` or ``timestamp``."""
    for key in ("t", "time", "timestamp"):
        if key in arguments:
            return _number(arguments[key])
    return None


@reward("tool_grounding", keys=("ground", "crop", "frame", "fidelity"), diagnostics=("crop", "frame", "fidelity"))
@per_sample
def tool_grounding(
    sample,
    trajectory,
    *,
    crop_tool: str = "crop_video",
    frame_tool: str = "get_frame",
    crop_weight: float = 0.7,
    tau: float | None = None,
    tau_frac: float = 0.05,
    max_crop_frac: float = 0.5,
):
    """MedScope tool localisation: 0.7 max tIoU of crop windows + 0.3 mean distance-decayed frame hits.

    R_crop = max_k tIoU(c_k, W*), scaled by min(1, max_crop_frac * T / |c_k|) for windows longer than
    half the video T (anti-hacking); R_frame = mean_k decay(t_k); ground = the weighted mean of the
    terms that occurred, 0 without any call, None without a gold window. ``fidelity`` (logged) is the
    fraction of calls that touch the window (tIoU > 0, or t inside), for evidence-weighted advantages.
    Columns: ``span``, ``duration`` (optional, for T and tau). docs/methods/packs.md#medscope ([proposed]).
    """
    spans = gold_spans(column(sample, "span"))
    if not spans:
        return {"ground": None, "crop": None, "frame": None, "fidelity": None}
    duration = video_duration(sample)
    crops, frames, hits, calls = [], [], 0, 0
    for call in tool_calls_of(trajectory):
        if call["name"] == crop_tool and (window := crop_window(call["arguments"])) is not None:
            score = max(tiou(window, g) for g in spans)
            length = window[1] - window[0]
            if duration and length > max_crop_frac * duration:
                score *= min(1.0, max_crop_frac * duration / length)
            crops.append(score)
            hits += score > 0
            calls += 1
        elif call["name"] == frame_tool and (t := frame_time(call["arguments"])) is not None:
            frames.append(decay(t, spans, decay_tau(sample, spans, tau, tau_frac)))
            hits += any(s <= t <= e for s, e in spans)
            calls += 1
    crop = max(crops) if crops else None
    frame = sum(frames) / len(frames) if frames else None
    if crop is None and frame is None:
        ground = 0.0
    elif crop is None or frame is None:
        ground = crop if crop is not None else frame
    else:
        ground = crop_weight * crop + (1 - crop_weight) * frame
    return {"ground": ground, "crop": crop, "frame": frame, "fidelity": hits / calls if calls else 0.0}
