"""HölderPO (arXiv 2605.12058): the Hölder p-mean ratio, both levels, and the p schedules
(docs/methods/losses.md#holder), worked by hand from the formulas of the authors' code.

One row, two tokens with ratios r = [2, 0.5] (log-ratios [ln 2, -ln 2]), epsilon = 0.2.
Sequence level, rho = M_p(r) = ((2^p + 0.5^p)/2)^(1/p):
    p = 1:  rho = 1.25, A = +1 -> loss -min(1.25, 1.2) = -1.2, gradient 0 (clipped)
    p = 0:  rho = sqrt(2 * 0.5) = 1 (GSPO) -> loss -1;  d rho / d Delta_t = rho / 2 -> gradient [-0.5, -0.5]
    p = -1: rho = 2 / (1/2 + 2) = 0.8 -> loss -0.8;  d rho / d Delta_t = rho^(1-p) r_t^p / 2 = 0.64 [0.5, 2] / 2
            -> gradient -[0.16, 0.64]
    p = 2:  rho = sqrt((4 + 0.25)/2) = 1.457738, A = -1 -> loss +1.457738 (not clipped: A < 0 and rho > 1 + eps);
            d rho / d Delta_t = r_t^2 / (2 rho) -> gradient [1.371989, 0.085749]
Token level, p = 1:  A = +1: C = mean(min(r, clip r)) = mean(1.2, 0.5) = 0.85 -> loss -0.85, gradient [0, -0.25]
                     A = -1: D = mean(max(r, clip r)) = mean(2, 0.8) = 1.4 -> loss 1.4, gradient [1, 0]
Schedule linear_dec from 2 to -2 over 500 steps (the authors' released run): p(0) = 2, p(250) = 0, p(500+) = -2.
"""

import math

import pytest
import torch

from mmreason.rl import policy_loss
from mmreason.rl.losses.holder import p_at_step

LOG_R = torch.tensor([[math.log(2.0), math.log(0.5)]])
MASK = torch.ones(1, 2)


def _run(adv, p, level="sequence", log_r=LOG_R, mask=MASK, **options):
    lp = log_r.clone().requires_grad_(True)
    out = policy_loss(
        "holder",
        lp,
        torch.zeros_like(lp),
        torch.tensor([adv]),
        mask,
        level=level,
        p_schedule="constant",
        p=p,
        **options,
    )
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), grad[0]


@pytest.mark.parametrize(
    "adv, p, loss, grad",
    [
        (1.0, 1.0, -1.2, [0.0, 0.0]),
        (1.0, 0.0, -1.0, [-0.5, -0.5]),
        (1.0, -1.0, -0.8, [-0.16, -0.64]),
        (-1.0, 2.0, 1.457738, [1.371989, 0.085749]),
    ],
)
def test_sequence_level_worked_examples(adv, p, loss, grad):
    got_loss, got_grad = _run(adv, p)
    assert got_loss == pytest.approx(loss, abs=1e-5)
    torch.testing.assert_close(got_grad, torch.tensor(grad), atol=1e-5, rtol=0)


@pytest.mark.parametrize("adv, loss, grad", [(1.0, -0.85, [0.0, -0.25]), (-1.0, 1.4, [1.0, 0.0])])
def test_token_level_worked_examples(adv, loss, grad):
    got_loss, got_grad = _run(adv, 1.0, level="token")
    assert got_loss == pytest.approx(loss, abs=1e-5)
    torch.testing.assert_close(got_grad, torch.tensor(grad), atol=1e-5, rtol=0)


def test_p_zero_is_the_gspo_sequence_ratio():
    torch.manual_seed(0)
    lp, old = torch.randn(3, 4) * 0.1, torch.zeros(3, 4)
    adv, mask = torch.tensor([1.0, -0.5, 0.3]), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]).float()
    ours = policy_loss("holder", lp, old, adv, mask, p_schedule="constant", p=0.0).loss
    gspo = policy_loss("clipped", lp, old, adv, mask, importance_sampling_level="sequence").loss
    assert ours.item() == pytest.approx(gspo.item(), abs=1e-6)


def test_schedules():
    assert [p_at_step(s, "linear_dec", 1.0, -2.0, 2.0, steps=500, power=2.0) for s in (0, 250, 500, 900)] == [
        2,
        0,
        -2,
        -2,
    ]
    assert p_at_step(250, "linear", 1.0, -2.0, 2.0, steps=500, power=2.0) == pytest.approx(0.0)
    assert p_at_step(0, "sin", 1.0, -2.0, 2.0, steps=500, power=2.0) == pytest.approx(-2.0)
    assert p_at_step(250, "cos", 1.0, -2.0, 2.0, steps=500, power=2.0) == pytest.approx(0.0, abs=1e-12)
    assert p_at_step(250, "quad", 1.0, -2.0, 2.0, steps=500, power=2.0) == pytest.approx(-1.0)  # -2 + 4 * 0.25
    assert p_at_step(0, "cubic_dec", 1.0, -2.0, 2.0, steps=500, power=2.0) == pytest.approx(2.0)
    assert p_at_step(123, "constant", 0.7, -2.0, 2.0, steps=500, power=2.0) == 0.7
    with pytest.raises(ValueError, match="p_schedule"):
        p_at_step(0, "step", 1.0, -2.0, 2.0, steps=500, power=2.0)
    # the trainer's train_step moves p: at step 0 of linear_dec p = 2, at 500 p = -2 (rho = 1.4577 vs 0.6860)
    lp = LOG_R.clone()
    first = policy_loss("holder", lp, torch.zeros_like(lp), torch.tensor([-1.0]), MASK, train_step=0).loss
    last = policy_loss("holder", lp, torch.zeros_like(lp), torch.tensor([-1.0]), MASK, train_step=500).loss
    assert first.item() == pytest.approx(1.457738, abs=1e-5) and last.item() == pytest.approx(0.8, abs=1e-5)


def test_edge_cases_zero_advantage_masked_tokens_and_rows():
    assert _run(0.0, 1.5)[0] == 0.0  # all rewards equal -> A = 0 -> no loss
    # a padded token (even -inf) leaves the row's p-mean unchanged
    log_r = torch.cat([LOG_R, torch.tensor([[-math.inf]])], 1)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, grad = _run(-1.0, 2.0, log_r=log_r, mask=mask)
    assert loss == pytest.approx(1.457738, abs=1e-5) and torch.isfinite(grad).all() and grad[2] == 0
    # a row with no response tokens, and a row masked by seq_mask, contribute nothing and stay finite
    lp = torch.zeros(2, 2, requires_grad=True)
    out = policy_loss(
        "holder",
        lp,
        torch.zeros(2, 2),
        torch.tensor([1.0, 1.0]),
        torch.tensor([[1.0, 1.0], [0, 0]]),
        p_schedule="constant",
        p=-2.0,
        seq_mask=torch.tensor([True, True]),
    )
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()
    with pytest.raises(ValueError, match="level"):
        _run(1.0, 1.0, level="chunk")
