"""Shared format rewards: think/answer (TON), tool-call turns. The packs' own format rewards are tested with
their pack (tests/tasks/docseeker/test_docseeker_format.py, tests/tasks/mrag/test_mrag_route_step.py)."""

from __future__ import annotations

from reward_factory import score, traj

from mmreason.rewards.format import tool_call_format
from mmreason.types import Turn


def test_think_answer_format_accepts_ton_empty_thought():
    # docs/methods/packs.md#ton: the format reward of the empty-think string is 1.
    assert score("think_answer_format", "<think>\n\n</think><answer>1</answer>") == 1.0
    assert score("think_answer_format", "<think>reasoning</think>\n<answer>B</answer>") == 1.0
    assert score("think_answer_format", "<think>\n\n</think><answer>1</answer>", kwargs={"strip": False}) == 1.0


def test_think_answer_format_rejects_broken_schemas():
    for text in [
        "<answer>1</answer>",
        "<think>a</think>",
        "<think>a</think><answer>1</answer><think>b</think>",
        "<think><think>a</think></think><answer>1</answer>",
        "Sure! <think>a</think><answer>1</answer>",
        "<think>a</think><answer>1",
        "",
        None,
    ]:
        assert score("think_answer_format", text) == 0.0, text
    assert score("think_answer_format", "<think>a</think><action>tap</action>", kwargs={"answer_tag": "action"}) == 1.0


def _call(name, **arguments):
    import json

    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_tool_call_format_over_turns():
    call = "<think>look closer</think>" + _call("crop_video", start=3, end=9)
    answer = "<think>seen it</think><answer>B</answer>"
    turns = [
        Turn("assistant", call, 0, 1),
        Turn("observation", "<observation>frames</observation>", 1, 2),
        Turn("assistant", answer, 2, 3),
    ]
    fmt = tool_call_format.__wrapped__
    assert fmt(None, traj("", turns=turns)) == 1.0
    # the same trajectory as one text, observations inline
    assert score("tool_call_format", call + "<observation>frames</observation>" + answer) == 1.0
    assert score("tool_call_format", answer) == 1.0  # no tool needed
    assert score("tool_call_format", call) == 0.0  # never answered
    assert score("tool_call_format", call, kwargs={"require_answer": False}) == 1.0
    broken = "<think>x</think><tool_call>{not json}</tool_call><observation>e</observation>" + answer
    assert score("tool_call_format", broken) == 0.0
    assert score("tool_call_format", answer + "<observation>o</observation>" + call) == 0.0  # answer before a call
