"""Clip-Cov (docs/methods/losses.md#clip_cov) on a worked example: the clipped surrogate, with the tokens whose
covariance lies in (clip_cov_lb, clip_cov_ub) cut from the gradient (a random draw of them; here only one qualifies).

Three one-token rows on policy (r = 1), A = [1, 0, -1], logp = [-0.2, -1.0, -1.3]:
    mean A = 0, mean logp = -0.833333: cov = [0.633333, 0, 0.466667]
    window (0.5, 5): only row 0 qualifies; clip_ratio 0.34 -> k = max(1, floor(0.34 * 3)) = 1 -> row 0 is cut
    per token -A r = [-1, 0, 1] -> [0, 0, 1] after the cut: loss 1/3, gradient [0, 0, 1/3]
Window (0.4, 5) lets row 2 qualify too, but k stays 1: one of the two rows is cut, and the loss is 1/3 (row 0 cut)
or -1/3 (row 2 cut). A window above every covariance cuts nothing: loss 0, gradient [-1/3, 0, 1/3].
"""

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[-0.2], [-1.0], [-1.3]]
ADV = [1.0, 0.0, -1.0]


def test_clip_cov_cuts_the_token_in_the_covariance_window():
    out, grad = run("clip_cov", LOGP, ADV, old=LOGP, options={"clip_ratio": 0.34, "clip_cov_lb": 0.5})
    assert out.loss.item() == pytest.approx(1 / 3, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.0], [0.0], [1 / 3]]), atol=1e-6, rtol=0)
    assert out.metrics.clip_region.item() == pytest.approx(1 / 3)


def test_clip_cov_cuts_one_of_two_candidates_and_nothing_outside_the_window():
    out, _ = run("clip_cov", LOGP, ADV, old=LOGP, options={"clip_ratio": 0.34, "clip_cov_lb": 0.4})
    assert out.loss.item() in (pytest.approx(1 / 3, abs=1e-6), pytest.approx(-1 / 3, abs=1e-6))
    out, grad = run("clip_cov", LOGP, ADV, old=LOGP, options={"clip_ratio": 0.34, "clip_cov_lb": 0.7})
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 3], [0.0], [1 / 3]]), atol=1e-6, rtol=0)
