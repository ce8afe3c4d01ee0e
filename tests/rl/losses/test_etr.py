"""ETR (docs/methods/losses.md#etr) on a worked example of its macro level: a group whose rewards vary most
(pass rate 1/2) gets a wider clip range, or, with ``macro_target: weight``, a larger loss weight.

Two one-token rows of one group, rewards [1, 0]: variance 1/4 over the bound span^2 / 4 = 1/4 -> v = 1;
micro level off (micro_scale 0), macro_scale 1 -> M = 1 + v = 2, epsilon 0.2 -> eps = 0.4 (under max_epsilon 0.5).
    row 0: r = 0.65, A = -1: inside [0.6, 1.4] -> l = -(r A) = 0.65, d l / d logp = -A r = 0.65
    row 1: r = 1.3,  A = +1: inside               -> l = -1.3,         d l / d logp = -1.3
    mean (0.65 - 1.3) / 2 = -0.325, gradient [0.325, -0.65]
The fixed clip 0.2 would cut both: l = [0.8, -1.2], gradient 0. macro_target weight keeps eps 0.2 and weighs the
rows by M = 2: loss 2 (0.8 - 1.2) / 2 = -0.4, gradient 0.
"""

import math

import pytest
import torch

from tests.rl.losses.worked import run

LOGP = [[math.log(0.65)], [math.log(1.3)]]
FIELDS = {"rewards": torch.tensor([1.0, 0.0]), "group_ids": torch.tensor([0, 0])}
MACRO = {"micro_scale": 0.0, "macro_scale": 1.0}


def test_etr_widens_the_clip_of_a_group_at_pass_rate_one_half():
    out, grad = run("etr", LOGP, [-1.0, 1.0], options=MACRO, **FIELDS)
    assert out.loss.item() == pytest.approx(-0.325, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[0.325], [-0.65]]), atol=1e-6, rtol=0)
    fixed, fixed_grad = run("clipped", LOGP, [-1.0, 1.0])
    assert fixed.loss.item() == pytest.approx(-0.2, abs=1e-6) and not fixed_grad.any()


def test_etr_macro_weight_scales_the_loss_instead():
    out, grad = run("etr", LOGP, [-1.0, 1.0], options={**MACRO, "macro_target": "weight"}, **FIELDS)
    assert out.loss.item() == pytest.approx(-0.4, abs=1e-6)
    assert not grad.any()
