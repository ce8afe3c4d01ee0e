"""``advantages(name, rewards, group_ids, ...)``: the one entry point to every registered estimator.

It does the shape and dtype handling once, so estimators only see ``rewards [N, K]`` fp32,
``group_ids [N]`` long and ``weights [K]`` fp32, and it always returns an ``AdvantageResult``
(``advantages [N]`` plus an optional ``loss_mask [N]``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mmreason.rl.options import check_options
from mmreason.rl.records import AdvantageResult
from mmreason.rl.registries import ESTIMATORS


def _as_rewards(rewards: Any) -> Tensor:
    r = torch.as_tensor(rewards)
    if r.dim() == 1:
        r = r[:, None]  # [N] -> [N, 1]: a single reward component
    if r.dim() != 2:
        raise ValueError(f"rewards must be [N] or [N, K], got shape {tuple(r.shape)}")
    return r.to(torch.float32)


def advantages(name: str, rewards: Any, group_ids: Any, *, weights: Any = None, **options: Any) -> AdvantageResult:
    """Advantages ``[N]`` from the estimator registered as ``name``.

    Args:
        rewards: ``[N]`` or ``[N, K]`` (K named components). NaN = component does not apply to that sample.
        group_ids: ``[N]`` integers; rollouts of one prompt share an id (any integers, any order).
        weights: ``[K]`` component weights from the config; default all ones.
        **options: estimator options (``scale_rewards``, ``scope``, ``fidelity``, ...). An option the
            estimator does not take raises ``TypeError`` naming it.

    Returns:
        ``AdvantageResult(advantages [N] fp32, loss_mask [N] bool | None)``.
    """
    fn = ESTIMATORS.get(name)
    check_options("estimator", name, fn, options)
    r = _as_rewards(rewards)
    n, k = r.shape
    g = torch.as_tensor(group_ids, device=r.device)
    if g.shape != (n,):
        raise ValueError(f"group_ids must be [N] = [{n}], got shape {tuple(g.shape)}")
    if g.is_floating_point() or g.is_complex():
        raise TypeError(f"group_ids must be integers, got {g.dtype}")
    w = torch.ones(k) if weights is None else torch.as_tensor(weights)
    w = w.to(device=r.device, dtype=torch.float32)
    if w.shape != (k,):
        raise ValueError(f"weights must be [K] = [{k}] (one per reward component), got shape {tuple(w.shape)}")
    out = fn(r, g.long(), w, **options)
    result = out if isinstance(out, AdvantageResult) else AdvantageResult(out)
    if result.advantages.shape != (n,):
        raise ValueError(f"estimator {name!r} returned shape {tuple(result.advantages.shape)}, expected [{n}]")
    result.advantages = result.advantages.to(torch.float32)
    return result
