"""Dr. GRPO advantage: the group-centred reward, without the std division.

Source: "Understanding R1-Zero-Like Training: A Critical Perspective" (Liu et al., 2025);
docs/methods/estimators.md#dr_grpo.

    A_i = r_i - mean_g(r)

Dividing by the group std up-weights questions that are almost always right or wrong (a difficulty bias);
Dr. GRPO drops it. Pair it with the ``seq_mean_token_sum_norm`` aggregation, which removes the length bias.
"""

from __future__ import annotations

from torch import Tensor

from mmreason.rl.estimators.grpo import grpo_core
from mmreason.rl.groups import weighted_total
from mmreason.rl.registries import register_estimator


@register_estimator("dr_grpo", provenance="equations")
def dr_grpo(rewards: Tensor, group_ids: Tensor, weights: Tensor, *, missing: str = "zero") -> Tensor:
    """Dr. GRPO: r - group mean, no std division (removes the question-difficulty bias)."""
    total, valid = weighted_total(rewards, weights, missing)
    return grpo_core(total, valid, group_ids, "none", 0.0)
