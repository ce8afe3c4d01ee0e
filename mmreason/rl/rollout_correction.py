"""Rollout-trainer mismatch: how far the sampler's log-probs are from the trainer's, and its correction.

A fast sampler (vLLM) and the trainer compute the same policy with different kernels, so the log-prob the
sampler drew a token at, ``q_t = log pi_rollout(y_t)``, differs from the trainer's ``p_t = log pi_old(y_t)``.
Truncated importance sampling (TIS; Yao et al., "Your efficient RL framework secretly brings you off-policy
RL training", 2025; TRL's ``vllm_importance_sampling_*``) re-weights each token's policy-gradient term by
the ratio of the two, capped at C:

    r_t = exp(p_t - q_t)                                    token ratio
    R   = exp(sum_t m_t (p_t - q_t))                        sequence ratio (product of the token ratios)
    token_truncate:    w_t = clip(r_t, C_min, C)
    token_mask:        w_t = r_t if C_min <= r_t <= C else 0          (rejection, "MIS")
    sequence_truncate: w_t = clip(R, C_min, C)          (every token of the row)
    sequence_mask:     w_t = R if C_min <= R <= C else 0

``C_min`` (TRL's ``vllm_importance_sampling_clip_min``) is the lower bound; None = none (0). The weights are
constants (no gradient). Shapes: N rows, T tokens; ``mask`` [N, T] is 1 on sampled tokens.

The off-policy sequence mask (DeepSeek-V3.2, arXiv 2512.02556; TRL's ``off_policy_mask_threshold``):
a row with a negative advantage whose mean behaviour-to-current divergence ``1/|y| sum_t (q_t - p_t)`` exceeds
``delta`` is left out (``off_policy_mask``): a negative sample the policy has already drifted far from teaches
little and destabilises. Rows with A >= 0 are always kept.
"""

from __future__ import annotations

import torch
from torch import Tensor

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
DISTANCE_BINS = (0, 8, 32, 128)  # tokens from the nearest vision token: [0, 8), [8, 32), [32, 128), >= 128


def importance_weights(
    trainer_logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    mode: str = "token_truncate",
    cap: float = 2.0,
    *,
    floor: float | None = None,
) -> Tensor:
    """[N, T] TIS / MIS weights (0 off the mask), bounded by ``floor`` (None: 0) and ``cap``. Log-ratios are
    clamped to [-20, 20] before ``exp``."""
    if mode not in IS_MODES:
        raise ValueError(f"vllm_importance_sampling_mode must be one of {', '.join(IS_MODES)}, got {mode!r}")
    if not cap > 0:
        raise ValueError(f"vllm_importance_sampling_cap must be positive, got {cap}")
    if floor is not None and not 0 <= floor <= cap:
        raise ValueError(f"vllm_importance_sampling_min must be in [0, cap={cap}], got {floor}")
    low = 0.0 if floor is None else floor
    m = mask.to(torch.float32)
    log_r = ((trainer_logprobs.float() - rollout_logprobs.float()) * m).detach()  # [N, T]
    if mode.startswith("token"):
        ratio = torch.exp(log_r.clamp(-20, 20))  # [N, T]
    else:
        ratio = torch.exp(log_r.sum(-1, keepdim=True).clamp(-20, 20)).expand_as(log_r)  # [N, T]
    if mode.endswith("truncate"):
        w = ratio.clamp(min=low, max=cap)
    else:
        w = torch.where((ratio <= cap) & (ratio >= low), ratio, torch.zeros_like(ratio))
    return w * m


def off_policy_mask(
    advantages: Tensor, logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    """[N] float keep flags: 0 for a row with A < 0 whose mean ``behaviour - current`` log-prob over its masked
    tokens exceeds ``threshold`` (DeepSeek-V3.2's off-policy sequence mask, as TRL), else 1. ``advantages`` may be
    [N] or [N, T] (then a row's sign is that of its mean over the mask). An empty row is kept."""
    m = mask.to(torch.float32)
    count = m.sum(-1).clamp(min=1.0)  # [N]
    kl = torch.nan_to_num(behaviour_logprobs.float() - logprobs.detach().float(), nan=0.0)
    mean_kl = (kl * m).sum(-1) / count  # [N]
    adv = advantages.float() if advantages.dim() == 1 else (advantages.float() * m).sum(-1) / count
    return ((adv >= 0) | (mean_kl <= threshold)).to(torch.float32)


def vision_distance(mm_token_type_ids: Tensor) -> Tensor:
    """[T] (0 text / 1 image / 2 video) -> [T] tokens from each position back to the nearest earlier vision
    token (-1 where none precedes). Completion tokens follow the prompt, so "nearest" looks backwards."""
    t = mm_token_type_ids.numel()
    idx = torch.arange(t)
    last = torch.where(mm_token_type_ids != 0, idx, torch.full_like(idx, -1))
    last = torch.cummax(last, dim=0).values  # [T] index of the latest vision token at or before t
    return torch.where(last >= 0, idx - last, torch.full_like(idx, -1))


def mismatch_metrics(
    trainer_logprobs: Tensor,
    rollout_logprobs: Tensor,
    mask: Tensor,
    cap: float = 2.0,
    distance: Tensor | None = None,
    *,
    turn: Tensor | None = None,
    after_media: Tensor | None = None,
) -> dict[str, float]:
    """The gap between trainer and sampler log-probs on the masked tokens.

    ``mismatch/logprob_abs_diff_mean`` / ``_max``: mean and max |p_t - q_t|; ``mismatch/ratio_outside_frac``:
    the share of tokens with exp(p_t - q_t) outside [1/C, C]. ``distance`` [N, T] (``vision_distance``; -1 =
    no vision token before) splits the mean by ``DISTANCE_BINS`` (``mismatch/near_vision_<lo>_<hi>``,
    ``mismatch/no_vision``); ``turn`` [N, T] (0-based assistant turn) splits it by turn (``mismatch/turn_<k>``);
    ``after_media`` [N, T] (bool: the token's turn follows an observation that showed images or frames, e.g. a
    tool's crop) gives ``mismatch/after_media_mean`` / ``_max``, the gap where the sampler and the trainer must
    both have read the observation's pixels. Empty splits are left out."""
    m = mask.bool()
    if not m.any():
        return {}
    diff = (trainer_logprobs.float() - rollout_logprobs.float()).abs()  # [N, T]
    log_cap = float(torch.log(torch.tensor(cap)))
    out = {
        "mismatch/logprob_abs_diff_mean": float(diff[m].mean()),
        "mismatch/logprob_abs_diff_max": float(diff[m].max()),
        "mismatch/ratio_outside_frac": float((diff[m] > log_cap).float().mean()),
    }
    if distance is not None:
        upper: list[int | None] = [*DISTANCE_BINS[1:], None]
        for lo, hi in zip(DISTANCE_BINS, upper):
            sel = m & (distance >= lo) & (distance < hi if hi is not None else True)
            if sel.any():
                out[f"mismatch/near_vision_{lo}_{hi if hi is not None else 'inf'}"] = float(diff[sel].mean())
        sel = m & (distance < 0)
        if sel.any():
            out["mismatch/no_vision"] = float(diff[sel].mean())
    if turn is not None:
        for k in sorted(set(turn[m].tolist())):
            out[f"mismatch/turn_{int(k)}"] = float(diff[m & (turn == k)].mean())
    if after_media is not None and (m & after_media.bool()).any():
        sel = m & after_media.bool()
        out["mismatch/after_media_mean"], out["mismatch/after_media_max"] = (
            float(diff[sel].mean()),
            float(diff[sel].max()),
        )
    return out
