"""CISPO, SAPO, GMPO, KL-Cov / Clip-Cov (docs/methods/losses.md#on-policy-the-ratio-losses-are-grpo), worked by hand
from their formulas.

One token per row, old log-prob 0, so logp = log r and d loss / d logp is the gradient through the ratio.

CISPO, w = sg(clip(r, eps_min, eps_max)), l = -w A logp, d l / d logp = -w A:
    r = 1.5, A = 1:   l = -1.5 ln 1.5 = -0.608198, grad -1.5   (the PPO clip at 0.2 would give grad 0)
    r = 6,   A = 1:   w = 5, l = -5 ln 6 = -8.958797, grad -5, clip_high 1
    r = 0.5, A = -1, eps_min 0.8:  w = 0.8, l = 0.8 ln 0.5 = -0.554518, grad 0.8, clip_low 1
SAPO, l = -4/tau sigmoid(tau (r - 1)) A, d l / d logp = -4 sigmoid'(tau (r - 1)) r A:
    r = 1,   A = 1 (tau 1):    l = -2, grad -1 (the plain surrogate's gradient at r = 1)
    r = 1.5, A = 1 (tau 1):    l = -4 s(0.5) = -2.489837, grad -4 s(0.5)(1 - s(0.5)) 1.5 = -1.410022
    r = 1.5, A = -1 (tau 1.05): l = 4/1.05 s(0.525) = 2.393585, grad 4 s(0.525)(1 - s(0.525)) 1.5 = 1.401210
GMPO, two tokens r = [2, 0.5], log clip +-0.4:
    A = +1: geomean of min(r, clip r) = exp((0.4 - ln 2)/2) = 0.863664 -> l = -0.863664, grad [0, -0.431832]
    A = -1: geomean of max(r, clip r) = exp((ln 2 - 0.4)/2) = 1.157869 -> l = 1.157869, grad [0.578934, 0]
KL-Cov / Clip-Cov, three one-token rows, A = [1, -1, 0], logp = [-0.1, -2, -1]:
    mean A = 0, mean logp = -1.033333, cov = [0.933333, 0.966667, 0]: row 2 has the largest covariance.
    KL-Cov, kl_cov_ratio 0.5 (k = max(1, floor(1.5)) = 1), old = logp + [0, 0.2, 0] (row 2: log r = -0.2):
        rows: -1, e^-0.2 + |-0.2| = 1.018731, 0 -> mean 0.006244; row 2's gradient (e^-0.2 - 1)/3 = -0.060423
    Clip-Cov, on policy, window (0.95, 5), clip_ratio 0.5: row 2 is cut -> loss (-1 + 0 + 0)/3 = -1/3,
        row 2's gradient 0; uncut the loss would be (-1 + 1)/3 = 0.
"""

import math

import pytest
import torch

from mmreason.rl import policy_loss


def one_token(name, ratio, adv, **options):
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    out = policy_loss(name, lp, torch.zeros(1, 1), torch.tensor([adv]), torch.ones(1, 1), **options)
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), grad.item(), out.metrics


@pytest.mark.parametrize(
    "ratio, adv, options, loss, grad, clip",
    [
        (1.5, 1.0, {}, -0.608198, -1.5, 0.0),
        (6.0, 1.0, {}, -8.958797, -5.0, 1.0),
        (5.0, 1.0, {}, -5 * math.log(5.0), -5.0, 0.0),  # at the bound: not counted as clipped
        (0.5, -1.0, {"epsilon_min": 0.8}, -0.554518, 0.8, 1.0),
        (1.5, 0.0, {}, 0.0, 0.0, 0.0),  # zero advantage: no loss, no gradient
    ],
)
def test_cispo_worked_examples(ratio, adv, options, loss, grad, clip):
    got_loss, got_grad, m = one_token("cispo", ratio, adv, **options)
    assert got_loss == pytest.approx(loss, abs=1e-5) and got_grad == pytest.approx(grad, abs=1e-5)
    assert m.clip_region.item() == clip


def test_cispo_keeps_the_gradient_the_ppo_clip_drops():
    _, clipped_grad, _ = one_token("clipped", 1.5, 1.0)
    _, cispo_grad, _ = one_token("cispo", 1.5, 1.0)
    assert clipped_grad == 0.0 and cispo_grad == pytest.approx(-1.5)


def test_cispo_refuses_a_bad_bound():
    with pytest.raises(ValueError, match="epsilon_max"):
        one_token("cispo", 1.0, 1.0, epsilon_max=0.0)


@pytest.mark.parametrize(
    "ratio, adv, loss, grad",
    [
        (1.0, 1.0, -2.0, -1.0),
        (1.5, 1.0, -2.489837, -1.410022),
        (1.5, -1.0, 2.393585, 1.401210),
        (1.5, 0.0, 0.0, 0.0),
    ],
)
def test_sapo_worked_examples(ratio, adv, loss, grad):
    got_loss, got_grad, _ = one_token("sapo", ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-5) and got_grad == pytest.approx(grad, abs=1e-5)


