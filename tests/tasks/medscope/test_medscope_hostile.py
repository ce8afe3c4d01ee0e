"""Hostile tool calls, fuzzed: every turn the environment is handed gets an observation (never an exception),
bounded in size, counted as an error when it is not a valid call, and an episode of any length stops within the
call, token and error limits. The rewards score the same turns without raising."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from medscope_helpers import make_data  # noqa: I001

from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.medscope.env import MedScopeEnv, ToolLimits
from mmreason.tasks.medscope.scoring import medscope_accuracy, medscope_format
from mmreason.types import Trajectory

NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.sampled_from([0, 1, 30, 59.9, 60, -1e-9, 1e308]),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
)
NESTED = st.recursive(
    NUMBERS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=20,
)
NAMES = st.sampled_from(["crop_video", "get_frame", "rm", "__import__", "", "crop_video\x00", "CROP_VIDEO"])
ARGS = st.dictionaries(st.sampled_from(["start", "end", "t", "window", "x" * 50]), NESTED, max_size=4)
PIECES = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        "{",
        "}",
        '"',
        "[",
        "]",
        "\n",
        "NaN",
        "Infinity",
        "1e999",
    ]
)


def _json_call(name, args, nest: int) -> str:
    body: object = {"name": name, "arguments": args}
    for _ in range(nest):
        body = {"arguments": body}
    return "<tool_call>" + json.dumps(body) + "</tool_call>"


TURNS = st.one_of(
    st.builds(_json_call, NAMES, ARGS, st.integers(0, 3)),
    st.lists(PIECES | st.text(max_size=20), max_size=30).map("".join),
    st.builds(lambda name, args: "<think>" + _json_call(name, args, 0) + "</think>", NAMES, ARGS),
    st.builds(
        lambda n: '<tool_call>{"name": "get_frame", "arguments": {"t": ' + "[" * n + "1" + "]" * n + "}}</tool_call>",
        st.integers(0, 5000),
    ),
    st.builds(
        lambda k: '<tool_call>{"name": "get_frame", "arguments": {"t": 1, "pad": "' + "x" * k + '"}}</tool_call>',
        st.sampled_from([10, 10_000, 1_000_000]),
    ),
)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return medscope_load(str(make_data(tmp_path_factory.mktemp("hostile"), videos=1)), "eval")[0]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(turns=st.lists(TURNS, min_size=1, max_size=8))
def test_any_turn_gets_a_bounded_observation_and_errors_are_counted(sample, turns):
    limits = ToolLimits(max_calls=2, max_errors=3, max_observation_tokens=40)
    env = MedScopeEnv(limits)
    env.reset(sample)
    errors = 0
    for text in turns:
        obs = env.step(text)
        assert len(obs.text) < 1_000 and len(obs.images) <= limits.frame_count
        assert sum(v.shape[0] for v in obs.videos) <= limits.crop_max_frames
        if "error" in obs.info:
            errors += 1
            assert not obs.images and not obs.videos
        if obs.done:
            break
    assert env.errors == errors <= limits.max_errors
    assert env.calls <= limits.max_calls and env.tokens <= limits.max_observation_tokens
    text = "".join(turns)
    traj = Trajectory(sample.id, 0, None, None, 0, text, tool_calls=[], reward_info={"observations": []})
    for reward in (medscope_accuracy, medscope_format):
        assert 0.0 <= reward([sample], [traj])[0] <= 1.0


def test_hundreds_of_calls_stop_at_the_budgets(sample):
    env = MedScopeEnv(ToolLimits(max_calls=4, max_errors=3))
    env.reset(sample)
    call = '<tool_call>{"name": "crop_video", "arguments": {"start": 1, "end": 30}}</tool_call>'
    outcomes = []
    for _ in range(300):
        obs = env.step(call)
        outcomes.append("error" in obs.info)
        if obs.done:
            break
    assert outcomes == [False] * 4 + [True] * 3  # four calls run, three refusals, then the episode ends
