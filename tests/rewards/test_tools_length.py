"""Tool-call validity and the length rewards (trapezoid, DAPO overlong)."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from reward_factory import sample, score, traj

from mmreason.rewards.length import LENGTH_PROFILES, length_trapezoid, overlong, trapezoid
from mmreason.rewards.tools import check_call, tool_call_valid, tool_table


def call(name, **arguments):
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_tool_call_valid_medscope_defaults():
    assert score("tool_call_valid", call("crop_video", start=1, end=5), duration=60) == 1.0
    assert score("tool_call_valid", call("get_frame", t=59.5), duration=60) == 1.0
    assert score("tool_call_valid", call("get_frame", t=61), duration=60) == 0.0  # past the video
    assert score("tool_call_valid", call("get_frame", t=61)) == 1.0  # no duration column: bound unchecked
    assert score("tool_call_valid", call("get_frame", t=-1)) == 0.0
    assert score("tool_call_valid", call("crop_video", start=5, end=5), duration=60) == 0.0  # start < end
    assert score("tool_call_valid", call("crop_video", start=1), duration=60) == 0.0  # missing end
    assert score("tool_call_valid", call("crop_video", start=1, end=2, zoom=3), duration=60) == 0.0  # unknown arg
    assert score("tool_call_valid", call("get_frame", t="12")) == 0.0  # wrong type
    assert score("tool_call_valid", call("zoom_in", x=1)) == 0.0  # unknown tool
    assert score("tool_call_valid", "<tool_call>{broken</tool_call>") == 0.0
    two = call("get_frame", t=3) + call("zoom_in", x=1)
    assert score("tool_call_valid", two) == 0.5
    assert score("tool_call_valid", "<answer>A</answer>") is None
    assert score("tool_call_valid", "<answer>A</answer>", kwargs={"no_calls": 1.0}) == 1.0


def test_tool_call_valid_custom_schema_and_recorded_calls():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "kb": {"type": "string", "enum": ["text", "table"]},
                        "k": {"type": "integer", "minimum": 1, "maximum": "$max_k"},
                    },
                    "required": ["kb"],
                },
            },
        }
    ]
    assert score("tool_call_valid", call("search", kb="text", k=3), kwargs={"tools": tools}, max_k=5) == 1.0
    assert score("tool_call_valid", call("search", kb="web"), kwargs={"tools": tools}) == 0.0
    assert score("tool_call_valid", call("search", kb="text", k=9), kwargs={"tools": tools}, max_k=5) == 0.0
    assert score("tool_call_valid", call("search", kb="text", k=2.5), kwargs={"tools": tools}) == 0.0
    recorded = traj("done", tool_calls=[{"name": "get_frame", "arguments": {"t": 2}}])
    assert tool_call_valid([sample()], [recorded]) == [1.0]
    table = tool_table(tools)
    assert "unknown tool" in check_call({"name": "x", "arguments": {}}, table, {})


def test_trapezoid_values():
    args = (16, 128, 1536, 3072)
    assert trapezoid(0, *args) == 0.0
    assert trapezoid(16, *args) == 0.0
    assert trapezoid(72, *args) == pytest.approx(0.5)
    assert trapezoid(128, *args) == 1.0 and trapezoid(1536, *args) == 1.0
    assert trapezoid(2304, *args) == pytest.approx(0.5)
    assert trapezoid(3072, *args) == 0.0 and trapezoid(3073, *args) == 0.0
    with pytest.raises(ValueError):
        trapezoid(5, 10, 5, 20, 30)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(LENGTH_PROFILES)), st.integers(0, 3), st.floats(-1e-3, 1e-3))
def test_trapezoid_is_continuous_at_every_threshold(profile, which, eps):
    thresholds = LENGTH_PROFILES[profile]
    x = thresholds[which]
    assert abs(trapezoid(x + eps, *thresholds) - trapezoid(x, *thresholds)) < 1e-2


def test_length_trapezoid_reward_counts_trained_tokens_only():
    t = traj("text", length=10)
    t.action_mask = torch.tensor([0, 0] + [1] * 8)  # prompt / observation tokens are not the response
    assert length_trapezoid([sample()], [t], profile=[0, 8, 8, 100]) == [1.0]
    assert length_trapezoid([sample()], [t], profile=[0, 16, 32, 100]) == [0.5]
    reasoning = sample(task="math")
    assert length_trapezoid(
        [reasoning], [traj("x", length=10)], profile="reasoning", by_task={"math": "perception"}
    ) == [1.0]
    assert length_trapezoid([sample(length_profile="reasoning")], [traj("x", length=10)], profile="perception") == [0.0]


def test_dapo_overlong_penalty():
    # docs/methods/trainer.md#dapo: at |y| = L_max - L_cache / 2 the penalty is -0.5
    assert overlong(20480 - 2048, 20480, 4096) == pytest.approx(-0.5)
    assert overlong(16384, 20480, 4096) == 0.0
    assert overlong(20480, 20480, 4096) == -1.0
    assert overlong(30000, 20480, 4096) == -1.0
    assert score("overlong_penalty", "x", length=18432) == pytest.approx(-0.5)
    assert score("overlong_penalty", "x", length=90, kwargs={"max_length": 100, "cache": 20}) == pytest.approx(-0.5)
