"""The ``advantages()`` entry point: shapes, dtypes, weights, NaN components, option errors, registration."""

import pytest
import torch

import mmreason.rl as rl
from mmreason.rl import ESTIMATORS, AdvantageResult, advantages, register_estimator

TWO_COMPONENTS = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
ONE_GROUP = torch.zeros(4, dtype=torch.long)


def test_every_builtin_estimator_is_registered_with_a_description():
    expected = {
        "grpo",
        "dr_grpo",
        "rloo",
        "mc_grpo",
        "g2rpo",
        "gdpo",
        "dvao",
        "corr_grpo",
        "ga_grpo",
        "step_grpo",
    }
    rows = dict(ESTIMATORS.describe())
    assert expected <= set(rows)
    assert all(rows[name] for name in expected)


def test_vector_and_column_rewards_agree_and_result_is_fp32():
    r = torch.tensor([1.0, 0.0, 0.5, 0.0], dtype=torch.float64)
    a = advantages("grpo", r, [3, 3, 8, 8])
    b = advantages("grpo", r[:, None], torch.tensor([3, 3, 8, 8]))
    assert isinstance(a, AdvantageResult) and a.loss_mask is None
    assert a.advantages.dtype == torch.float32
    assert torch.equal(a.advantages, b.advantages)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64])
def test_any_reward_dtype_is_computed_in_fp32(dtype):
    r = torch.tensor([2, 0, 1, 1]).to(dtype)
    out = advantages("grpo", r, ONE_GROUP).advantages
    expected = advantages("grpo", r.float(), ONE_GROUP).advantages
    assert out.dtype == torch.float32
    assert torch.equal(out, expected)


def test_weights_default_to_ones_and_scale_components():
    default = advantages("dr_grpo", TWO_COMPONENTS, ONE_GROUP).advantages
    ones = advantages("dr_grpo", TWO_COMPONENTS, ONE_GROUP, weights=[1.0, 1.0]).advantages
    assert torch.equal(default, ones)
    only_first = advantages("dr_grpo", TWO_COMPONENTS, ONE_GROUP, weights=[2.0, 0.0]).advantages
    assert torch.allclose(only_first, torch.tensor([1.0, 1.0, -1.0, -1.0]))


def test_nan_component_counts_zero_in_the_sum():
    r = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    out = advantages("dr_grpo", r, [0, 0]).advantages
    assert torch.allclose(out, torch.tensor([0.0, 0.0]))  # totals 1 and 1


def test_all_nan_row_is_left_out_of_the_baseline_and_gets_zero():
    r = torch.tensor([1.0, 0.0, float("nan")])
    out = advantages("grpo", r, [0, 0, 0]).advantages
    assert torch.allclose(out, torch.tensor([1.0, -1.0, 0.0]), atol=1e-5)


def test_unknown_option_names_the_option_and_suggests():
    with pytest.raises(TypeError, match="scale_reward'.*did you mean 'scale_rewards'"):
        advantages("grpo", TWO_COMPONENTS, ONE_GROUP, scale_reward="group")


def test_missing_required_option_is_named():
    with pytest.raises(TypeError, match="needs option 'fidelity'"):
        advantages("ga_grpo", TWO_COMPONENTS, ONE_GROUP)


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(KeyError, match="did you mean 'grpo'"):
        advantages("gpro", TWO_COMPONENTS, ONE_GROUP)


@pytest.mark.parametrize(
    "rewards, group_ids, weights",
    [
        (torch.zeros(4, 2, 1), ONE_GROUP, None),  # 3-D rewards
        (TWO_COMPONENTS, torch.zeros(3, dtype=torch.long), None),  # N mismatch
        (TWO_COMPONENTS, ONE_GROUP, [1.0, 1.0, 1.0]),  # K mismatch
    ],
)
def test_bad_shapes_are_rejected(rewards, group_ids, weights):
    with pytest.raises(ValueError):
        advantages("grpo", rewards, group_ids, weights=weights)


def test_float_group_ids_are_rejected():
    with pytest.raises(TypeError, match="group_ids must be integers"):
        advantages("grpo", TWO_COMPONENTS, torch.zeros(4))


@pytest.fixture
def scratch_name():
    name = "test_only_sign_estimator"
    yield name
    ESTIMATORS._items.pop(name, None)  # keep the shared registry clean for other tests


def test_user_estimator_registered_by_decorator(scratch_name):
    @register_estimator(scratch_name)
    def sign(rewards, group_ids, weights, *, flip: bool = False):
        """Sign of the weighted reward."""
        out = torch.sign((rewards * weights).sum(1))
        return -out if flip else out

    out = advantages(scratch_name, torch.tensor([2.0, -1.0, 0.0]), [0, 0, 1], flip=True)
    assert out.advantages.tolist() == [-1.0, 1.0, -0.0]
    assert (scratch_name, "Sign of the weighted reward.") in ESTIMATORS.describe()
    with pytest.raises(TypeError, match="no option 'flop'"):
        advantages(scratch_name, torch.ones(3), [0, 0, 1], flop=True)
    with pytest.raises(ValueError, match="registered twice"):

        @register_estimator(scratch_name)
        def other(rewards, group_ids, weights):
            return rewards[:, 0]


def test_public_surface_is_exported():
    for name in [
        "advantages",
        "policy_loss",
        "evidence_weighted",
        "step_group_ids",
        "aggregation_for_loss_type",
    ]:
        assert callable(getattr(rl, name))
