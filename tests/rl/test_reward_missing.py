"""``reward_missing: renormalize`` means the same total in the advantages, the logs and the sampler, in every
``scale_rewards`` mode: ``sum_{k applies} w_k r_k * sum_k w_k / sum_{k applies} w_k``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from mmreason import rl
from mmreason.rewarding.records import RewardBatch
from mmreason.train.config import TrainConfig, check_reward_missing
from mmreason.train.step import compute_advantages
from mmreason.train.table import StepTable

NAN = math.nan
WEIGHTS = torch.tensor([0.1, 0.3, 0.6])  # DocSeeker: format, page F-beta, answer
# Two groups of three; rows 1 and 4 have "no specific evidence page" (page reward does not apply).
REWARDS = torch.tensor(
    [[1.0, 0.5, 1.0], [1.0, NAN, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, NAN, 1.0], [1.0, 0.2, 0.5]]
)
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])
# By hand: a full row is 0.1 f + 0.3 p + 0.6 a; a row without p is (0.1 f + 0.6 a) / 0.7.
RENORMALIZED = torch.tensor([0.85, 0.7 / 0.7, 0.0, 0.4, 0.6 / 0.7, 0.46])
ZERO_FILLED = torch.tensor([0.85, 0.7, 0.0, 0.4, 0.6, 0.46])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_advantages_score_the_renormalized_total(scale):
    got = rl.advantages("grpo", REWARDS, GROUPS, weights=WEIGHTS, scale_rewards=scale, missing="renormalize")
    want = rl.advantages("grpo", RENORMALIZED, GROUPS, scale_rewards=scale)  # one column: the total itself
    torch.testing.assert_close(got.advantages, want.advantages, atol=1e-6, rtol=0)
    zero = rl.advantages("grpo", REWARDS, GROUPS, weights=WEIGHTS, scale_rewards=scale)
    torch.testing.assert_close(
        zero.advantages, rl.advantages("grpo", ZERO_FILLED, GROUPS, scale_rewards=scale).advantages, atol=1e-6, rtol=0
    )
    assert (got.advantages - zero.advantages).abs().max() > 0.05  # the option changes what is trained


def test_no_scale_known_answer():
    """scale_rewards=none by hand: group means 1.85/3 and (0.4 + 0.6/0.7 + 0.46)/3."""
    got = rl.advantages("grpo", REWARDS, GROUPS, weights=WEIGHTS, scale_rewards="none", missing="renormalize")
    m0, m1 = 1.85 / 3, (0.4 + 0.6 / 0.7 + 0.46) / 3
    want = torch.tensor([0.85 - m0, 1.0 - m0, -m0, 0.4 - m1, 0.6 / 0.7 - m1, 0.46 - m1])
    torch.testing.assert_close(got.advantages, want, atol=1e-6, rtol=0)


def test_logged_total_is_the_estimators_total():
    batch = RewardBatch(values=REWARDS, names=["fmt", "page", "ans"], weights=WEIGHTS)
    torch.testing.assert_close(batch.total("renormalize"), RENORMALIZED, atol=1e-6, rtol=0)
    torch.testing.assert_close(batch.total("zero"), ZERO_FILLED, atol=1e-6, rtol=0)


@pytest.mark.parametrize("estimator", ["dr_grpo", "rloo", "mc_grpo"])
def test_other_total_estimators_take_the_option(estimator):
    got = rl.advantages(estimator, REWARDS, GROUPS, weights=WEIGHTS, missing="renormalize")
    want = rl.advantages(estimator, RENORMALIZED, GROUPS)
    torch.testing.assert_close(got.advantages, want.advantages, atol=1e-6, rtol=0)


def test_trainer_passes_the_config_rule_to_the_estimator():
    cfg = TrainConfig(reward_missing="renormalize")
    cfg.algorithm.scale_rewards = "batch"
    run = SimpleNamespace(cfg=cfg, counters=SimpleNamespace(dropped_groups=0))
    table = StepTable(
        REWARDS,
        ["fmt", "page", "ans"],
        WEIGHTS,
        RENORMALIZED,
        GROUPS,
        GROUPS,
        ["t"] * 6,
        torch.zeros(6, dtype=torch.long),
        torch.ones(6, dtype=torch.long),
        torch.zeros(6, dtype=torch.bool),
        [],
        [],
    )
    adv, keep = compute_advantages(run, table)
    want = rl.advantages("grpo", RENORMALIZED, GROUPS, scale_rewards="batch").advantages
    torch.testing.assert_close(adv, want, atol=1e-6, rtol=0)
    assert keep.all()


def test_component_wise_estimator_with_renormalize_is_an_error_at_start():
    cfg = TrainConfig(reward_missing="renormalize")
    cfg.algorithm.estimator = "gdpo"
    with pytest.raises(ValueError, match="gdpo.*reward_missing=zero"):
        check_reward_missing(cfg)
