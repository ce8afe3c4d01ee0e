"""DaGRPO (docs/methods/losses.md#dagrpo) on a worked example: near-duplicate rows of one group with opposite
advantages lose their advantage, so their gradients do not cancel.

Three rows of one group, three tokens each, on policy; token ids [1, 2, 3], [1, 2, 4], [5, 6, 7]; A = [1, -1, -1].
    unigrams: U_0 = {1, 2, 3}, U_1 = {1, 2, 4}: Jaccard 2/4 = 0.5; row 2 shares nothing
    threshold 0.5, mask_rows both: rows 0 and 1 get A = 0 (they stay in the normaliser): A' = [0, 0, -1]
        per-row token means [0, 0, 1]: loss 1/3; gradient -A'/9 per token: row 2 gets 1/9 on each token
    mask_rows negative: A' = [1, 0, -1]: loss 0, gradient -1/9 on row 0's tokens, 1/9 on row 2's
    threshold 0.6, or bigrams (U_0 = {12, 23}, U_1 = {12, 24}: Jaccard 1/3): nothing masked, loss (-1 + 1 + 1)/3
"""

import pytest
import torch

from tests.rl.losses.worked import run

TOKENS = torch.tensor([[1, 2, 3], [1, 2, 4], [5, 6, 7]])
ZERO = [[0.0] * 3] * 3


@pytest.mark.parametrize(
    "options, loss, row_grads",
    [
        ({"similarity_threshold": 0.5, "ngram": 1}, 1 / 3, [0.0, 0.0, 1 / 9]),
        ({"similarity_threshold": 0.5, "ngram": 1, "mask_rows": "negative"}, 0.0, [-1 / 9, 0.0, 1 / 9]),
        ({"similarity_threshold": 0.6, "ngram": 1}, 1 / 3, [-1 / 9, 1 / 9, 1 / 9]),
        ({"similarity_threshold": 0.5, "ngram": 2}, 1 / 3, [-1 / 9, 1 / 9, 1 / 9]),
    ],
)
def test_dagrpo_masks_near_duplicate_pairs_of_opposite_sign(options, loss, row_grads):
    out, grad = run("dagrpo", ZERO, [1.0, -1.0, -1.0], options=options, token_ids=TOKENS)
    assert out.loss.item() == pytest.approx(loss, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor(row_grads)[:, None].expand(3, 3), atol=1e-6, rtol=0)
