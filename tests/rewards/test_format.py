"""Format rewards: think/answer (TON), DocSeeker ALR, tool-call turns, R1-Router steps."""

from __future__ import annotations

from reward_factory import score, traj

from mmreason.rewards.format import skip_ratio, tool_call_format
from mmreason.types import Turn

DOCSEEKER_OK = (
    "<think>\n\\boxed{Question Analysis}\nThe question asks for the page.\n"
    "\\boxed{Evidence Localization}\nPage 6 holds the table.\n"
    "\\boxed{Reasoning Process}\nThe table says so.\n</think>\n"
    '<answer>\n{"evidence_pages": [6], "answer": "Page 6"}\n</answer>'
)


def test_think_answer_format_accepts_ton_empty_thought():
    # docs/algorithms.md §6: the format reward of the empty-think string is 1.
    assert score("think_answer_format", "<think>\n\n</think><answer>1</answer>") == 1.0
    assert score("think_answer_format", "<think>reasoning</think>\n<answer>B</answer>") == 1.0
    assert (
        score("think_answer_format", "<think>\n\n</think><answer>1</answer>", kwargs={"strip": False}) == 1.0
    )


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
    assert (
        score("think_answer_format", "<think>a</think><action>tap</action>", kwargs={"answer_tag": "action"})
        == 1.0
    )


def test_skip_think():
    # docs/algorithms.md §6: skip_ratio(["<think>\n\n</think><answer>1</answer>"]) = 1.
    assert skip_ratio(["<think>\n\n</think><answer>1</answer>"]) == 1.0
    assert skip_ratio(["<think>\n\n</think><answer>1</answer>", "<think>x</think><answer>1</answer>"]) == 0.5
    assert score("skip_think", "<think> </think><answer>1</answer>") == 1.0
    assert score("skip_think", "<answer>1</answer>") == 0.0


def test_docseeker_format_worked_examples():
    assert score("docseeker_format", DOCSEEKER_OK) == 1.0
    single_quoted = DOCSEEKER_OK.replace(
        '{"evidence_pages": [6], "answer": "Page 6"}', "{'evidence_pages': [6], 'answer': 'Page 6'}"
    )
    assert score("docseeker_format", single_quoted) == 1.0
    # missing \boxed{Reasoning Process} -> R_fmt = 0 (docs/algorithms.md §1)
    assert score("docseeker_format", DOCSEEKER_OK.replace("\\boxed{Reasoning Process}", "")) == 0.0
    # headers out of order
    swapped = DOCSEEKER_OK.replace("Evidence Localization", "TMP").replace(
        "Reasoning Process", "Evidence Localization"
    )
    assert score("docseeker_format", swapped.replace("TMP", "Reasoning Process")) == 0.0
    # think must *start* with \boxed{Question Analysis}
    assert score("docseeker_format", DOCSEEKER_OK.replace("<think>\n", "<think>Intro. ")) == 0.0
    # answer body must be a dict
    assert (
        score(
            "docseeker_format", DOCSEEKER_OK.replace('{"evidence_pages": [6], "answer": "Page 6"}', "Page 6")
        )
        == 0.0
    )


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
    assert (
        score("tool_call_format", answer + "<observation>o</observation>" + call) == 0.0
    )  # answer before a call


def test_route_format():
    step = (
        "<think>need the year</think><sub-question>When was X built?</sub-question><ret>Text Retriever</ret>"
    )
    assert score("route_format", step) == 1.0
    assert score("route_format", "<think>done</think><answer>1889</answer>") == 1.0
    assert score("route_format", step.replace("Text Retriever", "Text Retriever, Table Retriever")) == 0.0
    assert score("route_format", step.replace("Text Retriever", "Web Search")) == 0.0
    assert score("route_format", step + "<answer>x</answer>") == 0.0
