"""TON thought dropout (ratio, the exact empty thought), the think-or-not format reward, skip-think metric;
the vision accuracy rule per answer type."""

from __future__ import annotations

import random

import pytest
import torch
from reward_factory import score
from vision_helpers import dropout_ratio

from mmreason.rewarding import REWARDS
from mmreason.taskpack import TASKS
from mmreason.tasks.vision.data import row_to_sample
from mmreason.tasks.vision.rewards import skip_ratio
from mmreason.tasks.vision.scoring import is_correct, vision_accuracy
from mmreason.tasks.vision.ton import (
    EMPTY_THOUGHT,
    apply_thought_dropout,
    think_answer,
    thought_dropout,
)
from mmreason.types import Trajectory


def _sample(i, answer="7", answer_type="numeric", trace="three and four", fmt="plain", **extra):
    return row_to_sample(
        {
            "id": f"s{i}",
            "image": "/x.png",
            "question": "q?",
            "answer": answer,
            "answer_type": answer_type,
            "trace": trace,
            **extra,
        },
        "mem",
        fmt,
    )


def _trajectory(text):
    return Trajectory("s", 0, torch.zeros(3, dtype=torch.long), torch.ones(3, dtype=torch.long), 0, text)


def test_empty_thought_is_exactly_two_newlines_in_think_tags():
    assert EMPTY_THOUGHT == "<think>\n\n</think>"
    assert think_answer("", "4") == "<think>\n\n</think><answer>4</answer>"
    assert think_answer("  \n", "4") == "<think>\n\n</think><answer>4</answer>"  # blank trace counts as dropped


def test_dropout_ratio_on_ten_thousand_items_is_one_half():
    samples = [_sample(i, fmt="think") for i in range(10_000)]
    dropped = apply_thought_dropout(samples, p=0.5, seed=11)
    assert abs(dropout_ratio(dropped) - 0.5) <= 0.02
    for s in dropped[:200]:
        if s.meta["thought_dropped"]:
            assert s.meta["target"] == "<think>\n\n</think><answer>7</answer>"
        else:
            assert s.meta["target"] == "<think>three and four</think><answer>7</answer>"
    again = apply_thought_dropout(list(reversed(samples)), p=0.5, seed=11)  # per example, not per position
    assert {s.id: s.meta["target"] for s in again} == {s.id: s.meta["target"] for s in dropped}
    other = apply_thought_dropout(samples, p=0.5, seed=12)
    assert [s.meta["target"] for s in other] != [s.meta["target"] for s in dropped]
    assert dropout_ratio(apply_thought_dropout(samples[:500], p=0.0)) == 0.0
    assert dropout_ratio(apply_thought_dropout(samples[:500], p=1.0)) == 1.0


def test_thought_dropout_edge_cases():
    text, dropped = thought_dropout("", "A", random.Random(0), p=0.0)  # no trace: dropped even at p = 0
    assert dropped and text == EMPTY_THOUGHT + "<answer>A</answer>"
    with pytest.raises(ValueError, match="p must be"):
        thought_dropout("t", "A", random.Random(0), p=1.5)


def test_thought_dropout_through_the_loader(shapes_cache):
    pack = TASKS.get("vision")
    samples = pack.load(None, "train", source="synthetic", synthetic_n=40, answer_format="think", thought_dropout=0.5)
    targets = [pack.target_text(s) for s in samples]
    assert 0 < sum(t.startswith(EMPTY_THOUGHT) for t in targets) < 40
    assert all(t.endswith(f"<answer>{s.answer}</answer>") for t, s in zip(targets, samples))


def test_format_reward_accepts_the_empty_thought_and_skip_think_counts_it():
    fmt, skip = REWARDS.get("think_answer_format"), REWARDS.get("skip_think")
    texts = ["<think>\n\n</think><answer>1</answer>", "<think>two</think><answer>2</answer>", "2"]
    samples = [_sample(i, fmt="think") for i in range(3)]
    trajectories = [_trajectory(t) for t in texts]
    assert list(fmt(samples, trajectories)) == [1.0, 1.0, 0.0]
    assert list(skip(samples, trajectories)) == [1.0, 0.0, 0.0]
    assert skip_ratio(["<think>\n\n</think><answer>1</answer>"]) == 1
    metrics = TASKS.get("vision").metrics
    assert [metrics["skip_think"](samples[0], t) for t in texts] == [1.0, 0.0, 0.0]
    assert [metrics["think_format"](samples[0], t) for t in texts] == [1.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "answer_type,answer,extra,right,wrong",
    [
        ("numeric", "12", {}, ["12", "<think>3x4</think><answer>12.0</answer>", "It is 12"], ["13", "none"]),
        ("yes/no", "no", {}, ["no", "No.", "<answer>no</answer>"], ["yes", "yes and no", ""]),
        ("free-form", "teal", {}, ["teal", "Teal.", "<answer>the teal</answer>"], ["blue", "teal circle"]),
        ("mcq", "B", {"choices": ["cat", "dog"]}, ["B", "(B)", "<answer>B</answer>"], ["A", "C"]),
    ],
)
def test_accuracy_rule_per_answer_type(answer_type, answer, extra, right, wrong):
    s = _sample(0, answer, answer_type, **extra)
    assert [is_correct(s, t) for t in right] == [1.0] * len(right)
    assert [is_correct(s, t) for t in wrong] == [0.0] * len(wrong)


def test_vision_accuracy_reward_and_per_domain_metrics():
    chart = _sample(0, "5", domain="chart")
    plain = _sample(1, "yes", "yes/no")
    assert vision_accuracy([chart, plain], [_trajectory("5"), _trajectory("no")]) == [1.0, 0.0]
    metrics = TASKS.get("vision").metrics
    assert metrics["accuracy_chart"](chart, "5") == 1.0
    assert torch.isnan(torch.tensor(metrics["accuracy_chart"](plain, "yes")))  # other domains: left out
    assert metrics["accuracy_perception"](plain, "yes") == 1.0


def test_think_format_samples_score_only_a_closed_answer_tag():
    row = {
        "id": "q",
        "image": "x.png",
        "question": "is there a red shape?",
        "answer": "no",
        "answer_type": "yes/no",
        "trace": "The image shows a blue circle.",
    }
    think, plain = row_to_sample(row, "data.jsonl", "think"), row_to_sample(row, "data.jsonl", "plain")
    broken = ".</><answer>re><answer>no.</><answer>rere><answer"  # a drifted policy's output
    assert is_correct(plain, broken) == 1.0  # plain answers: the whole completion when no tag
    assert is_correct(think, broken) == 0.0
    assert is_correct(think, "no") == 0.0
    assert is_correct(think, "<think>The image shows a blue circle.</think><answer>no</answer>") == 1.0
    assert is_correct(think, "<think>\n\n</think><answer>No.</answer>") == 1.0


def test_skip_think_reward_and_ratio():
    """The pack's own ``skip_think`` reward (tasks/vision/rewards.py), scored through the registry by name."""
    # docs/methods/packs.md#ton: skip_ratio(["<think>\n\n</think><answer>1</answer>"]) = 1.
    assert skip_ratio(["<think>\n\n</think><answer>1</answer>"]) == 1.0
    assert skip_ratio(["<think>\n\n</think><answer>1</answer>", "<think>x</think><answer>1</answer>"]) == 0.5
    assert score("skip_think", "<think> </think><answer>1</answer>") == 1.0
    assert score("skip_think", "<answer>1</answer>") == 0.0
