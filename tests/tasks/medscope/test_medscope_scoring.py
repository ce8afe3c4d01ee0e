"""MedScope scoring on hand-worked completions: the answer reward by task type, the format reward from the
environment's record, and the eval metrics (accuracy, grounded accuracy, mIoU / R@k, tool calls)."""

from __future__ import annotations

import math

import pytest

from mmreason.tasks.medscope.scoring import METRICS, medscope_accuracy, medscope_format
from mmreason.types import Sample, Trajectory


def _sample(task_type: str, answer: str, kind: str, span=((40.0, 46.0),), **meta) -> Sample:
    return Sample(
        id="s",
        messages=[],
        answer=answer,
        task="medscope",
        meta={"task_type": task_type, "answer_kind": kind, "span": [list(w) for w in span], "duration": 120.0, **meta},
    )


def _traj(text: str, infos=None) -> Trajectory:
    return Trajectory("s", 0, None, None, 0, text, reward_info={"observations": infos or []})


CROP = '<tool_call>{"name": "crop_video", "arguments": {"start": 38, "end": 48}}</tool_call>'
MISS = '<tool_call>{"name": "get_frame", "arguments": {"t": 90}}</tool_call>'
GROUNDING = _sample("temporal_grounding", "[40, 46]", "span")
MCQ = _sample("grounded_qa", "B", "mcq", choices=["red", "green", "blue", "yellow"])
COUNT = _sample("qa", "4", "numeric")


@pytest.mark.parametrize(
    "sample, text, want",
    [
        (GROUNDING, "<answer>[40, 46]</answer>", 1.0),
        (GROUNDING, "<answer>[43, 49]</answer>", 3 / 9),  # overlap 3 s of a 9 s union
        (GROUNDING, "<answer>[0, 120]</answer>", 6 / 120),
        (GROUNDING, "[40, 46] without an answer tag", 0.0),
        (MCQ, "<span>[40, 46]</span><answer>B</answer>", 1.0),
        (MCQ, "<span>[43, 49]</span><answer>B</answer>", 0.5 + 0.5 / 3),
        (MCQ, "<span>[40, 46]</span><answer>C</answer>", 0.5),
        (MCQ, "<answer>[40, 46]</answer>", 0.0),  # a span in place of the letter is no answer and no <span>
        (COUNT, "<span>[1, 2]</span><answer>4</answer>", 1.0),
        (COUNT, "<answer>four</answer>", 0.0),
    ],
)
def test_answer_reward_by_task_type(sample, text, want):
    assert medscope_accuracy([sample], [_traj(text)])[0] == pytest.approx(want)


def test_format_is_the_share_of_accepted_tool_turns_when_there_is_an_answer():
    ok, bad = {"name": "crop_video", "arguments": {}}, {"error": "unknown tool"}
    assert medscope_format([COUNT], [_traj(CROP + "<answer>4</answer>", [ok, {}])])[0] == 1.0
    assert medscope_format([COUNT], [_traj("x<answer>4</answer>", [ok, bad, bad, {}])])[0] == pytest.approx(1 / 3)
    assert medscope_format([COUNT], [_traj(CROP, [ok])])[0] == 0.0  # no answer
    assert medscope_format([COUNT], [_traj("<answer>4</answer>")])[0] == 1.0


def test_eval_metrics():
    def m(name, sample, text):
        return METRICS[name](sample, text)

    right = CROP + MISS + "<answer>[40, 46]</answer>"
    assert m("accuracy", GROUNDING, right) == 1.0 and m("miou", GROUNDING, right) == 1.0
    assert m("r@0.7", GROUNDING, "<answer>[43, 49]</answer>") == 0.0
    assert m("r@0.3", GROUNDING, "<answer>[43, 49]</answer>") == 1.0
    assert m("tool_calls", GROUNDING, right) == 2.0 and m("grounded_calls", GROUNDING, right) == 0.5
    assert m("tool_calls", GROUNDING, "<tool_call>{broken") == 1.0  # an attempted call counts
    assert math.isnan(m("grounded_calls", GROUNDING, "<answer>[1, 2]</answer>"))
    assert math.isnan(m("miou", COUNT, "<answer>4</answer>"))  # qa answers no span
    # grounded accuracy: right, and the span or a call touches the evidence
    assert m("grounded_accuracy", COUNT, CROP + "<answer>4</answer>") == 1.0
    assert m("grounded_accuracy", COUNT, MISS + "<answer>4</answer>") == 0.0
    assert m("accuracy", COUNT, MISS + "<answer>4</answer>") == 1.0
