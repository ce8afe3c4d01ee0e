"""GA-GRPO: evidence-weighted advantages (MedScope), usable after any estimator.

Source: MedScope (arXiv 2602.13332) describes the idea only; the formula is ours [proposed];
docs/methods/estimators.md#ga_grpo. Given a per-rollout evidence fidelity ``F_i in [0, 1]`` (share of the rollout's
tool calls that hit the gold evidence window) and base advantages ``A_i``:

    A_i > 0:  w_i = (1 + a F_i) / (1 + a mean_g F)
    A_i < 0:  w_i = (1 + a (1 - F_i)) / (1 + a mean_g (1 - F))
    A_i'    = clip(w_i, lo, hi) A_i,     a = 0.5, (lo, hi) = (0.5, 2.0)

Correct-and-grounded rollouts are pushed up most, wrong-and-ungrounded ones down most. Because ``lo > 0`` the
weight is positive and a sign never flips; with ``F`` constant in a group ``w = 1`` exactly. A NaN fidelity
(no gold window, e.g. captioning items) gives ``w = 1`` and is left out of the group mean.

Two ways in: ``evidence_weighted(advantages, fidelity, group_ids)`` after any estimator, or the registered
estimator ``ga_grpo`` = GRPO followed by this weighting (options ``fidelity``, ``a``, ``clip``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.estimators.grpo import grpo_core
from mmreason.rl.groups import group_index, group_stats, weighted_total
from mmreason.rl.registries import register_estimator


def evidence_weighted(
    advantages: Tensor,
    fidelity: Tensor,
    group_ids: Tensor,
    a: float = 0.5,
    clip: tuple[float, float] = (0.5, 2.0),
) -> Tensor:
    """Sign-preserving evidence weighting of ``advantages [N]`` by ``fidelity [N]`` (NaN = no evidence)."""
    lo, hi = clip
    if not 0 < lo <= hi:
        raise ValueError(f"clip must satisfy 0 < lo <= hi so no sign can flip, got {clip}")
    if a < 0:
        raise ValueError(f"a must be >= 0, got {a}")
    adv = torch.as_tensor(advantages).to(torch.float32)
    f = torch.as_tensor(fidelity, device=adv.device).to(torch.float32)
    if f.shape != adv.shape or adv.dim() != 1:
        raise ValueError(f"advantages and fidelity must both be [N], got {tuple(adv.shape)}, {tuple(f.shape)}")
    valid = ~torch.isnan(f)
    index, num_groups = group_index(torch.as_tensor(group_ids, device=adv.device))
    mean_f = group_stats(f[:, None], valid[:, None], index, num_groups).mean[index, 0]  # [N]
    w_pos = (1 + a * f) / (1 + a * mean_f)
    w_neg = (1 + a * (1 - f)) / (1 + a * (1 - mean_f))
    w = torch.where(adv > 0, w_pos, w_neg).clamp(lo, hi)
    w = torch.where(valid & (adv != 0), w, torch.ones_like(w))
    return adv * w


@register_estimator("ga_grpo", needs=("fidelity",), provenance="proposed")
def ga_grpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    fidelity: Tensor,
    a: float = 0.5,
    clip: tuple[float, float] = (0.5, 2.0),
    scale_rewards: str = "group",
    eps: float = 1e-6,
    missing: str = "zero",
) -> Tensor:
    """GA-GRPO: GRPO advantages re-weighted by per-rollout evidence fidelity; never flips a sign."""
    total, valid = weighted_total(rewards, weights, missing)
    base = grpo_core(total, valid, group_ids, scale_rewards, eps)
    return evidence_weighted(base, fidelity, group_ids, a=a, clip=clip)
