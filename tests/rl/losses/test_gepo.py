"""GEPO (docs/methods/losses.md#gepo) on a worked example: positive advantages of calm (low-entropy) groups and
negative ones of uncertain (high-entropy) groups shrink, with thresholds from the group entropies of this call
pooled with the history.

Four one-token rows on policy, groups [0, 0, 1, 1], A = [1, -1, 1, -1], token entropies 0.2 (group 0), 1.0 (group 1);
shrink_positive 0.25, shrink_negative 0.75, quantiles 0.25 / 0.75 (linear interpolation):
    history [0.4, 0.6, 0.8]: pool sorted [0.2, 0.4, 0.6, 0.8, 1.0] -> low 0.4, high 0.8
        group 0 (0.2 < 0.4) shrinks its positive, group 1 (1.0 > 0.8) its negative: A' = [0.25, -1, 1, -0.75]
        loss -mean(A') = 0.125, gradient -A'/4 = [-0.0625, 0.25, -0.25, 0.1875]
    history [1.2, 1.4, 1.6]: pool [0.2, 1.0, 1.2, 1.4, 1.6] -> low 1.0, high 1.4: group 1 is no longer uncertain
        A' = [0.25, -1, 1, -1], loss 0.1875, gradient [-0.0625, 0.25, -0.25, 0.25]
"""

import pytest
import torch

from tests.rl.losses.worked import run

FIELDS = {"group_ids": torch.tensor([0, 0, 1, 1]), "entropy": torch.tensor([[0.2], [0.2], [1.0], [1.0]])}
OPTIONS = {"shrink_positive": 0.25, "shrink_negative": 0.75}


@pytest.mark.parametrize(
    "history, loss, grad",
    [
        ([0.4, 0.6, 0.8], 0.125, [-0.0625, 0.25, -0.25, 0.1875]),
        ([1.2, 1.4, 1.6], 0.1875, [-0.0625, 0.25, -0.25, 0.25]),
    ],
)
def test_gepo_shrinks_by_group_entropy_against_the_pooled_history(history, loss, grad):
    out, g = run(
        "gepo", [[0.0]] * 4, [1.0, -1.0, 1.0, -1.0], options=OPTIONS, entropy_history=torch.tensor(history), **FIELDS
    )
    assert out.loss.item() == pytest.approx(loss, abs=1e-6)
    torch.testing.assert_close(g[:, 0], torch.tensor(grad), atol=1e-6, rtol=0)
