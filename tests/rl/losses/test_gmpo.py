"""GMPO (docs/methods/losses.md#gmpo) on a worked example: the geometric mean of the token ratios, each clipped in
log space to [-0.4, 0.4] on the side that limits the update.

One row, three tokens, old log-probs 0, log r = [0.2, 0.6, -0.6]; the clipped log-ratios are [0.2, 0.4, -0.4].
    A = +1: min(log r, clip) = [0.2, 0.4, -0.6] -> geometric mean exp(0 / 3) = 1, loss -1;
            the gradient -exp(0)/3 reaches the unclipped tokens 0 and 2 only: [-1/3, 0, -1/3]
    A = -1: max(log r, clip) = [0.2, 0.6, -0.4] -> exp(0.4 / 3) = 1.142631, loss +1.142631;
            gradient 1.142631 / 3 = 0.380877 on tokens 0 and 1, 0 on the clipped token 2
"""

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[0.2, 0.6, -0.6]]


@pytest.mark.parametrize(
    "adv, loss, grad",
    [
        (1.0, -1.0, [-1 / 3, 0.0, -1 / 3]),
        (-1.0, 1.142631, [0.380877, 0.380877, 0.0]),
    ],
)
def test_gmpo_geometric_mean_of_log_clipped_ratios(adv, loss, grad):
    out, g = run("gmpo", LOGP, [adv])
    assert out.loss.item() == pytest.approx(loss, abs=1e-5)
    torch.testing.assert_close(g, torch.tensor([grad]), atol=1e-5, rtol=0)


def test_gmpo_clip_range_is_its_own_option():
    out, g = run("gmpo", LOGP, [1.0], options={"epsilon_log": 1.0})  # nothing clipped: exp(mean log r) = exp(0.2/3)
    assert out.loss.item() == pytest.approx(-1.068939, abs=1e-5)
    torch.testing.assert_close(g, torch.full((1, 3), -1.068939 / 3), atol=1e-5, rtol=0)
