"""Every parser of model output runs in linear time on hostile text, and never raises.

Covered: the shared parsers (``mmreason.parsing``: tags, answers, literals, numbers), the reward modules'
extractors (choices, yes/no, numbers, page lists, spans, time points, boxes, tool calls, routing steps, formats,
text matching) and every registered task pack's answer reading: its eval metrics, its default rewards and its
``extract_answer``. Each runs on adversarial texts of 20,000 characters (long whitespace runs, long digit runs,
deeply nested brackets, repeated tags).

The time bound per call is calibrated on this machine, now: a known-quadratic negative control (``\\s+x``
searched in 20,000 spaces, the shape of the backtracking the old choice and box parsers had) is timed, and each
call must take under 1/20 of it (and under 1 s whatever the machine). A quadratic parser blows that bound by
construction; a linear one meets it with two orders of magnitude to spare, so load on the machine cannot make
the test flake (and a call gets up to three tries, the fastest counting).

Then hypothesis fuzzes each parser family on soups of its own syntax and checks what it returns.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason import parsing
from mmreason.rewarding.resolve import resolve_reward
from mmreason.rewards.accuracy import number_of, relaxed_correctness, yes_no_of
from mmreason.rewards.choice import extract_choice
from mmreason.rewards.evidence import answered_span, cited_pages, time_points
from mmreason.rewards.format import assistant_turns, parse_tool_call, think_answer_bodies, tool_turn_kind
from mmreason.rewards.grounding import parse_boxes
from mmreason.rewards.textmatch import anls_score, token_f1, vqa_normalize
from mmreason.rewards.tools import calls_in
from mmreason.taskpack import TASKS
from mmreason.tasks.docseeker.rewards import docseeker_format_score
from mmreason.tasks.medscope.rewards import tool_calls_of
from mmreason.tasks.mrag.route import KNOWLEDGE_BASES, RouteStep, parse_route_step
from mmreason.types import Sample, Trajectory

N = 20_000
CHOICES = ["Paris", "London", "Berlin", "Madrid"]

HOSTILE = {
    "space_run": "the answer is" + " " * N + "(1",
    "mixed_whitespace_run": "final answer:" + " \t\n\r\f\v" * (N // 6) + "C",
    "whitespace_in_answer": "<answer>" + " " * N + "[1, 2] to 3</answer>",
    "digit_run": "1" * N,
    "digit_run_answer": "<answer>" + "9" * N + "</answer>",
    "digit_run_pages": '<answer>{"evidence_pages": [' + "1" * N + '], "answer": "x"}</answer>',
    "digits_and_commas": "1," * (N // 2),
    "digits_and_colons": "0:" * (N // 2) + "1 to 2",
    "nested_brackets": "<answer>" + "[" * (N // 2) + "]" * (N // 2) + "</answer>",
    "nested_braces": "<answer>" + "{" * (N // 2) + "}" * (N // 2) + "</answer>",
    "open_parens": "(" * N,
    "open_boxed": "\\boxed{" * (N // 7),
    "nested_answer_tags": "<answer>" * (N // 17) + "</answer>" * (N // 17),
    "repeated_think": "<think></think>" * (N // 15),
    "repeated_route_tags": "<think>x</think><sub-question>" * (N // 30) + "<ret>Text Retriever</ret>",
    "repeated_tool_calls": '<tool_call>{"name": "crop_video", "arguments": {"start": 1' * (N // 60),
    "box_pair_spaces": "(1, 1)" + " " * N + "x",
    "box_pairs": "(1,1),(2,2) " * (N // 12),
    "list_box_spaces": "[1" + " " * N + ",",
    "list_boxes": "[1, 2, 3, " * (N // 10),
    "span_words": "1 to " * (N // 5),
    "answer_phrases": "the answer is " * (N // 14),
    "option_lines": "(A)\n" * (N // 4),
    "dict_spaces": '<answer>{"evidence_pages":' + " " * N + "[1]}</answer>",
}


def _traj(text: str) -> Trajectory:
    return Trajectory(
        sample_id="h",
        group_id=0,
        token_ids=torch.zeros(4, dtype=torch.long),
        action_mask=torch.ones(4, dtype=torch.long),
        prompt_length=0,
        completion_text=text,
    )


# name -> fn(text): the shared and reward-module extractors, each as the rewards call it
PARSERS: dict[str, Callable[[str], Any]] = {
    **{
        f"final_answer[{mode}]": (lambda t, m=mode: parsing.final_answer(t, m))
        for mode in ("auto", "answer_tag", "boxed", "answer_dict", "none")
    },
    "parse_dict": lambda t: parsing.parse_dict(t),
    "parse_literal": lambda t: parsing.parse_literal(t),
    "parse_schema": lambda t: parsing.parse_schema(t, ("think", "answer")),
    "all_tag_bodies": lambda t: parsing.all_tag_bodies(t, "answer"),
    "last_boxed": lambda t: parsing.last_boxed(t),
    "numbers_in": lambda t: parsing.numbers_in(t),
    "last_number": lambda t: parsing.last_number(t),
    "parse_number": lambda t: parsing.parse_number(t),
    "extract_choice": lambda t: extract_choice(t, CHOICES),
    "extract_choice[no choices]": lambda t: extract_choice(t),
    "yes_no_of": yes_no_of,
    "number_of": number_of,
    "relaxed_correctness": lambda t: relaxed_correctness(t, "12"),
    "vqa_normalize": vqa_normalize,
    "anls_score": lambda t: anls_score(t, ["Paris"]),
    "token_f1": lambda t: token_f1(t, "the answer"),
    "cited_pages": cited_pages,
    "answered_span": answered_span,
    "time_points": time_points,
    "parse_boxes": parse_boxes,
    "parse_tool_call": parse_tool_call,
    "calls_in": lambda t: calls_in(_traj(t)),
    "tool_calls_of": lambda t: tool_calls_of(_traj(t)),
    "assistant_turns": lambda t: assistant_turns(_traj(t)),
    "tool_turn_kind": tool_turn_kind,
    "parse_route_step": parse_route_step,
    "think_answer_bodies": think_answer_bodies,
    "docseeker_format_score": docseeker_format_score,
}


def _sample(answer: Any, **meta: Any) -> Sample:
    return Sample(id="h", messages=[{"role": "user", "content": "q"}], answer=answer, meta=meta)


# Samples that send each pack's scoring down each of its branches (answer types, step kinds, task types).
PACK_SAMPLES = {
    "docseeker": [_sample("Paris", evidence_pages=[2], num_pages=12), _sample("Paris", evidence_pages=[-1])],
    "medscope": [
        _sample("B", task_type="qa", answer_kind="mcq", choices=CHOICES, span=[5, 15], duration=60),
        _sample("12", task_type="qa", answer_kind="numeric", span=[5, 15], duration=60),
        _sample("x", task_type="temporal_grounding", span=[5, 15], duration=60),
        _sample("word", task_type="grounded_qa", answer_kind="free", span=[5, 15], duration=60),
    ],
    "mmlongbench_doc": [
        _sample(
            fmt_answer[1],
            answer_format=fmt_answer[0],
            evidence_pages=[2],
            num_pages=12,
            evidence_sources=["Table"],
            retrieved_pages=[1, 2],
        )
        for fmt_answer in (
            ("Int", "12"),
            ("Float", "1.5"),
            ("Str", "Paris"),
            ("List", "['a', 'b']"),
            ("None", "Not answerable"),
        )
    ],
    "mrag": [
        _sample("Paris", step_type="ret", step_index=0, knowledge_base="Text Retriever", sub_question="Where?"),
        _sample("Paris", step_type="ans", step_index=1),
        _sample("Paris", step_type="episode", gold_steps=[{"kb": "Text Retriever"}]),
    ],
    "shapes": [_sample("red")],
    "generic": [
        _sample("B", answer_kind="mcq", choices=["Paris", "Rome", "Oslo"], answer_format="think_boxed"),
        _sample("12.5", answer_kind="numeric", answer_format="think_answer"),
        _sample("\\frac{1}{2}", answer_kind="math", answer_format="plain"),
        _sample("a long answer of several words here", answer_kind="anls"),
        _sample("cat", answer_kind="exact"),
    ],
    "videoqa": [
        _sample("B", answer_type="mcq", choices=CHOICES),
        _sample("12", answer_type="numeric"),
        _sample("word", answer_type="free"),
        _sample("x", answer_type="span", span=[5, 15], duration=60),
    ],
    "mathvista": [
        _sample("1.2", question_type="free_form", answer_type="float", precision=1, choices=None),
        _sample("7", question_type="free_form", answer_type="integer", precision=None, choices=None),
        _sample("[1, 2]", question_type="free_form", answer_type="list", precision=None, choices=None),
        _sample(
            "Paris", question_type="multi_choice", answer_type="text", precision=None, choices=["Paris", "Rome", "Oslo"]
        ),
    ],
    "mmmu": [
        _sample("B", question_type="multiple-choice", options=["Paris", "Rome", "Oslo"], benchmark="MMMU"),
        _sample("B", question_type="multiple-choice", options=["Paris", "Rome", "Oslo"], benchmark="MMMU-Pro"),
        _sample("12.5", question_type="open", options=[], benchmark="MMMU"),
    ],
    "chartqa": [_sample("12", split="human"), _sample(["Japan", "JP"], split="augmented")],
    "docvqa": [_sample(["1 May 1999", "May 1"], question_types=["layout"])],
    "videomme": [_sample("B", duration="short", options=["A. 1", "B. 2", "C. 3", "D. 4"])],
    "vision": [
        _sample("yes", answer_type="yes/no", domain="perception"),
        _sample("12", answer_type="numeric", domain="chart", answer_format="think"),
        _sample("B", answer_type="mcq", choices=CHOICES, domain="reasoning"),
        _sample("red", answer_type="free-form", domain="perception"),
    ],
}


def _pack_calls() -> dict[str, Callable[[str], Any]]:
    """name -> fn(text) for every pack's metrics (on each of its samples), default rewards and extract_answer."""
    calls: dict[str, Callable[[str], Any]] = {}
    for name, pack in TASKS.items():
        samples = PACK_SAMPLES.get(name, [_sample("x")])
        for metric_name, metric in pack.metrics.items():
            for k, s in enumerate(samples):
                calls[f"{name}.metric.{metric_name}[{k}]"] = lambda t, m=metric, s=s: m(s, t)
        for spec in pack.rewards:
            fn, kwargs = resolve_reward(spec["name"]), dict(spec.get("kwargs", {}))
            for k, s in enumerate(samples):
                calls[f"{name}.reward.{spec['name']}[{k}]"] = lambda t, f=fn, s=s, kw=kwargs: f([s], [_traj(t)], **kw)
        if pack.extract_answer is not None:
            calls[f"{name}.extract_answer"] = pack.extract_answer
    return calls


