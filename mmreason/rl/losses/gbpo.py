"""GBPO (group-relative Bounded Policy Optimization): regress each token's ratio onto a bounded target ratio.

Source: "Bounded Ratio Reinforcement Learning" (Ao et al., arXiv 2604.18578), read from the authors' code
(bounded-ratio-rl/bounded_ratio_rl ``src/verl/trainer/ppo/core_algos.py``: ``compute_gbpo_outcome_advantage_and_target``
and ``compute_policy_loss_gbpo``; defaults from its README); docs/methods/losses.md#gbpo.

The bounded-ratio problem ``max E[rho A]`` s.t. ``1 - eps_l <= rho <= 1 + eps_h`` has the closed-form optimum
``rho* = 1 + eps_h`` where the action beats the (group) median and ``1 - eps_l`` where it does not; GBPO
regresses the policy ratio onto a smoothed version of that optimum, weighted by ``|A|``::

    s_i     = sigmoid((A_i - median_g A) / T)                 (= sigmoid((r_i - median_g r) / (std_g + eps) / T))
    rho*_i  = 1 - eps_l + (eps_l + eps_h) s_i                 (a bounded target ratio, T -> 0: binary)
    l_it    = |rho_it - rho*_i| |A_i|,    rho_it = exp(logp_theta_it - logp_old_it),   then aggregated

``advantages`` are the group z-scores of the ``grpo`` estimator (the authors' GBPO advantage is exactly GRPO's);
the target is rebuilt from them and ``group_ids``: a median commutes with the increasing map r -> A, so
``A_i - median_g A`` equals the authors' ``(r_i - median_g r) / (std_g + eps)``. No clip: the target is bounded
instead. Shapes: logprobs, old_logprobs, mask ``[N, T]``; advantages ``[N]``; group_ids ``[N]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.groups import group_index, grouped_median
from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import finish, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def target_ratio(
    advantages: Tensor, group_ids: Tensor, keep: Tensor, eps_low: float, eps_high: float, *, temperature: float
) -> Tensor:
    """Bounded target ratio ``[N]`` from sequence advantages ``[N]`` and their groups (kept rows only)."""
    index, num_groups = group_index(group_ids)
    rows = keep.nonzero().squeeze(1)
    median = advantages.new_zeros(num_groups)
    if rows.numel():
        sub_index, sub_groups = group_index(group_ids[rows])
        sub_median = grouped_median(advantages[rows], sub_index, sub_groups)
        median = median.index_copy(0, index[rows], sub_median[sub_index])
    scale = torch.sigmoid((advantages - median[index]) / temperature)
    return 1.0 - eps_low + (eps_low + eps_high) * scale


@register_policy_loss(
    "gbpo",
    provenance="authors' code",
    reads=("epsilon", "epsilon_high"),
    needs=("group_ids",),
    defaults={"aggregation": "token_mean", "epsilon": 0.3},
)
def gbpo(x: LossInputs, *, temperature: float = 1e-4) -> LossOutput:
    """GBPO (Bounded Ratio RL, arXiv 2604.18578): |ratio - bounded target ratio| * |A|, no clip.

    ``x.advantages`` are ``[N]`` group z-scores (the ``grpo`` estimator).

    ``x.epsilon`` / ``x.epsilon_high`` bound the target ratio (authors: 0.3 / 0.3, the defaults of a direct call;
    the trainer passes ``algorithm.epsilon`` / ``algorithm.epsilon_high``).

    Args:
        temperature: sharpness of the target (authors: 1e-4, nearly binary); > 0.
    """
    epsilon = x.epsilon
    eps_high = epsilon if x.epsilon_high is None else x.epsilon_high
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not (0 <= epsilon < 1 and eps_high >= 0):
        raise ValueError(f"need 0 <= epsilon < 1 and epsilon_high >= 0, got {epsilon}, {eps_high}")
    if x.advantages.dim() != 1:
        raise ValueError(f"gbpo needs sequence advantages [N], got shape {tuple(x.advantages.shape)}")
    p = prepare(x)
    adv = p.advantages[:, 0].detach()  # [N]
    ids = torch.as_tensor(x.group_ids, device=adv.device)
    target = target_ratio(adv, ids, p.keep, epsilon, eps_high, temperature=temperature)  # [N]
    ratio = ratio_from_log(p.log_ratio)  # [N, T]
    per_token = (ratio - target[:, None]).abs() * adv.abs()[:, None]
    return finish(p, per_token, ratio, clipped=(ratio < 1 - epsilon, ratio > 1 + eps_high))
