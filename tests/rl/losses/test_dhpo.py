"""DHPO (docs/methods/losses.md#dhpo) on a worked example: the token surrogate and the sequence (GSPO) surrogate,
each clipped in its own range, mixed per token.

One row, two tokens, old log-probs 0, log r = [0.1, -0.1], A = -1 (inside every clip range):
    token branch -r_t A = r_t = [1.105171, 0.904837], d/d logp_t = r_t
    sequence branch: s = exp(mean log r) = 1, term -s A = 1, d s / d logp_t = s / 2 = 0.5
    average (w = 1/2): per token [1.052586, 0.952419], token mean 1.002502;
        d loss / d logp_t = (0.5 r_t + 2 * 0.5 * 0.5) / 2 = 0.25 r_t + 0.25 = [0.526293, 0.476209]
        (the sequence term sits on both tokens)
    entropy mixing, entropies [1, 3]: z = [-1, 1], w = sigmoid(z) = [0.268941, 0.731059]
        per token w r_t + (1 - w) = [1.028285, 0.930431], mean 0.979358
        d loss / d logp_t = w_t r_t / 2 + 0.25 (the sequence term of both tokens, weights summing to 1)
                          = [0.398613, 0.580745]
"""

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[0.1, -0.1]]


def test_dhpo_average_mixing():
    out, grad = run("dhpo", LOGP, [-1.0])
    assert out.loss.item() == pytest.approx(1.002502, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[0.526293, 0.476209]]), atol=1e-5, rtol=0)


def test_dhpo_entropy_mixing_leans_high_entropy_tokens_on_their_own_ratio():
    entropy = torch.tensor([[1.0, 3.0]])
    out, grad = run("dhpo", LOGP, [-1.0], options={"mixing": "entropy"}, entropy=entropy)
    assert out.loss.item() == pytest.approx(0.979358, abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[0.398613, 0.580745]]), atol=1e-5, rtol=0)
