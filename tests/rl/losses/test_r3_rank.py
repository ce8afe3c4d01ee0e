"""R³'s ranking reward (docs/methods/losses.md#r3_rank) on a worked example: the failed rows of a group get a rank
bonus from their token-entropy pattern, summing to 0 over the failures.

One group, two tokens per row, on policy; rewards [1, 0, 0] (rows 1 and 2 failed), A = [1, -0.5, -0.5],
rank_weight 0.2, prefer low; row 1 entropies [0.4, 0.4] (mean 0.4, std 0), row 2 [0.1, 0.5] (mean 0.3, std 0.2).
    spread_weight 0: scores [0.4, 0.3] -> row 2 (lower) ranks first: bonus +0.2, row 1 -0.2: A' = [1, -0.7, -0.3]
    spread_weight 1: scores [0.4, 0.5] -> row 1 ranks first:                              A' = [1, -0.3, -0.7]
    loss -mean(A') = 0 both times; gradient -A'_i / (3 rows * 2 tokens): row 0 -1/6, and 0.7/6 = 0.116667 or
    0.3/6 = 0.05 on the failures; the succeeded row is never ranked
"""

import pytest
import torch

from tests.rl.losses.worked import run

FIELDS = {"rewards": torch.tensor([1.0, 0.0, 0.0]), "entropy": torch.tensor([[0.5, 0.5], [0.4, 0.4], [0.1, 0.5]])}


@pytest.mark.parametrize("spread, grads", [(0.0, [-1 / 6, 0.7 / 6, 0.3 / 6]), (1.0, [-1 / 6, 0.3 / 6, 0.7 / 6])])
def test_r3_rank_bonus_follows_the_entropy_score(spread, grads):
    options = {"rank_weight": 0.2, "spread_weight": spread}
    out, grad = run("r3_rank", [[0.0, 0.0]] * 3, [1.0, -0.5, -0.5], options=options, **FIELDS)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor(grads)[:, None].expand(3, 2), atol=1e-6, rtol=0)
