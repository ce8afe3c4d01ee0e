"""DAPO dynamic sampling: drop groups whose rewards are all equal (they carry no GRPO gradient).

Source: DAPO (arXiv 2503.14476), Sec. 3.2; docs/methods/trainer.md#dapo. The caller keeps sampling prompts until the
batch is full of mixed groups (with a cap on extra rounds); an empty result is a normal outcome.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, group_stats
from mmreason.rl.records import FilterResult


def dynamic_sampling_filter(scores: Tensor, group_ids: Tensor) -> FilterResult:
    """Keep mask ``[N]`` of trajectories in groups whose ``scores [N]`` are not all equal.

    ``scores`` is what must vary: the accuracy component (DAPO: all correct or all wrong is dropped) or the
    total reward. NaN scores are ignored; a group with fewer than two valid scores is dropped.
    """
    s = torch.as_tensor(scores).to(torch.float32)
    if s.dim() != 1:
        raise ValueError(f"scores must be [N] (e.g. the accuracy component), got shape {tuple(s.shape)}")
    index, num_groups = group_index(torch.as_tensor(group_ids, device=s.device))
    valid = ~torch.isnan(s)
    constant = group_stats(s[:, None], valid[:, None], index, num_groups).constant[:, 0]  # [M]
    return FilterResult(keep=~constant[index], num_dropped=int(constant.sum()), num_groups=num_groups)
