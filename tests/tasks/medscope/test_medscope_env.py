"""The MedScope environment: real tool observations with timestamps, every rule of the schema and the limits
enforced with an error observation, and the engine's fault path for a video that breaks mid-episode."""

from __future__ import annotations

import json

import pytest
from medscope_helpers import make_data

from mmreason.rollout.environment import Environment
from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.medscope.env import MedScopeEnv, ToolLimits


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    return medscope_load(str(make_data(tmp_path_factory.mktemp("medscope"))), "eval")


@pytest.fixture
def env(samples):
    env = MedScopeEnv()
    env.reset(samples[0])
    return env


def test_crop_returns_dense_frames_inside_the_window_with_their_timestamps(env):
    assert isinstance(env, Environment)
    obs = env.step("<think>look</think>" + call("crop_video", start=10, end=20))
    assert not obs.done and "error" not in obs.info
    stamps = obs.info["timestamps"]
    assert len(stamps) == 8 and all(10 <= t < 20 for t in stamps)  # crop_max_frames, inside the window
    assert min(b - a for a, b in zip(stamps, stamps[1:])) >= 0.5  # at most 2 fps
    assert obs.videos[0].shape[0] == 8 and obs.video_metadata[0]["frames_indices"] == [round(t * 2) for t in stamps]
    assert f"{stamps[0]:.1f}" in obs.text and f"{stamps[-1]:.1f}" in obs.text  # timestamps in the text
    assert obs.info["name"] == "crop_video" and obs.info["arguments"] == {"start": 10.0, "end": 20.0}


def test_get_frame_returns_the_frames_nearest_t_as_images(env):
    obs = env.step(call("get_frame", t=30.2))
    assert len(obs.images) == 2 and obs.info["timestamps"] == [30.0, 30.5]
    assert "30.0" in obs.text and "30.5" in obs.text


def test_an_answer_or_a_turn_without_a_call_ends_the_episode(env):
    assert env.step("<answer>B</answer><span>[3, 5]</span>").done
    assert env.step("I think it is B").done


@pytest.mark.parametrize(
    "text, reason",
    [
        (call("crop_video", start=10, end=5), "must be <"),
        (call("crop_video", start=-3, end=5), "minimum"),
        (call("crop_video", start=10, end=1e9), "maximum"),
        (call("crop_video", start=10, end=10.5), "shorter than"),
        (call("crop_video", start="10", end=20), "expected number"),
        (call("crop_video", start=10, end=20, fps=30), "unknown arguments"),
        (call("get_frame"), "missing required"),
        (call("open_file", path="/etc/passwd"), "unknown tool"),
        ('<tool_call>{"name": "get_frame", "arguments": {"t": NaN}}</tool_call>', "expected number"),
        ('<tool_call>{"name": "get_frame", "arguments": {"t": 1e999}}</tool_call>', "expected number"),
        ("<tool_call>__import__('os').system('true')</tool_call>", "not a JSON object"),
        ("<think>" + call("get_frame", t=3), "inside <think>"),
        ("<tool_call>" + call("get_frame", t=3), "opened twice"),
        ('<tool_call>{"name": "get_frame", "arguments": {"t": 3}}', "never closed"),
        (call("get_frame", t=3) + call("get_frame", t=4), "one tool call per turn"),
    ],
)
def test_a_bad_call_gets_an_error_observation_and_runs_nothing(env, text, reason):
    obs = env.step(text)
    assert reason in obs.info["error"] and obs.text.startswith("Error:")
    assert not obs.videos and not obs.images and env.calls == 0 and env.errors == 1


def test_the_call_budget_the_token_budget_and_the_error_limit_end_a_long_episode(samples):
    env = MedScopeEnv(ToolLimits(max_calls=3, max_errors=2))
    env.reset(samples[0])
    results = [env.step(call("get_frame", t=float(i))) for i in range(3)]
    assert all("error" not in r.info for r in results) and env.calls == 3
    spent = env.step(call("get_frame", t=9.0))
    assert "budget of 3 tool calls" in spent.info["error"] and not spent.done
    assert env.step(call("get_frame", t=9.0)).done  # the second error ends it
    small = MedScopeEnv(ToolLimits(max_observation_tokens=20))
    small.reset(samples[0])
    assert "error" not in small.step(call("crop_video", start=0, end=30)).info  # 16 tokens
    assert "observation budget" in small.step(call("crop_video", start=0, end=30)).info["error"]
    assert small.tokens <= 20


def test_limits_come_from_the_loader_and_unknown_keys_are_named(tmp_path_factory):
    path = str(make_data(tmp_path_factory.mktemp("limits"), videos=1))
    sample = medscope_load(path, "eval", tool_limits={"max_calls": 1})[0]
    env = MedScopeEnv()
    env.reset(sample)
    env.step(call("get_frame", t=1.0))
    assert "budget of 1 tool calls" in env.step(call("get_frame", t=2.0)).info["error"]
    with pytest.raises(ValueError, match="unknown keys \\['max_cals'\\]"):
        medscope_load(path, "eval", tool_limits={"max_cals": 1})


def test_a_video_that_breaks_mid_episode_raises_for_the_engine_to_count(samples, tmp_path):
    import shutil

    from mmreason.media import MediaError

    broken = tmp_path / "v.mp4"
    shutil.copy(samples[0].videos[0].path, broken)
    sample = samples[0]
    env = MedScopeEnv()
    env.reset(type(sample)(**{**sample.__dict__, "videos": [type(sample.videos[0])(str(broken))]}))
    broken.write_bytes(b"not a video any more")
    with pytest.raises(MediaError):
        env.step(call("crop_video", start=1, end=9))


def test_a_call_written_beside_the_answer_never_runs_and_earns_no_grounding(env, samples):
    from mmreason.tasks.medscope.rewards import tool_grounding
    from mmreason.types import Trajectory

    sample = samples[0]
    ((start, end),) = sample.meta["span"]
    text = call("crop_video", start=start, end=end) + "<answer>[1, 2]</answer>"
    obs = env.step(text)
    assert obs.done and obs.info == {"end": "answer"} and env.calls == 0
    traj = Trajectory(sample.id, 0, None, None, 0, text, tool_calls=[obs.info])  # what the rollout records
    assert tool_grounding([sample], [traj])["ground"][0] == 0.0
    assert tool_grounding([sample], [Trajectory(sample.id, 0, None, None, 0, text)])["ground"][0] == 1.0


def test_a_video_gone_before_the_episode_fails_its_first_step(samples, tmp_path):
    from mmreason.media import MediaError

    sample = samples[0]
    gone = type(sample)(**{**sample.__dict__, "videos": [type(sample.videos[0])(str(tmp_path / "gone.mp4"))]})
    env = MedScopeEnv()
    env.reset(gone)  # reset does not raise: the engine counts a failing step as this episode's fault
    with pytest.raises(MediaError, match="does not exist"):
        env.step(call("get_frame", t=1.0))
