"""Evidence-weighted advantages for GA-GRPO (docs/methods/estimators.md#ga_grpo)."""

import pytest
import torch

from mmreason.rl import advantages, evidence_weighted


def test_hand_worked_weights():
    a = torch.tensor([1.0, 1.0, -1.0, -1.0])
    f = torch.tensor([1.0, 0.0, 1.0, 0.0])  # group mean 0.5
    out = evidence_weighted(a, f, torch.zeros(4, dtype=torch.long))
    # A>0: (1 + .5F)/1.25 -> 1.2, 0.8;  A<0: (1 + .5(1-F))/1.25 -> 0.8, 1.2
    assert torch.allclose(out, torch.tensor([1.2, 0.8, -0.8, -1.2]))


def test_evidence_hit_with_positive_advantage_beats_a_miss():
    out = evidence_weighted(
        torch.tensor([0.5, 0.5, -1.0]), torch.tensor([0.9, 0.1, 0.5]), torch.zeros(3, dtype=torch.long)
    )
    assert out[0] > out[1] > 0


def test_weights_are_clipped():
    out = evidence_weighted(
        torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.0]), torch.zeros(2, dtype=torch.long), a=10.0
    )
    # raw weights 11/6 and 1/6 -> 1/6 is clipped up to 0.5
    assert torch.allclose(out, torch.tensor([11 / 6, 0.5]))


def test_constant_fidelity_is_the_identity_exactly():
    a = torch.tensor([0.3, -1.7, 1.4, 0.0])
    out = evidence_weighted(a, torch.full((4,), 0.37), torch.tensor([2, 2, 9, 9]))
    assert torch.equal(out, a)


def test_nan_fidelity_means_weight_one():
    a = torch.tensor([1.0, -1.0, 1.0])
    out = evidence_weighted(a, torch.tensor([float("nan"), 0.0, 1.0]), torch.zeros(3, dtype=torch.long))
    assert out[0] == 1.0
    # mean over the valid rows only: 0.5 -> row 2 gets (1 + .5)/(1.25)
    assert out[2].item() == pytest.approx(1.2)


def test_ga_grpo_estimator_is_grpo_then_weighting():
    rewards, groups, f = (
        torch.tensor([1.0, 0.0, 1.0, 0.0]),
        torch.tensor([0, 0, 0, 0]),
        torch.tensor([1.0, 0.2, 0.0, 0.9]),
    )
    base = advantages("grpo", rewards, groups).advantages
    out = advantages("ga_grpo", rewards, groups, fidelity=f).advantages
    assert torch.allclose(out, evidence_weighted(base, f, groups))
    assert not torch.allclose(out, base)


def test_a_clip_that_could_flip_signs_is_rejected():
    with pytest.raises(ValueError, match="clip"):
        evidence_weighted(torch.ones(2), torch.ones(2), torch.zeros(2, dtype=torch.long), clip=(0.0, 2.0))
