"""Evidence rewards: DocSeeker pages (and the whole DocSeeker reward), temporal IoU, timestamps
(MedScope's tool grounding: tests/tasks/medscope/test_medscope_rewards.py)."""

from __future__ import annotations

import json
import math

import pytest
from reward_factory import sample, score, traj

from mmreason.rewarding import RewardRunner, RewardSpec
from mmreason.rewards.evidence import answered_span, fbeta, seconds, time_points, tiou

THINK = "<think>\\boxed{Question Analysis} q \\boxed{Evidence Localization} e \\boxed{Reasoning Process} r</think>"


def docseeker_answer(pages, answer, think=THINK):
    return think + "<answer>" + json.dumps({"evidence_pages": pages, "answer": answer}) + "</answer>"


def test_fbeta_worked_example():
    # docs/methods/packs.md#docseeker: P={2,3}, T={3,4,5} -> p=0.5, q=1/3, F_2 = 0.3571
    assert fbeta({2, 3}, {3, 4, 5}) == pytest.approx(0.3571, abs=1e-4)
    assert fbeta({3, 4, 5}, {3, 4, 5}) == 1.0
    assert fbeta(set(), {1}) == 0.0 and fbeta({9}, {1}) == 0.0


def test_page_fbeta_reward():
    assert score("page_fbeta", docseeker_answer([2, 3], "x"), evidence_pages=[3, 4, 5]) == pytest.approx(
        0.35714, abs=1e-5
    )
    assert (
        score("page_fbeta", docseeker_answer([[3], 4, 5], "x"), evidence_pages=[3, 4, 5]) == 1.0
    )  # nested lists flatten
    assert (
        score("page_fbeta", docseeker_answer([2, 3, 4], "x"), evidence_pages=[2, 3, 4], kwargs={"index_base": 1}) == 1.0
    )
    # 0-based gold (DocSeeker's raw gt_page) is shifted to the 1-based numbers the model cites
    assert (
        score("page_fbeta", docseeker_answer([3, 4, 5], "x"), evidence_pages=[2, 3, 4], kwargs={"index_base": 0}) == 1.0
    )
    assert score("page_fbeta", "<answer>Page 6</answer>", evidence_pages=[6]) == 0.0  # not a dict
    assert score("page_fbeta", docseeker_answer(["6"], "x"), evidence_pages=[6]) == 0.0  # strings are not pages
    assert score("page_fbeta", docseeker_answer([6], "x"), evidence_pages=[-1]) is None  # no specific page


def _docseeker_runner():
    specs = [
        RewardSpec("docseeker_format", weight=0.1),
        RewardSpec("page_fbeta", weight=0.3),
        RewardSpec("anls", weight=0.6),
    ]
    return RewardRunner(specs, timeout_s=None)


def test_docseeker_reward_worked_examples():
    runner = _docseeker_runner()
    samples = [
        sample("Page 6", id="a", evidence_pages=[6]),
        sample("Page 6", id="b", evidence_pages=[6]),
        sample("Page 6", id="c", evidence_pages=[-1]),
    ]
    no_reasoning_header = THINK.replace("\\boxed{Reasoning Process}", "")
    trajectories = [
        traj(docseeker_answer([6], "Page 6"), sample_id="a"),
        traj(docseeker_answer([6], "Page 6", think=no_reasoning_header), sample_id="b"),
        traj(docseeker_answer([2], "Page 6"), sample_id="c"),
    ]
    batch = runner(samples, trajectories)
    total = batch.total(missing="renormalize")
    assert total[0].item() == pytest.approx(1.0)  # perfect output -> R = 1.0
    # missing \boxed{Reasoning Process}: R_fmt = 0, page and answer still scored -> 0.3 + 0.6
    assert batch.column("docseeker_format")[1].item() == 0.0
    assert total[1].item() == pytest.approx(0.9)
    # gt_page = [-1], R_fmt = 1, R_ans = 1 -> R = (0.1 + 0.6) / 0.7 = 1.0
    assert math.isnan(batch.column("page_fbeta")[2].item())
    assert total[2].item() == pytest.approx(1.0)


def test_temporal_iou_worked_examples():
    # docs/methods/packs.md#medscope: tIoU([0,10],[5,15]) = 1/3; disjoint -> 0
    assert tiou((0, 10), (5, 15)) == pytest.approx(1 / 3)
    assert tiou((0, 1), (2, 3)) == 0.0
    assert tiou((1, 1), (1, 1)) == 0.0
    assert score(
        "temporal_iou", "<answer>The lesion appears.</answer><span>[0, 10]</span>", span=[5, 15]
    ) == pytest.approx(1 / 3)
    assert score("temporal_iou", "<answer>from 5 to 15 seconds</answer>", span=[5, 15]) == 1.0
    assert score("temporal_iou", "<answer>[0:05, 0:15]</answer>", span=[[40, 50], [5, 15]]) == 1.0  # best window
    assert score("temporal_iou", "<answer>no idea</answer>", span=[5, 15]) == 0.0
    assert score("temporal_iou", "<answer>[1, 2]</answer>") is None


def test_time_parsing():
    assert seconds("1:15") == 75 and seconds("0:01:15.5") == 75.5
    assert answered_span("<span>[12.5s, 20s]</span>") == (12.5, 20.0)
    assert time_points("<time>3</time> and <time>1:00</time>") == [3.0, 60.0]
    assert time_points("<answer>It starts at 1:15 and again at 90 s.</answer>") == [75.0, 90.0]
    assert time_points("<answer>12.5</answer>") == [12.5]  # a bare number answer is a time
    assert time_points("<answer>3 people at the desk</answer>") == []  # other numbers are not


def test_timestamp_hit_decays_with_distance():
    # inside -> 1; 5 s outside with tau = 0.05 * 100 s = 5 s -> exp(-1)
    assert score("timestamp_hit", "<time>12</time>", span=[10, 20], duration=100) == 1.0
    assert score("timestamp_hit", "<time>25</time>", span=[10, 20], duration=100) == pytest.approx(math.exp(-1))
    mean = (1 + math.exp(-1)) / 2
    assert score("timestamp_hit", "<time>12</time><time>5</time>", span=[10, 20], duration=100) == pytest.approx(mean)
    assert score("timestamp_hit", "<time>25</time>", span=[10, 20], kwargs={"tau": 10.0}) == pytest.approx(
        math.exp(-0.5)
    )
    assert score("timestamp_hit", "<answer>nothing</answer>", span=[10, 20], duration=100) == 0.0
