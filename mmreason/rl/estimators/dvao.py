"""DVAO: dynamic variance-adaptive combination of per-objective advantages.

Source: arXiv 2605.25604 (abstract and summaries only); the exact form is ours [proposed];
docs/methods/estimators.md#dvao. Each objective's weight inside a group grows with its reward spread,
``w_k = std_k / sum_j std_j``:

    A_i = sum_k w_k (r_{k,i} - mean_k) / (std_k + eps)  ~=  sum_k (r_{k,i} - mean_k) / sum_j std_j

We use the right-hand form (bounded, no per-objective division) with config weights ``lambda_k`` applied to
the objectives: ``A_i = sum_k lambda_k (r_{k,i} - mean_k) / (sum_j |lambda_j| std_j + eps)``, which is the
same formula for the weighted objectives ``lambda_k r_k``. The shared denominator couples objectives; a
constant objective drops out of both sums. NaN entries are left out of their objective's mean and std.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import centred, group_index, group_stats
from mmreason.rl.registries import register_estimator


@register_estimator("dvao", provenance="proposed")
def dvao(rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """DVAO: sum of centred objectives over the sum of their group stds (spread-weighted) [proposed form]."""
    valid = ~torch.isnan(rewards)  # [N, K]
    index, num_groups = group_index(group_ids)
    stats = group_stats(rewards, valid, index, num_groups)
    numerator = (centred(rewards, valid, index, stats) * weights).sum(dim=1)  # [N]
    spread = (stats.std * weights.abs()).sum(dim=1)  # [M]
    return numerator / (spread[index] + eps)
