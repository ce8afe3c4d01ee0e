"""Mini-batches of an optimizer step: whole groups, longest first, every row once, the same cut every time."""

from __future__ import annotations

import random

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason.train.minibatches import length_sorted_minibatches
from mmreason.types import Trajectory


def _trajs(spec: list[tuple[int, int]]) -> list[Trajectory]:
    """(group id, total tokens) per row."""
    return [
        Trajectory(
            sample_id=f"s{g}",
            group_id=g,
            token_ids=torch.zeros(n, dtype=torch.long),
            action_mask=torch.ones(n, dtype=torch.long),
            prompt_length=1,
            completion_text="",
        )
        for g, n in spec
    ]


def test_whole_groups_longest_first():
    #            group 0: short          group 1: long            group 2: middle
    trajs = _trajs([(0, 5), (0, 7), (1, 30), (1, 20), (2, 12), (2, 15)])
    assert length_sorted_minibatches(list(range(6)), trajs, 4) == [[2, 3, 5, 4], [1, 0]]
    assert length_sorted_minibatches(list(range(6)), trajs, 3) == [[2, 3], [5, 4], [1, 0]]  # never 2 + 1
    assert length_sorted_minibatches(list(range(6)), trajs, 6) == [[2, 3, 5, 4, 1, 0]]
    assert length_sorted_minibatches(list(range(6)), trajs, 1) == [[2], [3], [5], [4], [1], [0]]


def test_padding_shrinks_against_arrival_order():
    rng = random.Random(0)
    spec = [(g, n) for g in range(8) for n in [rng.choice((20, 200)) + rng.randrange(5)] * 4]
    trajs, rows = _trajs(spec), list(range(len(spec)))

    def padded(batches):
        return sum(len(b) * max(trajs[i].token_ids.numel() for i in b) for b in batches)

    arrival = [rows[i : i + 8] for i in range(0, len(rows), 8)]
    assert padded(length_sorted_minibatches(rows, trajs, 8)) < padded(arrival)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 40)), min_size=1, max_size=30), st.integers(1, 9))
def test_every_row_once_groups_kept_deterministic(spec, size):
    trajs = _trajs(spec)
    rows = list(range(len(spec)))
    got = length_sorted_minibatches(rows, trajs, size)
    assert sorted(i for b in got for i in b) == rows
    assert all(1 <= len(b) <= size for b in got)
    assert got == length_sorted_minibatches(rows, trajs, size)
    for g in {t.group_id for t in trajs}:
        holding = [k for k, b in enumerate(got) if any(trajs[i].group_id == g for i in b)]
        assert holding == list(range(holding[0], holding[-1] + 1))  # a group's rows are contiguous
        if sum(t.group_id == g for t in trajs) <= size:
            assert len(holding) == 1  # a group that fits is never split
    order = list(dict.fromkeys(trajs[i].group_id for b in got for i in b))
    longest = [max(t.token_ids.numel() for t in trajs if t.group_id == g) for g in order]
    assert longest == sorted(longest, reverse=True)  # longest groups first
