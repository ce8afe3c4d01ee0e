"""Hostile completions: every built-in reward scores them in bounded time with 0 or None, never raising."""

from __future__ import annotations

import math
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from reward_factory import sample, score, traj

from mmreason.rewarding import REWARDS, reward_info

MODEL_REWARDS = {
    "vlm_judge",
    "served_judge",
}  # need a model (a directory, a server): test_judge.py, test_served_judge.py
PER_CALL_SECONDS = 10.0  # generous for a loaded 2-core machine; typical calls take milliseconds


def _unicode_junk(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    pool = [
        "\u0000",
        "\u200b",
        "\u202e",
        "\ufeff",
        "\ud800",
        "\U0001f600",
        "\u0301",
        "ß",
        "İ",
        "<",
        ">",
        "{",
        "}",
        "\\boxed{",
        "</answer>",
        "<think>",
        "\n",
        "١٢٣",
        "Ⅻ",
    ]
    return "".join(rng.choice(pool) for _ in range(n))


HOSTILE = {
    "10MB": "a" * 10_000_000,
    "10MB_tail_answer": "x" * 10_000_000 + "<answer>C</answer>",
    "tag_soup": "<think>" * 200_000 + "</answer>" * 200_000,
    "unbalanced": "<think><answer></think></answer><tool_call>" * 50_000,
    "unicode_junk": _unicode_junk(500_000),
    "deep_json": "<answer>" + "[" * 100_000 + "]" * 100_000 + "</answer>",
    "deep_dict": '<answer>{"evidence_pages": ' + "[" * 50_000 + "1" + "]" * 50_000 + "}</answer>",
    "tool_bomb": ("<tool_call>" + "{" * 10_000 + "</tool_call>") * 50,
    "boxed_bomb": "\\boxed{" * 300_000,
    "answer_is_spam": "the answer is " * 100_000,
    "paren_spam": "(" * 1_000_000,
    "box_spam": "[1, 2, 3" * 100_000,
    "time_spam": "0:" * 500_000 + "1 to " * 100_000,
    "number_spam": "1," * 1_000_000,
    "latex_bomb": "<answer>" + "\\frac{" * 400 + "1" + "}" * 400 + "^{9^{9^{9}}}</answer>",
    "power_tower": "<answer>9^{9^{9^{9}}}</answer>",
    "not_a_string": 12345,
    "none": None,
    "bytes": b"\xff\xfe<answer>C</answer>",
}

COLUMNS = dict(
    choices=["Paris", "London", "Berlin", "Madrid"],
    evidence_pages=[3],
    span=[5, 15],
    duration=60,
    gt_boxes=[10, 10, 50, 50],
    image_size=[100, 100],
    sub_question="When was it built?",
    knowledge_base="Text Retriever",
)


def _values(out, name):
    if isinstance(out, dict):
        info = reward_info(REWARDS.get(name))
        weighted = [k for k in out if not info or k not in info.diagnostics]
        return [v for k in weighted for v in out[k]]
    return list(out)


@pytest.mark.parametrize("name", [n for n in REWARDS.names() if n not in MODEL_REWARDS])
def test_hostile_completions_score_zero_or_none_in_bounded_time(name):
    fn = REWARDS.get(name)
    answer = "7" if name in ("math", "numeric") else "C"
    for label, text in HOSTILE.items():
        s = sample(answer, **COLUMNS)
        start = time.monotonic()
        out = fn([s], [traj(text, length=4)], **KWARGS.get(name, {}))
        elapsed = time.monotonic() - start
        assert elapsed < PER_CALL_SECONDS, (name, label, elapsed)
        for value in _values(out, name):
            assert value is None or value == 0.0 or (name, label) in EXPECTED_NONZERO, (name, label, value)
            assert value is None or math.isfinite(value)


# A few hostile texts do carry a real answer at their end; reading it is correct, not a failure.
EXPECTED_NONZERO = {
    ("mcq", "10MB_tail_answer"),
    ("mcq", "bytes"),
    ("anls", "bytes"),
    ("relaxed_accuracy", "bytes"),
    ("vqa_exact", "bytes"),
    ("token_recall", "bytes"),
    ("anls", "10MB_tail_answer"),
    ("relaxed_accuracy", "10MB_tail_answer"),
    ("vqa_exact", "10MB_tail_answer"),
    ("token_recall", "10MB_tail_answer"),
}
# ANLS with the RL threshold 0 gives partial credit to any string sharing a character with the reference
# (by definition), so it runs here with the evaluation threshold.
KWARGS = {"anls": {"threshold": 0.5}}


FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<tool_call>",
    "</tool_call>",
    "<span>",
    "</span>",
    "<time>",
    "</time>",
    "<sub-question>",
    "</sub-question>",
    "<ret>",
    "</ret>",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    '"',
    "'",
    ":",
    ",",
    "\\boxed{",
    "answer is",
    " A",
    "(B)",
    "1",
    "2.5",
    "1:05",
    " to ",
    "\n",
    "Text Retriever",
    '"name"',
    '"arguments"',
    "crop_video",
    "é",
    "\u202e",
]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=300))
def test_fragment_soup_never_raises(parts):
    text = "".join(parts)
    s = sample("C", **COLUMNS)
    for name in REWARDS.names():
        if name in MODEL_REWARDS or name == "math":  # math-verify is slow per call; covered above
            continue
        for value in _values(REWARDS.get(name)([s], [traj(text)]), name):
            assert value is None or (math.isfinite(value) and -1.0 <= value <= 1.0), (name, text, value)


