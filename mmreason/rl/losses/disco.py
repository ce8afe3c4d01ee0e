"""The DisCO loss: a discriminative objective (positives' scores up, negatives' down) under a KL constraint.

Source: "DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization" (Li et al.,
arXiv 2505.12366), read from the authors' code (Optimization-AI/DisCO,
``verl/verl/trainer/ppo/core_algos.py``: ``compute_policy_loss_disco_logL`` / ``_Lratio`` and the DisCO-b
variants ``compute_policy_loss_discob_*``); docs/methods/losses.md#disco.

Labels come in the advantage slot from the ``disco`` estimator (+1 positive, -1 negative, 0 = not used). With
response tokens ``t`` of rollout ``i`` and ``|y_i|`` its length::

    s_i   = 1/|y_i| sum_t logp_it                                  score "logL"   (tau = 10 in the paper runs)
          = 1/|y_i| sum_t exp(logp_it - logp_old_it)               score "Lratio" (tau = 1)
    J_q   = mean_{i in pos(q)} s_i - tau log(mean_{j in neg(q)} exp(s_j / tau))      negatives "lse" (DisCO)
          = mean_{i in pos(q)} s_i - mean_{j in neg(q)} s_j                          negatives "mean" (DisCO-b)
    KL    = token mean of (rho - 1 - log rho),  rho = exp(logp - logp_old)          (k3 to the behaviour policy)
    loss  = -1/Q sum_q J_q  +  max(0, beta_c (KL - delta)) KL       (the max(...) factor is not differentiated)

over the Q groups of the call (those without both labels contribute 0 but count in Q, as in the authors' code).
The log-mean-exp over negatives is a soft maximum: the highest-scoring wrong answers are pushed down hardest
(a DRO view of AUC maximisation). No clip: the squared-hinge penalty keeps the KL to the behaviour policy near
``delta``. Shapes: logprobs, old_logprobs, mask ``[N, T]``; labels ``[N]``; group_ids ``[N]``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, grouped_log_mean_exp
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import finish, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def group_objective(
    scores: Tensor, labels: Tensor, index: Tensor, num_groups: int, tau: float, *, negatives: str
) -> Tensor:
    """``J_q [M]`` from sequence scores ``[N]`` and labels ``[N]``; 0 for a group without both labels."""
    pos, neg = labels > 0, labels < 0
    n_pos = scores.new_zeros(num_groups).index_add(0, index, pos.to(scores.dtype))
    n_neg = scores.new_zeros(num_groups).index_add(0, index, neg.to(scores.dtype))
    pos_mean = scores.new_zeros(num_groups).index_add(0, index, torch.where(pos, scores, 0.0)) / n_pos.clamp(min=1)
    if negatives == "mean":
        neg_term = scores.new_zeros(num_groups).index_add(0, index, torch.where(neg, scores, 0.0))
        neg_term = neg_term / n_neg.clamp(min=1)
    else:
        neg_term = grouped_log_mean_exp(scores, neg, index, num_groups, tau)
    both = (n_pos > 0) & (n_neg > 0)
    return torch.where(both, pos_mean - neg_term, torch.zeros_like(pos_mean))


@register_policy_loss("disco", needs=("group_ids",), provenance="authors' code")
def disco(
    x: LossInputs,
    *,
    score: Literal["logL", "Lratio"] = "logL",
    tau: float = 10.0,
    negatives: Literal["lse", "mean"] = "lse",
    delta: float = 1e-4,
    constraint_beta: float = 1e3,
) -> LossOutput:
    """DisCO (arXiv 2505.12366): -(mean positive score - tau logmeanexp negative scores) + KL hinge penalty.

    ``x.advantages`` are the ``[N]`` labels of the ``disco`` estimator (+1, -1, 0); False rows of ``seq_mask``
    leave the objective and every group statistic. The KL to a reference (``beta``) is not part of DisCO.

    Args:
        score: ``"logL"`` mean token log-prob or ``"Lratio"`` mean token ratio to the behaviour policy.
        tau: temperature of the soft maximum over negatives (> 0; the authors use 10 for logL, 1 for Lratio).
        negatives: ``"lse"`` (DisCO) or ``"mean"`` (DisCO-b).
        delta, constraint_beta: KL budget and penalty weight of the constraint (authors: 1e-4, 1e3).
    """
    if tau <= 0 or delta < 0 or constraint_beta < 0:
        raise ValueError(f"need tau > 0, delta >= 0, constraint_beta >= 0; got {tau}, {delta}, {constraint_beta}")
    if x.advantages.dim() != 1:
        raise ValueError(f"disco needs sequence labels [N] from the disco estimator, got {tuple(x.advantages.shape)}")
    p = prepare(x)
    labels = torch.where(p.keep, p.advantages[:, 0], torch.zeros_like(p.advantages[:, 0]))  # [N]
    length = p.mask.sum(-1).clamp(min=1.0)  # [N]
    ratio = ratio_from_log(p.log_ratio)  # [N, T]
    token_score = p.logprobs if score == "logL" else ratio
    scores = (token_score * p.mask).sum(-1) / length  # [N]
    index, num_groups = group_index(torch.as_tensor(x.group_ids, device=scores.device))
    objective = group_objective(scores, labels, index, num_groups, tau, negatives=negatives)  # [M]
    seen = torch.zeros(num_groups, dtype=torch.bool, device=scores.device).index_fill(0, index[p.keep], True)
    policy = -objective.sum() / seen.sum().clamp(min=1)
    behaviour_kl = masked_mean(ratio - 1.0 - p.log_ratio, p.mask)  # k3 to the behaviour policy, scalar
    weight = torch.clamp(constraint_beta * (behaviour_kl - delta), min=0.0).detach()
    over = (behaviour_kl > delta).float().detach()
    return finish(p, policy, ratio, region=over, extra=weight * behaviour_kl)
