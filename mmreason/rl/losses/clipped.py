"""The PPO/GRPO clipped surrogate with clip-higher, dual-clip and sequence-level importance sampling.

Sources: PPO (Schulman et al., 2017); GRPO (arXiv 2402.03300); clip-higher from DAPO (arXiv 2503.14476);
sequence-level ratio from GSPO (arXiv 2507.18071) as TRL 1.16 implements it; docs/methods/losses.md#clipped.

    rho_it = exp(logp_theta - logp_old)                                  importance_sampling_level="token"
    rho_i  = exp(1/|y_i| sum_t (logp_theta - logp_old))                   importance_sampling_level="sequence"
    l_it   = -min(rho A_i, clip(rho, 1 - epsilon, 1 + epsilon_high) A_i) + beta KL_it

then aggregated over tokens by the named aggregation. ``delta`` (TRL's two-sided clip) caps the unclipped
ratio at ``delta``, bounding the loss of negative-advantage tokens whose ratio has run away. The GSPO ratio
keeps gradients to every token (no stop-gradient), as TRL does. Clip fractions are counted on the raw
ratio (TRL counts them after the ``delta`` cap, so with ``delta`` set its ``clip_high`` reads lower).
Computed in fp32 whatever the input dtype; log-ratios are clamped to [-20, 20] before ``exp`` (verl does
the same; TRL does not).
"""

from __future__ import annotations

import torch

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import (
    clip_fractions,
    clip_range,
    finish,
    importance_log_ratio,
    prepare,
    ratio_from_log,
)
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


@register_policy_loss("clipped", reads=("epsilon", "epsilon_high", "importance_sampling_level"), provenance="equations")
def clipped(x: LossInputs, *, delta: float | None = None) -> LossOutput:
    """Clipped surrogate (PPO/GRPO) with clip-higher and token- or sequence-level (GSPO) ratios.

    Reads ``x.epsilon`` / ``x.epsilon_high`` (DAPO clip-higher: 0.2 / 0.28) and ``x.importance_sampling_level``.

    Args:
        delta: dual-clip cap of the unclipped ratio (None: none).
    """
    p = prepare(x)
    ratio = ratio_from_log(importance_log_ratio(p, x.importance_sampling_level))  # [N, T] or [N, 1]
    low, high = clip_range(x)
    unclipped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.min(unclipped * p.advantages, torch.clamp(ratio, low, high) * p.advantages)
    return finish(p, per_token, ratio, clipped=clip_fractions(ratio, p.advantages, low, high))
