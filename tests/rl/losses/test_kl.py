"""KL estimators k1, k2, k3 / low_var_kl by hand."""

import math

import pytest
import torch

from mmreason.rl import KL_ESTIMATORS, kl_penalty

LOGP = torch.tensor([[math.log(0.5)]])
REF = torch.tensor([[math.log(0.25)]])


@pytest.mark.parametrize(
    "name, expected",
    [
        ("k1", math.log(2)),
        ("k2", 0.5 * math.log(2) ** 2),
        ("k3", 0.5 + math.log(2) - 1),  # exp(ref - logp) - (ref - logp) - 1 with ref - logp = -log 2
        ("low_var_kl", 0.5 + math.log(2) - 1),
    ],
)
def test_values(name, expected):
    assert kl_penalty(LOGP, REF, name).item() == pytest.approx(expected, rel=1e-6)


def test_low_var_kl_is_k3():
    assert KL_ESTIMATORS.get("low_var_kl") is KL_ESTIMATORS.get("k3")


def test_k3_is_nonnegative_zero_at_equality_and_clamped():
    x = torch.randn(4, 5)
    y = torch.randn(4, 5)
    assert (kl_penalty(x, y) >= 0).all()
    assert torch.equal(kl_penalty(x, x), torch.zeros(4, 5))
    far = kl_penalty(torch.tensor([[-50.0]]), torch.tensor([[0.0]]))
    assert far.item() == 10.0


def test_bf16_inputs_give_fp32():
    out = kl_penalty(LOGP.bfloat16(), REF.bfloat16(), "k2")
    assert out.dtype == torch.float32
