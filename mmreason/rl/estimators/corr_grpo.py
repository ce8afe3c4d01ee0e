"""CorrGRPO: correlation-normalised multi-reward GRPO.

Source: arXiv 2609.36820 (a public summary of the full paper); docs/methods/estimators.md#corr_grpo.
With total reward ``R = sum_l w_l r_l``, GRPO divides by ``std(R) = sqrt(sum_lm Cov(w_l r_l, w_m r_m))``,
which large-scale rewards dominate. CorrGRPO keeps the centred numerator and swaps covariances for Pearson
correlations:

    A_i = (R_i - mean_g(R)) / sqrt(sum_l sum_m rho_lm + eps),   rho_ll = 1

Rows/columns of zero-variance components are 0 (all constant -> A = 0). Within a group this is a positive
multiple of the GRPO advantage; correlated rewards are de-duplicated. With positive weights ``rho`` is the
plain correlation of the raw components (the unweighted ``sum rho`` of docs/methods/estimators.md#corr_grpo); a
negative weight flips the sign of its correlations, a zero weight removes its component.

Caution: when the standardised components cancel (e.g. G = 2 and two anti-correlated rewards),
``sum rho = 0`` and the denominator is ``sqrt(eps)``: advantages become large; gradient clipping bounds the
step. With NaN entries ``rho`` uses each component's own mean/std and the rows valid for both.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import centred, group_index, group_stats, scalar_group_stats, weighted_total
from mmreason.rl.registries import register_estimator


def group_correlation_sum(rewards: Tensor, valid: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """``sum_lm rho_lm`` per group ``[M]`` for components ``rewards [N, K]`` (NaN-free where ``valid``)."""
    stats = group_stats(rewards, valid, index, num_groups)
    live = stats.std > 0  # [M, K]
    z = centred(rewards, valid, index, stats) / torch.where(live, stats.std, 1.0)[index]  # [N, K]
    outer = z[:, :, None] * z[:, None, :]  # [N, K, K]
    both = (valid[:, :, None] & valid[:, None, :]).to(rewards.dtype)  # [N, K, K]
    k = rewards.shape[1]
    cross = rewards.new_zeros(num_groups, k, k).index_add(0, index, outer)
    pairs = rewards.new_zeros(num_groups, k, k).index_add(0, index, both)
    rho = cross / pairs.clamp(min=1)  # [M, K, K]
    eye = torch.eye(k, dtype=torch.bool, device=rewards.device)
    rho = torch.where(eye, live[:, :, None].to(rho.dtype) * eye, rho)  # rho_ll = 1, or 0 when constant
    return rho.sum(dim=(1, 2)).clamp(min=0.0)  # rounding can take a cancelling sum below 0


@register_estimator("corr_grpo", provenance="summaries")
def corr_grpo(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6, missing: str = "zero"
) -> Tensor:
    """CorrGRPO: centred total reward over sqrt(sum of the components' Pearson correlations + eps)."""
    valid = ~torch.isnan(rewards)  # [N, K]
    total, row_valid = weighted_total(rewards, weights, missing)  # [N], [N]
    index, num_groups = group_index(group_ids)
    diff, _ = scalar_group_stats(total, row_valid, index, num_groups)  # [N], exactly GRPO's numerator
    rho_sum = group_correlation_sum(rewards * weights, valid, index, num_groups)  # [M]
    adv = diff / torch.sqrt(rho_sum[index] + eps)
    return torch.where(row_valid, adv, torch.zeros_like(adv))
