"""Reg-GRPO: regression of normalised sequence log-ratios onto advantages (docs/methods/losses.md#reg_grpo)."""

import pytest
import torch

from mmreason.rl import advantages, policy_loss

GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.2])
TARGET = advantages("grpo", REWARDS, GROUPS).advantages


def logprobs_with_sequence_ratio(rho, t=3):
    """Per-token log-probs [N, t] whose sum per row is rho [N] (old log-probs are 0)."""
    lp = torch.randn(rho.numel(), t)
    lp[:, -1] += rho - lp.sum(-1)
    return lp


def test_loss_vanishes_when_ratios_are_an_affine_image_of_the_targets():
    torch.manual_seed(0)
    for c, k in [(5.0, 0.3), (50.0, -2.0)]:
        lp = logprobs_with_sequence_ratio(c * TARGET + k)
        out = policy_loss("reg_grpo", lp, torch.zeros_like(lp), TARGET, torch.ones_like(lp), group_ids=GROUPS)
        assert out.loss.item() < 1e-6


def test_loss_is_invariant_to_a_constant_shift_of_the_ratios():
    torch.manual_seed(1)
    rho = torch.randn(8)
    lp = logprobs_with_sequence_ratio(rho)
    shifted = logprobs_with_sequence_ratio(rho + 3.0)
    mask = torch.ones_like(lp)
    a = policy_loss("reg_grpo", lp, torch.zeros_like(lp), TARGET, mask, group_ids=GROUPS).loss
    b = policy_loss("reg_grpo", shifted, torch.zeros_like(lp), TARGET, mask, group_ids=GROUPS).loss
    assert a.item() == pytest.approx(b.item(), rel=1e-5)


def test_uniform_reward_group_contributes_exactly_zero():
    torch.manual_seed(2)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.4, 0.4, 0.4, 0.4])  # group 1 is uniform
    target = advantages("grpo", rewards, GROUPS).advantages
    lp = torch.randn(8, 3, requires_grad=True)
    out = policy_loss("reg_grpo", lp, torch.zeros(8, 3), target, torch.ones(8, 3), group_ids=GROUPS)
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[4:], torch.zeros(4, 3))
    other = lp.detach().clone()
    other[4:] = torch.randn(4, 3) * 10  # anything in the uniform group leaves the loss unchanged
    again = policy_loss("reg_grpo", other, torch.zeros(8, 3), target, torch.ones(8, 3), group_ids=GROUPS)
    assert again.loss.item() == pytest.approx(out.loss.item(), rel=1e-6)


def test_first_step_gradient_is_the_scaled_sequence_sum_grpo_gradient():
    torch.manual_seed(3)
    old = torch.randn(8, 4)
    lp = old.clone().requires_grad_()
    mask = (torch.rand(8, 4) > 0.3).float()
    eps_r = 1e-2
    out = policy_loss("reg_grpo", lp, old, TARGET, mask, group_ids=GROUPS, eps_r=eps_r)
    (grad,) = torch.autograd.grad(out.loss, lp)
    expected = -(2 / (8 * eps_r)) * TARGET[:, None] * mask  # -(2/(S eps_r)) A_i d rho_i / d logp_it
    assert torch.allclose(grad, expected, rtol=1e-4, atol=1e-4)


def test_seq_mask_row_leaves_statistics_and_loss():
    torch.manual_seed(4)
    lp, mask = torch.randn(8, 3), torch.ones(8, 3)
    keep = torch.ones(8, dtype=torch.bool)
    keep[2] = False
    masked = policy_loss("reg_grpo", lp, torch.zeros_like(lp), TARGET, mask, group_ids=GROUPS, seq_mask=keep).loss
    sliced = policy_loss("reg_grpo", lp[keep], torch.zeros(7, 3), TARGET[keep], mask[keep], group_ids=GROUPS[keep]).loss
    assert masked.item() == pytest.approx(sliced.item(), rel=1e-6)


def test_bad_arguments_are_rejected():
    lp = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="eps_r"):
        policy_loss(
            "reg_grpo", lp, lp, torch.zeros(2), torch.ones(2, 2), group_ids=torch.zeros(2, dtype=torch.long), eps_r=0.0
        )
    with pytest.raises(ValueError, match="sequence-level targets"):
        policy_loss("reg_grpo", lp, lp, torch.zeros(2, 2), torch.ones(2, 2), group_ids=torch.zeros(2, dtype=torch.long))
