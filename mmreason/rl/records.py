"""Typed records returned by the RL math: advantages, loss values with metrics, filter results.

Shape letters: N trajectories, T tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class AdvantageResult:
    """What every estimator call returns (``mmreason.rl.advantages`` wraps plain tensors into this).

    ``advantages``: ``[N]`` fp32, one value per trajectory, broadcast to its response tokens by the loss.
    ``loss_mask``: ``[N]`` bool or None. False marks a trajectory that must be left out of the loss *and* of
    its normalisation (the MC-GRPO pivot); pass it to the policy loss as ``seq_mask``. None = keep all.
    """

    advantages: Tensor
    loss_mask: Tensor | None = None

    def keep_mask(self) -> Tensor:
        """``[N]`` bool: the loss mask, or all True when the estimator keeps every trajectory."""
        if self.loss_mask is None:
            return torch.ones_like(self.advantages, dtype=torch.bool)
        return self.loss_mask


@dataclass
class LossMetrics:
    """Detached 0-dim fp32 tensors for logging (call ``.item()`` when logging, not inside the step).

    ``policy_loss`` is the aggregated policy term without the KL term; ``kl`` the masked mean per-token KL
    (None without a reference). Clip fractions follow TRL: ``clip_low`` = share of tokens with ratio
    below ``1 - epsilon`` and negative advantage, ``clip_high`` = above ``1 + epsilon_high`` with positive
    advantage, ``clip_region`` = either; they are None for losses without a clip.
    """

    policy_loss: Tensor
    ratio_mean: Tensor
    kl: Tensor | None = None
    clip_low: Tensor | None = None
    clip_high: Tensor | None = None
    clip_region: Tensor | None = None


@dataclass
class LossOutput:
    """A scalar loss to call ``backward()`` on, plus its metrics."""

    loss: Tensor
    metrics: LossMetrics


@dataclass
class FilterResult:
    """Outcome of the dynamic-sampling filter.

    ``keep``: ``[N]`` bool, True for trajectories of groups that carry a learning signal.
    ``num_dropped``: groups dropped because every reward in them was equal.
    ``num_groups``: groups seen. When ``num_dropped == num_groups`` the batch is empty: resample, do not step.
    """

    keep: Tensor
    num_dropped: int
    num_groups: int
