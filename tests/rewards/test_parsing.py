"""Bounded-time parsing helpers: tag schemas, literals, answers, numbers, edit distance."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason.parsing import (
    all_tag_bodies,
    final_answer,
    last_boxed,
    last_number,
    last_tag_body,
    parse_dict,
    parse_literal,
    parse_number,
    parse_schema,
)
from mmreason.rewards.textmatch import levenshtein, tfidf_cosine, token_f1, token_recall, vqa_normalize


def test_parse_schema_strict_full_match():
    assert parse_schema("<think>a</think><answer>b</answer>", ("think", "answer")) == ["a", "b"]
    assert parse_schema("  <think>a</think>\n <answer>b</answer>\n", ("think", "answer")) == ["a", "b"]
    assert parse_schema("<think>\n\n</think><answer>1</answer>", ("think", "answer")) == ["\n\n", "1"]
    bad = [
        "x<think>a</think><answer>b</answer>",  # text before
        "<think>a</think><answer>b</answer>x",  # text after
        "<think>a</think>x<answer>b</answer>",  # text between (gaps="space")
        "<think>a<think>b</think></think><answer>c</answer>",  # nested
        "<think>a</think><answer>b</answer><answer>c</answer>",  # duplicated
        "<answer>b</answer><think>a</think>",  # order
        "<think>a</think><answer>b",  # unclosed
        "<think>a</answer><answer>b</think>",  # crossed
    ]
    for text in bad:
        assert parse_schema(text, ("think", "answer")) is None, text
    assert parse_schema("<think>a</think>x<answer>b</answer>", ("think", "answer"), gaps="any") == ["a", "b"]
    assert parse_schema(" <think>a</think><answer>b</answer>", ("think", "answer"), strip=False) is None


def test_known_tags_may_not_appear_inside_bodies():
    text = "<think>a</think><answer>b <tool_call>{}</tool_call></answer>"
    assert parse_schema(text, ("think", "answer")) == ["a", "b <tool_call>{}</tool_call>"]
    assert parse_schema(text, ("think", "answer"), known=("tool_call",)) is None


def test_tag_extraction_takes_the_last_complete_pair():
    assert last_tag_body("<answer>1</answer> then <answer>2</answer>", "answer") == "2"
    assert last_tag_body("<answer>1</answer> then <answer>2", "answer") == "1"
    assert last_tag_body("no tags", "answer") is None
    assert all_tag_bodies("<t>a</t><t>b</t></t><t>c", "t") == ["a", "b"]
    assert last_boxed(r"so \boxed{\frac{1}{2}} and \boxed{x^{2}}") == "x^{2}"
    assert last_boxed(r"\boxed{unclosed") is None


def test_literals_json_then_python_and_depth_cap():
    assert parse_dict('{"evidence_pages": [6], "answer": "Page 6"}') == {
        "evidence_pages": [6],
        "answer": "Page 6",
    }
    assert parse_dict("{'evidence_pages': [6], 'answer': 'Page 6'}") == {
        "evidence_pages": [6],
        "answer": "Page 6",
    }
    assert parse_dict("[1, 2]") is None
    assert parse_dict("__import__('os').system('echo hi')") is None  # never evaluated
    assert parse_literal("[" * 40 + "]" * 40) is None  # deeper than MAX_DEPTH
    assert parse_literal("[" * 10 + "]" * 10) is not None
    assert parse_literal("x" * 30_000) is None


def test_python_literals_with_lone_backslashes_parse_to_the_same_value_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "\d" in a literal warns (SyntaxWarning on 3.12+): that would fail here
        assert parse_dict(r"{'pattern': '\d+', 'x': 1}") == {"pattern": "\\d+", "x": 1}
        assert parse_dict(r"{'path': 'C:\\new\q'}") == {"path": "C:\\new\\q"}  # an escaped backslash stays one
        assert parse_dict("{'line': 'a\\tb'}") == {"line": "a\tb"}  # a real escape keeps its meaning
        assert parse_dict(r"{'raw': r'\d'}") == {"raw": "\\d"}  # raw strings are left as written


def test_final_answer_sources():
    assert final_answer("<think>t</think><answer> 42 </answer>") == "42"
    assert final_answer('<answer>{"evidence_pages": [1], "answer": "Page 6"}</answer>') == "Page 6"
    assert final_answer(r"the result is \boxed{7}") == "7"
    assert final_answer("just text ") == "just text"
    assert final_answer("no tag", mode="answer_tag") == ""
    assert final_answer(r"<answer>a</answer> \boxed{b}", mode="boxed") == "b"


def test_numbers():
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("$3") == 3.0
    assert parse_number("-2e3") == -2000.0
    assert parse_number("12%") == 12.0
    assert parse_number("−4") == -4.0
    assert parse_number("nan") is None and parse_number("inf") is None and parse_number("12 apples") is None
    assert last_number("first 3 then 1,500.25 dollars") == 1500.25
    assert last_number("none here") is None


def _dp_levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcé ", max_size=40), st.text(alphabet="abcé ", max_size=40))
def test_bit_parallel_levenshtein_matches_the_dp(a, b):
    assert levenshtein(a, b) == _dp_levenshtein(a, b)


def test_levenshtein_known_values():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    assert levenshtein("flaw", "lawn") == 2
    assert levenshtein("a" * 70 + "b", "a" * 71) == 1  # pattern longer than one 64-bit word


def test_vqa_normalisation_and_token_overlap():
    assert vqa_normalize("  The Two dogs!") == "2 dogs"
    assert vqa_normalize("Isnt it?") == "isn't it"
    assert vqa_normalize("1,000 people.") == "1000 people"
    assert token_f1("red bus", "bus red") == 1.0
    assert math.isclose(token_f1("a b c", "a b d"), 2 / 3)
    assert token_recall("a b c", "a d") == 0.5
    assert math.isclose(tfidf_cosine("x y", "x y", ["x y", "z"]), 1.0)
    assert tfidf_cosine("x", "y", ["x", "y"]) == 0.0


def test_answer_dict_mode_scores_only_a_dict_answer():
    from mmreason.parsing import final_answer

    good = '<think>x</think><answer>{"evidence_pages": [2], "answer": "Page 6"}</answer>'
    assert final_answer(good, "answer_dict") == "Page 6"
    assert final_answer("<think>x</think><answer>Page 6</answer>", "answer_dict") == ""
    assert final_answer('<answer>{"pages": [2]}</answer>', "answer_dict") == ""
    assert final_answer("Page 6", "answer_dict") == ""
