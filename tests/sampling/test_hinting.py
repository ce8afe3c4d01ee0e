"""SAGE self-hinting (arXiv 2602.03143; the authors' ``recipe/hint/hint_trainer.py``, ``RayHintTrainer.fit``,
branch ``sage``): which groups need a hint, parsing the policy's untrusted reply, the hinted prompt, and the
level-by-level loop that stops at the first level under which some rollout succeeds."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.sampling.hinting import (
    HINT_TEMPLATE,
    hint_request,
    hinted_sample,
    leaks_answer,
    needs_hint,
    parse_hints,
    regenerate,
    solution_of,
)
from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.within_step import StepPhases
from mmreason.train.config import HintConfig
from mmreason.types import Sample


def _sample(sid="s1", answer="blue", meta=None) -> Sample:
    return Sample(
        id=sid,
        messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}],
        answer=answer,
        meta=meta or {},
    )


def test_a_group_needs_a_hint_when_no_rollout_succeeds():
    """SAGE: resolved = any(r > 0) over the group."""
    assert needs_hint([0.0, 0.0, 0.0]) is True  # all rewards equal (all fail)
    assert needs_hint([1.0, 1.0]) is False  # all rewards equal (all succeed)
    assert needs_hint([0.0, 0.3]) is False
    assert needs_hint([0.0]) is True  # one sample
    assert needs_hint([math.nan, 0.0]) is True  # unscored rows are failures
    assert needs_hint([]) is False  # nothing to redo
    assert needs_hint([0.4, 0.5], threshold=0.5) is True  # a stricter success threshold


def test_the_solution_is_the_solution_column_else_the_answer():
    assert solution_of(_sample(meta={"solution": " Mix red and... "})) == "Mix red and..."
    assert solution_of(_sample(answer=["blue", "navy"])) == "blue; navy"
    assert solution_of(_sample(answer=None)) is None
    request = hint_request(_sample(), "blue")
    assert request.messages[0]["role"] == "system" and "level_3" in request.messages[0]["content"]
    assert request.messages[1]["content"] == "Question:\nColour?\n\nSolution:\nblue\n" and not request.images


def test_parse_hints_reads_fenced_or_bare_json_and_refuses_the_rest():
    reply = 'Sure.\n```json\n{"level_1": " the sky ", "level_2": "", "level_3": 7}\n```'
    assert parse_hints(reply) == ["the sky", None, None]  # empty and non-text levels are missing
    assert parse_hints('x {"level_1": "a", "level_2": "b", "level_3": "c"} y') == ["a", "b", "c"]
    assert parse_hints('{"level_1": "abcdef"}', levels=2, max_chars=3) == ["abc", None]
    assert parse_hints("no json here") is None
    assert parse_hints("[1, 2]") is None  # JSON, but not an object
    assert parse_hints("{not: json}") is None


def test_the_hint_is_appended_to_the_last_user_turn_and_answer_leaks_are_seen():
    out = hinted_sample(_sample(), "look up")
    assert out.messages[0]["content"][-1] == {"type": "text", "text": HINT_TEMPLATE.replace("{hint}", "look up")}
    assert out.messages[0]["content"][0] == {"type": "image"}  # media kept
    assert leaks_answer("It is BLUE.", _sample()) and not leaks_answer("bluest sky", _sample())
    with pytest.raises(ValueError, match="no user turn"):
        hinted_sample(Sample(id="x", messages=[]), "h")


# ---- the loop of one step, with the model's phases replaced by a deterministic world ----------------------


def _world(replies):
    """A rollout succeeds (reward 1) exactly when its prompt holds the words "top left"; two rollouts a group."""

    def text(sample):
        return str(sample.messages[-1]["content"])

    def build(run, sample):
        return SimpleNamespace(sample=sample)

    def write(run, requests, step):
        return [SimpleNamespace(group_id=d.slot, completion_text=r) for d in requests for r in replies]

    def roll_out(run, drawn, step):
        return [
            SimpleNamespace(group_id=d.slot, completion_text=f"{d.slot}/{i}", sample=d.prompt.sample)
            for d in drawn
            for i in range(2)
        ]

    def score(run, drawn, trajs):
        ok = [float("top left" in text(t.sample)) if i % 2 == 0 else 0.0 for i, t in enumerate(trajs)]
        return [t.sample for t in trajs], RewardBatch(torch.tensor(ok)[:, None], ["acc"], torch.ones(1))

    return build, write, roll_out, score


def test_hints_are_tried_level_by_level_until_a_rollout_succeeds():
    """Worked: group 0 fails ([0, 0]); its hints are L1 "think of colours", L2 "the top left corner", L3 "...".
    Under L1 both rollouts still fail; under L2 the first succeeds -> resolved, L3 never rolled out. Group 1
    ([1, 0]) is resolved and untouched. Final rewards [1, 0, 1, 0], group 0's prompt holds the L2 hint."""
    build, write, roll_out, score = _world(
        ['{"level_1": "think of colours", "level_2": "the top left corner", "level_3": "the top left is blue"}']
    )
    run = SimpleNamespace(
        cfg=SimpleNamespace(hint=HintConfig(enabled=True, refuse_answer_leak=True), reward_missing="zero")
    )
    prompts = [Drawn(0, 10, SimpleNamespace(sample=_sample("a"))), Drawn(1, 11, SimpleNamespace(sample=_sample("b")))]
    trajs = [SimpleNamespace(group_id=g, completion_text="t") for g in (0, 0, 1, 1)]
    batch = RewardBatch(torch.tensor([[0.0], [0.0], [1.0], [0.0]]), ["acc"], torch.ones(1))
    out = regenerate(
        StepPhases(run, 1, build, roll_out, score),
        Rollouts(prompts, trajs, [p.prompt.sample for p in prompts for _ in range(2)], batch),
        write=write,
    )
    out_prompts, out_trajs, out_samples, out_batch, metrics = (
        out.prompts,
        out.trajectories,
        out.samples,
        out.batch,
        out.metrics,
    )
    assert out_batch.values[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert [t.group_id for t in out_trajs] == [0, 0, 1, 1]
    assert "the top left corner" in str(out_prompts[0].prompt.sample.messages[-1]["content"])
    assert out_prompts[1] is prompts[1] and out_trajs[2] is trajs[2]
    assert "the top left corner" in str(out_samples[0].messages[-1]["content"])  # rewards see the hinted prompt
    assert metrics == {
        "hint/prompts_needing_hint": 1.0,
        "hint/prompts_with_hints": 1.0,
        "hint/used_level_1": 1.0,
        "hint/used_level_2": 1.0,
        "hint/used_level_3": 0.0,
        "hint/resolved_after_hint": 1.0,
    }


def test_unusable_replies_leave_the_group_as_it_was():
    build, write, roll_out, score = _world(["I cannot help", '{"level_1": "the answer is blue"}'])
    run = SimpleNamespace(cfg=SimpleNamespace(hint=HintConfig(enabled=True), reward_missing="zero"))
    prompts = [Drawn(0, 10, SimpleNamespace(sample=_sample("a")))]
    trajs = [SimpleNamespace(group_id=0, completion_text="t") for _ in range(2)]
    batch = RewardBatch(torch.zeros(2, 1), ["acc"], torch.ones(1))
    out = regenerate(
        StepPhases(run, 1, build, roll_out, score),
        Rollouts(prompts, trajs, [prompts[0].prompt.sample] * 2, batch),
        write=write,
    )
    out_prompts, out_trajs, out_batch, metrics = out.prompts, out.trajectories, out.batch, out.metrics
    assert out_prompts == prompts and out_trajs == trajs and out_batch.values.tolist() == [[0.0], [0.0]]
    assert metrics["hint/prompts_needing_hint"] == 1.0 and metrics["hint/prompts_with_hints"] == 0.0  # leak refused
