"""The one merge of regenerated groups (``merge_groups``): groups keep their order, columns align by name, each
error record is kept once; ``StepPhases.rebuilt`` / ``redone`` leave a step whole when nothing is redone."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from mmreason.rewarding.records import ErrorRecord, RewardBatch
from mmreason.sampling.records import Drawn, Rollouts, merge_groups
from mmreason.sampling.within_step import StepPhases


def _traj(group: int, k: int):
    return SimpleNamespace(group_id=group, completion_text=f"{group}/{k}")


def _drawn(slot: int, tag: str = "") -> Drawn:
    return Drawn(slot, 10 + slot, SimpleNamespace(sample=f"s{slot}{tag}"))


def test_a_redone_group_takes_its_own_place_and_the_new_column_aligns():
    """Groups 0, 1, 2 of two rows; group 1 is redone and its scoring added a column "b".
    Worked: rows [0/0, 0/1, 1/0', 1/1', 2/0, 2/1]; column a = [1, 2, 7, 8, 5, 6], b = [nan, nan, 1, 1, nan, nan]."""
    old_error = ErrorRecord("a", "s0", 0, "exception", "boom")
    new_error = ErrorRecord("b", "s1", 1, "timeout", "slow")
    got = Rollouts(
        [_drawn(0), _drawn(1), _drawn(2)],
        [_traj(g, k) for g in range(3) for k in range(2)],
        [f"s{g}" for g in range(3) for _ in range(2)],
        RewardBatch(torch.tensor([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]]), ["a"], torch.ones(1), [old_error]),
        metrics={"kept": 1.0},
    )
    new = Rollouts(
        [_drawn(1, "'")],
        [_traj(1, 2), _traj(1, 3)],
        ["s1'", "s1'"],
        RewardBatch(torch.tensor([[7.0, 1.0], [8.0, 1.0]]), ["a", "b"], torch.ones(2), [new_error]),
    )
    out = merge_groups(got, new)
    assert [t.completion_text for t in out.trajectories] == ["0/0", "0/1", "1/2", "1/3", "2/0", "2/1"]
    assert out.samples == ["s0", "s0", "s1'", "s1'", "s2", "s2"]
    assert [d.prompt.sample for d in out.prompts] == ["s0", "s1'", "s2"]
    assert out.batch.names == ["a", "b"]
    assert out.batch.column("a").tolist() == [1.0, 2.0, 7.0, 8.0, 5.0, 6.0]
    assert [math.isnan(v) for v in out.batch.column("b").tolist()] == [True, True, False, False, True, True]
    assert out.batch.errors == [old_error, new_error] and out.metrics == {"kept": 1.0}


def test_nothing_built_or_rolled_out_leaves_the_step_whole():
    calls = []
    phases = StepPhases(
        SimpleNamespace(),
        3,
        prompt_of=lambda run, sample: None if sample == "broken" else SimpleNamespace(sample=sample),
        roll_out=lambda run, drawn, step: calls.append((len(drawn), step)) or [],
        score=lambda run, drawn, trajectories: None,
    )
    got = Rollouts(
        [_drawn(0), _drawn(1)],
        [_traj(0, 0), _traj(1, 0)],
        ["s0", "s1"],
        RewardBatch(torch.zeros(2, 1), ["a"], torch.ones(1)),
    )
    built = phases.rebuilt(got, lambda d, rows: "broken" if d.slot == 0 else f"new{d.slot}:{rows}")
    assert [(d.slot, d.index, d.prompt.sample) for d in built] == [(1, 11, "new1:[1]")]  # slot 0's prompt failed
    assert phases.redone(got, []) is None and calls == []  # nothing to roll out: no call
    assert phases.redone(got, built) is None and calls == [(1, 3)]  # rolled out, nothing came back
