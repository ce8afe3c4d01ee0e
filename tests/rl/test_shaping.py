"""Length trapezoid, DAPO overlong penalty and the entropy band (docs/methods/trainer.md#length-trapezoid,
docs/methods/trainer.md#entropy-band, docs/methods/trainer.md#dapo)."""

import pytest
import torch

from mmreason.rl import entropy_band_penalty, length_trapezoid, overlong_penalty

PERCEPTION = (1, 8, 256, 1024)


def test_trapezoid_values():
    lengths = torch.tensor([0, 1, 4.5, 8, 100, 256, 640, 1024, 2000])
    expected = torch.tensor([0, 0, 0.5, 1, 1, 1, 0.5, 0, 0])
    assert torch.allclose(length_trapezoid(lengths, *PERCEPTION), expected)


@pytest.mark.parametrize("edge", PERCEPTION)
def test_trapezoid_is_continuous_at_every_threshold(edge):
    out = length_trapezoid(torch.tensor([edge - 1e-3, edge, edge + 1e-3], dtype=torch.float64), *PERCEPTION)
    assert (out.max() - out.min()).item() < 1e-3


def test_trapezoid_rejects_misordered_thresholds():
    with pytest.raises(ValueError):
        length_trapezoid(torch.tensor([5]), 8, 1, 256, 1024)


def test_overlong_penalty():
    max_len, cache = 20480, 4096
    lengths = torch.tensor([100, max_len - cache, max_len - cache // 2, max_len, max_len + 1])
    out = overlong_penalty(lengths, max_len, cache)
    assert torch.allclose(out, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    assert out.dtype == torch.float32


def test_entropy_band_zero_inside_with_zero_gradient():
    h = torch.full((2, 3), 0.5, requires_grad=True)
    out = entropy_band_penalty(h, torch.ones(2, 3), 0.3, 1.2)
    (grad,) = torch.autograd.grad(out, h)
    assert out.item() == 0.0 and torch.equal(grad, torch.zeros(2, 3))


def test_entropy_band_penalises_both_sides_per_task():
    h = torch.tensor([[1.0, 1.0, 9.0], [0.1, 0.1, 0.1]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # the 9 is padding
    out = entropy_band_penalty(h, mask, torch.tensor([0.3, 0.3]), torch.tensor([0.8, 0.8]), torch.tensor([4, 7]))
    # task 4: H = 1.0 -> 1.0 - 0.8; task 7: H = 0.1 -> 0.3 - 0.1
    assert out.item() == pytest.approx(0.2 + 0.2)
    pooled = entropy_band_penalty(h, mask, 0.3, 0.8)  # one task: H = (2 + 0.3) / 5 = 0.46 is inside
    assert pooled.item() == 0.0


def test_entropy_band_per_row_bands():
    h = torch.tensor([[1.0], [1.0]])
    out = entropy_band_penalty(
        h, torch.ones(2, 1), torch.tensor([0.15, 0.3]), torch.tensor([0.8, 1.2]), torch.tensor([0, 1])
    )
    assert out.item() == pytest.approx(0.2)  # perception band [0.15, 0.8] exceeded, reasoning [0.3, 1.2] not
