"""Accuracy rewards. ANLS and relaxed accuracy are checked against lmms-eval's definitions, transcribed
below as oracles from lmms-eval (EvolvingLMMs-Lab/lmms-eval): ``lmms_eval/api/metrics.py::anls`` and
``lmms_eval/tasks/chartqa/utils.py::relaxed_correctness``."""

from __future__ import annotations

import math

import pytest
from reward_factory import score

from mmreason.rewards.accuracy import recall_score, relaxed_correctness
from mmreason.rewards.textmatch import anls_score


# ---- oracles, transcribed from lmms-eval -------------------------------------------------------
def _lmms_levenshtein(s1, s2):
    if len(s1) > len(s2):
        s1, s2 = s2, s1
    distances = range(len(s1) + 1)
    for i2, c2 in enumerate(s2):
        distances_ = [i2 + 1]
        for i1, c1 in enumerate(s1):
            if c1 == c2:
                distances_.append(distances[i1])
            else:
                distances_.append(1 + min((distances[i1], distances[i1 + 1], distances_[-1])))
        distances = distances_
    return distances[-1]


def lmms_anls(references, predictions, thresh_hold=0.5):
    values = []
    for answer in references:
        gt_answer = " ".join(answer.strip().lower().split())
        det_answer = " ".join(predictions[0].strip().lower().split())
        dist = _lmms_levenshtein(gt_answer, det_answer)
        length = max(len(answer.upper()), len(predictions[0].upper()))
        values.append(0.0 if length == 0 else float(dist) / float(length))
    question_result = 1 - min(values)
    if question_result < thresh_hold:
        question_result = 0
    return {"anls": question_result}


def lmms_relaxed_correctness(prediction, target, max_relative_change=0.05):
    def _to_float(text):
        try:
            if text.endswith("%"):
                return float(text.rstrip("%")) / 100.0
            else:
                return float(text)
        except ValueError:
            return None

    prediction_float = _to_float(prediction)
    target_float = _to_float(target)
    if prediction_float is not None and target_float:
        relative_change = abs(prediction_float - target_float) / abs(target_float)
        return relative_change <= max_relative_change
    else:
        return prediction.lower() == target.lower()


# (prediction, references, threshold, expected) -- expected worked out by hand
ANLS_TABLE = [
    ("Page 6", ["page 6"], 0.5, 1.0),
    ("Paris", ["Pari"], 0.5, 0.8),  # lev 1 / max(4, 5)
    ("abc", ["xyz"], 0.5, 0.0),
    ("hello world", ["hello  world "], 0.5, 1.0),  # whitespace collapsed before the distance
    ("cat", ["dog", "cart"], 0.5, 0.75),  # best reference: lev("cart", "cat") = 1, / 4
    ("ab", ["abcd"], 0.5, 0.5),  # exactly at the threshold: kept
    ("a", ["abcd"], 0.5, 0.0),  # 0.25 < 0.5
    ("a", ["abcd"], 0.0, 0.25),  # RL threshold 0
    ("", [""], 0.5, 1.0),
    ("Straße", ["STRASSE"], 0.5, 1 - 2 / 7),  # upper() lengthens the raw length of 'Straße' to 7
]

RELAXED_TABLE = [
    ("10.4", "10", True),
    ("10.6", "10", False),
    ("95", "100", True),  # exactly 5 %
    ("12%", "0.12", True),  # '%' divides by 100
    ("0", "0", True),  # target 0: string comparison
    ("0.0", "0", False),
    ("Yes", "yes", True),
    ("yes ", "yes", False),
    ("1,000", "1000", False),  # float() refuses the comma: string comparison
    ("-5", "5", False),
    ("nan", "5", False),
    ("Blue", "blue", True),
]


@pytest.mark.parametrize("prediction, refs, threshold, expected", ANLS_TABLE)
def test_anls_agrees_with_lmms_eval(prediction, refs, threshold, expected):
    assert math.isclose(lmms_anls(refs, [prediction], threshold)["anls"], expected, abs_tol=1e-12)
    assert math.isclose(anls_score(prediction, refs, threshold), expected, abs_tol=1e-12)


def test_anls_departs_from_lmms_eval_on_surplus_whitespace():
    # lmms-eval: lev on normalised text (1) over the raw length (7) -> 1 - 1/7; here both on 'helo' -> 0.8.
    assert math.isclose(lmms_anls(["hello"], ["  Helo "])["anls"], 1 - 1 / 7)
    assert math.isclose(anls_score("  Helo ", ["hello"]), 0.8)


