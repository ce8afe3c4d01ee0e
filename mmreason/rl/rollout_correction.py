"""Rollout-trainer mismatch: how far the sampler's log-probs are from the trainer's, and its correction.

A fast sampler (vLLM) and the trainer compute the same policy with different kernels, so the log-prob the
sampler drew a token at, ``q_t = log pi_rollout(y_t)``, differs from the trainer's ``p_t = log pi_old(y_t)``.
Truncated importance sampling (TIS; Yao et al., "Your efficient RL framework secretly brings you off-policy
RL training", 2025; TRL's ``vllm_importance_sampling_*``) re-weights each token's policy-gradient term by
the ratio of the two, capped at C:

    r_t = exp(p_t - q_t)                                    token ratio
    R   = exp(sum_t m_t (p_t - q_t))                        sequence ratio (product of the token ratios)
    token_truncate:    w_t = min(r_t, C)
    token_mask:        w_t = r_t if r_t <= C else 0
    sequence_truncate: w_t = min(R, C)          (every token of the row)
    sequence_mask:     w_t = R if R <= C else 0

The weights are constants (no gradient). Shapes: N rows, T tokens; ``mask`` [N, T] is 1 on sampled tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
DISTANCE_BINS = (0, 8, 32, 128)  # tokens from the nearest vision token: [0, 8), [8, 32), [32, 128), >= 128


def importance_weights(trainer_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor,
                       mode: str = "token_truncate", cap: float = 2.0) -> Tensor:
    """[N, T] TIS weights (0 off the mask). Log-ratios are clamped to [-20, 20] before ``exp``."""
    if mode not in IS_MODES:
        raise ValueError(f"vllm_importance_sampling_mode must be one of {', '.join(IS_MODES)}, got {mode!r}")
    if not cap > 0:
        raise ValueError(f"vllm_importance_sampling_cap must be positive, got {cap}")
    m = mask.to(torch.float32)
    log_r = ((trainer_logprobs.float() - rollout_logprobs.float()) * m).detach()  # [N, T]
    if mode.startswith("token"):
        ratio = torch.exp(log_r.clamp(-20, 20))  # [N, T]
    else:
        ratio = torch.exp(log_r.sum(-1, keepdim=True).clamp(-20, 20)).expand_as(log_r)  # [N, T]
    w = ratio.clamp(max=cap) if mode.endswith("truncate") else torch.where(ratio <= cap, ratio, 0.0)
    return w * m


def vision_distance(mm_token_type_ids: Tensor) -> Tensor:
    """[T] (0 text / 1 image / 2 video) -> [T] tokens from each position back to the nearest earlier vision
    token (-1 where none precedes). Completion tokens follow the prompt, so "nearest" looks backwards."""
    t = mm_token_type_ids.numel()
    idx = torch.arange(t)
    last = torch.where(mm_token_type_ids != 0, idx, torch.full_like(idx, -1))
    last = torch.cummax(last, dim=0).values  # [T] index of the latest vision token at or before t
    return torch.where(last >= 0, idx - last, torch.full_like(idx, -1))


def mismatch_metrics(trainer_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor, cap: float = 2.0,
                     distance: Tensor | None = None, turn: Tensor | None = None) -> dict[str, float]:
    """The gap between trainer and sampler log-probs on the masked tokens.

    ``mismatch/logprob_abs_diff_mean`` / ``_max``: mean and max |p_t - q_t|; ``mismatch/ratio_outside_frac``:
    the share of tokens with exp(p_t - q_t) outside [1/C, C]. ``distance`` [N, T] (``vision_distance``; -1 =
    no vision token before) splits the mean by ``DISTANCE_BINS`` (``mismatch/near_vision_<lo>_<hi>``,
    ``mismatch/no_vision``); ``turn`` [N, T] (0-based assistant turn) splits it by turn (``mismatch/turn_<k>``).
    Empty splits are left out."""
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
    return out
