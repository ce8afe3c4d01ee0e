"""Reward and loss shaping terms: response-length trapezoid, DAPO overlong penalty, entropy band.

Shape letters: N trajectories, T tokens. All outputs are fp32.
"""

from __future__ import annotations

import torch
from torch import Tensor


def length_trapezoid(lengths: Tensor, l_min: float, l_low: float, l_high: float, l_max: float) -> Tensor:
    """Length reward ``[N]`` in [0, 1]: 0 outside [l_min, l_max], 1 on [l_low, l_high], linear between.

    Source: OpenVLThinkerV2 (arXiv 2604.08539), Sec. 2.3; docs/methods/trainer.md#length-trapezoid::

        R_len = 0                              L < l_min or L > l_max
              = (L - l_min) / (l_low - l_min)  l_min <= L < l_low
              = 1                              l_low <= L <= l_high
              = (l_max - L) / (l_max - l_high) l_high < L <= l_max

    Long chains for reasoning tasks, short answers for perception. Needs ``l_min < l_low <= l_high < l_max``.
    """
    if not l_min < l_low <= l_high < l_max:
        raise ValueError(f"need l_min < l_low <= l_high < l_max, got {(l_min, l_low, l_high, l_max)}")
    length = torch.as_tensor(lengths).to(torch.float32)
    rise = (length - l_min) / (l_low - l_min)
    fall = (l_max - length) / (l_max - l_high)
    return torch.minimum(rise, fall).clamp(0.0, 1.0)


def overlong_penalty(lengths: Tensor, max_len: float, cache_len: float) -> Tensor:
    """DAPO soft overlong punishment ``[N]`` in [-1, 0].

    Source: DAPO (arXiv 2503.14476), Eq. 13; docs/methods/trainer.md#dapo::

        0                                     |y| <= max_len - cache_len
        ((max_len - cache_len) - |y|) / cache_len   in (max_len - cache_len, max_len]
        -1                                    |y| > max_len

    Paper defaults ``max_len = 20480``, ``cache_len = 4096``. Added to the reward before the estimator.
    """
    if not 0 < cache_len <= max_len:
        raise ValueError(f"need 0 < cache_len <= max_len, got cache_len={cache_len}, max_len={max_len}")
    length = torch.as_tensor(lengths).to(torch.float32)
    return (((max_len - cache_len) - length) / cache_len).clamp(-1.0, 0.0)


def entropy_band_penalty(
    entropy: Tensor,
    mask: Tensor,
    h_min: float | Tensor,
    h_max: float | Tensor,
    task_ids: Tensor | None = None,
) -> Tensor:
    """Two-sided entropy shaping, a scalar to add to the loss as ``lambda_ent * L_ent``.

    Source: OpenVLThinkerV2 (arXiv 2604.08539), Sec. 2.3; docs/methods/trainer.md#entropy-band. Per task ``tau``,
    ``H_tau`` = mean token entropy (nats) over that task's response tokens, and::

        L_ent = sum_tau max(0, H_tau - H_max,tau) + max(0, H_min,tau - H_tau)

    Penalises both collapse and explosion; zero value and zero gradient inside the band.

    Args:
        entropy: ``[N, T]`` per-token entropy (see ``entropy_from_logits``; keep its graph for the gradient).
        mask: ``[N, T]`` response tokens.
        h_min, h_max: one band for all rows, or ``[N]`` per-row bands (each row carries its task's band).
        task_ids: ``[N]`` task of each row; None = one task.
    """
    h = entropy.float()
    m = mask.float()
    n = h.shape[0]
    tasks = torch.zeros(n, dtype=torch.long, device=h.device) if task_ids is None else task_ids.long()
    _, index = torch.unique(tasks, return_inverse=True)
    num_tasks = int(index.max()) + 1 if n else 0
    token_sum = h.new_zeros(num_tasks).index_add(0, index, (h * m).sum(-1))
    token_count = h.new_zeros(num_tasks).index_add(0, index, m.sum(-1))
    h_task = token_sum / token_count.clamp(min=1.0)  # [tasks]
    lo = _per_task(h_min, index, num_tasks, h)
    hi = _per_task(h_max, index, num_tasks, h)
    penalty = torch.relu(h_task - hi) + torch.relu(lo - h_task)
    return torch.where(token_count > 0, penalty, torch.zeros_like(penalty)).sum()


def _per_task(bound: float | Tensor, index: Tensor, num_tasks: int, like: Tensor) -> Tensor:
    """A band edge per task: a scalar broadcast, or the value carried by the task's rows."""
    b = torch.as_tensor(bound, dtype=torch.float32, device=like.device)
    if b.dim() == 0:
        return b.expand(num_tasks)
    return like.new_zeros(num_tasks).scatter(0, index, b)