@pytest.mark.parametrize("prediction, target, expected", RELAXED_TABLE)
def test_relaxed_accuracy_agrees_with_lmms_eval(prediction, target, expected):
    assert lmms_relaxed_correctness(prediction, target) is expected
    assert relaxed_correctness(prediction, target) is expected


def test_anls_reward_reads_the_answer_and_keeps_the_threshold():
    # DocSeeker R_ans: the 'answer' of the JSON answer dict; threshold 0.5 unless a config asks for 0.
    text = '<think>x</think><answer>{"evidence_pages": [6], "answer": "Page 6"}</answer>'
    assert score("anls", text, "page 6") == 1.0
    assert score("anls", "<answer>a</answer>", "abcd") == 0.0  # a fragment earns nothing by default
    assert score("anls", "<answer>rue</answer>", "red") == 0.0  # the quickstart's old reward hack
    assert math.isclose(score("anls", "<answer>a</answer>", "abcd", kwargs={"threshold": 0.0}), 0.25)
    assert score("anls", "<answer></answer>", "abcd") == 0.0
    assert score("anls", "<answer>x</answer>", None) is None
    assert score("anls", "<answer>Pari</answer>", ["London", "Paris"]) == pytest.approx(0.8)


def test_relaxed_accuracy_reward():
    assert score("relaxed_accuracy", "<think>read the bar</think><answer>10.4</answer>", "10") == 1.0
    assert score("relaxed_accuracy", "<answer>11</answer>", "10") == 0.0
    assert score("relaxed_accuracy", "<answer>Blue</answer>", ["red", "blue"]) == 1.0


def test_numeric():
    assert score("numeric", "<answer>1,234.5</answer>", "1234.5") == 1.0
    assert score("numeric", "The total is $42 in the end.", 42) == 1.0
    assert score("numeric", "<answer>42.01</answer>", 42) == 0.0
    assert score("numeric", "<answer>42.01</answer>", 42, kwargs={"rel_tol": 1e-3}) == 1.0
    assert score("numeric", "<answer>0</answer>", 0) == 1.0  # abs_tol handles a zero reference
    assert score("numeric", "<answer>no idea</answer>", 3) == 0.0
    assert score("numeric", "<answer>3</answer>", "three") is None  # no numeric reference


def test_vqa_exact_and_recall():
    assert score("vqa_exact", "<answer>Two dogs.</answer>", "2 dogs") == 1.0
    assert score("vqa_exact", "<answer>the red bus</answer>", ["bus", "red bus"]) == 1.0
    assert score("vqa_exact", "<answer>red car</answer>", "red bus") == 0.0
    # R1-Router rule (docs/methods/packs.md#r1-router)
    assert recall_score("it was built in 1889", ["1889"]) == 1.0  # short gold: full recall needed
    assert recall_score("the tower in paris", ["eiffel tower"]) == 0.0  # short gold, recall 0.5 -> 0
    long_gold = "the tower was designed by gustave eiffel company"  # 6 tokens after dropping 'the'
    assert recall_score("designed by eiffel", [long_gold]) == pytest.approx(3 / 7)
    assert recall_score("eiffel tower", ["tower", "bridge"]) == 1.0
    assert recall_score("eiffel", ["eiffel tower", "bridge"]) == 0.0
    assert score("token_recall", "<answer>in 1889</answer>", "1889") == 1.0


def test_yes_no():
    assert score("yes_no", "<answer>Yes, it is.</answer>", "yes") == 1.0
    assert score("yes_no", "<answer>No.</answer>", "Yes") == 0.0
    assert score("yes_no", "<answer>no</answer>", False) == 1.0
    assert score("yes_no", "<answer>yes or no, hard to say</answer>", "yes") == 1.0  # starts with yes
    assert score("yes_no", "<answer>maybe yes, maybe no</answer>", "yes") == 0.0  # both words
    assert score("yes_no", "<answer>yes</answer>", "blue") is None


def test_math_through_math_verify():
    assert score("math", r"<think>half</think><answer>\frac{1}{2}</answer>", "0.5") == 1.0
    assert score("math", r"so the answer is $\boxed{\frac{2}{4}}$", r"\frac{1}{2}") == 1.0
    assert score("math", "<answer>x + 1</answer>", "1+x") == 1.0
    assert score("math", "<answer>3</answer>", "4") == 0.0
    assert score("math", "<answer>blue</answer>", "blue") == 1.0  # TON's exact-string fallback
    assert score("math", "<answer>3</answer>", None) is None
