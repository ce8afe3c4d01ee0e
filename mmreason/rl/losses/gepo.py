"""GEPO: group-entropy asymmetric advantage shaping with thresholds adapted from the history of group entropies.

Source: "Group Entropy-Controlled Policy Optimization" (no arXiv id matched the title); our reading of its abstract,
docs/methods/losses.md#gepo. With ``H_g`` the mean token entropy of group g's rows (current policy, detached) and ``Q``
the pooled group entropies of the history and of this call::

    low  = quantile(Q, low_quantile),   high = quantile(Q, high_quantile)
    A'_i = shrink_positive * A_i   if A_i > 0 and H_g(i) < low      (a confident group: less over-exploitation)
    A'_i = shrink_negative * A_i   if A_i < 0 and H_g(i) > high     (an uncertain group: keep exploring)
    A'_i = A_i                     otherwise
    l_it = -min(r_it A'_i, clip(r_it, 1 - epsilon, 1 + epsilon_high) A'_i)

What is the paper's: a per-group entropy estimated from the group's samples; shrinking positive advantages of
low-entropy groups and negative advantages of high-entropy groups; thresholds that adapt from the history of
group entropies; the motivation (task mixtures with different entropy regimes bias normalised advantages). What is
ours: the entropy estimate (mean token entropy of the group's rows), the shrink factors (constants), and the
history statistic (quantiles of the last group entropies the trainer kept, ``entropy_history``, pooled with this
call's). The trainer keeps the last ``1024`` group entropies across steps (saved in checkpoints).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor

from mmreason.rl.groups import group_index
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import (
    clip_range,
    prepare,
    row_entropy,
    row_group_mean,
    sequence_advantages,
    surrogate,
)
from mmreason.rl.providers import Provider
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def group_entropies(entropy: Tensor, mask: Tensor, group_ids: Tensor | None) -> tuple[Tensor, Tensor]:
    """(``[N]`` each row's group entropy, ``[M]`` the entropy of each group with active tokens)."""
    per_row = row_entropy(entropy, mask)
    has = mask.sum(-1) > 0
    per_group_row = row_group_mean(per_row, group_ids, has)  # [N]
    ids = torch.zeros_like(per_row, dtype=torch.long) if group_ids is None else group_ids.to(per_row.device)
    index, m = group_index(ids)
    seen = torch.zeros(m, dtype=torch.bool, device=per_row.device).index_fill(0, index[has], True)
    values = per_row.new_zeros(m).index_copy(0, index, per_group_row)
    return per_group_row, values[seen]


def gepo_advantages(
    advantages: Tensor,
    row_entropy_of_group: Tensor,
    pool: Tensor,
    *,
    low_quantile: float,
    high_quantile: float,
    shrink_positive: float,
    shrink_negative: float,
) -> Tensor:
    """``[N]`` GEPO-shaped advantages from each row's group entropy and the pooled group entropies."""
    if pool.numel() == 0:
        return advantages
    low = torch.quantile(pool.float(), low_quantile)
    high = torch.quantile(pool.float(), high_quantile)
    pos = (advantages > 0) & (row_entropy_of_group < low)
    neg = (advantages < 0) & (row_entropy_of_group > high)
    scale = torch.where(pos, torch.full_like(advantages, shrink_positive), torch.ones_like(advantages))
    scale = torch.where(neg, torch.full_like(advantages, shrink_negative), scale)
    return advantages * scale


@register_policy_loss(
    "gepo",
    reads=("epsilon", "epsilon_high", "entropy", "entropy_history"),
    provenance="abstract only",
)
def gepo(
    x: LossInputs,
    *,
    low_quantile: float = 0.25,
    high_quantile: float | None = None,
    shrink_positive: float = 0.5,
    shrink_negative: float = 0.5,
) -> LossOutput:
    """GEPO (Group Entropy-Controlled PO, our reading): shrink A > 0 of low-entropy groups, A < 0 of high-entropy ones.

    Reads ``x.entropy`` ``[N, T]`` (without it nothing is shaped) and ``x.entropy_history`` ``[H]`` (past group
    entropies, pooled with the current ones for the thresholds).

    Args:
        low_quantile, high_quantile: the thresholds' quantiles of the pooled group entropies (0 <= low <= high <= 1;
            ``high_quantile`` defaults to ``1 - low_quantile``).
        shrink_positive, shrink_negative: factors in [0, 1] for the shrunk advantages.
    """
    high_quantile = 1 - low_quantile if high_quantile is None else high_quantile
    if not 0 <= low_quantile <= high_quantile <= 1:
        raise ValueError(f"need 0 <= low_quantile <= high_quantile <= 1, got {low_quantile}, {high_quantile}")
    if not (0 <= shrink_positive <= 1 and 0 <= shrink_negative <= 1):
        raise ValueError("shrink_positive and shrink_negative must be in [0, 1]")
    p = prepare(x)
    adv = sequence_advantages(p, "gepo")
    if x.entropy is not None:
        of_group, current = group_entropies(x.entropy, p.mask, x.group_ids)
        past = current.new_zeros(0) if x.entropy_history is None else x.entropy_history.to(current).flatten()
        adv = gepo_advantages(
            adv,
            of_group,
            torch.cat([past, current]),
            low_quantile=low_quantile,
            high_quantile=high_quantile,
            shrink_positive=shrink_positive,
            shrink_negative=shrink_negative,
        )
    return surrogate(p, adv[:, None], *clip_range(x))


class EntropyHistory(Provider):
    """The trainer side of GEPO: the last ``SIZE`` group entropies of earlier steps (``entropy_history``, kept
    across steps, in checkpoints), each group's mean token entropy taken on the update's first pass."""

    provides: ClassVar[tuple[str, ...]] = ("entropy_history",)
    SIZE = 1024

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.history: list[float] = []
        self.step: list[float] = []

    def before_update(self, view: Any) -> dict[str, float]:
        self.step = []
        return {}

    def inputs(self, k: int) -> dict[str, Any]:
        return {"entropy_history": torch.tensor(self.history, dtype=torch.float32)}

    def after_minibatch(self, k: int, entropy: Tensor, mask: Tensor, group_ids: Tensor) -> None:
        _, values = group_entropies(entropy.detach(), mask.float(), group_ids.to(entropy.device))
        self.step += [float(v) for v in values]

    def after_update(self, entropy: float | None) -> None:
        self.history = (self.history + self.step)[-self.SIZE :]
        self.step = []

    def state_dict(self) -> dict[str, Any]:
        return {"entropy_history": list(self.history)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.history = [float(v) for v in state.get("entropy_history", [])]
