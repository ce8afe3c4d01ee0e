"""G²RPO: rank -> normal quantile with tie averaging (docs/methods/estimators.md#g2rpo)."""

import pytest
import torch

from mmreason.rl import advantages


def adv(rewards, groups, **options):
    return advantages("g2rpo", torch.tensor(rewards), torch.tensor(groups), **options).advantages


def test_four_distinct_rewards():
    assert torch.allclose(
        adv([0.0, 1.0, 2.0, 3.0], [0] * 4), torch.tensor([-1.1503, -0.3186, 0.3186, 1.1503]), atol=1e-4
    )


def test_scattered_back_to_original_order():
    assert torch.allclose(
        adv([3.0, 1.0, 2.0, 7.0], [0] * 4), torch.tensor([0.3186, -1.1503, -0.3186, 1.1503]), atol=1e-4
    )


def test_binary_ties_average_their_quantiles():
    assert torch.allclose(
        adv([0.0, 0.0, 1.0, 1.0], [0] * 4), torch.tensor([-0.7345, -0.7345, 0.7345, 0.7345]), atol=1e-4
    )


def test_eight_rewards_two_correct():
    out = adv([0.0] * 6 + [1.0] * 2, [0] * 8)
    assert torch.allclose(out, torch.tensor([-0.4035] * 6 + [1.2106] * 2), atol=1e-4)
    assert abs(out.sum().item()) < 1e-5


def test_bounded_by_the_extreme_quantile():
    out = adv([float(i) for i in range(8)], [0] * 8)
    assert out.abs().max().item() == pytest.approx(1.5341, abs=1e-4)


def test_scope_task_batch_pools_groups_and_group_scope_does_not():
    rewards, groups = [0.0, 1.0, 2.0, 3.0], [0, 0, 1, 1]
    pooled = adv(rewards, groups)  # default scope: the whole batch is one task
    assert torch.allclose(pooled, torch.tensor([-1.1503, -0.3186, 0.3186, 1.1503]), atol=1e-4)
    per_group = adv(rewards, groups, scope="group")
    assert torch.allclose(per_group, torch.tensor([-0.6745, 0.6745, -0.6745, 0.6745]), atol=1e-4)


def test_task_ids_split_the_batch_into_sets():
    out = adv([0.0, 1.0, 2.0, 3.0], [0, 1, 2, 3], task_ids=torch.tensor([5, 5, 6, 6]))
    assert torch.allclose(out, torch.tensor([-0.6745, 0.6745, -0.6745, 0.6745]), atol=1e-4)


def test_unknown_scope_is_rejected():
    with pytest.raises(ValueError, match="scope"):
        adv([0.0, 1.0], [0, 0], scope="prompt")
