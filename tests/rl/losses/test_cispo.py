"""CISPO (docs/methods/losses.md#cispo) on a worked example: the clipped weight is a constant, so every token keeps
the gradient ``-w A``, even one the PPO clip would cut.

One row, two tokens, old log-probs 0 (so logp = log r), A = -1, epsilon_max = 1.5:
    r = [2, 0.5] -> w = sg(clip(r, -, 1.5)) = [1.5, 0.5]
    l_t = -w_t A logp_t = [1.5 ln 2, 0.5 ln 0.5] = [1.039721, -0.346574]
    token mean over the row: (1.5 - 0.5) ln 2 / 2 = 0.346574
    d loss / d logp_t = -w_t A / 2 = [0.75, 0.25]   (were w not detached, token 1 would get (0.5 + 0.5 ln 0.5) / 2)
With epsilon_min = 0.8 the second weight is raised to 0.8: loss (1.5 ln 2 + 0.8 ln 0.5) / 2 = 0.7 ln 2 / 2 = 0.242601,
gradient [0.75, 0.4].
"""

import math

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[math.log(2.0), math.log(0.5)]]


def test_cispo_weights_are_clipped_constants():
    out, grad = run("cispo", LOGP, [-1.0], options={"epsilon_max": 1.5})
    assert out.loss.item() == pytest.approx(0.346574, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.75, 0.25]]), atol=1e-6, rtol=0)


def test_cispo_lower_bound_raises_the_small_weight():
    out, grad = run("cispo", LOGP, [-1.0], options={"epsilon_max": 1.5, "epsilon_min": 0.8})
    assert out.loss.item() == pytest.approx(0.7 * math.log(2) / 2, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.75, 0.4]]), atol=1e-6, rtol=0)
