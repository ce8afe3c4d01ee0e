"""The OPMD policy loss -A logp / (1 + tau) (docs/methods/losses.md#opmd), worked by hand.

Two rows, tau = 1, token_mean over the 3 active tokens:
    logp = [[log 0.5, log 0.25], [log 0.8, (masked)]],  A = [1, -2]
    l = -A logp / 2 = [[0.5 log 2, log 2], [log 0.8, 0]]  ->  loss = (1.5 log 2 + log 0.8) / 3 = 0.272209
    d loss / d logp = -A / (2 * 3) = [[-1/6, -1/6], [1/3, 0]]
The old log-probs do not enter: any behaviour policy gives the same loss and gradient.
"""

import math

import pytest
import torch

from mmreason.rl import policy_loss

LOGP = torch.tensor([[math.log(0.5), math.log(0.25)], [math.log(0.8), -math.inf]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
ADV = torch.tensor([1.0, -2.0])


def _loss(old=None, **options):
    lp = LOGP.clone().requires_grad_(True)
    old = torch.zeros_like(LOGP) if old is None else old
    out = policy_loss("opmd", lp, old, ADV, MASK, aggregation="token_mean", **options)
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out, grad


def test_worked_example_value_and_gradient():
    out, grad = _loss()
    assert out.loss.item() == pytest.approx((1.5 * math.log(2) + math.log(0.8)) / 3, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 6, -1 / 6], [1 / 3, 0.0]]))
    assert torch.isfinite(grad).all()  # the -inf padding stays out


def test_old_logprobs_do_not_matter_and_tau_scales_the_step():
    out, grad = _loss()
    other, other_grad = _loss(old=torch.randn(2, 2))
    assert other.loss.item() == pytest.approx(out.loss.item()) and torch.equal(grad, other_grad)
    _, g3 = _loss(tau=3.0)
    torch.testing.assert_close(g3, grad / 2)  # 1 / (1 + 3) vs 1 / (1 + 1)
    with pytest.raises(ValueError, match="tau"):
        _loss(tau=-1.0)


def test_zero_advantages_masked_rows_and_kl():
    lp = torch.randn(2, 2, requires_grad=True)
    out = policy_loss("opmd", lp, lp.detach(), torch.zeros(2), torch.ones(2, 2))
    assert out.loss.item() == 0.0  # all rewards equal -> A = 0 -> no loss, no gradient
    out = policy_loss("opmd", LOGP, LOGP, ADV, MASK, seq_mask=torch.tensor([True, False]), aggregation="token_mean")
    assert out.loss.item() == pytest.approx((0.5 * math.log(2) + math.log(2)) / 2, abs=1e-6)
    kl = policy_loss(
        "opmd", LOGP, LOGP, ADV, MASK, ref_logprobs=LOGP - 0.1, beta=0.5, kl_estimator="k1", aggregation="token_mean"
    )
    assert kl.loss.item() == pytest.approx(_loss()[0].loss.item() + 0.5 * 0.1, abs=1e-6)
    with pytest.raises(TypeError, match="epsilon"):
        policy_loss("opmd", LOGP, LOGP, ADV, MASK, epsilon=0.2)
