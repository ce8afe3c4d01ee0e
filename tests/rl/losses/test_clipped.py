"""The clipped surrogate (docs/methods/losses.md#clipped): ratios, clip-higher, dual clip, GSPO ratio, metrics, masks,
dtypes."""

import math

import pytest
import torch

from mmreason.rl import kl_penalty, policy_loss


def one_token(ratio, advantage, **options):
    """Loss and d loss / d logp for a single token with the given ratio and advantage."""
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    out = policy_loss("clipped", lp, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), **options)
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), grad.item(), out.metrics


def test_positive_advantage_clipped_above():
    loss, grad, m = one_token(1.5, 1.0)
    assert loss == pytest.approx(-1.2) and grad == 0.0
    assert m.clip_high.item() == 1.0 and m.clip_low.item() == 0.0 and m.clip_region.item() == 1.0


def test_negative_advantage_clipped_below():
    loss, grad, m = one_token(0.5, -1.0)
    assert loss == pytest.approx(0.8) and grad == 0.0
    assert m.clip_low.item() == 1.0


def test_negative_advantage_with_large_ratio_keeps_its_gradient():
    loss, grad, _ = one_token(1.5, -1.0)
    assert loss == pytest.approx(1.5) and grad == pytest.approx(1.5)  # d(ratio)/d logp = ratio


def test_clip_higher():
    loss, grad, _ = one_token(1.25, 1.0, epsilon=0.2, epsilon_high=0.28)
    assert loss == pytest.approx(-1.25) and grad == pytest.approx(-1.25)
    loss, _, _ = one_token(1.25, 1.0, epsilon=0.2)
    assert loss == pytest.approx(-1.2)


def test_dual_clip_delta_caps_the_ratio():
    loss, grad, _ = one_token(5.0, -1.0, delta=3.0)
    assert loss == pytest.approx(3.0) and grad == 0.0


def test_sequence_level_ratio_is_exp_of_mean_log_ratio():
    lp = torch.tensor([[0.1, 0.3, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = policy_loss(
        "clipped", lp, torch.zeros(1, 3), torch.tensor([1.0]), mask, epsilon=0.5, importance_sampling_level="sequence"
    )
    assert out.loss.item() == pytest.approx(-math.exp(0.2))
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert torch.allclose(grad, torch.tensor([[-math.exp(0.2) / 2] * 2 + [0.0]]))


def test_on_policy_gradient_is_minus_advantage_over_length():
    lp = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    out = policy_loss("clipped", lp, lp.detach(), torch.tensor([2.0, -1.0]), mask)
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == pytest.approx(-(2.0 - 1.0) / 2)
    assert torch.allclose(grad, torch.tensor([[-2 / 6] * 3, [1 / 2, 0, 0]]))
    assert out.metrics.ratio_mean.item() == pytest.approx(1.0)


def test_seq_mask_removes_rows_from_loss_and_normalisation():
    torch.manual_seed(0)
    lp, old, adv = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3)
    mask = torch.ones(3, 4)
    keep = torch.tensor([True, False, True])
    for aggregation in ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"]:
        masked = policy_loss("clipped", lp, old, adv, mask, seq_mask=keep, aggregation=aggregation).loss
        sliced = policy_loss("clipped", lp[keep], old[keep], adv[keep], mask[keep], aggregation=aggregation).loss
        assert masked.item() == pytest.approx(sliced.item(), rel=1e-6)


def test_kl_term_is_added_before_aggregation():
    torch.manual_seed(1)
    lp, ref = torch.randn(2, 3), torch.randn(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    zero_adv = torch.zeros(2)
    out = policy_loss("clipped", lp, lp, zero_adv, mask, ref_logprobs=ref, beta=0.1, kl_estimator="k3")
    kl = kl_penalty(lp, ref, "k3")
    per_seq = (kl * mask).sum(-1) / mask.sum(-1)
    assert out.loss.item() == pytest.approx(0.1 * per_seq.mean().item(), rel=1e-6)
    assert out.metrics.kl.item() == pytest.approx(((kl * mask).sum() / mask.sum()).item(), rel=1e-6)
    assert out.metrics.policy_loss.item() == 0.0


def test_low_precision_inputs_are_computed_in_fp32():
    torch.manual_seed(2)
    lp, old, adv = torch.randn(2, 5).bfloat16(), torch.randn(2, 5).bfloat16(), torch.randn(2).bfloat16()
    mask = torch.ones(2, 5)
    low = policy_loss("clipped", lp, old, adv, mask)
    ref = policy_loss("clipped", lp.float(), old.float(), adv.float(), mask)
    assert low.loss.dtype == torch.float32
    assert low.loss.item() == ref.loss.item()


def test_token_level_advantages_are_accepted():
    lp = torch.zeros(1, 2)
    out = policy_loss("clipped", lp, lp, torch.tensor([[1.0, -3.0]]), torch.ones(1, 2))
    assert out.loss.item() == pytest.approx(1.0)


def test_policy_loss_dispatch_checks_options():
    lp = torch.zeros(1, 2)
    with pytest.raises(TypeError, match="no option 'epsilon_hi'.*did you mean 'epsilon_high'"):
        policy_loss("clipped", lp, lp, torch.ones(1), torch.ones(1, 2), epsilon_hi=0.28)
    with pytest.raises(ValueError, match="importance_sampling_level"):
        policy_loss("clipped", lp, lp, torch.ones(1), torch.ones(1, 2), importance_sampling_level="batch")
    out = policy_loss("clipped", lp, lp, torch.ones(1), torch.ones(1, 2), epsilon_high=0.28)
    assert out.loss.item() == pytest.approx(-1.0)
