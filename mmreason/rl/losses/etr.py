"""ETR, elastic trust regions: clip bounds that widen with the advantage magnitude and the group's reward variance.

Source: "Outcome-Guided Elastic Trust Regions for Policy Optimization" (Zhang et al., arXiv 2601.03723; no code was
found); our reading of its abstract, docs/methods/losses.md#etr. With the clipped surrogate of ``clipped`` (token
ratios ``r_it``, ``[N, T]``; advantages ``A_i``, ``[N]``)::

    micro:  m_i = 1 + micro_scale * tanh(|A_i|)                                   [N]
    macro:  v_g = Var_g(R) / ((R_max - R_min)^2 / 4)  in [0, 1]                   [N] (1 at pass rate 0.5)
            M_i = 1 + macro_scale * v_g(i)
    eps_i  = min(max_epsilon, epsilon * m_i * M_i),  eps_high_i likewise from epsilon_high
    l_it   = -min(r_it A_i, clip(r_it, 1 - eps_i, 1 + eps_high_i) A_i)              (macro_target "epsilon")
    l_it   = -M_i min(r_it A_i, clip(r_it, 1 - eps_i', 1 + eps_high_i') A_i)        (macro_target "weight",
                                                                                   eps' from m_i alone)

What is the paper's: the micro level (the clip range of a sample widens with |A|), the macro level (groups with
a larger reward variance, pass rate near 0.5, get a larger update budget), the motivation (static clipping
leads to entropy collapse). What is ours: the ``tanh`` map of |A| and its scale, the variance normalisation by
the batch's reward range (Popoviciu's bound: 0/1 rewards give v = 4 p (1 - p)), the scales' defaults, the
``max_epsilon`` cap, and whether the macro part widens the clip or weights the loss (``macro_target``). The
group variance is that of the call's rows (the trainer's mini-batches hold whole groups unless a group is larger
than ``mini_batch_size``); ``rewards`` are the rows' total rewards, passed by the trainer.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import (
    clip_fractions,
    clipped_term,
    finish,
    prepare,
    ratio_from_log,
    row_group_mean,
    sequence_advantages,
)
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def group_variance_share(rewards: Tensor, group_ids: Tensor | None) -> Tensor:
    """``[N]`` each row's group reward variance over its bound (R_max - R_min)^2 / 4 of the call, in [0, 1]."""
    r = rewards.float()
    span = r.max() - r.min() if r.numel() else r.new_zeros(())
    if r.numel() == 0 or span <= 0:
        return torch.zeros_like(r)
    mean = row_group_mean(r, group_ids)
    var = row_group_mean((r - mean) ** 2, group_ids)
    return (var / (span**2 / 4)).clamp(0.0, 1.0)


def elastic_epsilons(
    advantages: Tensor,
    rewards: Tensor | None,
    group_ids: Tensor | None,
    *,
    epsilon: float,
    epsilon_high: float,
    micro_scale: float,
    macro_scale: float,
    macro_target: str,
    max_epsilon: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(eps_low [N], eps_high [N], loss weight [N])`` of ETR for sequence advantages ``[N]``."""
    micro = 1 + micro_scale * torch.tanh(advantages.abs())
    v = torch.zeros_like(advantages) if rewards is None else group_variance_share(rewards, group_ids)
    macro = 1 + macro_scale * v
    widen = micro * macro if macro_target == "epsilon" else micro
    weight = macro if macro_target == "weight" else torch.ones_like(macro)
    return (epsilon * widen).clamp(max=max_epsilon), (epsilon_high * widen).clamp(max=max_epsilon), weight


@register_policy_loss("etr", reads=("epsilon", "epsilon_high", "rewards"), provenance="abstract only")
def etr(
    x: LossInputs,
    *,
    micro_scale: float = 0.5,
    macro_scale: float = 0.5,
    macro_target: Literal["epsilon", "weight"] = "epsilon",
    max_epsilon: float = 0.5,
) -> LossOutput:
    """ETR (Elastic Trust Regions, arXiv 2601.03723, reading): the clip range widens with |A| and the group's reward variance.

    Args:
        micro_scale: how far |A| widens the range (``1 + micro_scale tanh|A|``); 0 turns the micro level off.
        macro_scale: how far the group variance of ``x.rewards`` widens the range or weights the loss; 0 (or no
            rewards) turns it off.
        macro_target: ``epsilon`` (widen the clip) or ``weight`` (scale the row's loss).
        max_epsilon: cap on either clip range.
    """
    if micro_scale < 0 or macro_scale < 0 or not max_epsilon > 0:
        raise ValueError("micro_scale and macro_scale must be >= 0 and max_epsilon > 0")
    p = prepare(x)
    eps_low, eps_high, weight = elastic_epsilons(
        sequence_advantages(p, "etr"),
        x.rewards,
        x.group_ids,
        epsilon=x.epsilon,
        epsilon_high=x.epsilon if x.epsilon_high is None else x.epsilon_high,
        micro_scale=micro_scale,
        macro_scale=macro_scale,
        macro_target=macro_target,
        max_epsilon=max_epsilon,
    )
    ratio = ratio_from_log(p.log_ratio)  # [N, T]
    lo, hi = (1 - eps_low)[:, None], (1 + eps_high)[:, None]
    per_token = weight[:, None] * clipped_term(ratio, p.advantages, lo, hi)
    return finish(p, per_token, ratio, clipped=clip_fractions(ratio, p.advantages, lo, hi))
