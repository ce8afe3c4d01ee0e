"""RLOO: leave-one-out baseline.

Source: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization..." (arXiv 2402.14740);
docs/methods/estimators.md#rloo.

    A_i = r_i - 1/(G-1) sum_{j != i} r_j  =  G/(G-1) (r_i - mean_g(r))

G counts the valid rollouts of the group; a group with G <= 1 has no baseline and gets 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, group_stats, weighted_total
from mmreason.rl.registries import register_estimator


@register_estimator("rloo", provenance="equations")
def rloo(rewards: Tensor, group_ids: Tensor, weights: Tensor, *, missing: str = "zero") -> Tensor:
    """RLOO: r minus the mean of the other rollouts of the group, G/(G-1)(r - mean)."""
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    index, num_groups = group_index(group_ids)
    stats = group_stats(total[:, None], valid[:, None], index, num_groups)
    g = stats.count[index, 0]  # [N] valid rollouts in the row's group
    diff = total - stats.mean[index, 0]
    keep = valid & ~stats.constant[index, 0] & (g > 1)
    return torch.where(keep, diff * g / (g - 1).clamp(min=1), torch.zeros_like(diff))
