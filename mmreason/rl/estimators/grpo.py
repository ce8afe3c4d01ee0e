"""GRPO: the group z-score of the weighted reward.

Source: DeepSeekMath (arXiv 2402.03300); docs/methods/estimators.md#grpo.

    A_i = (r_i - mean_g(r)) / (std(r) + eps),    r_i = sum_k w_k r_{i,k}

``scale_rewards`` chooses the std, as TRL's option of that name does:
``"group"`` the std of the rollout's group, ``"batch"`` one std over the whole batch (mean still per group,
Liu et al. 2025 / TRL), ``"none"`` no division (Dr. GRPO).

Departures from TRL 1.16 (``_generate_and_score_completions``): std is the population std (ddof 0) where TRL
uses Bessel's correction, and ``eps = 1e-6`` where TRL adds 1e-4; both follow docs/methods/estimators.md#grpo. Groups
whose rewards are all equal get exactly 0 (the mean is the common value, not a rounding of it).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, scalar_group_stats, weighted_total
from mmreason.rl.registries import register_estimator

SCALES = ("group", "batch", "none")


def grpo_core(total: Tensor, valid: Tensor, group_ids: Tensor, scale_rewards: str, eps: float) -> Tensor:
    """GRPO advantage ``[N]`` of a scalar reward ``total [N]``; rows with ``valid`` False get 0."""
    if scale_rewards not in SCALES:
        raise ValueError(f"scale_rewards must be one of {SCALES}, got {scale_rewards!r}")
    index, num_groups = group_index(group_ids)
    diff, group_std = scalar_group_stats(total, valid, index, num_groups)  # [N], [N]
    if scale_rewards == "group":
        diff = diff / (group_std + eps)
    elif scale_rewards == "batch":
        _, batch_std = scalar_group_stats(total, valid, torch.zeros_like(index), 1)
        diff = diff / (batch_std + eps)
    return torch.where(valid, diff, torch.zeros_like(diff))


@register_estimator("grpo", provenance="equations")
def grpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    scale_rewards: str = "group",
    eps: float = 1e-6,
    missing: str = "zero",
) -> Tensor:
    """GRPO: (r - group mean) / (std + eps) of the weighted reward; std per group, per batch or none."""
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    return grpo_core(total, valid, group_ids, scale_rewards, eps)
