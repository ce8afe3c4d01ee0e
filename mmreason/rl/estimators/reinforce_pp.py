"""REINFORCE++ and REINFORCE++-baseline: advantages normalised over the whole batch, not per group.

Source: Hu et al., "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global Advantage
Normalization" (arXiv 2501.03262); verl ``compute_reinforce_plus_plus_outcome_advantage`` and
``compute_reinforce_plus_plus_baseline_outcome_advantage``; OpenRLHF ``advantage_estimator``;
docs/methods/estimators.md#reinforce_pp. With ``r_i`` the weighted reward and the batch's valid rows B::

    reinforce_pp:           A_i = (r_i - mean_B(r)) / (std_B(r) + eps)
    reinforce_pp_baseline:  d_i = r_i - mean_g(r)  (group mean),   A_i = (d_i - mean_B(d)) / (std_B(d) + eps)

Departure from verl: verl whitens the per-token returns (a token-weighted mean and std over every response
token, with ``gamma = 1`` the return of every token is the outcome reward); here each trajectory counts once
(sequence-weighted). The KL-in-reward term of the paper is the trainer's ``beta`` (KL in the loss) here. A
batch whose rewards are all equal gets 0. Groups of any size (including 1) are accepted; the baseline variant
gives a single-rollout group d = 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.estimators.grpo import grpo_core
from mmreason.rl.groups import weighted_total
from mmreason.rl.registries import register_estimator


def batch_whiten(x: Tensor, valid: Tensor, eps: float) -> Tensor:
    """``(x - mean) / (std + eps)`` over the valid rows (population std); 0 where invalid or the batch is constant."""
    if not valid.any():
        return torch.zeros_like(x)
    v = x[valid]
    if bool((v == v[0]).all()):
        return torch.zeros_like(x)
    out = (x - v.mean()) / (v.std(unbiased=False) + eps)
    return torch.where(valid, out, torch.zeros_like(out))


@register_estimator("reinforce_pp", provenance="equations")
def reinforce_pp(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6, missing: str = "zero"
) -> Tensor:
    """REINFORCE++ (arXiv 2501.03262): the reward z-scored over the whole batch (no group baseline)."""
    total, valid = weighted_total(rewards, weights, missing)
    return batch_whiten(total, valid, eps)


@register_estimator("reinforce_pp_baseline", provenance="equations")
def reinforce_pp_baseline(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, eps: float = 1e-6, missing: str = "zero"
) -> Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262): reward minus its group mean, then z-scored over the batch."""
    total, valid = weighted_total(rewards, weights, missing)
    centred = grpo_core(total, valid, group_ids, "none", 0.0)  # r - group mean, 0 where invalid
    return batch_whiten(centred, valid, eps)
