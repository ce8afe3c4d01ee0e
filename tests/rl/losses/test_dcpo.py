"""DCPO (arXiv 2601.12730), checked against the authors' ``verl/trainer/ray_trainer.py`` (``fit``, branch
``alg == "DCPO"``): T' from the last step's entropy, alpha from the entropy gap and the step's accuracy, and
A' = (1 - alpha) A + alpha [r > 0.05] pi_old^{T'} / pi_old fed to the clipped surrogate
(docs/methods/losses.md#dcpo)."""

from __future__ import annotations

import math

import pytest
import torch

from mmreason import rl
from mmreason.rl.losses.dcpo import dcpo_advantages, dcpo_alpha, dcpo_temperature

OLD = torch.log(torch.tensor([[0.5, 0.25], [0.8, 0.3]]))
TEMPERED = torch.log(torch.tensor([[0.6, 0.3], [0.7, 0.9]]))
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0]])


def _loss(logp, **kw):
    options = dict(
        tempered_logprobs=TEMPERED,
        rewards=torch.tensor([1.0, 0.0]),
        step_rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]),
        prev_entropy=0.3,
        aggregation="token_mean",
    )
    return rl.policy_loss("dcpo", logp, OLD, torch.tensor([1.0, -1.0]), MASK, **{**options, **kw})


def test_temperature_and_alpha_follow_the_authors_rules():
    assert dcpo_temperature(0.3) == 1.2 and dcpo_temperature(0.5) == 1.2  # H <= base: flatten
    assert dcpo_temperature(0.7) == 0.8  # H > base: sharpen
    # a = min(|0.5 - 0.3|, 0.1) / acc = 0.1 / 0.25 = 0.4 -> alpha = 0.4 / 1.4 = 2/7
    assert dcpo_alpha(0.3, torch.tensor([1.0, 0.0, 0.0, 0.0])) == pytest.approx(2 / 7)
    assert dcpo_alpha(0.0, torch.tensor([0.04, 1.0])) == pytest.approx((0.1 / 0.5) / 1.2)  # 0.04 <= 0.05 fails
    assert dcpo_alpha(0.5, torch.tensor([1.0, 0.0])) == 0.0  # at the entropy target: no mixing
    assert dcpo_alpha(0.3, torch.tensor([0.0, 0.0])) == 0.0  # all rewards equal, none succeeds: A kept
    assert dcpo_alpha(0.3, torch.tensor([1.0])) == pytest.approx(0.1 / 1.1)  # one sample, acc 1


def test_worked_example():
    """alpha = 2/7; row 0 succeeds (r = 1 > 0.05): f = [0.6/0.5, 0.3/0.25] = [1.2, 1.2] ->
    A'_0 = 5/7 * 1 + 2/7 * 1.2 = 7.4/7 = 1.057143 on both tokens; row 1 fails: A'_1 = 5/7 * (-1) = -0.714286 on
    its one token (the masked one is 0). On-policy, token mean over 3 tokens:
    loss = (-1.057143 * 2 + 0.714286) / 3 = -1.4 / 3, gradient -A'/3 = [[-0.352381, -0.352381], [0.238095, 0]]."""
    shaped = dcpo_advantages(torch.tensor([1.0, -1.0]), torch.tensor([1.0, 0.0]), OLD, TEMPERED, MASK, alpha=2 / 7)
    torch.testing.assert_close(shaped, torch.tensor([[7.4 / 7, 7.4 / 7], [-5 / 7, 0.0]]))
    logp = OLD.clone().requires_grad_(True)
    out = _loss(logp)
    assert float(out.loss.detach()) == pytest.approx(-1.4 / 3, abs=1e-6)
    out.loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-7.4 / 21, -7.4 / 21], [5 / 21, 0.0]]))


def test_edge_cases_reduce_to_the_clipped_surrogate():
    logp = OLD + 0.05
    base = rl.policy_loss("clipped", logp, OLD, torch.tensor([1.0, -1.0]), MASK, aggregation="token_mean")
    # zero variance in the step (nobody succeeds) and "at the target entropy": alpha = 0 -> exactly clipped
    for kw in ({"step_rewards": torch.zeros(4), "rewards": torch.zeros(2)}, {"prev_entropy": 0.5}):
        assert float(_loss(logp, **kw).loss) == pytest.approx(float(base.loss))
    # masked tokens: whatever the tempered log-prob there, nothing changes
    poisoned = TEMPERED.clone()
    poisoned[1, 1] = 50.0
    assert float(_loss(logp, tempered_logprobs=poisoned).loss) == pytest.approx(float(_loss(logp).loss))
    # one sample
    one = rl.policy_loss(
        "dcpo",
        OLD[:1],
        OLD[:1],
        torch.tensor([0.0]),
        MASK[:1],
        tempered_logprobs=TEMPERED[:1],
        rewards=torch.tensor([1.0]),
        step_rewards=torch.tensor([1.0]),
        prev_entropy=0.0,
        aggregation="token_mean",
    )
    assert float(one.loss) == pytest.approx(-(0.1 / 1.1) * 1.2)  # A = 0, alpha = 1/11, f = 1.2
    assert math.isfinite(float(one.loss))
