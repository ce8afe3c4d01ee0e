"""PlanPO: among a group's successful multi-turn episodes, fewer turns and shorter turns get larger advantages.

Source: "Group Planning-Aware Policy Optimization for Multi-Turn Agentic LLMs" (no arXiv id matched the title); our
reading of its abstract, docs/methods/estimators.md#planpo. With ``A_i`` the GRPO advantage of the weighted reward,
``S_g`` the successes of group g (total reward >= ``success_threshold``), ``n_i`` the assistant turns and ``L_i`` the
mean tokens per turn (the trainer's columns ``num_turns`` / ``mean_turn_length``)::

    z(x)_i = (mean_{S_g} x - x_i) / (std_{S_g} x + eps)                 (0 when S_g has < 2 members or x is constant)
    A'_i   = A_i + turn_weight * z(n)_i + length_weight * z(L)_i        i in S_g
    A'_i   = A_i                                                        i not in S_g (failures: plain GRPO)

Both terms are relative within the group and only among its successes (they sum to 0 over S_g), so a failure is
never preferred for being short and the signal does not collapse into length minimisation. What is the paper's:
the coarse trajectory-level signal from the number of turns, the fine turn-level signal from the response
lengths, both relative within the group and only among successful trajectories. What is ours: the z-score as
the shaping function, the weights (0.2 / 0.1, below the unit scale of the GRPO advantage), the success
threshold, and the plain GRPO advantage for failures. Groups of any size are accepted.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.estimators.grpo import grpo_core
from mmreason.rl.groups import group_index, group_stats, weighted_total
from mmreason.rl.registries import register_estimator


def success_z(values: Tensor, success: Tensor, index: Tensor, num_groups: int, eps: float) -> Tensor:
    """``[N]`` (mean - x) / (std + eps) over each group's successes (a smaller x scores higher); 0 elsewhere."""
    stats = group_stats(values[:, None], success[:, None], index, num_groups)
    mean, std, const = stats.mean[index, 0], stats.std[index, 0], stats.constant[index, 0]
    z = (mean - values) / (std + eps)
    return torch.where(success & ~const, z, torch.zeros_like(z))


@register_estimator("planpo", needs=("num_turns", "mean_turn_length"), provenance="abstract only")
def planpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    num_turns: Tensor,
    mean_turn_length: Tensor,
    success_threshold: float = 1.0,
    turn_weight: float = 0.2,
    length_weight: float = 0.1,
    scale_rewards: str = "group",
    eps: float = 1e-6,
    missing: str = "zero",
) -> Tensor:
    """PlanPO (Group Planning-Aware PO, our reading): GRPO plus fewer-turns / shorter-turns bonuses among a group's successes.

    Args:
        num_turns, mean_turn_length: ``[N]`` assistant turns and mean tokens per turn (the trainer's columns).
        success_threshold: a trajectory with total reward >= this is a success.
        turn_weight, length_weight: weights of the turn-count and per-turn-length terms (>= 0).
        scale_rewards, eps, missing: as in ``grpo``.
    """
    if turn_weight < 0 or length_weight < 0:
        raise ValueError(f"turn_weight and length_weight must be >= 0, got {turn_weight}, {length_weight}")
    total, valid = weighted_total(rewards, weights, missing)
    base = grpo_core(total, valid, group_ids, scale_rewards, eps)
    index, m = group_index(group_ids)
    success = valid & (total >= success_threshold)
    bonus = turn_weight * success_z(num_turns.float(), success, index, m, eps) + length_weight * success_z(
        mean_turn_length.float(), success, index, m, eps
    )
    return base + bonus
