"""GDPO: group reward-decoupled normalisation of multi-component rewards.

Source: arXiv 2601.05242 (paper summaries); docs/methods/estimators.md#gdpo.

    z_{k,i} = (r_{k,i} - mean_{g,k}) / (std_{g,k} + eps)     per group, per component
    s_i     = sum_k w_k z_{k,i}
    A_i     = (s_i - mean_batch(s)) / (std_batch(s) + eps)

z-scoring the summed reward maps different component combinations to the same advantage; normalising each
component first keeps them apart, and the batch step stops the scale growing with K. A zero-variance
component in a group has z = 0; a NaN entry is left out of its component's statistics and has z = 0.
TRL 1.16's ``multi_objective_aggregation="normalize_then_sum"`` is the same scheme with Bessel's std and
``eps = 1e-4``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import centred, group_index, group_stats, scalar_group_stats
from mmreason.rl.registries import register_estimator


@register_estimator("gdpo", provenance="summaries")
def gdpo(rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6) -> Tensor:
    """GDPO: z-score each component per group, weighted sum, then z-score over the whole batch."""
    valid = ~torch.isnan(rewards)  # [N, K]
    index, num_groups = group_index(group_ids)
    stats = group_stats(rewards, valid, index, num_groups)
    z = centred(rewards, valid, index, stats) / (stats.std[index] + eps)  # [N, K]
    s = (z * weights).sum(dim=1)  # [N]
    row_valid = valid.any(dim=1)
    diff, batch_std = scalar_group_stats(s, row_valid, torch.zeros_like(index), 1)
    return torch.where(row_valid, diff / (batch_std + eps), torch.zeros_like(diff))
