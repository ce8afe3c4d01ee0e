"""SAPO: a smooth, temperature-controlled gate in place of the hard clip, asymmetric in the advantage's sign.

Source: "Soft Adaptive Policy Optimization" (Qwen, arXiv 2511.20347); TRL 1.16 ``loss_type="sapo"``;
docs/methods/losses.md#sapo. With ``r_it = exp(logp_theta_it - logp_old_it)`` and ``tau = tau_pos`` for ``A > 0``,
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

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_fractions, finish, importance_log_ratio, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss

HALF_GRADIENT = 2 * math.acosh(math.sqrt(2.0))  # tau |r - 1| beyond which sech^2(tau (r - 1) / 2) < 1/2


@register_policy_loss("sapo", reads=("importance_sampling_level",), provenance="equations")
def sapo(x: LossInputs, *, tau_pos: float = 1.0, tau_neg: float = 1.05) -> LossOutput:
    """SAPO (Soft Adaptive PO, arXiv 2511.20347): -4/tau sigmoid(tau (ratio - 1)) * A, tau_pos for A > 0, tau_neg otherwise.

    Args:
        tau_pos, tau_neg: gate temperatures (TRL's ``sapo_temperature_pos`` / ``_neg``); both > 0.
        ``x.importance_sampling_level``: ``token`` or ``sequence`` (the GSPO ratio, as TRL allows).
    """
    if not (tau_pos > 0 and tau_neg > 0):
        raise ValueError(f"tau_pos and tau_neg must be > 0, got {tau_pos}, {tau_neg}")
    p = prepare(x)
    ratio = ratio_from_log(importance_log_ratio(p, x.importance_sampling_level))
    adv = p.advantages
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1)) * 4 / tau
    gated = (tau * (ratio - 1)).abs() > HALF_GRADIENT
    low, high = clip_fractions(ratio, adv, 1.0, 1.0)
    return finish(p, -gate * adv, ratio, clipped=(gated & low, gated & high))
