"""MedScope's own reward, ``tool_grounding`` (tasks/medscope/rewards.py): 0.7 crop tIoU + 0.3 distance-decayed
frame hits, long crops scaled down, ``fidelity`` the share of calls that touch the evidence
(docs/methods/packs.md#medscope). Scored through the registry by name, so these also check the pack's rewards module
registers it."""

from __future__ import annotations

import json
import math

import pytest
from reward_factory import sample, score, traj

from mmreason.tasks.medscope.rewards import tool_grounding
from mmreason.types import VideoRef


def _calls(*calls):
    return "".join("<tool_call>" + json.dumps({"name": n, "arguments": a}) + "</tool_call>" for n, a in calls)


def test_tool_grounding():
    text = _calls(("crop_video", {"start": 0, "end": 10}), ("get_frame", {"t": 12}))
    out = score("tool_grounding", text, span=[5, 15], duration=100)
    assert out["crop"] == pytest.approx(1 / 3)
    assert out["frame"] == 1.0
    assert out["ground"] == pytest.approx(0.7 / 3 + 0.3)
    assert out["fidelity"] == 1.0
    # only crops -> ground = R_crop; no call -> 0; no gold -> None
    assert score("tool_grounding", _calls(("crop_video", {"start": 5, "end": 15})), span=[5, 15])["ground"] == 1.0
    assert score("tool_grounding", "<answer>A</answer>", span=[5, 15])["ground"] == 0.0
    assert score("tool_grounding", text)["ground"] is None
    # a window over 80 % of a 100 s video containing the 10 s gold: tIoU 1/8, scaled by 0.5 * 100 / 80
    wide = score("tool_grounding", _calls(("crop_video", {"start": 0, "end": 80})), span=[5, 15], duration=100)
    assert wide["crop"] == pytest.approx(10 / 80 * 50 / 80)
    # a miss lowers fidelity
    half = score(
        "tool_grounding",
        _calls(("get_frame", {"t": 12}), ("get_frame", {"t": 90})),
        span=[5, 15],
        duration=100,
    )
    assert half["fidelity"] == 0.5


def test_tool_grounding_reads_recorded_calls_and_video_length():
    s = sample(None, span=[5, 15], videos=[VideoRef("v.mp4", start=0, end=20)])
    t = traj("<answer>A</answer>", tool_calls=[{"name": "get_frame", "arguments": {"t": 16}}])
    out = tool_grounding([s], [t])
    assert out["frame"][0] == pytest.approx(math.exp(-1 / (0.05 * 20)))  # tau from the 20 s video window
