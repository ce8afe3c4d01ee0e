"""DisCO labels: which rollouts of a group are positives and which negatives, for the ``disco`` loss.

Source: "DisCO: Reinforcing Large Reasoning Models with Discriminative Constrained Optimization" (Li et al.,
arXiv 2505.12366), read from the authors' code (Optimization-AI/DisCO,
``verl/verl/trainer/ppo/core_algos.py::compute_policy_loss_disco_logL`` and siblings); docs/methods/estimators.md#disco.
DisCO has no advantage: its loss contrasts the scores of correct and incorrect answers of each question. This
estimator only hands the loss the labels, in the advantage slot::

    A_i = +1   r_i >= threshold        (a positive; the authors' r == 1)
    A_i = -1   r_i <  threshold        (a negative; the authors' r == 0)
    A_i =  0   the row is invalid, or its group has no positive or no negative (all right / all wrong)

``r`` is the weighted total; the default ``threshold = 1.0`` splits binary rewards exactly as the authors do.
Shapes: rewards ``[N, K]``, group_ids ``[N]`` -> labels ``[N]`` in {-1, 0, +1}.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, weighted_total
from mmreason.rl.registries import register_estimator


@register_estimator("disco", provenance="authors' code")
def disco(
    rewards: Tensor, group_ids: Tensor, weights: Tensor, *, threshold: float = 1.0, missing: str = "zero"
) -> Tensor:
    """DisCO (arXiv 2505.12366) labels: +1 correct, -1 wrong, 0 in groups without both; train with loss disco."""
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    index, num_groups = group_index(group_ids)
    pos = valid & (total >= threshold)
    neg = valid & (total < threshold)
    pos_count = torch.zeros(num_groups, device=total.device).index_add(0, index, pos.float())
    neg_count = torch.zeros(num_groups, device=total.device).index_add(0, index, neg.float())
    mixed = (pos_count > 0) & (neg_count > 0)  # [M]
    labels = pos.float() - neg.float()
    return torch.where(mixed[index], labels, torch.zeros_like(labels))
