"""OPMD and AsymRE advantages, the off-policy REINFORCE family (docs/methods/estimators.md#opmd,
docs/methods/estimators.md#asymre), checked against
the formulas of the authors' implementation worked by hand.

    OPMD, baseline "mean", r = [1, 0, 0, 0]: mean 0.25 -> A = [0.75, -0.25, -0.25, -0.25]
    OPMD, baseline "logavgexp", tau = 1: b = log((e + 3) / 4) = 0.357374 -> A = [0.642626, -0.357374 x 3]
          tau = 0.5: b = 0.5 log((e^2 + 3) / 4) = 0.477229 -> A = [0.522771, -0.477229 x 3]
          (the soft maximum sits between the mean 0.25 and the max 1, nearer the max as tau falls)
    AsymRE, shift -0.1: baseline 0.25 - 0.1 = 0.15 -> A = [0.85, -0.15, -0.15, -0.15]
"""

import math

import pytest
import torch

from mmreason.rl import advantages

R = [1.0, 0.0, 0.0, 0.0]
G = [7, 7, 7, 7]


def test_opmd_mean_baseline():
    torch.testing.assert_close(advantages("opmd", R, G).advantages, torch.tensor([0.75, -0.25, -0.25, -0.25]))


@pytest.mark.parametrize("tau, b", [(1.0, 0.357374), (0.5, 0.477229)])
def test_opmd_logavgexp_baseline(tau, b):
    assert b == pytest.approx(tau * math.log((math.exp(1 / tau) + 3) / 4), abs=1e-6)
    got = advantages("opmd", R, G, baseline="logavgexp", tau=tau).advantages
    torch.testing.assert_close(got, torch.tensor([1 - b, -b, -b, -b]), atol=1e-5, rtol=0)


def test_opmd_logavgexp_is_stable_for_large_rewards_and_small_tau():
    got = advantages("opmd", [100.0, 0.0], [0, 0], baseline="logavgexp", tau=0.01).advantages
    # b = 0.01 log((e^10000 + 1) / 2) = 100 - 0.01 log 2
    torch.testing.assert_close(got, torch.tensor([0.01 * math.log(2), -100 + 0.01 * math.log(2)]), atol=1e-4, rtol=0)


def test_asymre_shifted_baseline():
    torch.testing.assert_close(advantages("asymre", R, G).advantages, torch.tensor([0.85, -0.15, -0.15, -0.15]))
    torch.testing.assert_close(advantages("asymre", R, G, shift=0.0).advantages, advantages("opmd", R, G).advantages)


def test_edge_cases():
    equal = [0.4, 0.4, 0.4]
    assert advantages("opmd", equal, [0, 0, 0]).advantages.tolist() == [0.0, 0.0, 0.0]
    assert advantages("opmd", equal, [0, 0, 0], baseline="logavgexp", tau=0.3).advantages.tolist() == [0.0] * 3
    # AsymRE keeps pushing an all-equal group by -shift (its baseline sits below the mean)
    torch.testing.assert_close(advantages("asymre", equal, [0, 0, 0]).advantages, torch.full((3,), 0.1))
    for name in ("opmd", "asymre"):
        assert advantages(name, [0.9], [0]).advantages.tolist() == [0.0]  # one rollout: no baseline
        got = advantages(name, [1.0, 0.0, float("nan")], [0, 0, 0]).advantages  # invalid row: out of the mean
        assert got[2].item() == 0.0 and got[0].item() == pytest.approx(0.5 + (0.1 if name == "asymre" else 0.0))
    with pytest.raises(ValueError, match="baseline"):
        advantages("opmd", R, G, baseline="max")
    with pytest.raises(ValueError, match="tau"):
        advantages("opmd", R, G, tau=0.0)
