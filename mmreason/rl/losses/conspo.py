"""ConSPO: InfoNCE over length-normalised sequence log-probs, each verified positive against its group's negatives.

Source: "Revisiting RLVR from a Contrastive Perspective" (Zhang et al., arXiv 2605.12969); our reading of its
abstract, docs/methods/losses.md#conspo. With ``s_i = 1/|y_i| sum_t logp_theta_it`` (``[N]``, with gradient), the
positives P_g (A_i > 0) and negatives N_g (A_i < 0) of group g, and the margin ``m`` at the step::

    per_positive:  l_i = -log( e^{(s_i - m)/tau} / (e^{(s_i - m)/tau} + sum_{j in N_g} e^{s_j/tau}) ),  i in P_g
                   loss = mean over the positives of groups that have a negative
    pooled:        l_g = -log( sum_{i in P_g} e^{(s_i - m)/tau} / (sum_{P_g} e^{(s_i - m)/tau} + sum_{N_g} e^{s_j/tau}) )
                   loss = mean over the groups with both
    m(step) = margin * min(1, train_step / margin_warmup_steps)   (margin_schedule "linear"; "constant": margin)

The softmax puts more weight on a positive that is poorly separated (its gradient is ``(1 - p_i)/tau``) and on a
negative that scores high (its share ``p_j``). What is the paper's: length-normalised sequence log-probs as scores,
an InfoNCE-style objective of each verified positive against the negatives of its group, more weight on poorly
separated positives and high-scoring negatives, and a margin scheduled over training. What is ours: the
temperature, the margin's schedule (a linear ramp) and size, positives and negatives read from the sign of the
estimator's advantage (0 = neither), the ``per_positive`` default against the ``pooled`` variant, and the
normalisation (a mean over positives / groups; the token aggregation does not apply to a sequence objective).
There is no importance ratio: the objective is on-policy, ``old_logprobs`` only feed the logged ratio.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from mmreason.rl.groups import group_index
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import finish, prepare, ratio_from_log, sequence_advantages
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss

MarginSchedule = Literal["linear", "constant"]
SCHEDULES = get_args(MarginSchedule)


def margin_at(step: int, margin: float, schedule: str, warmup_steps: int) -> float:
    """The margin at ``step`` finished steps: a linear ramp to ``margin`` over ``warmup_steps``, or constant."""
    if schedule not in SCHEDULES:
        raise ValueError(f"margin_schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "constant":
        return float(margin)
    return float(margin) * min(1.0, max(0, step) / max(1, warmup_steps))


def conspo_objective(
    scores: Tensor, advantages: Tensor, group_ids: Tensor | None, *, tau: float, margin: float, variant: str
) -> Tensor:
    """The ConSPO loss (0-dim) from scores ``[N]`` and sequence advantages ``[N]``; 0 when no group has both."""
    ids = torch.zeros_like(advantages, dtype=torch.long) if group_ids is None else group_ids.to(scores.device)
    index, m = group_index(ids)
    pos, neg = advantages > 0, advantages < 0
    z_pos = (scores - margin) / tau
    z_neg = scores / tau
    top = torch.full((m,), -torch.inf, device=scores.device).scatter_reduce(
        0,
        index,
        torch.where(pos | neg, torch.where(pos, z_pos, z_neg), torch.full_like(z_neg, -torch.inf)).detach(),
        "amax",
    )
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    e_pos = torch.where(pos, torch.exp(z_pos - top[index]), torch.zeros_like(z_pos))
    e_neg = torch.where(neg, torch.exp(z_neg - top[index]), torch.zeros_like(z_neg))
    neg_sum = scores.new_zeros(m).index_add(0, index, e_neg)  # [M]
    has_neg = scores.new_zeros(m).index_add(0, index, neg.float()) > 0
    has_pos = scores.new_zeros(m).index_add(0, index, pos.float()) > 0
    if variant == "per_positive":
        take = pos & has_neg[index]
        if not take.any():
            return scores.sum() * 0.0
        log_p = torch.log(e_pos + 1e-30) - torch.log(e_pos + neg_sum[index])
        return -(log_p[take]).mean()
    pos_sum = scores.new_zeros(m).index_add(0, index, e_pos)
    take = has_pos & has_neg
    if not take.any():
        return scores.sum() * 0.0
    log_p = torch.log(pos_sum + 1e-30) - torch.log(pos_sum + neg_sum)
    return -(log_p[take]).mean()


@register_policy_loss("conspo", reads=("train_step",), provenance="abstract only")
def conspo(
    x: LossInputs,
    *,
    tau: float = 0.1,
    margin: float = 0.1,
    margin_schedule: MarginSchedule = "linear",
    margin_warmup_steps: int = 200,
    variant: Literal["per_positive", "pooled"] = "per_positive",
) -> LossOutput:
    """ConSPO (contrastive RLVR, arXiv 2605.12969, reading): InfoNCE of each positive's mean log-prob against its group's negatives.

    Args:
        tau: temperature of the softmax (> 0).
        margin, margin_schedule, margin_warmup_steps: the margin subtracted from positive scores and its schedule
            (at ``x.train_step``).
        variant: ``per_positive`` (one InfoNCE term per positive) or ``pooled`` (one per group).
    """
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    m = margin_at(x.train_step, margin, margin_schedule, margin_warmup_steps)
    p = prepare(x)
    adv = sequence_advantages(p, "conspo")
    rows = p.mask.sum(-1) > 0  # rows with tokens (seq_mask already applied)
    scores = (p.logprobs * p.mask).sum(-1) / p.mask.sum(-1).clamp(min=1.0)  # [N]
    adv = torch.where(rows, adv, torch.zeros_like(scores))
    policy = conspo_objective(scores, adv, x.group_ids, tau=tau, margin=m, variant=variant)
    return finish(p, policy, ratio_from_log(p.log_ratio))
