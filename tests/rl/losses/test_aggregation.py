"""Token aggregations by hand, and the TRL loss_type mapping (docs/methods/aggregation-and-kl.md#token-aggregation)."""

import pytest
import torch

from mmreason.rl import AGGREGATIONS, aggregate, aggregation_for_loss_type

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])  # lengths 3 and 1; the 9s are padding


@pytest.mark.parametrize(
    "name, expected",
    [
        ("seq_mean_token_mean", (6 / 3 + 4 / 1) / 2),
        ("token_mean", 10 / 4),
        ("seq_mean_token_sum_norm", 10 / (2 * 3)),  # L_max defaults to T = 3
        ("seq_mean_token_sum", 10 / 2),
    ],
)
def test_formulas(name, expected):
    assert aggregate(name, LOSS, MASK).item() == pytest.approx(expected)


def test_overrides():
    assert aggregate("seq_mean_token_sum_norm", LOSS, MASK, max_len=5).item() == pytest.approx(1.0)
    assert aggregate("token_mean", LOSS, MASK, num_tokens=20).item() == pytest.approx(0.5)
    assert aggregate("seq_mean_token_mean", LOSS, MASK, num_seqs=4).item() == pytest.approx(1.5)


def test_equal_lengths_make_all_aggregations_agree_up_to_a_constant():
    loss = torch.randn(3, 4)
    mask = torch.ones(3, 4)
    base = aggregate("token_mean", loss, mask)
    assert aggregate("seq_mean_token_mean", loss, mask).item() == pytest.approx(base.item(), abs=1e-6)
    assert aggregate("seq_mean_token_sum_norm", loss, mask).item() == pytest.approx(base.item(), abs=1e-6)
    assert aggregate("seq_mean_token_sum", loss, mask).item() == pytest.approx(4 * base.item(), abs=1e-5)


def test_all_masked_gives_zero_not_nan():
    for name in AGGREGATIONS.names():
        assert aggregate(name, LOSS, torch.zeros_like(MASK)).item() == 0.0


def test_trl_loss_types_map_to_aggregations():
    assert aggregation_for_loss_type("grpo") == "seq_mean_token_mean"
    assert aggregation_for_loss_type("bnpo") == "token_mean"
    assert aggregation_for_loss_type("dapo") == "token_mean"
    assert aggregation_for_loss_type("dr_grpo") == "seq_mean_token_sum_norm"
    for name in ["grpo", "bnpo", "dapo", "dr_grpo", "luspo"]:
        assert aggregation_for_loss_type(name) in AGGREGATIONS


def test_unsupported_loss_type_is_named():
    with pytest.raises(KeyError, match="cispo"):
        aggregation_for_loss_type("cispo")
    with pytest.raises(KeyError, match="did you mean 'dr_grpo'"):
        aggregation_for_loss_type("drgrpo")
