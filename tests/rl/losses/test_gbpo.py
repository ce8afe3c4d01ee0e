"""GBPO (Bounded Ratio RL, arXiv 2604.18578): the bounded target ratio and the |A|-weighted L1 regression
(docs/methods/losses.md#gbpo), worked by hand from the formulas of the authors' code.

Group rewards [1, 0, 0, 0] -> GRPO A = [1.732051, -0.577350 x 3]; the median of A (even G: mean of the middle
two) is -0.577350, so with T = 1e-4: s = [1, 0.5, 0.5, 0.5] and target = 0.7 + 0.6 s = [1.3, 1.0, 1.0, 1.0]
(eps = 0.3): the lone success is pushed to 1 + eps, the rollouts at the median are left alone.
On-policy (ratio 1), one token each, token mean: loss = |1 - 1.3| 1.732051 / 4 = 0.129904;
gradient w.r.t. logp = sign(ratio - target) ratio |A| / 4 = [-0.433013, 0, 0, 0].
Rewards [1, 1, 0, 0], T = 1: A = [1, 1, -1, -1], median 0, s = sigmoid(+-1) = [0.731059, 0.268941] ->
target = [1.138635, 1.138635, 0.861365, 0.861365], loss 0.138635, gradient [-0.25, -0.25, 0.25, 0.25].
"""

import pytest
import torch

from mmreason.rl import advantages, policy_loss
from mmreason.rl.losses.gbpo import target_ratio


def _run(rewards, groups, temperature=1e-4, logp=None, mask=None, **options):
    adv = advantages("grpo", rewards, groups).advantages
    n = adv.numel()
    lp = (torch.zeros(n, 1) if logp is None else logp).clone().requires_grad_(True)
    mask = torch.ones(n, 1) if mask is None else mask
    out = policy_loss(
        "gbpo",
        lp,
        lp.detach(),
        adv,
        mask,
        group_ids=torch.tensor(groups),
        epsilon=0.3,
        temperature=temperature,
        aggregation="token_mean",
        **options,
    )
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out.loss.item(), grad


def test_worked_example_lone_success():
    loss, grad = _run([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    assert loss == pytest.approx(0.3 * 3**0.5 / 4, abs=1e-5)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-(3**0.5) / 4, 0.0, 0.0, 0.0]), atol=1e-5, rtol=0)


def test_worked_example_soft_target():
    loss, grad = _run([1.0, 1.0, 0.0, 0.0], [0, 0, 0, 0], temperature=1.0)
    assert loss == pytest.approx(0.138635, abs=1e-5)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.25, -0.25, 0.25, 0.25]), atol=1e-5, rtol=0)


def test_target_equals_the_authors_form_from_raw_rewards():
    """(A_i - median_g A) = (r_i - median_g r) / (std_g + eps): the target rebuilt from advantages is the one the
    authors compute from rewards (torch.quantile median; population std here, as the grpo estimator)."""
    torch.manual_seed(0)
    rewards = torch.rand(15)
    groups = torch.tensor([0] * 5 + [1] * 4 + [2] * 6)
    adv = advantages("grpo", rewards, groups).advantages
    got = target_ratio(adv, groups, torch.ones(15, dtype=torch.bool), 0.3, 0.2, temperature=0.5)
    want = torch.empty(15)
    for g in range(3):
        r = rewards[groups == g]
        z = (r - torch.quantile(r, 0.5)) / (r.std(unbiased=False) + 1e-6)
        want[groups == g] = 0.7 + 0.5 * torch.sigmoid(z / 0.5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_edge_cases():
    loss, grad = _run([0.5, 0.5, 0.5], [0, 0, 0])  # all rewards equal: A = 0, no loss, no gradient
    assert loss == 0.0 and torch.equal(grad, torch.zeros_like(grad))
    assert _run([1.0], [0])[0] == 0.0  # one rollout
    # a padded token (even -inf) does not enter; a seq_mask row leaves the loss and the group median
    logp = torch.tensor([[0.0, -float("inf")]] * 4)
    mask = torch.tensor([[1.0, 0.0]] * 4)
    loss, grad = _run([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0], logp=logp, mask=mask)
    assert loss == pytest.approx(0.129904, abs=1e-5) and torch.isfinite(grad).all()
    loss, _ = _run([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0], seq_mask=torch.tensor([True, True, True, False]))
    assert loss == pytest.approx(0.3 * 3**0.5 / 3, abs=1e-5)  # same targets, three tokens left
    with pytest.raises(ValueError, match="temperature"):
        _run([1.0, 0.0], [0, 0], temperature=0.0)
    with pytest.raises(TypeError, match="group_ids"):
        policy_loss("gbpo", torch.zeros(2, 1), torch.zeros(2, 1), torch.zeros(2), torch.ones(2, 1))
