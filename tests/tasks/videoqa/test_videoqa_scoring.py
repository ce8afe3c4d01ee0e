"""The videoqa reward and eval metrics on hand-worked answers, one rule per answer type."""

from __future__ import annotations

import math

import pytest
import torch

from mmreason.eval.metrics import summarize
from mmreason.taskpack import TASKS
from mmreason.tasks.videoqa.data import row_to_sample
from mmreason.tasks.videoqa.scoring import METRICS, videoqa_accuracy
from mmreason.types import Trajectory


def _sample(kind: str, answer, **extra):
    row = {"id": f"x-{kind}", "video": "/v.mp4", "question": "q?", "answer": answer, "answer_type": kind, **extra}
    return row_to_sample(row, "/data/rows.jsonl", 0)


def _traj(text: str) -> Trajectory:
    return Trajectory("x", 0, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), 0, text)


def _reward(sample, text: str, **kwargs) -> float:
    return videoqa_accuracy([sample], [_traj(text)], **kwargs)[0]


MCQ = _sample("mcq", "B", options=["red", "green", "blue"])
NUM = _sample("numeric", "3")
FREE = _sample("free", "yellow")
SPAN = _sample("span", [2.0, 4.0])  # gold [2, 4]


@pytest.mark.parametrize(
    "sample,text,expected",
    [
        (MCQ, "B", 1.0),
        (MCQ, "The answer is (B).", 1.0),
        (MCQ, "green", 1.0),
        (MCQ, "A", 0.0),
        (MCQ, "A or B", 0.0),
        (NUM, "3", 1.0),
        (NUM, "three times? 3", 1.0),
        (NUM, "4", 0.0),
        (NUM, "none", 0.0),
        (FREE, "Yellow.", 1.0),
        (FREE, "<answer>yellow</answer>", 1.0),
        (FREE, "yellowish", 0.0),
        (FREE, "yell", 0.0),
        (SPAN, "[2, 4]", 1.0),
        (SPAN, "[2.0, 5.0]", 2 / 3),  # tIoU 2/3 >= 0.5: earns its tIoU
        (SPAN, "[0, 5]", 0.0),  # tIoU 0.4 < 0.5: nothing
        (SPAN, "from 3 to 4", 0.5),  # tIoU exactly 1/2: at the threshold, earns it
        (SPAN, "[3, 5]", 0.0),  # tIoU 1/3: nothing
        (SPAN, "no idea", 0.0),
    ],
)
def test_reward_by_answer_type(sample, text, expected):
    assert _reward(sample, text) == pytest.approx(expected)


def test_span_threshold_is_a_reward_option():
    assert _reward(SPAN, "[3, 5]", span_threshold=0.3) == pytest.approx(1 / 3)
    assert _reward(SPAN, "[2.0, 5.0]", span_threshold=0.7) == 0.0


def test_pack_rewards_and_metrics():
    pack = TASKS.get("videoqa")
    assert pack.rewards == [{"name": "mmreason.tasks.videoqa.scoring:videoqa_accuracy", "weight": 1.0}]
    assert set(pack.metrics) == {
        "accuracy",
        "accuracy_mcq",
        "accuracy_numeric",
        "accuracy_free",
        "accuracy_span",
        "miou",
        "r@0.3",
        "r@0.5",
        "r@0.7",
    }


def test_metrics_aggregate_to_known_values():
    # four span answers with tIoU 1, 2/3, 0.4, 0 and one right mcq, one wrong numeric
    docs = [(SPAN, "[2, 4]"), (SPAN, "[2, 5]"), (SPAN, "[0, 5]"), (SPAN, "[6, 7]"), (MCQ, "B"), (NUM, "5")]
    got = {name: summarize(fn(s, text) for s, text in docs) for name, fn in METRICS.items()}
    assert got["miou"].value == pytest.approx((1 + 2 / 3 + 0.4 + 0) / 4) and got["miou"].n == 4
    assert got["r@0.3"].value == pytest.approx(3 / 4)
    assert got["r@0.5"].value == pytest.approx(2 / 4)
    assert got["r@0.7"].value == pytest.approx(1 / 4)
    assert got["accuracy_span"].value == pytest.approx(2 / 4)
    assert got["accuracy_mcq"].value == 1.0 and got["accuracy_mcq"].n == 1
    assert got["accuracy_numeric"].value == 0.0
    assert got["accuracy_free"].n == 0 and got["accuracy_free"].value is None
    assert got["accuracy"].value == pytest.approx(3 / 6) and got["accuracy"].n == 6
    assert math.isnan(METRICS["miou"](MCQ, "B"))