def test_every_pack_is_covered():
    """A new pack gets its own samples here, so its scoring branches are exercised, not just the default."""
    assert sorted(TASKS.names()) == sorted(PACK_SAMPLES)


@pytest.fixture(scope="module")
def bound_s() -> float:
    """1/20 of a known-quadratic parse of 20,000 characters on this machine (at most 1 s)."""
    quadratic = re.compile(r"\s+x")
    text = " " * N + "y"
    start = time.perf_counter()
    assert quadratic.search(text) is None
    control = time.perf_counter() - start
    return min(control / 20, 1.0)


def _fastest(fn: Callable[[str], Any], text: str, bound: float, tries: int = 3) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(tries):  # a descheduled process slows one try, a quadratic parser every try
        start = time.perf_counter()
        out = fn(text)
        best = min(best, time.perf_counter() - start)
        if best < bound:
            break
    return best, out


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value) or math.isnan(value)  # NaN = "does not apply" for metrics
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_every_parser_is_linear_on_hostile_text(label, bound_s):
    text = HOSTILE[label]
    assert 0.9 * N <= len(text) <= 1.2 * N
    slow = {}
    for name, fn in {**PARSERS, **_pack_calls()}.items():
        elapsed, out = _fastest(fn, text, bound_s)
        if elapsed >= bound_s:
            slow[name] = round(elapsed, 4)
        assert _finite(out), (name, out)
    assert not slow, f"over {bound_s:.4f} s (1/20 of a quadratic parse) on {label!r}: {slow}"