# Texts of 20,000 characters that made chained whitespace quantifiers backtrack (an "answer ... 1" phrase with a
# long whitespace run took minutes in the multiple-choice parser) and numbers too big for a float.
BIG = "9" * 400
WHITESPACE_AND_NUMBERS = {
    "final_answer_spaces": "final answer" + " " * 20_000 + "1",
    "answer_is_spaces": "the answer is" + " \t" * 10_000 + "(1",
    "box_pair_spaces": "(1, 1)" + " " * 20_000 + "x",
    "box_list_spaces": "[1" + " " * 20_000 + ",",
    "digit_run": "(" + "1" * 20_000,
    "newline_run": "answer:" + "\n" * 20_000 + "C?",
    "big_int_tool_call": (
        '<tool_call>{"name": "crop_video", "arguments": {"start": ' + BIG + ', "end": 3}}</tool_call>'
        '<tool_call>{"name": "get_frame", "arguments": {"t": ' + BIG + "}}</tool_call>"
    ),
}
STRICT_SECONDS = 0.25  # each takes < 10 ms now; the old parsers took 0.35 s (spans, boxes) to hours (mcq)


@pytest.mark.parametrize("name", [n for n in REWARDS.names() if n not in MODEL_REWARDS])
def test_long_whitespace_runs_and_huge_numbers_are_linear_and_never_raise(name):
    fn = REWARDS.get(name)
    fn([sample("C", **COLUMNS)], [traj("warm up: the first call imports its library", length=4)])
    for label, text in WHITESPACE_AND_NUMBERS.items():
        start = time.monotonic()
        out = fn([sample("C", **COLUMNS)], [traj(text, length=4)], **KWARGS.get(name, {}))
        elapsed = time.monotonic() - start
        assert elapsed < STRICT_SECONDS, (name, label, elapsed)
        for value in _values(out, name):
            assert value is None or math.isfinite(value), (name, label, value)


def test_an_out_of_range_tool_argument_is_invalid_not_an_error():
    from mmreason.rewarding import RewardRunner, RewardSpec

    runner = RewardRunner([RewardSpec("tool_call_valid"), RewardSpec("tool_grounding")], max_reward_errors=0)
    text = WHITESPACE_AND_NUMBERS["big_int_tool_call"]
    batch = runner([sample("x", span=[5, 15], duration=60)], [traj(text, length=4)])
    assert runner.total_errors == 0 and not batch.errors
    assert batch.column("tool_call_valid").item() == 0.0  # neither call is in range
    assert batch.column("tool_grounding/fidelity").item() == 0.0  # and neither touches the evidence


def test_a_python_power_is_its_value_not_its_base():
    # math-verify's LaTeX reader alone takes "3**2" as 3: a completion naming the base scored as right
    assert score("math", "<answer>3**2</answer>", "3") == 0.0
    assert score("math", "<answer>3**2</answer>", "9") == 1.0
    assert score("math", "<answer>(x+1)**2</answer>", "(x+1)^2") == 1.0
    assert score("math", "The answer is **9**.", "9") == 1.0  # markdown bold is not a power
