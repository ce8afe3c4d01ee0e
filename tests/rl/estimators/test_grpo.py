"""GRPO (group / batch / no std), Dr. GRPO and RLOO by hand (docs/methods/estimators.md#grpo,
docs/methods/estimators.md#dr_grpo, docs/methods/estimators.md#rloo)."""

import math

import pytest
import torch

from mmreason.rl import advantages

R1 = [1.0, 1.0, 0.0, 0.0]
R2 = [1.0, 0.0, 0.0, 0.0]


def adv(name, rewards, groups, **options):
    return advantages(name, torch.tensor(rewards), torch.tensor(groups), **options).advantages


def test_grpo_on_summed_components_matches_algorithms_8_1():
    rewards = torch.tensor([R1, R2]).T  # [4, 2]
    out = advantages("grpo", rewards, [0, 0, 0, 0]).advantages
    assert torch.allclose(out, torch.tensor([1.5076, 0.3015, -0.9045, -0.9045]), atol=1e-4)


def test_grpo_uses_population_std():
    # rewards [1, 0]: mean 0.5, population std 0.5 -> +-1 (Bessel's std would give +-0.7071)
    assert torch.allclose(adv("grpo", [1.0, 0.0], [4, 4]), torch.tensor([1.0, -1.0]), atol=1e-5)


def test_scale_rewards_batch_and_none():
    rewards, groups = [1.0, 0.0, 3.0, 3.0], [0, 0, 1, 1]
    # group means 0.5 and 3; batch std of [1, 0, 3, 3] = sqrt(1.6875)
    batch_std = math.sqrt(1.6875)
    expected = torch.tensor([0.5 / batch_std, -0.5 / batch_std, 0.0, 0.0])
    assert torch.allclose(adv("grpo", rewards, groups, scale_rewards="batch"), expected, atol=1e-5)
    assert torch.allclose(adv("grpo", rewards, groups, scale_rewards="none"), torch.tensor([0.5, -0.5, 0, 0]))


def test_scale_rewards_rejects_unknown_value():
    with pytest.raises(ValueError, match="scale_rewards"):
        adv("grpo", [1.0, 0.0], [0, 0], scale_rewards="global")


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_identical_rewards_and_single_rollouts_give_exact_zero(name):
    out = adv(name, [0.7, 0.7, 0.7, 5.0, 0.1], [1, 1, 1, 2, 3])
    assert torch.equal(out, torch.zeros(5))


def test_dr_grpo_is_centred_reward_and_scales_with_rewards():
    base = adv("dr_grpo", [2.0, 1.0, 0.0, 0.0], [0, 0, 0, 0])
    assert torch.allclose(base, torch.tensor([1.25, 0.25, -0.75, -0.75]))
    scaled = adv("dr_grpo", [20.0, 10.0, 0.0, 0.0], [0, 0, 0, 0])
    assert torch.allclose(scaled, 10 * base)


def test_rloo_subtracts_the_mean_of_the_others():
    out = adv("rloo", [2.0, 1.0, 0.0, 0.0], [5, 5, 5, 5])
    # row 0: 2 - (1 + 0 + 0)/3; row 2: 0 - (2 + 1 + 0)/3
    assert torch.allclose(out, torch.tensor([5 / 3, 1 / 3, -1.0, -1.0]))


def test_groups_are_independent_and_ids_need_not_be_contiguous():
    mixed = adv("grpo", [1.0, 10.0, 0.0, 20.0], [42, -7, 42, -7])
    assert torch.allclose(mixed, torch.tensor([1.0, -1.0, -1.0, 1.0]), atol=1e-5)