def test_the_bound_catches_a_quadratic_parser(bound_s):
    """The negative control through the same harness: the old box-pair pattern (whitespace runs chained
    between two groups) on a whitespace run is over the bound, by far."""
    old_box_pair = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*,?\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
    elapsed, _ = _fastest(lambda t: old_box_pair.findall(t), HOSTILE["box_pair_spaces"], bound_s, tries=1)
    assert elapsed >= bound_s
    elapsed, _ = _fastest(parse_boxes, HOSTILE["box_pair_spaces"], bound_s)  # today's parser on the same text
    assert elapsed < bound_s


# ---- hypothesis: each parser family on soups of its own syntax ------------------------------------------------


def _soup(fragments: list[str], max_size: int = 120):
    return st.lists(st.sampled_from(fragments), max_size=max_size).map("".join)


SPACE = [" ", "  ", "\t", "\n", "\u00a0", "\u2028"]
NUMBERS = ["0", "1", "-1", "2.5", "1e309", "9" * 400, "NaN", "Infinity", "-0", "1_000", "0x10", "١٢"]
JSON = ["{", "}", "[", "]", ":", ",", '"', "'", "null", "true", "None", "\\", "\\u00e9"]

TOOL_SOUP = _soup(
    JSON
    + NUMBERS
    + SPACE
    + [
        '"name"',
        '"arguments"',
        '"crop_video"',
        '"get_frame"',
        '"start"',
        '"end"',
        '"t"',
        '"window"',
        '"{\\"start\\": 1}"',
    ]
)


