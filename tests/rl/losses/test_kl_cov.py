"""KL-Cov (docs/methods/losses.md#kl_cov) on a worked example: the unclipped surrogate ``-r A``, plus
``kl_coef |log r|`` on the tokens whose (detached) log-prob and advantage co-vary most.

Three one-token rows, A = [1, 0, -1], logp = [-0.5, -1.5, -1.0]; old = logp except row 0, whose log r = 0.1.
    mean A = 0, mean logp = -1: cov = [1 * 0.5, 0, -1 * 0] = [0.5, 0, 0] -> row 0 is the top token
    kl_cov_ratio 0.4: k = max(1, floor(0.4 * 3)) = 1 token penalised
    rows: -e^0.1 + |0.1| = -1.005171,  0,  -1 * (-1) = 1  -> mean -0.001724
    gradient: row 0 (-e^0.1 + 1) / 3 = -0.035057, row 1 0, row 2 -A r / 3 = 1/3
With kl_coef = 0 nothing is added: loss (-e^0.1 + 1) / 3 = -0.035057, row 0's gradient -e^0.1 / 3 = -0.368390.
"""

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[-0.5], [-1.5], [-1.0]]
OLD = [[-0.6], [-1.5], [-1.0]]
ADV = [1.0, 0.0, -1.0]


def test_kl_cov_penalises_the_top_covariance_token():
    out, grad = run("kl_cov", LOGP, ADV, old=OLD, options={"kl_cov_ratio": 0.4})
    assert out.loss.item() == pytest.approx(-0.001724, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.035057], [0.0], [1 / 3]]), atol=1e-5, rtol=0)
    assert out.metrics.clip_region.item() == pytest.approx(1 / 3)


def test_kl_cov_without_the_penalty_is_the_unclipped_surrogate():
    out, grad = run("kl_cov", LOGP, ADV, old=OLD, options={"kl_cov_ratio": 0.4, "kl_coef": 0.0})
    assert out.loss.item() == pytest.approx(-0.035057, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.368390], [0.0], [1 / 3]]), atol=1e-5, rtol=0)
