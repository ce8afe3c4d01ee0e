"""GRPO-VPS (docs/methods/losses.md#vps) on a worked example: each token's advantage is the trajectory's plus
``progress_weight tanh(progress of its segment)``.

One row of four tokens on policy, A = -1, segment progress [ln 3, ln 3, -ln 2, -ln 2] (tanh: 0.8, 0.8, -0.6, -0.6):
    progress_weight 0.5: A_t = -1 + 0.5 [0.8, 0.8, -0.6, -0.6] = [-0.6, -0.6, -1.3, -1.3]
    loss -mean(A_t) = (0.6 + 0.6 + 1.3 + 1.3) / 4 = 0.95, gradient -A_t / 4 = [0.15, 0.15, 0.325, 0.325]:
    the segment that raised the answer's probability is pushed down less
    progress_weight 0 (or no progress): GRPO, loss 1, gradient 0.25 on every token
"""

import math

import pytest
import torch

from tests.rl.losses.worked import run

PROGRESS = torch.tensor([[math.log(3), math.log(3), -math.log(2), -math.log(2)]])


@pytest.mark.parametrize(
    "weight, loss, grad",
    [(0.5, 0.95, [0.15, 0.15, 0.325, 0.325]), (0.0, 1.0, [0.25] * 4)],
)
def test_vps_refines_the_advantage_per_segment(weight, loss, grad):
    out, g = run("vps", [[0.0] * 4], [-1.0], options={"progress_weight": weight}, segment_progress=PROGRESS)
    assert out.loss.item() == pytest.approx(loss, abs=1e-6)
    torch.testing.assert_close(g, torch.tensor([grad]), atol=1e-6, rtol=0)
