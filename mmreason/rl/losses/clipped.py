"""The PPO/GRPO clipped surrogate with clip-higher, dual-clip and sequence-level importance sampling.

Sources: PPO (Schulman et al., 2017); GRPO (arXiv 2402.03300); clip-higher from DAPO (arXiv 2503.14476);
sequence-level ratio from GSPO (arXiv 2507.18071) as TRL 1.16 implements it; docs/algorithms.md §0.

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
from torch import Tensor

from mmreason.rl.losses.common import aggregate_loss, kl_term, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossMetrics, LossOutput
from mmreason.rl.registries import register_policy_loss

IS_LEVELS = ("token", "sequence")


@register_policy_loss("clipped")
def clipped_surrogate(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
    aggregation: str = "seq_mean_token_mean",
    max_len: int | None = None,
    num_tokens: float | Tensor | None = None,
    seq_mask: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    group_ids: Tensor | None = None,
) -> LossOutput:
    """Clipped surrogate (PPO/GRPO) with clip-higher and token- or sequence-level (GSPO) ratios.

    Args:
        logprobs, old_logprobs: ``[N, T]`` per-token log-probs under the current / behaviour policy.
        advantages: ``[N]`` (broadcast to tokens) or ``[N, T]``.
        mask: ``[N, T]``, 1 on trained response tokens.
        epsilon, epsilon_high: lower / upper clip range; ``epsilon_high`` defaults to ``epsilon``
            (DAPO clip-higher: 0.2 / 0.28).
        aggregation, max_len, num_tokens: see ``mmreason.rl.losses.aggregation``.
        seq_mask: ``[N]`` bool; False rows leave the loss and its normalisation (MC-GRPO pivot).
        ref_logprobs, beta, kl_estimator: optional per-token KL to a reference, added before aggregation.
        group_ids: unused; accepted so every policy loss shares one call signature.
    """
    if importance_sampling_level not in IS_LEVELS:
        raise ValueError(f"importance_sampling_level must be one of {IS_LEVELS}, got {importance_sampling_level!r}")
    eps_high = epsilon if epsilon_high is None else epsilon_high
    x = prepare(logprobs, old_logprobs, advantages, mask, seq_mask)
    if importance_sampling_level == "token":
        log_w = x.log_ratio  # [N, T]
    else:
        length = x.mask.sum(-1, keepdim=True).clamp(min=1.0)  # [N, 1]
        log_w = (x.log_ratio * x.mask).sum(-1, keepdim=True) / length  # [N, 1] mean token log-ratio
    ratio = ratio_from_log(log_w)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    unclipped = ratio if delta is None else torch.clamp(ratio, max=delta)
    per_token = -torch.min(unclipped * x.advantages, clipped * x.advantages)  # [N, T] or [N, 1]
    policy = aggregate_loss(aggregation, per_token, x, num_tokens, max_len)
    kl = kl_term(x, ref_logprobs, beta, kl_estimator)
    loss = policy if kl is None else policy + beta * aggregate_loss(aggregation, kl, x, num_tokens, max_len)
    with torch.no_grad():
        low = ((ratio < 1 - epsilon) & (x.advantages < 0)).float()
        high = ((ratio > 1 + eps_high) & (x.advantages > 0)).float()
        metrics = LossMetrics(
            policy_loss=policy.detach(),
            ratio_mean=masked_mean(ratio, x.mask),
            kl=None if kl is None else masked_mean(kl, x.mask),
            clip_low=masked_mean(low, x.mask),
            clip_high=masked_mean(high, x.mask),
            clip_region=masked_mean(torch.maximum(low, high), x.mask),
        )
    return LossOutput(loss, metrics)
