"""Group bookkeeping shared by every estimator: ids -> dense indices, masked per-group statistics, sorting.

Rollouts of one prompt share a group id; ids may be any integers (not contiguous, not sorted). A NaN reward
entry means "this component does not apply to this sample": it is left out of that component's group
statistics and contributes 0 to the weighted sum. Everything is vectorised with ``index_add_`` /
``scatter_reduce_``; no Python loop over groups.

Shape letters: N trajectories, K reward components, M groups.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

MISSING_RULES = ("zero", "renormalize")


def group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Dense group index ``[N]`` in ``0..M-1`` (ordered by id) and the number of groups ``M``."""
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must be 1-D [N], got shape {tuple(group_ids.shape)}")
    if group_ids.numel() == 0:
        return group_ids.long(), 0
    unique, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, unique.numel()


def step_group_ids(sample_ids: Sequence[Hashable] | Tensor, step_indices: Sequence[int] | Tensor) -> Tensor:
    """Group ids for Step-GRPO: one group per (sample id, step index) pair, ``[N]`` long.

    Each step prompt of an unrolled gold trajectory is its own RL prompt, so its G rollouts form a group and
    are z-scored only against each other (R1-Router, docs/methods/estimators.md#step_grpo). ``sample_ids`` may be
    strings or integers. Ids are numbered in order of first appearance.
    """
    if isinstance(sample_ids, Tensor) and isinstance(step_indices, Tensor):
        if sample_ids.shape != step_indices.shape or sample_ids.dim() != 1:
            raise ValueError("sample_ids and step_indices must both be [N]")
        pairs = torch.stack([sample_ids.long(), step_indices.long()], dim=1)  # [N, 2]
        if pairs.numel() == 0:
            return torch.zeros(0, dtype=torch.long, device=pairs.device)
        _, inverse = torch.unique(pairs, dim=0, return_inverse=True)
        return inverse
    sids = sample_ids.tolist() if isinstance(sample_ids, Tensor) else list(sample_ids)
    steps = step_indices.tolist() if isinstance(step_indices, Tensor) else list(step_indices)
    if len(sids) != len(steps):
        raise ValueError(f"sample_ids ({len(sids)}) and step_indices ({len(steps)}) differ in length")
    table: dict[tuple[Hashable, int], int] = {}
    ids = [table.setdefault((sid, int(step)), len(table)) for sid, step in zip(sids, steps)]
    return torch.tensor(ids, dtype=torch.long)


@dataclass
class GroupStats:
    """Per-group, per-component statistics over valid entries; every field is ``[M, K]``.

    ``std`` is the population std (ddof 0) and is exactly 0 for a ``constant`` group (all valid entries
    equal, or fewer than two); there ``mean`` is that exact common value, so ``x - mean`` is exactly 0 rather
    than a rounding residue that a later division by ``std + eps`` would blow up.
    """

    mean: Tensor
    std: Tensor
    count: Tensor
    constant: Tensor


def group_stats(values: Tensor, valid: Tensor, index: Tensor, num_groups: int) -> GroupStats:
    """Masked mean / std per group of ``values [N, K]`` with ``valid [N, K]`` bool and ``index [N]``."""
    n, k = values.shape
    zeros = values.new_zeros(num_groups, k)
    v = torch.where(valid, values, torch.zeros_like(values))
    count = zeros.index_add(0, index, valid.to(values.dtype))  # [M, K]
    mean = zeros.index_add(0, index, v) / count.clamp(min=1)
    expand = index[:, None].expand(n, k)
    inf = torch.full_like(values, float("inf"))
    lo = torch.full_like(zeros, float("inf")).scatter_reduce(0, expand, torch.where(valid, values, inf), "amin")
    hi = torch.full_like(zeros, -float("inf")).scatter_reduce(0, expand, torch.where(valid, values, -inf), "amax")
    constant = (lo == hi) | (count <= 1)
    mean = torch.where(constant & (count > 0), lo, mean)
    dev = torch.where(valid, values - mean[index], torch.zeros_like(values))
    var = zeros.index_add(0, index, dev * dev) / count.clamp(min=1)
    std = torch.where(constant, torch.zeros_like(var), var.sqrt())
    return GroupStats(mean=mean, std=std, count=count, constant=constant)


def centred(values: Tensor, valid: Tensor, index: Tensor, stats: GroupStats) -> Tensor:
    """``values - group mean`` ``[N, K]``; exactly 0 for invalid entries and constant groups."""
    keep = valid & ~stats.constant[index]
    return torch.where(keep, values - stats.mean[index], torch.zeros_like(values))


