"""What every policy loss shares, written once: fp32 casting and masks (``prepare``), the PPO clip, and
``finish``: the policy term aggregated, plus ``beta`` times the aggregated KL to the reference, with the metrics
(ratio mean, KL, TRL's clip fractions)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

import torch
from torch import Tensor

from mmreason.rl.groups import group_index
from mmreason.rl.loss_inputs import ImportanceSamplingLevel, LossInputs
from mmreason.rl.losses.aggregation import aggregate
from mmreason.rl.losses.kl import kl_penalty
from mmreason.rl.records import LossMetrics, LossOutput

# exp() of a log-ratio beyond this overflows fp32 to inf and turns 0-advantage tokens into NaN; verl clamps
# the same way. Only ratios above e^20 are affected, where the clip has already cut the gradient.
MAX_LOG_RATIO = 20.0
IS_LEVELS = get_args(ImportanceSamplingLevel)


def ratio_from_log(log_ratio: Tensor) -> Tensor:
    """``exp(log_ratio)`` with the log-ratio clamped to +-MAX_LOG_RATIO first (no inf, no inf * 0)."""
    return torch.exp(log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


@dataclass(frozen=True)
class PolicyInputs:
    """The loss inputs in fp32, zero at masked positions, beside the record they came from.

    ``mask [N, T]`` already has the ``seq_mask`` rows zeroed; ``num_seqs`` counts the kept rows; ``advantages``
    are ``[N, 1]`` or ``[N, T]``.
    """

    inputs: LossInputs
    logprobs: Tensor
    log_ratio: Tensor
    advantages: Tensor
    mask: Tensor
    num_seqs: Tensor
    keep: Tensor


def prepare(x: LossInputs) -> PolicyInputs:
    """Check shapes and cast to fp32 (whatever the input dtype): the ratio of two bf16 log-probs is noise."""
    if x.logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [N, T], got shape {tuple(x.logprobs.shape)}")
    n, t = x.logprobs.shape
    if x.old_logprobs.shape != (n, t) or x.mask.shape != (n, t):
        raise ValueError(
            f"old_logprobs {tuple(x.old_logprobs.shape)} and mask {tuple(x.mask.shape)} must match logprobs [{n}, {t}]"
        )
    adv = x.advantages.float()
    if adv.dim() == 1:
        adv = adv[:, None]  # [N] -> [N, 1], broadcast over the response tokens
    if adv.shape not in ((n, 1), (n, t)):
        raise ValueError(f"advantages must be [N] or [N, T], got shape {tuple(x.advantages.shape)}")
    device = x.logprobs.device
    keep = torch.ones(n, dtype=torch.bool, device=device) if x.seq_mask is None else x.seq_mask.bool()
    m = x.mask.float() * keep[:, None]  # [N, T]
    lp = x.logprobs.float()
    # masked positions may hold padding garbage (even -inf): keep them out of exp() and its gradient
    log_ratio = torch.where(m > 0, lp - x.old_logprobs.float(), torch.zeros_like(lp))  # [N, T]
    lp = torch.where(m > 0, lp, torch.zeros_like(lp))
    num_seqs = keep.sum().to(lp.dtype).clamp(min=1.0)  # an all-masked batch gives loss 0, not 0/0
    return PolicyInputs(x, lp, log_ratio, adv, m, num_seqs, keep)


def sequence_advantages(p: PolicyInputs, loss: str) -> Tensor:
    """``[N]`` the one advantage of each row; a loss of whole sequences refuses token-level advantages."""
    if p.advantages.shape[1] != 1:
        raise ValueError(f"{loss} needs sequence-level advantages [N]")
    return p.advantages[:, 0]


def importance_log_ratio(p: PolicyInputs, level: ImportanceSamplingLevel) -> Tensor:
    """The log importance ratio: per token ``[N, T]``, or GSPO's mean token log-ratio of each row ``[N, 1]``."""
    if level not in IS_LEVELS:
        raise ValueError(f"importance_sampling_level must be one of {IS_LEVELS}, got {level!r}")
    if level == "token":
        return p.log_ratio
    length = p.mask.sum(-1, keepdim=True).clamp(min=1.0)  # [N, 1]
    return (p.log_ratio * p.mask).sum(-1, keepdim=True) / length


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over active positions of ``mask`` (``x`` may be ``[N, 1]``: one value per row)."""
    if x.shape[-1] == 1 and mask.shape[-1] != 1:
        row = (mask.sum(-1, keepdim=True) > 0).to(x.dtype)  # [N, 1]: rows with any active token
        return (x * row).sum() / row.sum().clamp(min=1.0)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def aggregate_loss(p: PolicyInputs, per_token: Tensor) -> Tensor:
    """Aggregate ``per_token [N, T] | [N, 1]`` as the inputs say, with the kept-row count as ``num_seqs``."""
    x = p.inputs
    per_token = per_token.expand_as(p.mask)
    return aggregate(x.aggregation, per_token, p.mask, num_seqs=p.num_seqs, num_tokens=x.num_tokens, max_len=x.max_len)


def kl_term(p: PolicyInputs) -> Tensor | None:
    """Per-token KL ``[N, T]`` to the reference, or None when there is no reference or ``beta == 0``."""
    x = p.inputs
    if x.ref_logprobs is None or x.beta == 0.0:
        return None
    ref = torch.where(p.mask > 0, x.ref_logprobs.float(), torch.zeros_like(p.logprobs))
    return kl_penalty(p.logprobs, ref, x.kl_estimator)  # masked positions: 0 vs 0, KL exactly 0


def clip_range(x: LossInputs) -> tuple[float, float]:
    """The PPO ratio bounds ``(1 - epsilon, 1 + epsilon_high)``; ``epsilon_high`` defaults to ``epsilon``."""
    return 1 - x.epsilon, 1 + (x.epsilon if x.epsilon_high is None else x.epsilon_high)


def clipped_term(ratio: Tensor, advantages: Tensor, low: Tensor | float, high: Tensor | float) -> Tensor:
    """The PPO term ``-min(r A, clip(r, low, high) A)`` per token (bounds may be per row, ``[N, 1]``)."""
    low_t, high_t = torch.as_tensor(low).to(ratio), torch.as_tensor(high).to(ratio)
    return -torch.min(ratio * advantages, torch.clamp(ratio, low_t, high_t) * advantages)


def clip_fractions(
    ratio: Tensor, advantages: Tensor, low: Tensor | float, high: Tensor | float
) -> tuple[Tensor, Tensor]:
    """TRL's clipped tokens: ``ratio < low`` with ``A < 0``, and ``ratio > high`` with ``A > 0``."""
    return (ratio < low) & (advantages < 0), (ratio > high) & (advantages > 0)


