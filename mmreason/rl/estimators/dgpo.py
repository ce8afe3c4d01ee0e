"""DGPO (Harder Is Better): difficulty-balanced advantages with difficulty-aware question weights.

Source: "Harder Is Better: Boosting Mathematical Reasoning via Difficulty-Aware GRPO and Multi-Aspect Question
Reformulation" (Dai et al., ICLR 2026, arXiv 2601.20614); the formulas are read from the authors' code
(AMAP-ML/MathForge, ``trl-0.20.0/trl/trainer/grpo_trainer.py::_generate_and_score_completions``, the
``enable_dgpo`` / ``enable_dgpo_dqw`` branches); docs/methods/estimators.md#dgpo.

GRPO's std normalisation gives a group a total update ``sum_i |A_i|`` that is smaller for hard questions
(one success in G) than for medium ones. DGPO fixes the total (DGAE) and then tilts it towards hard questions
(DQW). With ``r`` the weighted total, per group of G valid rollouts::

    DGAE:  A_i = (r_i - mean_g r) / (MAD_g + eps),        MAD_g = 1/G sum_j |r_j - mean_g r|
           (so sum_i |A_i| = G in every group with any spread)
    DQW:   lambda_q = M * softmax_q(-d_q / T)   over the M groups of the batch with spread,  T = 2
           d_q = mean_g of the difficulty signal (the group's accuracy: lower = harder)
    A_i'  = lambda_q A_i

Groups whose rewards are all equal, or with one rollout, get exactly 0 and take no part in the softmax.

Shapes: rewards ``[N, K]``, group_ids ``[N]`` -> advantages ``[N]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, group_stats, weighted_total
from mmreason.rl.registries import register_estimator


def difficulty_weights(difficulty: Tensor, live: Tensor, temperature: float) -> Tensor:
    """DQW ``[M]``: ``M_live * softmax(-difficulty / T)`` over the live groups, 1 elsewhere.

    ``difficulty [M]`` is each group's mean accuracy (higher = easier); ``live [M]`` marks groups with a
    non-zero spread. The weights of the live groups sum to their number, so the batch's total update is kept.
    """
    weights = torch.ones_like(difficulty)
    count = int(live.sum())
    if count:
        weights[live] = count * torch.softmax(-difficulty[live] / temperature, dim=0)
    return weights


@register_estimator("dgpo", provenance="authors' code")
def dgpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    dqw: bool = True,
    temperature: float = 2.0,
    difficulty_component: int | None = None,
    eps: float = 1e-6,
    missing: str = "zero",
) -> Tensor:
    """DGPO (Harder Is Better, arXiv 2601.20614): MAD-normalised advantages x softmax(-accuracy/T) weights.

    Args:
        dqw: apply the difficulty-aware question weights (False = DGAE alone).
        temperature: DQW softmax temperature ``T`` (the authors' default 2.0); must be > 0.
        difficulty_component: reward column whose group mean is the difficulty ``d_q`` (the authors use
            their first reward, the accuracy); None = the weighted total.
        eps: added to the MAD.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    index, num_groups = group_index(group_ids)
    stats = group_stats(total[:, None], valid[:, None], index, num_groups)
    live = ~stats.constant[:, 0]  # [M] groups with any spread (two or more valid rows, not all equal)
    mean = stats.mean[:, 0]
    keep = valid & live[index]
    diff = torch.where(keep, total - mean[index], torch.zeros_like(total))  # [N]
    mad = total.new_zeros(num_groups).index_add(0, index, diff.abs()) / stats.count[:, 0].clamp(min=1)
    adv = diff / (mad[index] + eps)
    if not dqw:
        return adv
    if difficulty_component is None:
        difficulty = mean
    else:
        if not -rewards.shape[1] <= difficulty_component < rewards.shape[1]:
            raise ValueError(
                f"difficulty_component {difficulty_component} is not a reward column (there are {rewards.shape[1]})"
            )
        column = rewards[:, difficulty_component]
        present = ~torch.isnan(column)
        difficulty = group_stats(column[:, None], present[:, None], index, num_groups).mean[:, 0]
    return adv * difficulty_weights(difficulty, live, temperature)[index]