@settings(max_examples=150, deadline=None)
@given(TOOL_SOUP)
def test_tool_calls_parse_to_a_name_and_an_argument_dict_or_none(text):
    call = parse_tool_call(text)
    assert call is None or (isinstance(call["name"], str) and isinstance(call["arguments"], dict))
    for parsed in calls_in(_traj(f"<tool_call>{text}</tool_call>" * 2)):
        assert parsed is None or isinstance(parsed["arguments"], dict)
    assert all(isinstance(c["arguments"], dict) for c in tool_calls_of(_traj(f"<tool_call>{text}</tool_call>")))


ANSWER_SOUP = _soup(
    JSON + NUMBERS + SPACE + ["<answer>", "</answer>", '"answer"', '"evidence_pages"', "\\boxed{", "Paris", "x"]
)


@settings(max_examples=150, deadline=None)
@given(ANSWER_SOUP, st.sampled_from(["auto", "answer_tag", "boxed", "answer_dict", "none"]))
def test_answer_dicts_give_a_bounded_string(text, mode):
    answer = parsing.final_answer(text, mode)
    assert isinstance(answer, str) and len(answer) <= 4_000 and answer == answer.strip()
    parsed = parsing.parse_dict(text)
    assert parsed is None or isinstance(parsed, dict)
    if mode == "answer_dict" and answer:
        assert isinstance(parsing.parse_dict(parsing.last_tag_body(text, "answer").strip()), dict)


@settings(max_examples=150, deadline=None)
@given(ANSWER_SOUP)
def test_page_lists_are_sets_of_integers_or_none(text):
    pages = cited_pages(text)
    assert pages is None or (isinstance(pages, set) and all(type(p) is int for p in pages))
    if pages is not None:
        assert parsing.parse_dict(parsing.last_tag_body(text, "answer")) is not None


SPAN_SOUP = _soup(
    NUMBERS
    + SPACE
    + [
        "[",
        "]",
        ",",
        "<span>",
        "</span>",
        "<answer>",
        "</answer>",
        "<time>",
        "</time>",
        " to ",
        "-",
        "–",
        "until",
        ":",
        "1:05",
        "0:00:07",
        "s",
        " seconds",
        ".",
    ]
)


@settings(max_examples=150, deadline=None)
@given(SPAN_SOUP)
def test_spans_and_time_points_are_ordered_finite_seconds(text):
    span = answered_span(text)
    assert span is None or (math.isfinite(span[0]) and math.isfinite(span[1]) and span[0] <= span[1])
    points = time_points(text)
    assert len(points) <= 32 and all(isinstance(p, float) and math.isfinite(p) for p in points)


BOX_SOUP = _soup(NUMBERS + SPACE + ["[", "]", "(", ")", ",", "<answer>", "</answer>", '{"bbox_2d": ', "}", "."])


@settings(max_examples=150, deadline=None)
@given(BOX_SOUP)
def test_boxes_are_at_most_32_finite_quadruples(text):
    boxes = parse_boxes(text)
    assert len(boxes) <= 32
    assert all(len(b) == 4 and all(math.isfinite(v) for v in b) for b in boxes)


TAG_FREE = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    _soup(
        [
            "<think>",
            "</think>",
            "<sub-question>",
            "</sub-question>",
            "<ret>",
            "</ret>",
            "<answer>",
            "</answer>",
            *KNOWLEDGE_BASES,
            "Text Retriever, Table Retriever",
            "x",
            *SPACE,
        ]
    )
)
def test_routing_steps_name_one_known_knowledge_base_or_answer(text):
    step = parse_route_step(text)
    assert step is None or (step.answer is None) == (step.knowledge_base in KNOWLEDGE_BASES)


@settings(max_examples=100, deadline=None)
@given(TAG_FREE, TAG_FREE.filter(str.strip), st.sampled_from(KNOWLEDGE_BASES), TAG_FREE)
def test_a_written_routing_step_reads_back(think, question, kb, answer):
    from mmreason.tasks.mrag.steps import render_step

    assert parse_route_step(render_step(think, question, kb)) == RouteStep(think, question.strip(), kb)
    assert parse_route_step(render_step(think, answer=answer)) == RouteStep(think, answer=answer.strip())


CHOICE_SOUP = _soup(
    SPACE
    + [
        "(",
        ")",
        "[",
        "]",
        "A",
        "B",
        "C",
        "D",
        "E",
        "J",
        "a",
        "answer",
        "is",
        ":",
        ".",
        "Paris",
        "London",
        "option",
        "not",
        "final answer",
        "*",
        "\n",
    ]
)


@settings(max_examples=150, deadline=None)
@given(CHOICE_SOUP)
def test_choices_are_one_valid_letter_or_none(text):
    assert extract_choice(text, CHOICES) in (None, "A", "B", "C", "D")
    assert extract_choice(text) in (None, *"ABCDEFGHIJ")
