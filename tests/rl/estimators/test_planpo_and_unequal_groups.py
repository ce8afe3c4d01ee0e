"""PlanPO (docs/methods/estimators.md#planpo) by hand, and every registered estimator on groups of unequal size.

PlanPO, one group, rewards [1, 1, 1, 0], turns [2, 3, 4, 1], mean turn lengths [10, 10, 10, 5]:
    GRPO: mean 0.75, std 0.433013 -> successes 0.577350, failure -1.732051
    turns among the successes: mean 3, std sqrt(2/3) = 0.816497 -> z = [1.224745, 0, -1.224745], x 0.2
    lengths among the successes are equal -> no length term; the failure (1 turn, short) gets nothing
    -> [0.822299, 0.577350, 0.332401, -1.732051]
"""

import inspect

import pytest
import torch

from mmreason import rl
from mmreason.rl import advantages


def test_planpo_prefers_fewer_turns_among_successes_only():
    got = advantages(
        "planpo",
        [1.0, 1.0, 1.0, 0.0],
        [0, 0, 0, 0],
        num_turns=torch.tensor([2.0, 3.0, 4.0, 1.0]),
        mean_turn_length=torch.tensor([10.0, 10.0, 10.0, 5.0]),
    ).advantages
    torch.testing.assert_close(got, torch.tensor([0.822299, 0.577350, 0.332401, -1.732051]), atol=1e-5, rtol=0)


def test_planpo_length_term_and_an_all_success_group():
    # all succeed: GRPO gives 0, PlanPO still ranks the concise one first (lengths [4, 8]: z = [1, -1] x 0.1)
    got = advantages(
        "planpo", [1.0, 1.0], [0, 0], num_turns=torch.tensor([2.0, 2.0]), mean_turn_length=torch.tensor([4.0, 8.0])
    ).advantages
    torch.testing.assert_close(got, torch.tensor([0.1, -0.1]), atol=1e-5, rtol=0)


UNEQUAL = torch.tensor([7, 7, 7, 3, 9, 9])  # groups of 3, 1 and 2 rollouts
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])


@pytest.mark.parametrize("name", rl.ESTIMATORS.names())
def test_every_estimator_accepts_groups_of_unequal_size(name):
    fn = rl.ESTIMATORS.get(name)
    columns = {need: torch.ones(6) for need in rl.needs_of(fn)}
    required = [
        p
        for p, v in list(inspect.signature(fn).parameters.items())[3:]
        if v.default is inspect.Parameter.empty and p not in columns
    ]
    assert not required, f"{name} needs options {required}"
    out = advantages(name, REWARDS, UNEQUAL, **columns).advantages
    assert out.shape == (6,) and torch.isfinite(out).all()
    # the 3-rollout group's one success scores above its two failures, whatever the baseline
    assert out[0] > out[1] and out[1] == pytest.approx(out[2].item())
