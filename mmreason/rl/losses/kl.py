"""Per-token KL estimators between the policy and a frozen reference (Schulman, "Approximating KL
Divergence", 2020). With ``log r = ref - logp`` on tokens sampled from the policy:

- ``k1``: ``logp - ref`` (unbiased, high variance, can be negative)
- ``k2``: ``(logp - ref)^2 / 2`` (biased, low variance)
- ``k3`` / ``low_var_kl``: ``exp(ref - logp) - (ref - logp) - 1`` (unbiased, >= 0, low variance). TRL's
  GRPO KL. Like verl's ``low_var_kl`` the log-ratio is clamped to [-20, 20] (no overflow) and the result
  to [-10, 10] (docs/methods/aggregation-and-kl.md#k3); TRL does not clamp, so values agree only inside those bounds.

All take ``logprobs [N, T]`` and ``ref_logprobs [N, T]`` and return ``[N, T]`` fp32; masking is the
caller's job.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.registries import KL_ESTIMATORS, register_kl_estimator


@register_kl_estimator("k1", provenance="equations")
def k1(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k1: log pi - log pi_ref (unbiased, high variance)."""
    return logprobs.float() - ref_logprobs.float()


@register_kl_estimator("k2", provenance="equations")
def k2(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k2: (log pi - log pi_ref)^2 / 2 (biased, low variance)."""
    return 0.5 * (logprobs.float() - ref_logprobs.float()).square()


@register_kl_estimator("k3", provenance="equations")
def k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """k3 / low_var_kl: exp(ref - logp) - (ref - logp) - 1, clamped to [-10, 10] (unbiased, >= 0)."""
    log_ratio = (ref_logprobs.float() - logprobs.float()).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(-10.0, 10.0)


KL_ESTIMATORS.add("low_var_kl", k3, provenance="equations")


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token KL ``[N, T]`` fp32 by the estimator registered as ``estimator``."""
    return KL_ESTIMATORS.get(estimator)(logprobs, ref_logprobs)