def weighted_total(rewards: Tensor, weights: Tensor, missing: str = "zero") -> tuple[Tensor, Tensor]:
    """Weighted reward sum ``[N]`` and row validity ``[N]``; the one definition of the total.

    ``missing`` says what a NaN component ("does not apply") counts as:
    ``"zero"``: 0 (TRL's nansum), ``sum_k w_k r_k`` over the components that apply;
    ``"renormalize"``: the weights of the components that apply are rescaled to sum to the full weight,
    ``sum_{k applies} w_k r_k * sum_k w_k / sum_{k applies} w_k`` (DocSeeker's "no specific evidence page":
    ``(0.1 R_fmt + 0.6 R_ans) / 0.7``). A row whose every component is NaN is invalid: no reward applies, so
    it takes no part in any baseline, its total is 0 and its advantage is 0 (TRL's convention).
    docs/methods/trainer.md#reward_missing.
    """
    if missing not in MISSING_RULES:
        raise ValueError(f"missing must be one of {MISSING_RULES}, got {missing!r}")
    valid = ~torch.isnan(rewards)  # [N, K]
    total = torch.where(valid, rewards * weights, torch.zeros_like(rewards)).sum(dim=1)  # [N]
    if missing == "renormalize":
        applied = torch.where(valid, weights.expand_as(rewards), torch.zeros_like(rewards)).sum(dim=1)  # [N]
        total = torch.where(applied != 0, total * weights.sum() / applied, torch.zeros_like(total))
    return total, valid.any(dim=1)


def scalar_group_stats(values: Tensor, valid: Tensor, index: Tensor, num_groups: int) -> tuple[Tensor, Tensor]:
    """Centred values ``[N]`` and per-row group std ``[N]`` for a 1-D ``values [N]``."""
    stats = group_stats(values[:, None], valid[:, None], index, num_groups)
    diff = centred(values[:, None], valid[:, None], index, stats)[:, 0]
    return diff, stats.std[index, 0]


@dataclass
class GroupedOrder:
    """Rows sorted by (group, value), stable: ``order [N]``; group starts and sizes ``[M]``; rank ``[N]``.

    ``rank[i]`` is the 0-based position of row ``i`` inside its group's ascending sort; ties keep their
    original order.
    """

    order: Tensor
    start: Tensor
    count: Tensor
    rank: Tensor


def grouped_sort(values: Tensor, index: Tensor, num_groups: int) -> GroupedOrder:
    """Stable ascending sort of ``values [N]`` within each group of ``index [N]``."""
    by_value = torch.sort(values, stable=True).indices
    order = by_value[torch.sort(index[by_value], stable=True).indices]  # group-major, value-minor
    count = torch.bincount(index, minlength=num_groups)  # [M]
    start = torch.cumsum(count, 0) - count
    rank = torch.empty_like(index)
    rank[order] = torch.arange(values.numel(), device=values.device) - start[index[order]]
    return GroupedOrder(order=order, start=start, count=count, rank=rank)


def grouped_lower_median(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """Per-group lower median ``[M]`` of ``values [N]`` (the ``(n-1)//2``-th smallest; 0 for empty groups)."""
    if values.numel() == 0:
        return values.new_zeros(num_groups)
    go = grouped_sort(values, index, num_groups)
    pos = (go.start + (go.count - 1).clamp(min=0) // 2).clamp(max=values.numel() - 1)  # [M]
    median = values[go.order][pos]
    return torch.where(go.count > 0, median, torch.zeros_like(median))


def grouped_median(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """Per-group median ``[M]`` of ``values [N]``, the mean of the two middle values for an even count
    (``torch.quantile(x, 0.5)``); 0 for empty groups."""
    if values.numel() == 0:
        return values.new_zeros(num_groups)
    go = grouped_sort(values, index, num_groups)
    last = values.numel() - 1
    low = (go.start + (go.count - 1).clamp(min=0) // 2).clamp(max=last)  # [M]
    high = (go.start + go.count // 2).clamp(max=last)
    ordered = values[go.order]
    median = (ordered[low] + ordered[high]) / 2
    return torch.where(go.count > 0, median, torch.zeros_like(median))


def grouped_log_mean_exp(values: Tensor, member: Tensor, index: Tensor, num_groups: int, tau: float) -> Tensor:
    """``tau log(mean_{member rows of g} exp(values / tau))`` ``[M]`` (a soft maximum of each group's member
    rows), shifted by the group maximum for stability; ``tau log 1e-30`` for a group without members."""
    z = torch.where(member, values / tau, torch.full_like(values, -math.inf))  # [N]
    top = values.new_full((num_groups,), -math.inf).scatter_reduce(0, index, z.detach(), "amax")  # [M]
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    count = values.new_zeros(num_groups).index_add(0, index, member.to(values.dtype))
    summed = values.new_zeros(num_groups).index_add(0, index, torch.where(member, torch.exp(z - top[index]), 0.0))
    return tau * (top + torch.log(summed.clamp(min=1e-30)) - torch.log(count.clamp(min=1)))
