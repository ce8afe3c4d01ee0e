"""Step-GRPO: every (sample, step) prompt is its own group (docs/methods/estimators.md#step_grpo)."""

import torch

from mmreason.rl import advantages, step_group_ids


def test_each_step_is_normalised_on_its_own():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    sample = torch.tensor([4, 4, 4, 4])
    step = torch.tensor([0, 0, 1, 1])
    out = advantages("step_grpo", rewards, sample, step_index=step).advantages
    assert torch.allclose(out, torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-5)
    pooled = advantages("grpo", rewards, sample).advantages  # without the step split the steps would mix
    assert not torch.allclose(out, pooled)


def test_step_grpo_equals_grpo_on_step_group_ids():
    rewards = torch.tensor([0.2, 0.9, 0.4, 0.1, 0.8, 0.3])
    sample = torch.tensor([1, 1, 1, 2, 2, 2])
    step = torch.tensor([0, 1, 0, 0, 0, 1])
    out = advantages("step_grpo", rewards, sample, step_index=step).advantages
    ref = advantages("grpo", rewards, step_group_ids(sample, step)).advantages
    assert torch.equal(out, ref)
