"""CISPO: a clipped, stop-gradient importance weight times a REINFORCE term, so every token keeps a gradient.

Source: MiniMax-M1 (arXiv 2506.13585, section 3.1); the bound ``epsilon_max`` of ScaleRL (arXiv 2510.13786);
TRL 1.16 ``loss_type="cispo"``; docs/methods/losses.md#cispo. With ``r_it = exp(logp_theta_it - logp_old_it)``::

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

import math

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_fractions, finish, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


@register_policy_loss("cispo", provenance="equations")
def cispo(x: LossInputs, *, epsilon_max: float = 5.0, epsilon_min: float | None = None) -> LossOutput:
    """CISPO (MiniMax-M1, arXiv 2506.13585): -sg(clip(ratio, eps_min, eps_max)) * A * logp, every token keeps a gradient.

    Args:
        epsilon_max: upper bound of the importance weight (ScaleRL / TRL recommend 5.0); must be > 0.
        epsilon_min: lower bound of the weight (None: none, as TRL).
    """
    if not epsilon_max > 0:
        raise ValueError(f"epsilon_max must be > 0, got {epsilon_max}")
    if epsilon_min is not None and not 0 <= epsilon_min < epsilon_max:
        raise ValueError(f"epsilon_min must be in [0, epsilon_max), got {epsilon_min}")
    p = prepare(x)
    ratio = ratio_from_log(p.log_ratio).detach()  # [N, T] the weight is a constant
    weight = ratio.clamp(min=epsilon_min, max=epsilon_max)
    low = -math.inf if epsilon_min is None else epsilon_min
    return finish(
        p, -weight * p.advantages * p.logprobs, ratio, clipped=clip_fractions(ratio, p.advantages, low, epsilon_max)
    )