def surrogate(p: PolicyInputs, advantages: Tensor, low: Tensor | float, high: Tensor | float) -> LossOutput:
    """The PPO clipped surrogate of token ratios on (shaped) ``advantages``, finished; the clip fractions count
    on the advantages the loss was given, as TRL does."""
    ratio = ratio_from_log(p.log_ratio)  # [N, T]
    term = clipped_term(ratio, advantages, low, high)
    return finish(p, term, ratio, clipped=clip_fractions(ratio, p.advantages, low, high))


def finish(
    p: PolicyInputs,
    term: Tensor,
    ratio: Tensor,
    *,
    clipped: tuple[Tensor, Tensor] | None = None,
    region: Tensor | None = None,
    extra: Tensor | None = None,
) -> LossOutput:
    """The loss of a policy term: ``policy + beta * KL (+ extra)``, with its metrics.

    Args:
        term: the per-token policy term ``[N, T] | [N, 1]``, aggregated here; or the aggregated 0-dim policy
            loss of a sequence-level objective.
        ratio: ``[N, T] | [N, 1]`` the importance ratio the metrics report.
        clipped: boolean ``(low, high)`` masks of clipped tokens (``clip_fractions``); their union is the clip
            region. None for a loss without a clip.
        region: the clip-region share itself, for a loss that reports only that.
        extra: a 0-dim term added to the loss but not to the logged policy loss (a penalty).
    """
    policy = term if term.dim() == 0 else aggregate_loss(p, term)
    kl = kl_term(p)
    loss = policy if kl is None else policy + p.inputs.beta * aggregate_loss(p, kl)
    if extra is not None:
        loss = loss + extra
    with torch.no_grad():
        low, high = (None, None) if clipped is None else (clipped[0].float(), clipped[1].float())
        if low is not None and high is not None and region is None:
            region = masked_mean(torch.maximum(low, high), p.mask)
        metrics = LossMetrics(
            policy_loss=policy.detach(),
            ratio_mean=masked_mean(ratio, p.mask),
            kl=None if kl is None else masked_mean(kl, p.mask),
            clip_low=None if low is None else masked_mean(low, p.mask),
            clip_high=None if high is None else masked_mean(high, p.mask),
            clip_region=region,
        )
    return LossOutput(loss, metrics)


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
