"""Tools declared once (``Tool`` / ``@tool``), calls read from a turn in the family's format (bounded, strict JSON,
never evaluated), arguments checked against the schema, and a ``ToolEnvironment`` that turns every bad call into
an observation saying what was wrong (counted) and a good one into the tool's text and images."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from mmreason.rollout.tool_calls import CallFormatError, CallLimits, parse_calls
from mmreason.rollout.tool_env import ToolEnvironment
from mmreason.rollout.tools import Tool, ToolError, ToolOutput, check_arguments, tool
from mmreason.types import Sample

BOX = {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 4, "maxItems": 4}
SCHEMA = {
    "type": "object",
    "properties": {"box": BOX, "label": {"type": "string", "enum": ["a", "b"]}},
    "required": ["box"],
}


def call(name: str, **arguments) -> str:
    return f"<think>look</think><tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class Crop(ToolEnvironment):
    max_errors = 2
    max_tool_calls = 2

    def setup(self, sample):
        self.image = sample.images[0]

    @tool(parameters=SCHEMA)
    def crop(self, box, label="a"):
        """Crop the image to box."""
        if box[2] <= box[0]:
            raise ToolError("x1 must exceed x0")
        w, h = self.image.size
        return ToolOutput(text=f"crop {label}", images=[self.image.crop((int(box[0] * w), 0, int(box[2] * w), h))])

    @tool
    def broken(self):
        """A tool with a bug."""
        return 42


def _env() -> Crop:
    env = Crop()
    env.reset(Sample(id="s", messages=[], images=[Image.new("RGB", (100, 50), "red")]))
    return env


def test_a_tool_is_declared_once_and_its_schema_is_the_templates_function_record():
    env = Crop()
    assert [t.name for t in env.tools()] == ["crop", "broken"]
    assert env.tool_schemas()[0] == {
        "type": "function",
        "function": {"name": "crop", "description": "Crop the image to box.", "parameters": SCHEMA},
    }
    assert isinstance(Crop.crop, Tool) and env.max_turns == 3
    with pytest.raises(ValueError, match="type 'object'"):
        Tool("t", "", {"type": "array"}, print)


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ({"box": [0, 0, 1, 1]}, None),
        ({"box": [0, 0, 1, 1], "label": "b"}, None),
        ({}, "missing box"),
        ({"box": [0, 0, 1]}, "3 items"),
        ({"box": [0, 0, 1, 2]}, "arguments.box[3]: 2 must be <= 1"),
        ({"box": [0, 0, "1", 1]}, "expected number, got str"),
        ({"box": [0, 0, True, 1]}, "expected number, got bool"),
        ({"box": [0, 0, float("nan"), 1]}, "not a finite number"),
        ({"box": [0, 0, 1, 1], "label": "c"}, "is not one of"),
        ({"box": [0, 0, 1, 1], "zoom": 2}, "unknown argument 'zoom'"),
    ],
)
def test_arguments_are_checked_against_the_schema(arguments, problem):
    got = check_arguments(arguments, SCHEMA)
    assert got is None if problem is None else problem in got, got


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<tool_call>{'name': 'crop'}</tool_call>", "not JSON"),  # a Python literal is not read
        ('<tool_call>{"name": "crop", "arguments": {"box": [NaN, 0, 1, 1]}}</tool_call>', "not JSON"),
        ('<tool_call>{"name": "crop", "arguments": [1]}</tool_call>', "not a JSON object"),
        ('<tool_call>{"name": "crop", "arguments": {}, "code": "rm"}</tool_call>', "only name and arguments"),
        ('<tool_call>{"name": "crop"}', "never closed"),
        ('{"name": "crop"}</tool_call>', "without its"),
        ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>', "at most 1"),
        ("<tool_call>" + "[" * 20 + "]" * 20 + "</tool_call>", "nested deeper"),
        ("<tool_call>" + "x" * 5000 + "</tool_call>", "over the limit of 4000"),
        ("x" * 30_000, "over the limit of 20000"),
    ],
)
def test_malformed_or_oversized_calls_are_refused_with_a_reason(text, problem):
    with pytest.raises(CallFormatError, match=problem):
        parse_calls(text)


def test_calls_parse_from_the_hermes_format():
    assert parse_calls("no call here") == []
    (one,) = parse_calls('<tool_call>\n{"name": "crop", "arguments": "{\\"box\\": [0, 0, 1, 1]}"}\n</tool_call>')
    assert (one.name, one.arguments) == ("crop", {"box": [0, 0, 1, 1]})  # arguments serialised twice: read
    two = parse_calls(call("crop", box=[0, 0, 1, 1]) + call("crop", box=[0, 0, 1, 1]), limits=CallLimits(max_calls=2))
    assert len(two) == 2


def test_a_good_call_returns_the_tools_text_and_images():
    env = _env()
    obs = env.step(call("crop", box=[0.5, 0, 1, 1], label="b"))
    assert not obs.done and "<tool_response>\ncrop b\n</tool_response>" == obs.text
    assert [im.size for im in obs.images] == [(50, 50)]
    assert obs.info == {"name": "crop", "arguments": {"box": [0.5, 0, 1, 1], "label": "b"}, "images": 1, "calls": 1}
    assert env.step("<answer>red</answer>").done  # a turn without a call: the model answered


def test_bad_calls_are_observations_that_say_what_was_wrong_then_end_the_episode():
    env = _env()
    obs = env.step(call("rotate", angle=90))
    assert obs.info == {"error": "unknown tool 'rotate'", "tool": "rotate"} and not obs.done
    assert obs.text.startswith("Error: unknown tool 'rotate'") and "crop, broken" in obs.text and not obs.images
    obs = env.step(call("crop", box=[0.5, 0, 0.2, 1]))  # the tool refuses (ToolError)
    assert obs.info["error"] == "x1 must exceed x0" and obs.done  # max_errors = 2


def test_the_call_budget_is_enforced_and_a_tools_bug_is_a_fault_not_an_observation():
    env = _env()
    for _ in range(2):
        assert "error" not in env.step(call("crop", box=[0, 0, 1, 1])).info
    assert "budget of 2 tool calls is spent" in env.step(call("crop", box=[0, 0, 1, 1])).info["error"]
    with pytest.raises(TypeError, match="returned a int"):  # the engine ends the episode and counts a fault
        _env().step(call("broken"))
