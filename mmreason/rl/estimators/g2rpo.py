"""G²RPO: rewards mapped through their ranks onto standard-normal quantiles.

Source: OpenVLThinkerV2 (arXiv 2604.08539), Sec. 2.2, Alg. 1; docs/methods/estimators.md#g2rpo.

For the reward set {R_1..R_n}: sort, give ranks k = 1..n, ``p_k = (k - 0.5)/n``,
``q_k = Phi^-1(p_k) = sqrt(2) erfinv(2 p_k - 1)``; every reward value gets the mean of the quantiles of all
positions holding it (ties); scatter back. No mean or std: it is the 1-D optimal-transport map of the
empirical rewards onto N(0, 1). Properties: sums to 0 over each set, all-equal rewards give 0, invariant to
any strictly increasing transform of the rewards, ``|A| <= Phi^-1(1 - 0.5/n)``.

``scope`` [uncertain in the source]: ``"task_batch"`` (paper-literal, default) uses every reward of a task
in the batch as the set — rows grouped by ``task_ids``, the whole batch when ``task_ids`` is None;
``"group"`` uses the G rollouts of one prompt. Quantiles are computed in fp64 and returned in fp32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, grouped_sort, weighted_total
from mmreason.rl.registries import register_estimator

SCOPES = ("task_batch", "group")


def normal_scores(values: Tensor, set_ids: Tensor) -> Tensor:
    """Tie-averaged normal quantiles of ``values [N]`` ranked within each set of ``set_ids [N]``, fp64."""
    index, num_sets = group_index(set_ids)
    go = grouped_sort(values, index, num_sets)
    n = go.count[index].double()  # [N] size of the row's set
    u = (2.0 * go.rank.double() + 1.0 - n) / n  # 2 p_k - 1 in (-1, 1)
    q = math.sqrt(2.0) * torch.sign(u) * torch.erfinv(u.abs())  # [N], exactly antisymmetric in k
    # ties are adjacent in the (set, value) order: number the runs, average q over each run
    sv, si = values[go.order], index[go.order]
    new_run = torch.ones_like(sv, dtype=torch.bool)
    new_run[1:] = (sv[1:] != sv[:-1]) | (si[1:] != si[:-1])
    run = torch.empty_like(index)
    run[go.order] = torch.cumsum(new_run.long(), 0) - 1
    num_runs = int(new_run.sum())
    total = q.new_zeros(num_runs).index_add(0, run, q)
    size = q.new_zeros(num_runs).index_add(0, run, torch.ones_like(q))
    mean_q = (total / size)[run]
    # a run covering its whole set (all rewards equal) averages symmetric quantiles: exactly 0, not a residue
    return torch.where(size[run] == n, torch.zeros_like(mean_q), mean_q)


@register_estimator("g2rpo", provenance="equations")
def g2rpo(
    rewards: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    *,
    scope: str = "task_batch",
    task_ids: Tensor | None = None,
    missing: str = "zero",
) -> Tensor:
    """G²RPO: rank -> inverse-normal quantile, ties averaged; set = task in batch (default) or group."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    total, valid = weighted_total(rewards, weights, missing)  # [N], [N]
    if scope == "group":
        set_ids = group_ids
    elif task_ids is None:
        set_ids = torch.zeros_like(group_ids)
    else:
        set_ids = torch.as_tensor(task_ids, device=group_ids.device).long()
        if set_ids.shape != group_ids.shape:
            raise ValueError(f"task_ids must be [N] = [{group_ids.numel()}], got {tuple(set_ids.shape)}")
    adv = torch.zeros_like(total)
    rows = valid.nonzero().squeeze(1)
    if rows.numel():
        adv[rows] = normal_scores(total[rows], set_ids[rows]).to(adv.dtype)
    return adv
