"""MC-GRPO: median-centred advantages over G+1 rollouts, with the median "pivot" left out of the loss.

Source: arXiv 2601.22582, code lotusroot-kim/MC-GRPO; docs/methods/estimators.md#mc_grpo.

    m = lower median of the group's rewards,   A_i = (r_i - m) / s

with ``scale``: ``"none"`` (s = 1, the worked example of docs/methods/estimators.md#mc_grpo), ``"std"`` (population std
of the G+1 rewards + eps) or ``"mad"`` (median |r - m| + eps; the reference code divides by MAD + 1e-3).
Sampling G+1 (odd) rollouts makes the median one of them; that pivot rollout has A = 0 and is excluded from
backprop *and* from the loss normalisation, so G rollouts are trained at the cost of plain G-rollout GRPO.
The pivot is the first row, in a stable ascending sort (= lowest original index among ties), whose reward
equals m. Rollouts tied with the median also get A = 0 but stay in the loss. The median is robust to
outliers, so small groups flip fewer advantage signs. The reference code also rescales non-zero
advantages by G/#non-zero; that is not done here.

Returns ``AdvantageResult(advantages, loss_mask)`` with ``loss_mask`` False at each group's pivot.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, grouped_lower_median, scalar_group_stats, weighted_total
from mmreason.rl.records import AdvantageResult
from mmreason.rl.registries import register_estimator

SCALES = ("none", "std", "mad")


@register_estimator("mc_grpo", provenance="authors' code")
def mc_grpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    scale: str = "none",
    eps: float = 1e-6,
    missing: str = "zero",
) -> AdvantageResult:
    """MC-GRPO: r - group median over G+1 rollouts; the median pivot is masked out of the loss."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    n = total.numel()
    adv = torch.zeros_like(total)
    keep = torch.ones(n, dtype=torch.bool, device=total.device)
    rows = valid.nonzero().squeeze(1)  # invalid rows take no part in the median; they keep A = 0
    if rows.numel() == 0:
        return AdvantageResult(adv, keep)
    r = total[rows]
    index, num_groups = group_index(group_ids[rows])
    median = grouped_lower_median(r, index, num_groups)  # [M]
    diff = r - median[index]
    if scale == "std":
        _, std = scalar_group_stats(r, torch.ones_like(r, dtype=torch.bool), index, num_groups)
        diff = diff / (std + eps)
    elif scale == "mad":
        mad = grouped_lower_median(diff.abs(), index, num_groups)
        diff = diff / (mad[index] + eps)
    position = torch.arange(r.numel(), device=r.device)
    at_median = torch.where(r == median[index], position, torch.full_like(position, r.numel()))
    pivot = torch.full((num_groups,), r.numel(), device=r.device).scatter_reduce(0, index, at_median, "amin")
    adv[rows] = diff
    keep[rows[pivot]] = False
    return AdvantageResult(adv, keep)
