"""DisCO (arXiv 2505.12366): labels from the ``disco`` estimator and the constrained discriminative loss
(docs/methods/losses.md#disco), worked by hand from the formulas of the authors' code.

One group, rewards [1, 1, 0, 0] -> labels [+1, +1, -1, -1]; one response token each, scores s = logp =
[-1, -2, -0.5, -3]; on-policy (old = logp), so the KL penalty is 0.
    logL, tau = 10:  pos mean = -1.5,  tau log mean exp(s_neg / tau) = 10 log((e^-0.05 + e^-0.3)/2) = -1.672078
                     J = -1.5 + 1.672078 = 0.172078,  loss = -J = -0.172078
                     d loss / d s = [-1/2, -1/2, w_1, w_2],  w = softmax([-0.05, -0.3]) = [0.562177, 0.437823]
                     (the best-scoring wrong answer is pushed down hardest)
    DisCO-b (negatives "mean"): J = -1.5 - (-1.75) = 0.25,  loss = -0.25, gradient [-1/2, -1/2, 1/2, 1/2]
KL constraint: every token log-ratio 0.1 -> KL = e^0.1 - 1 - 0.1 = 0.005171 > delta = 1e-4, penalty
    max(0, 1e3 (0.005171 - 1e-4)) * 0.005171 = 5.070918 * 0.005171 = 0.026221.
"""

import math

import pytest
import torch

from mmreason.rl import advantages, policy_loss

LOGP = torch.tensor([[-1.0], [-2.0], [-0.5], [-3.0]])
MASK = torch.ones(4, 1)
GROUPS = torch.zeros(4, dtype=torch.long)
LABELS = torch.tensor([1.0, 1.0, -1.0, -1.0])


def _run(logp=LOGP, old=None, labels=LABELS, groups=GROUPS, mask=MASK, **options):
    lp = logp.clone().requires_grad_(True)
    old = lp.detach() if old is None else old
    out = policy_loss("disco", lp, old, labels, mask, group_ids=groups, **options)
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out, grad


def test_labels_from_rewards():
    got = advantages("disco", [1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5], [0, 0, 0, 0, 1, 1, 2, 2, 3]).advantages
    # group 0 mixed; group 1 all right, group 2 all wrong, group 3 one rollout: no contrast -> 0
    assert got.tolist() == [1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    partial = advantages("disco", [0.7, 0.2, 0.4], [0, 0, 0], threshold=0.5).advantages
    assert partial.tolist() == [1.0, -1.0, -1.0]


def test_worked_example_logl_lse():
    out, grad = _run(tau=10.0)
    assert out.loss.item() == pytest.approx(-0.172078, abs=1e-5)
    w = torch.softmax(torch.tensor([-0.05, -0.3]), 0)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.5, -0.5, w[0], w[1]]), atol=1e-6, rtol=0)
    assert w[0].item() == pytest.approx(0.562177, abs=1e-6)


def test_worked_example_discob_mean():
    out, grad = _run(negatives="mean")
    assert out.loss.item() == pytest.approx(-0.25, abs=1e-6)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.5, -0.5, 0.5, 0.5]))


def test_kl_constraint_penalty_and_lratio_score():
    old = LOGP - 0.1  # every token log-ratio 0.1
    out, _ = _run(old=old, score="Lratio", tau=1.0)
    kl = math.exp(0.1) - 1 - 0.1
    # Lratio scores are all e^0.1: J = e^0.1 - log(mean exp(e^0.1)) = 0, so the loss is the penalty alone
    assert out.loss.item() == pytest.approx(1e3 * (kl - 1e-4) * kl, abs=1e-6)
    assert out.loss.item() == pytest.approx(0.026221, abs=1e-6)
    assert out.metrics.clip_region.item() == 1.0  # over the KL budget
    inside, _ = _run(old=old, score="Lratio", tau=1.0, delta=0.01)
    assert inside.loss.item() == pytest.approx(0.0, abs=1e-6) and inside.metrics.clip_region.item() == 0.0


def test_edge_cases_equal_rewards_masked_tokens_and_rows():
    out, grad = _run(labels=torch.zeros(4))  # all rewards equal -> no labels -> no loss, no gradient
    assert out.loss.item() == 0.0 and torch.equal(grad, torch.zeros_like(grad))
    # a padded token (even -inf) does not change a row's score
    logp = torch.cat([LOGP, torch.full((4, 1), -math.inf)], 1)
    mask = torch.cat([MASK, torch.zeros(4, 1)], 1)
    padded, grad = _run(logp=logp, old=logp.nan_to_num(neginf=0.0), mask=mask, tau=10.0)
    assert padded.loss.item() == pytest.approx(-0.172078, abs=1e-5) and torch.isfinite(grad).all()
    # a row masked out by seq_mask leaves its group: only one negative remains, J = -1.5 - (-0.5)
    out, _ = _run(seq_mask=torch.tensor([True, True, True, False]), tau=10.0)
    assert out.loss.item() == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ValueError, match="score"):
        _run(score="prob")
    with pytest.raises(TypeError, match="group_ids"):
        policy_loss("disco", LOGP, LOGP, LABELS, MASK)


def test_groups_without_both_labels_count_in_the_normaliser():
    logp = torch.cat([LOGP, torch.tensor([[-1.0], [-1.0]])])
    labels = torch.cat([LABELS, torch.zeros(2)])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    out, _ = _run(logp=logp, labels=labels, groups=groups, mask=torch.ones(6, 1), tau=10.0)
    assert out.loss.item() == pytest.approx(-0.172078 / 2, abs=1e-5)
