"""Reg-GRPO (DeepVideo-R1): regress the policy's normalised log-likelihood ratios onto the advantages.

Source: "DeepVideo-R1: Video Reinforcement Fine-Tuning via Difficulty-aware Regressive GRPO"
(arXiv 2506.07464), Sec. 3.2, App. A, reconstructed from the text; docs/methods/losses.md#reg_grpo.

    rho_i     = sum_t (logp_theta - logp_old)                 sequence log-ratio over response tokens
    A_theta,i = (rho_i - mean_g rho) / sqrt(var_g(rho) + eps_r^2)
    L         = 1/S sum_i (A_i - A_theta,i)^2  +  beta KL

``advantages`` are the targets ``A_i`` (normally the ``grpo`` advantages, a group z-score). The
KL-regularised optimum ``pi* ~ pi_old exp(r / lambda)`` gives ``r = lambda log(pi*/pi_old) + const``, and the
z-score inside a group removes both ``lambda`` and the constant. No clip, no min.

Zero-variance guard [proposed]: at the first inner step ``pi_theta = pi_old``, all ``rho = 0`` and a plain
std would be 0/0 (and torch's std backward NaN). ``eps_r > 0`` inside the square root keeps it finite; there
the gradient is ``-(2 / (S eps_r)) sum_i A_i grad log pi(y_i)``, the unclipped sequence-sum GRPO gradient
times a constant that grad-norm clipping absorbs. Groups whose targets are all 0 (equal rewards, or G = 1)
contribute exactly 0. S counts the kept rows (``seq_mask``), zero-target groups included, as GRPO's 1/G does.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import finish, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def predicted_advantages(rho: Tensor, index: Tensor, num_groups: int, keep: Tensor, eps_r: float) -> Tensor:
    """Group z-score ``[N]`` of sequence log-ratios ``rho [N]`` over kept rows; std floored by ``eps_r``."""
    w = keep.to(rho.dtype)
    count = rho.new_zeros(num_groups).index_add(0, index, w).clamp(min=1.0)  # [M]
    mean = rho.new_zeros(num_groups).index_add(0, index, rho * w) / count
    dev = rho - mean[index]
    var = rho.new_zeros(num_groups).index_add(0, index, dev * dev * w) / count
    return dev / torch.sqrt(var[index] + eps_r**2)


@register_policy_loss("reg_grpo", needs=("group_ids",), provenance="equations")
def reg_grpo(x: LossInputs, *, eps_r: float = 1e-2) -> LossOutput:
    """Reg-GRPO: squared error between target advantages and group-normalised sequence log-ratios.

    ``x.advantages`` are ``[N]`` regression targets (group z-scores of the rewards); the aggregation applies to the
    KL term only.

    Args:
        eps_r: std floor of the predicted advantages (> 0; see the module docstring).
    """
    if eps_r <= 0:
        raise ValueError(f"eps_r must be > 0 (it keeps the first step finite), got {eps_r}")
    if x.advantages.dim() != 1:
        raise ValueError(f"reg_grpo needs sequence-level targets [N], got shape {tuple(x.advantages.shape)}")
    p = prepare(x)
    target = p.advantages[:, 0]  # [N]
    index, num_groups = group_index(torch.as_tensor(x.group_ids, device=target.device))
    rho = (p.log_ratio * p.mask).sum(-1)  # [N] sequence log-ratio
    predicted = predicted_advantages(rho, index, num_groups, p.keep, eps_r)
    nonzero = ((target != 0) & p.keep).to(target.dtype)
    signal = target.new_zeros(num_groups).index_add(0, index, nonzero)  # [M] rows with a non-zero target
    live = p.keep & (signal[index] > 0)  # [N]: kept rows of groups with a non-zero target
    err = torch.where(live, target - predicted, torch.zeros_like(predicted))
    return finish(p, err.square().sum() / p.num_seqs, ratio_from_log(p.log_ratio))
