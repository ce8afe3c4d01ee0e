"""SAPO: a smooth, temperature-controlled gate in place of the hard clip, asymmetric in the advantage's sign.

Source: "Soft Adaptive Policy Optimization" (Qwen, arXiv 2511.20347); TRL 1.16 ``loss_type="sapo"``;
docs/algorithms.md §14.2. With ``r_it = exp(logp_theta_it - logp_old_it)`` and ``tau = tau_pos`` for ``A > 0``,
``tau_neg`` otherwise::

    f(r) = 4 / tau * sigmoid(tau (r - 1))           [N, T]     f(1) = 2 / tau,  f'(r) = 4 sigmoid' = sech^2(tau (r-1)/2)
    l_it = -f(r_it) A_i

At r = 1 the gradient is that of the plain surrogate (f'(1) = 1); away from 1 it decays smoothly (a soft trust
region) instead of dropping to 0 at the clip. ``tau_neg > tau_pos`` (1.05 / 1.0, the paper's and TRL's defaults)
damps negative-advantage tokens faster. Same formula as TRL; TRL aggregates SAPO like ``grpo`` (sequence mean of
token means), the aggregation here follows ``algorithm.loss_type`` (``grpo``, the default, gives TRL's).
SAPO has no clip: the clip fractions report the share of tokens whose gate gradient has fallen below half
(|r - 1| > 2 asech(sqrt(1/2)) / tau = 1.7627 / tau), as a comparable "mostly gated" figure.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mmreason.rl.losses.common import aggregate_loss, kl_term, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossMetrics, LossOutput
from mmreason.rl.registries import register_policy_loss

HALF_GRADIENT = 2 * math.acosh(math.sqrt(2.0))  # tau |r - 1| beyond which sech^2(tau (r - 1) / 2) < 1/2


@register_policy_loss("sapo")
def sapo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
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
    """SAPO (Soft Adaptive PO, arXiv 2511.20347): -4/tau sigmoid(tau (ratio - 1)) * A, tau_pos for A > 0, tau_neg otherwise.

    Args:
        tau_pos, tau_neg: gate temperatures (TRL's ``sapo_temperature_pos`` / ``_neg``); both > 0.
        importance_sampling_level: ``token`` or ``sequence`` (the GSPO ratio, as TRL allows).
        aggregation, max_len, num_tokens, seq_mask, ref_logprobs, beta, kl_estimator: as in ``clipped``.
        group_ids: unused; accepted so every policy loss shares one call signature.
    """
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(f"importance_sampling_level must be token or sequence, got {importance_sampling_level!r}")
    x = prepare(logprobs, old_logprobs, advantages, mask, seq_mask)
    if importance_sampling_level == "token":
        log_w = x.log_ratio
    else:
        log_w = (x.log_ratio * x.mask).sum(-1, keepdim=True) / x.mask.sum(-1, keepdim=True).clamp(min=1.0)
    ratio = ratio_from_log(log_w)
    tau = torch.where(x.advantages > 0, torch.full_like(x.advantages, tau_pos), torch.full_like(x.advantages, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    per_token = -gate * x.advantages
    policy = aggregate_loss(aggregation, per_token, x, num_tokens, max_len)
    kl = kl_term(x, ref_logprobs, beta, kl_estimator)
    loss = policy if kl is None else policy + beta * aggregate_loss(aggregation, kl, x, num_tokens, max_len)
    with torch.no_grad():
        gated = (tau * (ratio - 1)).abs() > HALF_GRADIENT
        low = (gated & (ratio < 1) & (x.advantages < 0)).float()
        high = (gated & (ratio > 1) & (x.advantages > 0)).float()
        metrics = LossMetrics(
            policy_loss=policy.detach(),
            ratio_mean=masked_mean(ratio, x.mask),
            kl=None if kl is None else masked_mean(kl, x.mask),
            clip_low=masked_mean(low, x.mask),
            clip_high=masked_mean(high, x.mask),
            clip_region=masked_mean(torch.maximum(low, high), x.mask),
        )
    return LossOutput(loss, metrics)
