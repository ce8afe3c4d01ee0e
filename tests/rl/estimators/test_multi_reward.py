"""GDPO, DVAO and CorrGRPO on the shared example r1 = [1,1,0,0], r2 = [1,0,0,0] (docs/methods/estimators.md#gdpo,
docs/methods/estimators.md#dvao, docs/methods/estimators.md#corr_grpo)."""

import torch

from mmreason.rl import advantages

R1 = [1.0, 1.0, 0.0, 0.0]
R2 = [1.0, 0.0, 0.0, 0.0]
ONE_GROUP = [0, 0, 0, 0]


def adv(name, *components, groups=ONE_GROUP, **options):
    return advantages(name, torch.tensor(components).T, groups, **options).advantages


def test_gdpo_worked_example():
    assert torch.allclose(adv("gdpo", R1, R2), torch.tensor([1.5382, 0.2380, -0.8881, -0.8881]), atol=1e-4)


def test_gdpo_constant_component_has_zero_z():
    # r2 constant -> only z(r1) = [1, 1, -1, -1] survives, already batch-normalised
    assert torch.allclose(adv("gdpo", R1, [3.0] * 4), torch.tensor([1.0, 1.0, -1.0, -1.0]), atol=1e-4)


def test_gdpo_normalises_over_the_batch_not_the_group():
    out = adv("gdpo", [1.0, 0.0, 5.0, 1.0], groups=[0, 0, 1, 1])
    assert torch.allclose(out, torch.tensor([1.0, -1.0, 1.0, -1.0]), atol=1e-4)


def test_dvao_worked_example():
    assert torch.allclose(adv("dvao", R1, R2), torch.tensor([1.3397, 0.2679, -0.8038, -0.8038]), atol=1e-4)


def test_dvao_constant_objective_drops_out_and_all_constant_is_zero():
    assert torch.allclose(adv("dvao", [1.0, 0.0], [5.0, 5.0], groups=[0, 0]), torch.tensor([1.0, -1.0]), atol=1e-5)
    assert torch.equal(adv("dvao", [0.3] * 4, [0.7] * 4), torch.zeros(4))


def test_corr_grpo_worked_example():
    assert torch.allclose(adv("corr_grpo", R1, R2), torch.tensor([0.7038, 0.1408, -0.4223, -0.4223]), atol=1e-4)


def test_corr_grpo_deduplicates_a_repeated_reward():
    # [r, r]: total 2r, sum of correlations 4 -> (2r - 2 mean) / 2 = r - mean
    out = adv("corr_grpo", R2, R2)
    assert torch.allclose(out, torch.tensor([0.75, -0.25, -0.25, -0.25]), atol=1e-5)


def test_corr_grpo_all_constant_is_zero():
    assert torch.equal(adv("corr_grpo", [1.0] * 4, [0.5] * 4), torch.zeros(4))


def test_nan_component_is_left_out_of_its_statistics():
    # r2 does not apply to row 3: its group statistics use rows 0-2 only
    nan = float("nan")
    with_nan = adv("dvao", R1, [1.0, 0.0, 0.0, nan])
    r1c = torch.tensor([0.5, 0.5, -0.5, -0.5])
    r2c = torch.tensor([2 / 3, -1 / 3, -1 / 3, 0.0])
    expected = (r1c + r2c) / (0.5 + torch.tensor(2 / 9).sqrt())
    assert torch.allclose(with_nan, expected, atol=1e-5)
