"""R³'s structural-entropy ranking reward: failed samples of a group get relative rewards from their entropy pattern.

Source: "Replay, Reflection, and Ranking Rewards" (R³; Jiang et al., arXiv 2601.19620); our reading of its abstract,
docs/methods/losses.md#r3_rank. With ``F_g`` the failed rows of group g (total reward <= ``fail_threshold``; ``rewards``
passed by the trainer), ``m = |F_g|``, and each row's score ``h_i = mean_t H_it + spread_weight * std_t H_it`` (the
current policy's token entropies, detached)::

    rank_i in 0 .. m-1 among F_g, the most stable (lowest score with prefer "low") ranked m-1
    b_i = rank_weight * (2 rank_i / (m - 1) - 1)        in [-rank_weight, rank_weight], sum 0 over F_g (m >= 2)
    A'_i = A_i + b_i  for i in F_g;   A'_i = A_i otherwise;   l_it = clipped surrogate on A'_i

An all-fail group, whose GRPO advantages are all 0, still gets a signal. What is the paper's: relative rewards for
failed or truncated samples from a ranking of their token-entropy patterns (local exploration, global stability).
What is ours: the score (mean token entropy plus ``spread_weight`` times its std over the row), the direction
(``prefer: low``, a steadier failure ranks higher), the linear rank-to-bonus map and its weight (0.1), adding it to
the advantage in the loss (where the entropies are known), and the failure threshold (0).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, grouped_sort
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_range, prepare, sequence_advantages, surrogate
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def ranking_bonus(
    scores: Tensor, failed: Tensor, group_ids: Tensor | None, *, rank_weight: float, prefer: str
) -> Tensor:
    """``[N]`` the rank bonus of each failed row within its group's failed rows (0 elsewhere, and for m < 2)."""
    ids = torch.zeros_like(scores, dtype=torch.long) if group_ids is None else group_ids.to(scores.device)
    index, m = group_index(ids)
    key = -scores if prefer == "low" else scores  # ascending sort: the preferred row last (highest rank)
    big = torch.where(failed, key, torch.full_like(key, torch.inf))  # non-failed rows sort after the failed ones
    order = grouped_sort(big, index, m)
    count = torch.zeros(m, device=scores.device).index_add(0, index, failed.float())[index]  # [N] failed in group
    rank = order.rank.float()
    bonus = rank_weight * (2 * rank / (count - 1).clamp(min=1) - 1)
    return torch.where(failed & (count >= 2), bonus, torch.zeros_like(bonus))


@register_policy_loss("r3_rank", reads=("epsilon", "epsilon_high", "entropy", "rewards"), provenance="abstract only")
def r3_rank(
    x: LossInputs,
    *,
    prefer: Literal["low", "high"] = "low",
    rank_weight: float = 0.1,
    spread_weight: float = 0.0,
    fail_threshold: float = 0.0,
) -> LossOutput:
    """R³ ranking reward (arXiv 2601.19620, reading): failed rows of a group ranked by their token-entropy pattern.

    Reads ``x.entropy`` ``[N, T]`` and ``x.rewards`` ``[N]``; without either nothing is ranked.

    Args:
        rank_weight: the bonus of the best-ranked failure (the worst gets its negative); >= 0.
        spread_weight: weight of the entropy's std over the row in the score (0: the mean alone).
        prefer: ``low`` (a lower score ranks higher) or ``high``.
        fail_threshold: a row with total reward <= this failed.
    """
    if rank_weight < 0:
        raise ValueError(f"rank_weight must be >= 0, got {rank_weight}")
    p = prepare(x)
    adv = sequence_advantages(p, "r3_rank")
    if x.entropy is not None and x.rewards is not None:
        count = p.mask.sum(-1).clamp(min=1.0)
        mean = (x.entropy.float() * p.mask).sum(-1) / count
        std = (((x.entropy.float() - mean[:, None]) ** 2 * p.mask).sum(-1) / count).sqrt()
        failed = (x.rewards.to(adv.device).float() <= fail_threshold) & (p.mask.sum(-1) > 0)
        bonus = ranking_bonus(mean + spread_weight * std, failed, x.group_ids, rank_weight=rank_weight, prefer=prefer)
        adv = adv + bonus
    return surrogate(p, adv[:, None], *clip_range(x))
