"""Input handling shared by the policy losses: fp32 casting, masks, the optional KL term."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from mmreason.rl.groups import group_index
from mmreason.rl.losses.aggregation import aggregate
from mmreason.rl.losses.kl import kl_penalty
from mmreason.rl.records import LossMetrics

# exp() of a log-ratio beyond this overflows fp32 to inf and turns 0-advantage tokens into NaN; verl clamps
# the same way. Only ratios above e^20 are affected, where the clip has already cut the gradient.
MAX_LOG_RATIO = 20.0


def ratio_from_log(log_ratio: Tensor) -> Tensor:
    """``exp(log_ratio)`` with the log-ratio clamped to +-MAX_LOG_RATIO first (no inf, no inf * 0)."""
    return torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


@dataclass
class PolicyInputs:
    """The loss inputs in fp32, zero at masked positions.

    ``mask [N, T]`` already has the ``seq_mask`` rows zeroed; ``num_seqs`` counts the kept rows.
    """

    logprobs: Tensor
    log_ratio: Tensor
    advantages: Tensor
    mask: Tensor
    num_seqs: Tensor
    keep: Tensor


def prepare(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, seq_mask: Tensor | None
) -> PolicyInputs:
    """Check shapes and cast to fp32 (whatever the input dtype): the ratio of two bf16 log-probs is noise."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [N, T], got shape {tuple(logprobs.shape)}")
    n, t = logprobs.shape
    if old_logprobs.shape != (n, t) or mask.shape != (n, t):
        raise ValueError(
            f"old_logprobs {tuple(old_logprobs.shape)} and mask {tuple(mask.shape)} must match logprobs [{n}, {t}]"
        )
    adv = advantages.float()
    if adv.dim() == 1:
        adv = adv[:, None]  # [N] -> [N, 1], broadcast over the response tokens
    if adv.shape not in ((n, 1), (n, t)):
        raise ValueError(f"advantages must be [N] or [N, T], got shape {tuple(advantages.shape)}")
    keep = torch.ones(n, dtype=torch.bool, device=logprobs.device) if seq_mask is None else seq_mask.bool()
    m = mask.float() * keep[:, None]  # [N, T]
    lp = logprobs.float()
    # masked positions may hold padding garbage (even -inf): keep them out of exp() and its gradient
    log_ratio = torch.where(m > 0, lp - old_logprobs.float(), torch.zeros_like(lp))  # [N, T]
    lp = torch.where(m > 0, lp, torch.zeros_like(lp))
    num_seqs = keep.sum().to(lp.dtype).clamp(min=1.0)  # an all-masked batch gives loss 0, not 0/0
    return PolicyInputs(lp, log_ratio, adv, m, num_seqs, keep)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over active positions of ``mask`` (``x`` may be ``[N, 1]``: one value per row)."""
    if x.shape[-1] == 1 and mask.shape[-1] != 1:
        row = (mask.sum(-1, keepdim=True) > 0).to(x.dtype)  # [N, 1]: rows with any active token
        return (x * row).sum() / row.sum().clamp(min=1.0)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def kl_term(inputs: PolicyInputs, ref_logprobs: Tensor | None, beta: float, estimator: str) -> Tensor | None:
    """Per-token KL ``[N, T]`` to the reference, or None when there is no reference or ``beta == 0``."""
    if ref_logprobs is None or beta == 0.0:
        return None
    ref = torch.where(inputs.mask > 0, ref_logprobs.float(), torch.zeros_like(inputs.logprobs))
    return kl_penalty(inputs.logprobs, ref, estimator)  # masked positions: 0 vs 0, KL exactly 0


def aggregate_loss(
    name: str, per_token: Tensor, inputs: PolicyInputs, num_tokens: float | Tensor | None, max_len: int | None
) -> Tensor:
    """Aggregate with the kept-row count as ``num_seqs`` (a masked-out row leaves the normaliser)."""
    per_token = per_token.expand_as(inputs.mask)
    return aggregate(name, per_token, inputs.mask, num_seqs=inputs.num_seqs, num_tokens=num_tokens, max_len=max_len)


def row_group_mean(values: Tensor, group_ids: Tensor | None, valid: Tensor | None = None) -> Tensor:
    """``[N]``: the mean of ``values [N]`` over the valid rows of each row's group (the whole call when
    ``group_ids`` is None); a group without valid rows gets 0."""
    ok = torch.ones_like(values, dtype=torch.bool) if valid is None else valid.bool()
    ids = torch.zeros_like(values, dtype=torch.long) if group_ids is None else group_ids.to(values.device)
    index, m = group_index(ids)
    total = values.new_zeros(m).index_add(0, index, torch.where(ok, values, torch.zeros_like(values)))
    count = values.new_zeros(m).index_add(0, index, ok.to(values.dtype))
    return (total / count.clamp(min=1))[index]


def row_entropy(entropy: Tensor, mask: Tensor) -> Tensor:
    """``[N]`` mean token entropy of each row over its active tokens (0 for an empty row)."""
    return (entropy.float() * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def clip_metrics(
    policy: Tensor,
    ratio: Tensor,
    x: PolicyInputs,
    kl: Tensor | None,
    low_bound: Tensor | float,
    high_bound: Tensor | float,
) -> LossMetrics:
    """The usual metrics of a clipped surrogate (TRL's clip fractions) for per-row or per-token bounds."""
    low = ((ratio < low_bound) & (x.advantages < 0)).float()
    high = ((ratio > high_bound) & (x.advantages > 0)).float()
    return LossMetrics(
        policy_loss=policy.detach(),
        ratio_mean=masked_mean(ratio, x.mask),
        kl=None if kl is None else masked_mean(kl, x.mask),
        clip_low=masked_mean(low, x.mask),
        clip_high=masked_mean(high, x.mask),
        clip_region=masked_mean(torch.maximum(low, high), x.mask),
    )


def with_kl(
    policy: Tensor, x: PolicyInputs, ref_logprobs, beta: float, kl_estimator: str, aggregation: str, num_tokens, max_len
) -> tuple[Tensor, Tensor | None]:
    """The policy term plus ``beta`` times the aggregated KL to the reference (when there is one)."""
    kl = kl_term(x, ref_logprobs, beta, kl_estimator)
    loss = policy if kl is None else policy + beta * aggregate_loss(aggregation, kl, x, num_tokens, max_len)
    return loss, kl
