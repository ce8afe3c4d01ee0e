"""The OPMD policy loss: REINFORCE on the current policy's log-probs, no importance ratio, no clip.

Source: "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm: Demystifying Some Myths About GRPO and
Its Friends" (Yao et al., arXiv 2509.24203), read from the authors' implementation (modelscope/Trinity-RFT
``trinity/algorithm/policy_loss_fn/opmd_policy_loss.py``, the loss of both their ``opmd`` and ``asymre``
algorithms); docs/algorithms.md §11.2::

    l_it = -A_i logp_theta_it / (1 + tau)          then aggregated over response tokens (default token mean)

The behaviour policy's log-probs are not used: the off-policy correction is carried by the group baseline of
the advantage (``opmd`` / ``asymre`` estimators), not by a ratio. ``1 / (1 + tau)`` is the step size of the
mirror-descent update with regulariser ``tau`` (``tau`` large = small steps). The gradient per token is
``-A_i / (1 + tau)`` times the aggregation's weight; on-policy it equals the unclipped GRPO gradient
divided by ``1 + tau``. Masked positions (padding, even ``-inf``) contribute exactly 0.

Shapes: logprobs, old_logprobs, mask ``[N, T]``; advantages ``[N]`` or ``[N, T]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.losses.common import aggregate_loss, kl_term, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossMetrics, LossOutput
from mmreason.rl.registries import register_policy_loss


@register_policy_loss("opmd")
def opmd_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    tau: float = 1.0,
    aggregation: str = "token_mean",
    max_len: int | None = None,
    num_tokens: float | Tensor | None = None,
    seq_mask: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    kl_estimator: str = "k3",
    group_ids: Tensor | None = None,
) -> LossOutput:
    """OPMD / AsymRE loss (arXiv 2509.24203): -A logp / (1 + tau), no ratio and no clip.

    Args:
        tau: mirror-descent regulariser (> -1; the authors' default 1.0 halves the step).
        aggregation, max_len, num_tokens: token aggregation (the trainer sets it from ``loss_type``).
        seq_mask: ``[N]`` bool; False rows leave the loss and its normalisation.
        ref_logprobs, beta, kl_estimator: optional per-token KL to a reference (the authors add k2 for OPMD).
        group_ids: unused; accepted so every policy loss shares one call signature.
    """
    if tau <= -1:
        raise ValueError(f"tau must be > -1 (the step is 1 / (1 + tau)), got {tau}")
    x = prepare(logprobs, old_logprobs, advantages, mask, seq_mask)
    per_token = -x.advantages * x.logprobs / (1.0 + tau)  # [N, T]; masked positions hold logp 0
    policy = aggregate_loss(aggregation, per_token, x, num_tokens, max_len)
    kl = kl_term(x, ref_logprobs, beta, kl_estimator)
    loss = policy if kl is None else policy + beta * aggregate_loss(aggregation, kl, x, num_tokens, max_len)
    with torch.no_grad():
        metrics = LossMetrics(
            policy_loss=policy.detach(),
            ratio_mean=masked_mean(ratio_from_log(x.log_ratio), x.mask),
            kl=None if kl is None else masked_mean(kl, x.mask),
        )
    return LossOutput(loss, metrics)
