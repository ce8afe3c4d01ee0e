"""CISPO: a clipped, stop-gradient importance weight times a REINFORCE term, so every token keeps a gradient.

Source: MiniMax-M1 (arXiv 2506.13585, section 3.1); the bound ``epsilon_max`` of ScaleRL (arXiv 2510.13786);
TRL 1.16 ``loss_type="cispo"``; docs/algorithms.md §14.1. With ``r_it = exp(logp_theta_it - logp_old_it)``::

    w_it = sg(clip(r_it, epsilon_min, epsilon_max))      [N, T]   sg = stop-gradient (a constant)
    l_it = -w_it A_i logp_theta_it                                 d l / d logp = -w_it A_i, never 0 for A != 0

unlike the PPO clip, which zeroes the gradient of a token past the clip, CISPO only bounds how much such a
token weighs. Departures from TRL: TRL reads the upper bound from ``epsilon_high`` (so an unset ``epsilon_high``
bounds the weight at 0.2); here it is the loss's own ``epsilon_max`` (default 5.0, ScaleRL's and TRL's
recommendation) and ``algorithm.epsilon`` / ``epsilon_high`` are refused. ``epsilon_min`` is the paper's lower
bound (unset in TRL and by default here). TRL aggregates CISPO as a token mean (its ``dapo`` normaliser); the
aggregation here follows ``algorithm.loss_type`` (``dapo`` gives TRL's). ``clip_high`` counts tokens with
``r > epsilon_max`` and ``A > 0`` (TRL's ``cispo_clip_ratio``), ``clip_low`` tokens with ``r < epsilon_min``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.losses.common import aggregate_loss, kl_term, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossMetrics, LossOutput
from mmreason.rl.registries import register_policy_loss


@register_policy_loss("cispo")
def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    epsilon_max: float = 5.0,
    epsilon_min: float | None = None,
    aggregation: str = "seq_mean_token_mean",
    max_len: int | None = None,
    num_tokens: float | Tensor | None = None,
    seq_mask: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    group_ids: Tensor | None = None,
) -> LossOutput:
    """CISPO (MiniMax-M1, arXiv 2506.13585): -sg(clip(ratio, eps_min, eps_max)) * A * logp, every token keeps a gradient.

    Args:
        epsilon_max: upper bound of the importance weight (ScaleRL / TRL recommend 5.0); must be > 0.
        epsilon_min: lower bound of the weight (None: none, as TRL).
        aggregation, max_len, num_tokens, seq_mask, ref_logprobs, beta, kl_estimator: as in ``clipped``.
        group_ids: unused; accepted so every policy loss shares one call signature.
    """
    if not epsilon_max > 0:
        raise ValueError(f"epsilon_max must be > 0, got {epsilon_max}")
    if epsilon_min is not None and not 0 <= epsilon_min < epsilon_max:
        raise ValueError(f"epsilon_min must be in [0, epsilon_max), got {epsilon_min}")
    x = prepare(logprobs, old_logprobs, advantages, mask, seq_mask)
    ratio = ratio_from_log(x.log_ratio).detach()  # [N, T] the weight is a constant
    weight = ratio.clamp(min=epsilon_min, max=epsilon_max)
    per_token = -weight * x.advantages * x.logprobs  # [N, T]
    policy = aggregate_loss(aggregation, per_token, x, num_tokens, max_len)
    kl = kl_term(x, ref_logprobs, beta, kl_estimator)
    loss = policy if kl is None else policy + beta * aggregate_loss(aggregation, kl, x, num_tokens, max_len)
    with torch.no_grad():
        high = ((ratio > epsilon_max) & (x.advantages > 0)).float()
        low = torch.zeros_like(high) if epsilon_min is None else ((ratio < epsilon_min) & (x.advantages < 0)).float()
        metrics = LossMetrics(
            policy_loss=policy.detach(),
            ratio_mean=masked_mean(ratio, x.mask),
            kl=None if kl is None else masked_mean(kl, x.mask),
            clip_low=masked_mean(low, x.mask),
            clip_high=masked_mean(high, x.mask),
            clip_region=masked_mean(torch.maximum(low, high), x.mask),
        )
    return LossOutput(loss, metrics)
