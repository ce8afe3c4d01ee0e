"""ERPO (docs/methods/losses.md#erpo) on a worked example: token advantages scaled by an entropy gate normalised to
mean 1 within each relative-position bucket.

One row, two tokens on policy, A = +1, entropies [0, 2], gate_strength 2:
    standardised entropy z = [-1, 1] (mean 1, population std 1); gate 1 + 2 sigmoid(z) = [1.537883, 2.462117]
    one bucket: mean gate 2 -> weights [0.768941, 1.231059]; token advantages A w
    on policy the surrogate is -mean_t(A_t) = -1 (the weights average 1), gradient -A_t / 2 = [-0.384471, -0.615529]
    two buckets: each token is its own bucket, every weight 1: gradient [-0.5, -0.5], as GRPO
"""

import pytest
import torch

from tests.rl.losses.worked import run

ENTROPY = torch.tensor([[0.0, 2.0]])


@pytest.mark.parametrize("buckets, grad", [(1, [-0.384471, -0.615529]), (2, [-0.5, -0.5])])
def test_erpo_gate_normalised_within_buckets(buckets, grad):
    out, g = run("erpo", [[0.0, 0.0]], [1.0], options={"gate_strength": 2.0, "buckets": buckets}, entropy=ENTROPY)
    assert out.loss.item() == pytest.approx(-1.0, abs=1e-6)
    torch.testing.assert_close(g, torch.tensor([grad]), atol=1e-5, rtol=0)
