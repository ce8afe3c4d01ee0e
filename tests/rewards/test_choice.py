"""The multiple-choice extractor on realistic model outputs, and the mcq reward's sub-scores."""

from __future__ import annotations

import pytest
from reward_factory import score

from mmreason.rewards.choice import extract_choice, gold_letter, option_map

CHOICES = ["Paris", "London", "Berlin", "Madrid"]

# (model output, expected letter or None = unparsed)
OUTPUTS = [
    ("C", "C"),
    ("(C)", "C"),
    ("c", "C"),
    ("C.", "C"),
    ("**C**", "C"),
    ("Option C", "C"),
    ("The answer is (C).", "C"),
    ("The answer is C", "C"),
    ("the answer is c.", "C"),
    ("Answer: B", "B"),
    ("ANSWER: (a)", "A"),
    ("Final answer: **D**", "D"),
    ("The correct option is A.", "A"),
    ("The correct choice is: [C]", "C"),
    ("The correct answer is option B because London is the capital of the UK.", "B"),
    ("Looking at the map, the highlighted city is on the Seine. Therefore, the answer is A.", "A"),
    ("C. Berlin", "C"),
    ("(B) London", "B"),
    ("B) London", "B"),
    ("D: Madrid", "D"),
    ("**Answer:** C. Berlin", "C"),
    ("The answer would be D) Madrid.", "D"),
    ("Berlin", "C"),  # option text only
    ("The city shown is Berlin.", "C"),
    ("madrid", "D"),
    ("<think>The tower is the Eiffel Tower.</think><answer>A</answer>", "A"),
    ("<think>Hmm, maybe B.</think>\n<answer>(D) Madrid</answer>", "D"),  # the answer tag decides
    ("<think>x</think><answer>Paris</answer>", "A"),
    ("After careful analysis, \\boxed{B}", "B"),
    ("The final answer is $\\boxed{C}$.", "C"),
    ("I choose B.", "B"),
    ("I would select option D.", "D"),
    ("Option C is correct.", "C"),
    ("It's B.", "B"),
    ("At first I thought A, but the image clearly shows a red bus, so the answer is B.", "B"),
    ("Let's analyze each option.\nA: wrong.\nB: wrong.\nC: correct.\nSo the answer is C.", "C"),
    ("Looking at option A, it says Paris. Option B says London. The answer is (A).", "A"),
    ("Based on the chart, the value increases.\n\nB", "B"),
    ("答案是 (B)", "B"),
    # several letters, none, or not an option: unparsed
    ("The answer is A or C.", None),
    ("A and C", None),
    ("The answer is A, C.", None),
    ("Both (A) and (C) look plausible.", None),
    ("Paris or London", None),
    ("I cannot determine the answer from the image.", None),
    ("", None),
    ("The answer is a dog.", None),  # lower-case 'a' is a word here
    ("The answer is E.", None),  # only A-D exist
    ("The image shows a bridge over a river at sunset.", None),
]


def test_there_are_at_least_forty_outputs():
    assert len(OUTPUTS) >= 40


@pytest.mark.parametrize("text, expected", OUTPUTS)
def test_extract_choice(text, expected):
    assert extract_choice(text, CHOICES) == expected


def test_letters_without_choices_go_up_to_j():
    assert extract_choice("The answer is (G).") == "G"
    assert extract_choice("The answer is (K).") is None


def test_option_map_and_gold():
    assert option_map(["A. Paris", "(B) London"]) == {"A": "Paris", "B": "London"}
    assert option_map({"a": "x", "B": "y"}) == {"A": "x", "B": "y"}
    assert gold_letter("(c)") == "C"
    assert gold_letter(2) == "C"  # 0-based index
    assert gold_letter("Berlin", CHOICES) == "C"
    assert gold_letter("Rome", CHOICES) is None


def test_mcq_reward_counts_unparsed_separately():
    assert score("mcq", "The answer is (C).", "C", choices=CHOICES) == {"accuracy": 1.0, "unparsed": 0.0}
    assert score("mcq", "The answer is (B).", "C", choices=CHOICES) == {"accuracy": 0.0, "unparsed": 0.0}
    assert score("mcq", "I am not sure.", "C", choices=CHOICES) == {"accuracy": 0.0, "unparsed": 1.0}
    assert score("mcq", "Berlin", "Berlin", choices=CHOICES) == {"accuracy": 1.0, "unparsed": 0.0}
    assert score("mcq", "C", None) == {"accuracy": None, "unparsed": 0.0}


def test_mcq_has_no_random_fallback():
    # the same unparsable output always scores 0, whatever the gold letter
    for gold in "ABCD":
        assert score("mcq", "Hmm, hard to tell.", gold, choices=CHOICES)["accuracy"] == 0.0
