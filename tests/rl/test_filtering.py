"""DAPO dynamic sampling filter (docs/methods/trainer.md#dapo)."""

import torch

from mmreason.rl import dynamic_sampling_filter


def test_drops_all_correct_and_all_wrong_groups():
    acc = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([10, 10, 20, 20, 30, 30, 20, 10, 30])
    out = dynamic_sampling_filter(acc, groups)
    assert out.keep.tolist() == [False, False, False, False, True, True, False, False, True]
    assert (out.num_dropped, out.num_groups) == (2, 3)


def test_batch_of_only_uniform_groups_comes_back_empty():
    out = dynamic_sampling_filter(torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1]))
    assert not out.keep.any()
    assert out.num_dropped == out.num_groups == 2


def test_single_rollout_group_carries_no_signal():
    out = dynamic_sampling_filter(torch.tensor([0.3, 0.1, 0.9]), torch.tensor([0, 1, 1]))
    assert out.keep.tolist() == [False, True, True]
