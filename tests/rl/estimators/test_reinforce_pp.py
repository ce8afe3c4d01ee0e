"""REINFORCE++ and REINFORCE++-baseline (docs/methods/estimators.md#reinforce_pp), by hand.

rewards [1, 0, 0, 0], groups [0, 0, 1, 1]:
    reinforce_pp: batch mean 0.25, std sqrt(0.25 * 0.75) = 0.433013 -> [1.732051, -0.577350 x 3]
    baseline:     d = r - group mean = [0.5, -0.5, 0, 0], mean 0, std sqrt(0.5 / 4) = 0.353553
                  -> [1.414214, -1.414214, 0, 0]
unequal groups [0, 0, 0, 1], rewards [1, 0, 0, 1]: d = [2/3, -1/3, -1/3, 0], std sqrt(6/36) = 0.408248
                  -> [1.632993, -0.816497, -0.816497, 0]
"""

import pytest
import torch

from mmreason.rl import advantages


def test_reinforce_pp_whitens_over_the_batch():
    got = advantages("reinforce_pp", [1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1]).advantages
    torch.testing.assert_close(got, torch.tensor([1.732051, -0.577350, -0.577350, -0.577350]), atol=1e-5, rtol=0)


def test_reinforce_pp_baseline_subtracts_the_group_mean_first():
    got = advantages("reinforce_pp_baseline", [1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1]).advantages
    torch.testing.assert_close(got, torch.tensor([1.414214, -1.414214, 0.0, 0.0]), atol=1e-5, rtol=0)


def test_reinforce_pp_baseline_with_groups_of_unequal_size():
    got = advantages("reinforce_pp_baseline", [1.0, 0.0, 0.0, 1.0], [0, 0, 0, 1]).advantages
    torch.testing.assert_close(got, torch.tensor([1.632993, -0.816497, -0.816497, 0.0]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["reinforce_pp", "reinforce_pp_baseline"])
def test_a_constant_batch_gives_zero(name):
    assert torch.equal(advantages(name, [0.5, 0.5, 0.5], [0, 0, 1]).advantages, torch.zeros(3))
