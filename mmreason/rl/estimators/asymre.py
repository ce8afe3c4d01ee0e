"""AsymRE: REINFORCE with a group baseline shifted below the mean (asymmetric in positive and negative rewards).

Source: "Asymmetric REINFORCE for off-Policy Reinforcement Learning: Balancing positive and negative rewards"
(Arnal et al., arXiv 2506.20520), as the off-policy REINFORCE family's implementation computes it
(modelscope/Trinity-RFT ``trinity/algorithm/advantage_fn/asymre_advantage.py``, trained there with the
``opmd`` loss); docs/methods/estimators.md#asymre. With ``r`` the weighted total and a group of G >= 2 valid rollouts::

    A_i = r_i - (mean_g r + shift),     shift = -0.1

A negative ``shift`` puts the baseline V below the group's expected reward, so positive rewards weigh more than
negative ones (the paper's V < E[r] regime, where off-policy training stays stable); a group whose rewards
are all equal still gets ``-shift``. Single-rollout groups and invalid rows get 0 (the authors' code uses a
baseline of 0 there, i.e. the raw reward). Shapes: rewards ``[N, K]``, group_ids ``[N]`` -> advantages ``[N]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.estimators.opmd import group_baseline
from mmreason.rl.groups import weighted_total
from mmreason.rl.registries import register_estimator


@register_estimator("asymre", provenance="authors' code")
def asymre(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, shift: float = -0.1, missing: str = "zero"
) -> Tensor:
    """AsymRE (arXiv 2506.20520): r minus (group mean + shift); shift < 0 favours positive rewards."""
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    base, has = group_baseline(total, valid, group_ids, "mean", 1.0)
    return torch.where(has, total - (base + shift), torch.zeros_like(total))
