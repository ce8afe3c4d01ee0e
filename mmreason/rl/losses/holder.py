"""HölderPO: the clipped surrogate with each sequence's token ratios pooled by a Hölder (power) mean.

Source: "Hölder Policy Optimisation" (Le, Chen et al., arXiv 2605.12058), read from the authors' code
(YihangChen9/HolderPO ``train_zero_math_holder.py``: ``ZeroMathLearner.learning_step`` branches ``holder`` and
``holder_token``, ``_get_current_holder_p``; settings of ``scripts/qwen2.5-math-7b-holder.sh``);
docs/methods/losses.md#holder. With ``Delta_it = logp_theta_it - logp_old_it``, ``r_it = exp(Delta_it)``::

    M_p(x_i) = (1/|y_i| sum_t x_it^p)^(1/p)                (p -> 0: the geometric mean exp(mean_t log x_it))
    level "sequence":  rho_i = M_p(r_i),   l_i = -min(rho_i A_i, clip(rho_i, 1 - eps, 1 + eps) A_i)
    level "token":     C_i = M_p(min(r_it, clip(r_it))),  D_i = M_p(max(r_it, clip(r_it)))
                       l_i = -C_i A_i  if A_i > 0,   -D_i A_i  if A_i < 0

``p = 0`` is GSPO's sequence ratio, ``p = 1`` the arithmetic mean of token ratios; a larger ``p`` lets the
largest token ratios dominate (concentrated gradient), a smaller one bounds the variance. The paper anneals
``p`` over training (``p_at_step``); the authors' released run decreases it linearly from 2 to -2 over 500
steps (``linear_dec``). The per-row loss is broadcast to the row's tokens and aggregated (default: sequence
mean, as in the authors' code). Computed in the log domain: ``log M_p = (logsumexp_t(p Delta_it) - log|y_i|)/p``.
Shapes: logprobs, old_logprobs, mask ``[N, T]``; advantages ``[N]``.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_fractions, finish, prepare, ratio_from_log, sequence_advantages
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss

PSchedule = Literal["constant", "linear", "linear_dec", "sin", "cos", "quad", "quad_dec", "cubic", "cubic_dec"]
SCHEDULES = get_args(PSchedule)


def p_at_step(step: int, schedule: str, p: float, p_min: float, p_max: float, *, steps: int, power: float) -> float:
    """The Hölder exponent at ``step`` (finished steps, from 0) under ``schedule``; progress = min(1, step/steps).

    linear / linear_dec: p_min -> p_max / p_max -> p_min;  sin / cos: half-cosine S-curve up / down;
    quad / quad_dec: p_min + (p_max - p_min) progress^power / its mirror;  cubic / cubic_dec: mid +- amp (2x-1)^3.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"p_schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "constant" or p_min == p_max:
        return float(p if schedule == "constant" else p_min)
    x = min(1.0, max(0, step) / max(1, steps))
    mid, amp, span = (p_min + p_max) / 2, (p_max - p_min) / 2, p_max - p_min
    return {
        "linear": p_min + span * x,
        "linear_dec": p_max - span * x,
        "sin": mid - amp * math.cos(math.pi * x),
        "cos": mid + amp * math.cos(math.pi * x),
        "quad": p_min + span * x**power,
        "quad_dec": p_max - span * x**power,
        "cubic": mid + amp * (2 * x - 1) ** 3,
        "cubic_dec": mid - amp * (2 * x - 1) ** 3,
    }[schedule]


def log_power_mean(log_x: Tensor, mask: Tensor, p: float) -> Tensor:
    """``log M_p`` ``[N]`` of ``x = exp(log_x)`` over the masked positions of each row (0 for an empty row)."""
    count = mask.sum(-1)  # [N]
    if abs(p) < 1e-6:
        return (log_x * mask).sum(-1) / count.clamp(min=1.0)
    scaled = torch.where(mask > 0, p * log_x, torch.full_like(log_x, -math.inf))
    lse = torch.logsumexp(scaled, dim=-1)  # [N]
    out = (lse - torch.log(count.clamp(min=1.0))) / p
    return torch.where(count > 0, out, torch.zeros_like(out))


@register_policy_loss("holder", reads=("epsilon", "train_step"), provenance="authors' code")
def holder(
    x: LossInputs,
    *,
    level: Literal["sequence", "token"] = "sequence",
    p: float = 1.0,
    p_schedule: PSchedule = "linear_dec",
    p_min: float = -2.0,
    p_max: float = 2.0,
    schedule_steps: int = 500,
    p_power: float = 2.0,
) -> LossOutput:
    """HölderPO (arXiv 2605.12058): clipped surrogate on the Hölder p-mean of each sequence's token ratios.

    The ratio is clipped to ``[1 - x.epsilon, 1 + x.epsilon]`` (authors: 0.2).

    Args:
        level: ``"sequence"`` (p-mean ratio, then PPO clip) or ``"token"`` (p-mean of clipped token ratios).
        p, p_schedule, p_min, p_max, schedule_steps, p_power: the exponent at ``x.train_step``; ``p`` is used
            by ``p_schedule: constant``, the others anneal it (see ``p_at_step``).
    """
    if not 0 < x.epsilon < 1:
        raise ValueError(f"epsilon must be in (0, 1), got {x.epsilon}")
    exponent = p_at_step(x.train_step, p_schedule, p, p_min, p_max, steps=schedule_steps, power=p_power)
    return pooled_surrogate(x, level, exponent, (math.log(1 - x.epsilon), math.log(1 + x.epsilon)))


def pooled_surrogate(x: LossInputs, level: str, exponent: float, log_bounds: tuple[float, float]) -> LossOutput:
    """The HölderPO / GMPO surrogate at one exponent, with the clip range given as log-ratio bounds (lo, hi)."""
    lo, hi = log_bounds
    p = prepare(x)
    adv = sequence_advantages(p, "holder / gmpo")  # [N]
    if level == "sequence":
        ratio = ratio_from_log(log_power_mean(p.log_ratio, p.mask, exponent))  # [N]
        clipped = ratio.clamp(math.exp(lo), math.exp(hi))
        per_row = -torch.min(ratio * adv, clipped * adv)
    else:
        clamped = p.log_ratio.clamp(lo, hi)
        c = ratio_from_log(log_power_mean(torch.minimum(p.log_ratio, clamped), p.mask, exponent))
        d = ratio_from_log(log_power_mean(torch.maximum(p.log_ratio, clamped), p.mask, exponent))
        ratio = torch.where(adv > 0, c, d)
        per_row = -ratio * adv
    row = ratio[:, None]  # [N, 1]
    return finish(p, per_row[:, None], row, clipped=clip_fractions(row, p.advantages, math.exp(lo), math.exp(hi)))


@register_policy_loss("gmpo", provenance="equations")
def gmpo(x: LossInputs, *, epsilon_log: float = 0.4) -> LossOutput:
    """GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673): HölderPO's token level at p = 0.

    The objective is ``A_i (prod_t min/max(r_it, clip(r_it)))^(1/|y_i|)``: the geometric mean of the clipped
    token ratios (min for A > 0, max for A < 0), with the clip symmetric in log space, ``log r`` in
    ``[-epsilon_log, epsilon_log]`` (the paper's 0.4). One implementation with ``holder`` (``pooled_surrogate``).

    Args:
        epsilon_log: clip range of the token log-ratio (> 0).
    """
    if not epsilon_log > 0:
        raise ValueError(f"epsilon_log must be > 0, got {epsilon_log}")
    return pooled_surrogate(x, "token", 0.0, (-epsilon_log, epsilon_log))
