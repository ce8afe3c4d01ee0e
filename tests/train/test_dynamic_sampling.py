"""DAPO dynamic sampling: the step keeps drawing prompts until it holds prompts_per_step groups whose
rewards vary, under a cap on extra draws; what it does not train on is counted."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.sampling.records import Drawn
from mmreason.train import rounds
from mmreason.train import step as grpo
from mmreason.train.config import TrainConfig
from mmreason.types import Sample, Trajectory

G = 2
# Each dataset index has fixed rewards for its G rollouts: index 0 and 2 vary, the others do not.
REWARDS = {0: [1.0, 0.0], 1: [1.0, 1.0], 2: [0.0, 1.0], 3: [0.0, 0.0], 4: [1.0, 1.0], 5: [0.5, 0.0]}


def _phases(draws: list[list[int]]):
    queue = list(draws)

    def draw(run):
        return list(enumerate(queue.pop(0)))

    def build(run, drawn):
        return [
            Drawn(slot, index, SimpleNamespace(sample=Sample(id=f"s{index}", messages=[], answer="")))
            for slot, index in drawn
        ]

    def roll_out(run, prompts, step):
        return [
            Trajectory(f"s{d.index}", d.slot, torch.tensor([1, 2]), torch.tensor([0, 1]), 1, "x")
            for d in prompts
            for _ in range(G)
        ]

    def score(run, prompts, trajectories):
        index_of = {d.slot: d.index for d in prompts}
        seen: dict[int, int] = {}
        values = []
        for t in trajectories:
            k = seen[t.group_id] = seen.get(t.group_id, -1) + 1
            values.append([REWARDS[index_of[t.group_id]][k]])
        return [d.prompt.sample for d in prompts for _ in range(G)], RewardBatch(
            torch.tensor(values), ["r"], torch.ones(1)
        )

    return draw, build, roll_out, score


def _run(dynamic: bool, max_draws: int = 3) -> SimpleNamespace:
    cfg = TrainConfig(prompts_per_step=2)
    cfg.algorithm.dynamic_sampling = dynamic
    cfg.algorithm.dynamic_sampling_max_draws = max_draws
    return SimpleNamespace(
        cfg=cfg,
        accelerator=SimpleNamespace(num_processes=1),
        augmenter=None,
        counters=SimpleNamespace(dropped_groups=0),
    )


def collect_rollouts(run, step, draw, build, roll_out, score, monkeypatch):
    """The step's rounds as ``train_step`` draws them, with its phases replaced by the stubs."""
    for name, fn in (("sample_prompts", draw), ("build_prompts", build), ("roll_out", roll_out), ("score", score)):
        monkeypatch.setattr(rounds, name, fn)  # a round's phases (train/rounds.py)
        if hasattr(grpo, name):
            monkeypatch.setattr(grpo, name, fn)  # the step draws further rounds with the same ones
    timed = grpo.PhaseTimes()
    got = grpo.dynamic_sampling(run, step, timed, grpo.draw_round(run, step, timed, grpo.sample_prompts(run)))
    assert set(timed.seconds) == {"prompts", "generate", "reward"}
    assert run.counters.dropped_groups == got.discarded_groups
    return got


def test_draws_again_until_the_batch_is_full_of_groups_with_signal(monkeypatch):
    got = collect_rollouts(_run(True), 1, *_phases([[0, 1], [3, 2], [4, 5]]), monkeypatch)
    assert got.extra_draws == 1  # [0, 1] has one group with signal, [3, 2] brings the second
    assert [d.index for d in got.prompts] == [0, 2]
    assert len({d.slot for d in got.prompts}) == 2  # the extra draw got fresh slots (group ids, seeds)
    assert [t.sample_id for t in got.trajectories] == ["s0", "s0", "s2", "s2"]
    assert got.batch.values[:, 0].tolist() == [1.0, 0.0, 0.0, 1.0]  # rewards stay with their rows
    assert got.discarded_groups == 2


def test_at_the_cap_zero_signal_groups_fill_the_batch(monkeypatch):
    got = collect_rollouts(_run(True, max_draws=1), 1, *_phases([[1, 3], [4, 0], [2, 5]]), monkeypatch)
    assert got.extra_draws == 1
    assert sorted(d.index for d in got.prompts) == [0, 1]  # the group with signal, and the first filler drawn
    assert got.discarded_groups == 2


def test_without_dynamic_sampling_one_draw(monkeypatch):
    got = collect_rollouts(_run(False), 1, *_phases([[1, 3], [0, 2]]), monkeypatch)
    assert got.extra_draws == 0 and [d.index for d in got.prompts] == [1, 3]
