"""Every policy loss keeps finite values and gradients on degenerate inputs, for every aggregation."""

import pytest
import torch

from mmreason.rl import AGGREGATIONS, POLICY_LOSSES, policy_loss

NEG_INF = float("-inf")


def case(name):
    """(logprobs, old_logprobs, advantages, mask, group_ids, seq_mask) for one degenerate situation."""
    torch.manual_seed(0)
    n, t = 4, 3
    lp, old = torch.randn(n, t), torch.randn(n, t)
    adv, mask = torch.tensor([1.0, -1.0, 0.5, -0.5]), torch.ones(n, t)
    groups, keep = torch.tensor([0, 0, 1, 1]), None
    if name == "all_masked":
        mask = torch.zeros(n, t)
    elif name == "empty_rows":
        mask[1:] = 0
    elif name == "zero_advantages":
        adv = torch.zeros(n)
    elif name == "on_policy":
        old = lp.clone()
    elif name == "huge_log_ratios":
        lp, old = lp + 300.0, old - 300.0
        adv = torch.tensor([0.0, -1.0, 0.0, 1.0])
    elif name == "padding_is_minus_inf":
        mask[:, -1] = 0
        lp[:, -1], old[:, -1] = NEG_INF, NEG_INF
    elif name == "single_rollout_groups":
        groups = torch.arange(n)
        adv = torch.zeros(n)
    elif name == "every_row_dropped":
        keep = torch.zeros(n, dtype=torch.bool)
    return lp, old, adv, mask, groups, keep


CASES = [
    "all_masked",
    "empty_rows",
    "zero_advantages",
    "on_policy",
    "huge_log_ratios",
    "padding_is_minus_inf",
    "single_rollout_groups",
    "every_row_dropped",
]


# a second option set per loss, exercising its other branch
VARIANTS = {
    "clipped": {"importance_sampling_level": "sequence"},
    "reg_grpo": {},
    "opmd": {"tau": 0.0},
    "disco": {"score": "Lratio", "tau": 1.0, "negatives": "mean"},
    "holder": {"level": "token", "p_schedule": "constant", "p": -2.0},
    "gbpo": {"temperature": 1.0},
    "dcpo": {"prev_entropy": 2.0, "entropy_base": 0.5},
    "llds": {"gate": "action", "llds_coef": 1.0},
    "cispo": {"epsilon_min": 0.5, "epsilon_max": 2.0},
    "sapo": {"importance_sampling_level": "sequence"},
    "gmpo": {"epsilon_log": 0.1},
    "kl_cov": {"kl_cov_ratio": 0.5},
    "clip_cov": {"clip_ratio": 0.5, "clip_cov_lb": -5.0},
    "etr": {"macro_target": "weight", "rewards": torch.tensor([1.0, 0.0, 1.0, 1.0])},
    "dhpo": {"mixing": "entropy", "entropy": torch.rand(4, 3)},
    "erpo": {"entropy": torch.rand(4, 3), "buckets": 2},
    "gepo": {"entropy": torch.rand(4, 3), "entropy_history": torch.rand(5)},
    "conspo": {"variant": "pooled", "train_step": 10},
    "dagrpo": {"token_ids": torch.randint(0, 3, (4, 3)), "similarity_threshold": 0.1},
    "r3_rank": {"entropy": torch.rand(4, 3), "rewards": torch.zeros(4), "spread_weight": 1.0},
    "vps": {"segment_progress": torch.randn(4, 3) * 5},
}


def inputs(loss_name, lp, old):
    """The trainer inputs a loss requires (DCPO: tempered log-probs, the rows' and the step's rewards)."""
    if loss_name != "dcpo":
        return {}
    n = lp.shape[0]
    return {
        "tempered_logprobs": old.detach() * 1.1,
        "rewards": torch.linspace(0.0, 1.0, n),
        "step_rewards": torch.linspace(0.0, 1.0, n),
        "prev_entropy": 0.0,
    }


def test_all_policy_losses_are_covered():
    assert set(POLICY_LOSSES.names()) == set(VARIANTS)


@pytest.mark.parametrize("situation", CASES)
@pytest.mark.parametrize("loss_name", sorted(VARIANTS))
@pytest.mark.parametrize("aggregation", sorted(AGGREGATIONS.names()))
def test_gradients_are_finite(situation, loss_name, aggregation):
    lp, old, adv, mask, groups, keep = case(situation)
    lp = lp.requires_grad_()
    for options in ({}, VARIANTS[loss_name]):
        out = policy_loss(
            loss_name,
            lp,
            old,
            adv,
            mask,
            aggregation=aggregation,
            seq_mask=keep,
            ref_logprobs=old,
            beta=0.05,
            **({"group_ids": groups} | inputs(loss_name, lp, old) | options),
        )
        (grad,) = torch.autograd.grad(out.loss, lp)
        assert torch.isfinite(out.loss), (situation, options)
        assert torch.isfinite(grad).all(), (situation, options)
        for value in vars(out.metrics).values():
            assert value is None or torch.isfinite(value).all()
