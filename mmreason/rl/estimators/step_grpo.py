"""Step-GRPO (R1-Router): GRPO where every step prompt of an unrolled trajectory is its own group.

Source: R1-Router (Peng et al.), code read from ChloeTT-LAO/Router-Search; docs/methods/estimators.md#step_grpo.
A gold trajectory is unrolled into steps; step ``t`` becomes its own prompt with its own group of G rollouts.
The advantage is the ordinary group z-score inside that step prompt's group: no discounting, no credit
across steps. ``group_ids`` here are the *sample* ids and ``step_index [N]`` the step of each rollout; the
pair picks the group (see ``mmreason.rl.groups.step_group_ids``, which the data side can call directly).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.estimators.grpo import grpo_core
from mmreason.rl.groups import step_group_ids, weighted_total
from mmreason.rl.registries import register_estimator


@register_estimator("step_grpo", needs=("step_index",), provenance="authors' code")
def step_grpo(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, step_index: Tensor, eps: float = 1e-6, missing: str = "zero"
) -> Tensor:
    """Step-GRPO: GRPO z-score within each (sample id, step index) group; no cross-step credit."""
    steps = torch.as_tensor(step_index, device=group_ids.device)
    groups = step_group_ids(group_ids, steps)
    total, valid = weighted_total(rewards, weights, missing)
    return grpo_core(total, valid, groups, "group", eps)