def test_sapo_gate_is_soft_and_asymmetric():
    # the gradient per unit of ratio, sech^2(tau (r - 1) / 2), falls smoothly past the PPO clip but not to 0
    _, near, _ = one_token("sapo", 1.1, 1.0)
    _, far, m = one_token("sapo", 3.0, 1.0)
    assert -far / 3.0 == pytest.approx(1 / math.cosh(1.0) ** 2, abs=1e-5)
    assert 0 < -far / 3.0 < -near / 1.1
    assert m.clip_high.item() == 1.0  # tau |r - 1| = 2 > 1.7627: past half gradient
    _, pos, _ = one_token("sapo", 2.5, 1.0, tau_pos=2.0, tau_neg=2.0)
    _, neg, _ = one_token("sapo", 2.5, -1.0, tau_pos=2.0, tau_neg=4.0)
    assert abs(neg) < abs(pos)


LOG_R2 = torch.tensor([[math.log(2.0), math.log(0.5)]])


@pytest.mark.parametrize("adv, loss, grad", [(1.0, -0.863664, [0.0, -0.431832]), (-1.0, 1.157869, [0.578934, 0.0])])
def test_gmpo_worked_examples(adv, loss, grad):
    lp = LOG_R2.clone().requires_grad_(True)
    out = policy_loss("gmpo", lp, torch.zeros(1, 2), torch.tensor([adv]), torch.ones(1, 2))
    (g,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == pytest.approx(loss, abs=1e-5)
    torch.testing.assert_close(g[0], torch.tensor(grad), atol=1e-5, rtol=0)


def test_gmpo_is_holder_token_level_at_p_zero_inside_the_clip():
    torch.manual_seed(0)
    lp, adv = torch.randn(3, 4) * 0.02, torch.tensor([1.0, -0.5, 0.3])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]).float()
    gmpo = policy_loss("gmpo", lp, torch.zeros(3, 4), adv, mask).loss
    holder = policy_loss("holder", lp, torch.zeros(3, 4), adv, mask, level="token", p_schedule="constant", p=0.0).loss
    torch.testing.assert_close(gmpo, holder)


ADV3 = torch.tensor([1.0, -1.0, 0.0])
LP3 = torch.tensor([[-0.1], [-2.0], [-1.0]])


def test_kl_cov_penalises_the_largest_covariance_token():
    lp = LP3.clone().requires_grad_(True)
    old = LP3 + torch.tensor([[0.0], [0.2], [0.0]])
    out = policy_loss("kl_cov", lp, old, ADV3, torch.ones(3, 1), kl_cov_ratio=0.5)
    (g,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == pytest.approx(0.006244, abs=1e-5)
    assert g[1, 0].item() == pytest.approx((math.exp(-0.2) - 1) / 3, abs=1e-6)
    assert out.metrics.clip_region.item() == pytest.approx(1 / 3)
    plain = policy_loss("kl_cov", LP3, old, ADV3, torch.ones(3, 1), kl_cov_ratio=0.0)
    assert plain.loss.item() == pytest.approx((-1 + math.exp(-0.2)) / 3, abs=1e-6)


def test_clip_cov_cuts_the_token_in_the_window():
    lp = LP3.clone().requires_grad_(True)
    out = policy_loss("clip_cov", lp, LP3.clone(), ADV3, torch.ones(3, 1), clip_ratio=0.5, clip_cov_lb=0.95)
    (g,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == pytest.approx(-1 / 3, abs=1e-6)
    assert g[1, 0].item() == 0.0 and g[0, 0].item() == pytest.approx(-1 / 3)
    uncut = policy_loss("clip_cov", LP3, LP3.clone(), ADV3, torch.ones(3, 1), clip_ratio=0.0)
    assert uncut.loss.item() == pytest.approx(0.0, abs=1e-7)


def test_clip_cov_leaves_tokens_the_ppo_clip_already_cut():
    old = LP3 + torch.tensor([[0.0], [math.log(2.0)], [0.0]])  # row 2: r = 0.5 < 0.8 with A < 0: clipped
    out = policy_loss("clip_cov", LP3, old, ADV3, torch.ones(3, 1), clip_ratio=0.5, clip_cov_lb=0.95)
    assert out.metrics.clip_region.item() == 0.0


@pytest.mark.parametrize("name", ["cispo", "sapo", "gmpo", "kl_cov", "clip_cov"])
def test_empty_mask_gives_zero_loss(name):
    lp = torch.randn(2, 3, requires_grad=True)
    out = policy_loss(name, lp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3))
    (g,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == 0.0 and torch.count_nonzero(g) == 0


@pytest.mark.parametrize(
    "name, options",
    [("cispo", {}), ("sapo", {}), ("gmpo", {}), ("kl_cov", {"kl_cov_ratio": 0.5}), ("etr", {}), ("dhpo", {})],
)
def test_on_policy_the_gradient_is_grpos(name, options):
    """docs/methods/losses.md#on-policy-the-ratio-losses-are-grpo: at ratio 1 (one optimizer step per batch) these
    losses give the clipped surrogate's gradient; they differ only off-policy."""
    torch.manual_seed(3)
    lp, adv = torch.randn(3, 4), torch.tensor([1.0, -0.5, 0.0])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]]).float()
    grads = []
    for loss, opts in (("clipped", {}), (name, options)):
        x = lp.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(policy_loss(loss, x, lp.clone(), adv, mask, **opts).loss, x)
        grads.append(g)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-5)
