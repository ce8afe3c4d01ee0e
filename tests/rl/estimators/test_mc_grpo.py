"""MC-GRPO: median baseline over G+1 rollouts and the pivot mask (docs/methods/estimators.md#mc_grpo)."""

import pytest
import torch

from mmreason.rl import advantages


def test_worked_example_from_algorithms():
    out = advantages("mc_grpo", [0.2, 1.0, 0.0], [0, 0, 0])
    assert torch.allclose(out.advantages, torch.tensor([0.0, 0.8, -0.2]))
    assert out.loss_mask.tolist() == [False, True, True]  # the pivot (index 0) is left out of the loss


def test_pivot_is_first_tied_row_and_ties_get_zero():
    out = advantages("mc_grpo", [1.0, 1.0, 1.0, 0.0, 2.0], [3, 3, 3, 3, 3])
    assert torch.equal(out.advantages, torch.tensor([0.0, 0.0, 0.0, -1.0, 1.0]))
    assert out.loss_mask.tolist() == [False, True, True, True, True]


def test_interleaved_groups_each_lose_one_pivot():
    out = advantages("mc_grpo", [3.0, 9.0, 0.0, 7.0, 1.0, 8.0], [5, 9, 5, 9, 5, 9])
    # group 5: [3, 0, 1] -> median 1 at row 4; group 9: [9, 7, 8] -> median 8 at row 5
    assert torch.allclose(out.advantages, torch.tensor([2.0, 1.0, -1.0, -1.0, 0.0, 0.0]))
    assert out.loss_mask.tolist() == [True, True, True, True, False, False]


def test_even_group_uses_the_lower_median():
    out = advantages("mc_grpo", [4.0, 1.0, 3.0, 2.0], [0, 0, 0, 0])
    assert torch.allclose(out.advantages, torch.tensor([2.0, -1.0, 1.0, 0.0]))
    assert out.loss_mask.tolist() == [True, True, True, False]


def test_mad_and_std_scales():
    mad = advantages("mc_grpo", [0.2, 1.0, 0.0], [0, 0, 0], scale="mad").advantages
    # |r - m| = [0, 0.8, 0.2] -> MAD 0.2
    assert torch.allclose(mad, torch.tensor([0.0, 4.0, -1.0]), atol=1e-4)
    std = advantages("mc_grpo", [0.0, 1.0, 2.0], [0, 0, 0], scale="std").advantages
    assert torch.allclose(std, torch.tensor([-1.0, 0.0, 1.0]) / torch.tensor(2 / 3).sqrt(), atol=1e-5)
    with pytest.raises(ValueError, match="scale"):
        advantages("mc_grpo", [0.0, 1.0, 2.0], [0, 0, 0], scale="iqr")


def test_single_rollout_is_its_own_pivot():
    out = advantages("mc_grpo", [0.5], [0])
    assert out.advantages.tolist() == [0.0] and out.loss_mask.tolist() == [False]
