"""OPMD advantages: the off-policy REINFORCE family's group baseline (mean or soft maximum).

Source: "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm: Demystifying Some Myths
About GRPO and Its Friends" (Yao et al., arXiv 2509.24203; first in the Trinity-RFT report, arXiv 2505.17826,
App. A), read from the authors' implementation (modelscope/Trinity-RFT
``trinity/algorithm/advantage_fn/opmd_advantage.py``); docs/methods/estimators.md#opmd. Train it with the ``opmd``
policy loss (``mmreason/rl/losses/opmd.py``), as the authors do; ``asymre`` (docs/methods/estimators.md#asymre) shares
the baseline code.

With ``r`` the weighted total and a group of G >= 2 valid rollouts::

    baseline "mean":       A_i = r_i - mean_g r
    baseline "logavgexp":  A_i = r_i - tau log(1/G sum_j exp(r_j / tau))      (a soft maximum of the group)

A group whose rewards are all equal gets exactly 0 under both baselines. Single-rollout groups (and invalid
rows) get 0: no baseline can be formed (the authors' code uses baseline 0 there, i.e. the raw reward). Shapes: rewards ``[N, K]``, group_ids ``[N]`` -> advantages ``[N]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, group_stats, grouped_log_mean_exp, weighted_total
from mmreason.rl.registries import register_estimator

BASELINES = ("mean", "logavgexp")


def group_baseline(total: Tensor, valid: Tensor, group_ids: Tensor, baseline: str, tau: float) -> tuple[Tensor, Tensor]:
    """Per-row baseline ``[N]`` and the rows ``[N]`` that have one (valid, in a group of >= 2 valid rows)."""
    index, num_groups = group_index(group_ids)
    stats = group_stats(total[:, None], valid[:, None], index, num_groups)
    count, mean = stats.count[:, 0], stats.mean[:, 0]  # [M]
    if baseline == "logavgexp":
        soft = grouped_log_mean_exp(total, valid, index, num_groups, tau)  # [M]
        mean = torch.where(stats.constant[:, 0], mean, soft)  # all equal: exactly the common value
    has = valid & (count[index] > 1)
    return mean[index], has


@register_estimator("opmd", provenance="authors' code")
def opmd(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    baseline: str = "mean",
    tau: float = 1.0,
    missing: str = "zero",
) -> Tensor:
    """OPMD (arXiv 2509.24203): r minus the group mean, or minus tau * log-mean-exp(r / tau)."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    base, has = group_baseline(total, valid, group_ids, baseline, tau)
    return torch.where(has, total - base, torch.zeros_like(total))
