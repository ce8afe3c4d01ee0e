"""Group bookkeeping: dense ids, masked statistics, exact constants, sorting, Step-GRPO ids."""

import math

import torch

from mmreason.rl.groups import (
    centred,
    group_index,
    group_stats,
    grouped_lower_median,
    grouped_sort,
    step_group_ids,
    weighted_total,
)


def test_group_index_accepts_arbitrary_integer_ids():
    index, m = group_index(torch.tensor([10, -3, 10, 99]))
    assert m == 3
    assert index.tolist() == [1, 0, 1, 2]


def test_group_stats_leaves_nan_entries_out():
    values = torch.tensor([[1.0, float("nan")], [3.0, 2.0], [5.0, 4.0]])
    valid = ~torch.isnan(values)
    stats = group_stats(values, valid, torch.zeros(3, dtype=torch.long), 1)
    assert torch.allclose(stats.mean, torch.tensor([[3.0, 3.0]]))
    assert torch.allclose(stats.std, torch.tensor([[math.sqrt(8 / 3), 1.0]]))
    assert stats.count.tolist() == [[3.0, 2.0]]


def test_constant_group_has_its_exact_value_as_mean():
    # 0.1 * 3 / 3 is not 0.1 in floating point; the constant guard must make x - mean exactly 0
    values = torch.full((3, 1), 0.1)
    valid = torch.ones(3, 1, dtype=torch.bool)
    index = torch.zeros(3, dtype=torch.long)
    stats = group_stats(values, valid, index, 1)
    assert stats.constant.item() and stats.std.item() == 0.0
    assert torch.equal(centred(values, valid, index, stats), torch.zeros(3, 1))


def test_single_member_group_is_constant():
    stats = group_stats(torch.tensor([[2.0], [5.0]]), torch.ones(2, 1, dtype=torch.bool), torch.tensor([0, 1]), 2)
    assert stats.constant.all()


def test_weighted_total_counts_nan_as_zero_and_flags_all_nan_rows():
    rewards = torch.tensor([[1.0, float("nan")], [float("nan"), float("nan")], [2.0, 3.0]])
    total, valid = weighted_total(rewards, torch.tensor([2.0, 0.5]))
    assert total.tolist() == [2.0, 0.0, 5.5]
    assert valid.tolist() == [True, False, True]


def test_grouped_sort_is_stable_within_groups():
    values = torch.tensor([2.0, 1.0, 2.0, 0.0, 1.0])
    index = torch.tensor([0, 1, 0, 0, 1])
    go = grouped_sort(values, index, 2)
    assert go.rank.tolist() == [1, 0, 2, 0, 1]  # ties 0 and 2 keep their order
    assert go.count.tolist() == [3, 2]


def test_grouped_lower_median():
    values = torch.tensor([3.0, 4.0, 1.0, 4.0, 2.0, 7.0, 1.0])
    index = torch.tensor([0, 1, 0, 1, 0, 2, 2])
    assert grouped_lower_median(values, index, 3).tolist() == [2.0, 4.0, 1.0]


def test_step_group_ids_unrolled_trajectory_gives_one_group_per_step():
    # a 3-step trajectory of sample "q1" (2 rollouts per step) and a 1-step sample "q2"
    ids = step_group_ids(["q1", "q1", "q1", "q1", "q1", "q1", "q2", "q2"], [0, 0, 1, 1, 2, 2, 0, 0])
    assert ids.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert ids.dtype == torch.long


def test_step_group_ids_from_tensors_distinguishes_pairs():
    ids = step_group_ids(torch.tensor([7, 7, 3, 3]), torch.tensor([0, 1, 0, 1]))
    assert len(set(ids.tolist())) == 4
    same = step_group_ids(torch.tensor([7, 7]), torch.tensor([1, 1]))
    assert same[0] == same[1]
