"""DGPO (Harder Is Better, arXiv 2601.20614): MAD-normalised advantages and difficulty-aware question weights
(docs/methods/estimators.md#dgpo), checked against the formulas of the authors' code worked by hand.

Worked example (two groups of G = 4, one constant group):

    group A  r = [1, 0, 0, 0]: mean 0.25, |r - mean| = [0.75, 0.25, 0.25, 0.25], MAD = 0.375
             DGAE A = (r - 0.25) / 0.375 = [2, -2/3, -2/3, -2/3]          (GRPO's std 0.433 would give 2.309)
    group B  r = [1, 1, 1, 0]: mean 0.75, MAD 0.375 -> A = [2/3, 2/3, 2/3, -2]
    group C  r = [1, 1]: constant -> A = 0 and left out of the softmax, so M = 2 live groups
    DQW, T = 2: softmax(-[0.25, 0.75] / 2) = [1, e^-0.25] / (1 + e^-0.25) = [0.562177, 0.437823]
             lambda = 2 * that = [1.124353, 0.875647]
    A' = A: [2.248706, -0.749569 x 3]   B: [0.583765 x 3, -1.751294]   C: [0, 0]

Each live group's |A| sums to G = 4 before the weights (the balance DGAE restores); the harder group A
(accuracy 0.25) weighs more than B (0.75).
"""

import math

import pytest
import torch

from mmreason.rl import advantages

REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])


def test_worked_example_by_hand():
    got = advantages("dgpo", REWARDS, GROUPS).advantages
    a, b = 2 / (1 + math.exp(-0.25)), 2 * math.exp(-0.25) / (1 + math.exp(-0.25))
    want = torch.tensor([2 * a, -2 / 3 * a, -2 / 3 * a, -2 / 3 * a, 2 / 3 * b, 2 / 3 * b, 2 / 3 * b, -2 * b, 0, 0])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        got[:8],
        torch.tensor([2.248706, -0.749569, -0.749569, -0.749569, 0.583765, 0.583765, 0.583765, -1.751294]),
        atol=1e-5,
        rtol=0,
    )


def test_dgae_alone_balances_every_group_to_g():
    got = advantages("dgpo", REWARDS, GROUPS, dqw=False).advantages
    torch.testing.assert_close(
        got, torch.tensor([2, -2 / 3, -2 / 3, -2 / 3, 2 / 3, 2 / 3, 2 / 3, -2, 0, 0]), atol=1e-5, rtol=0
    )
    for g in (0, 1):
        assert got[GROUPS == g].abs().sum().item() == pytest.approx(4.0, abs=1e-4)


def test_weights_of_live_groups_sum_to_their_count_and_temperature_flattens_them():
    got = advantages("dgpo", REWARDS, GROUPS).advantages
    base = advantages("dgpo", REWARDS, GROUPS, dqw=False).advantages
    lam = [(got[GROUPS == g] / base[GROUPS == g]).mean().item() for g in (0, 1)]
    assert sum(lam) == pytest.approx(2.0, abs=1e-5) and lam[0] > lam[1]
    hot = advantages("dgpo", REWARDS, GROUPS, temperature=1e6).advantages
    torch.testing.assert_close(hot, base, atol=1e-5, rtol=0)  # T -> inf: every weight 1
    with pytest.raises(ValueError, match="temperature"):
        advantages("dgpo", REWARDS, GROUPS, temperature=0.0)


def test_difficulty_can_come_from_one_reward_column():
    """Column 0 is the accuracy, column 1 a format score constant within each group (1 in A, 0 in B): the spreads
    and DGAE values are unchanged, but by the total A looks easier (mean 1.25 vs 0.75), so the weights swap:
    softmax(-[1.25, 0.75] / 2) * 2 = [0.875647, 1.124353]."""
    fmt = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    rewards = torch.stack([REWARDS, fmt], 1)
    by_accuracy = advantages("dgpo", rewards, GROUPS, difficulty_component=0).advantages
    torch.testing.assert_close(by_accuracy, advantages("dgpo", REWARDS, GROUPS).advantages)
    by_total = advantages("dgpo", rewards, GROUPS).advantages
    base = advantages("dgpo", REWARDS, GROUPS, dqw=False).advantages
    lam = torch.tensor([0.875647] * 4 + [1.124353] * 4 + [1.0] * 2)
    torch.testing.assert_close(by_total, base * lam, atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="difficulty_component"):
        advantages("dgpo", rewards, GROUPS, difficulty_component=2)


def test_edge_cases_equal_rewards_one_sample_and_invalid_rows():
    assert advantages("dgpo", [0.5, 0.5, 0.5], [0, 0, 0]).advantages.tolist() == [0.0, 0.0, 0.0]
    assert advantages("dgpo", [1.0], [3]).advantages.tolist() == [0.0]
    # an all-NaN row takes no part in its group's mean or MAD and gets 0
    got = advantages("dgpo", [1.0, 0.0, float("nan")], [0, 0, 0], dqw=False).advantages
    torch.testing.assert_close(got, torch.tensor([1.0, -1.0, 0.0]), atol=1e-5, rtol=0)
    assert torch.isfinite(advantages("dgpo", [[float("nan")]] * 2, [0, 0]).advantages).all()
