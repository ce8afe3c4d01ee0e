"""ConSPO (docs/methods/losses.md#conspo) on a worked example: InfoNCE of each positive's length-normalised score
against its group's negatives, with a margin subtracted from the positives.

One group, tau 1, on policy. Row 0 positive with two tokens, logp [-1, -3] -> s_0 = -2; row 1 negative, one token
(the second masked), logp -2 -> s_1 = -2.
    margin 1 (constant): z_pos = -3, z_neg = -2, p = e^-3 / (e^-3 + e^-2) = 1 / (1 + e) = 0.268941
        loss -ln p = ln(1 + e) = 1.313262
        d loss / d s_0 = -(1 - p) = -0.731059, spread over row 0's two tokens: -0.365529 each
        d loss / d s_1 = +e / (1 + e) = 0.731059 on row 1's token
    linear margin at train_step 0: margin 0, p = 1/2, loss ln 2
    pooled, a second positive (row 2, logp -2): p = 2 e^-3 / (2 e^-3 + e^-2) = 2 / (2 + e), loss 0.858298;
        per_positive gives each positive p = 1 / (1 + e) again: loss 1.313262
"""

import math

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[-1.0, -3.0], [-2.0, 0.0]]
MASK = [[1.0, 1.0], [1.0, 0.0]]


def test_conspo_infonce_with_a_constant_margin():
    options = {"tau": 1.0, "margin": 1.0, "margin_schedule": "constant"}
    out, grad = run("conspo", LOGP, [1.0, -1.0], old=LOGP, mask=MASK, options=options)
    assert out.loss.item() == pytest.approx(math.log(1 + math.e), abs=1e-5)
    torch.testing.assert_close(grad, torch.tensor([[-0.365529, -0.365529], [0.731059, 0.0]]), atol=1e-5, rtol=0)


def test_conspo_linear_margin_starts_at_zero():
    out, _ = run("conspo", LOGP, [1.0, -1.0], old=LOGP, mask=MASK, options={"tau": 1.0, "margin": 1.0}, train_step=0)
    assert out.loss.item() == pytest.approx(math.log(2), abs=1e-5)


def test_conspo_pooled_against_per_positive():
    logp, mask = [*LOGP, [-2.0, 0.0]], [*MASK, [1.0, 0.0]]
    options = {"tau": 1.0, "margin": 1.0, "margin_schedule": "constant"}
    pooled, _ = run("conspo", logp, [1.0, -1.0, 1.0], old=logp, mask=mask, options={**options, "variant": "pooled"})
    assert pooled.loss.item() == pytest.approx(-math.log(2 / (2 + math.e)), abs=1e-5)
    each, _ = run("conspo", logp, [1.0, -1.0, 1.0], old=logp, mask=mask, options=options)
    assert each.loss.item() == pytest.approx(math.log(1 + math.e), abs=1e-5)
