"""SAPO (docs/methods/losses.md#sapo) on a worked example: a soft gate ``4/tau sigmoid(tau (r - 1))`` in place of
the clip, with its own temperature for each sign of the advantage.

Two one-token rows, old log-probs 0, tau_pos = tau_neg = 2:
    row 0: r = 1, A = +1:       l = -4/2 sigmoid(0) = -1;   d l / d logp = -4 s'(0) r A = -4 (1/4) = -1
    row 1: r = e^0.5, A = -1:   z = 2 (e^0.5 - 1) = 1.297443, s(z) = 0.785404
                                l = +2 s(z) = 1.570808;     d l / d logp = 4 s(z) (1 - s(z)) r = 1.111531
    mean over the rows: (-1 + 1.570808) / 2 = 0.285404, gradient [-0.5, 0.555766]
With tau_neg = 4 row 1 moves further along its sigmoid: z = 2.594885, s = 0.930532, l = 4/4 s = 0.930532,
d l / d logp = 4 s (1 - s) r = 0.426310; mean (-1 + 0.930532) / 2 = -0.034734.
"""

import math

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[0.0], [0.5]]


def test_sapo_soft_gate_per_sign():
    out, grad = run("sapo", LOGP, [1.0, -1.0], options={"tau_pos": 2.0, "tau_neg": 2.0})
    assert out.loss.item() == pytest.approx(0.285404, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.5], [0.555766]]), atol=1e-5, rtol=0)


def test_sapo_negative_temperature_acts_on_negative_advantages_only():
    out, grad = run("sapo", LOGP, [1.0, -1.0], options={"tau_pos": 2.0, "tau_neg": 4.0})
    s = 1 / (1 + math.exp(-4 * (math.exp(0.5) - 1)))
    assert out.loss.item() == pytest.approx((-1 + s) / 2, abs=1e-5)
    assert out.loss.item() == pytest.approx(-0.034734, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.5], [0.426310 / 2]]), atol=1e-5, rtol=0)
