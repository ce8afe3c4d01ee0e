"""The sampler's own log-probs in the update: the sampler-trainer gap logged (``mismatch/*``), the truncated
importance weights on the advantages, and the off-policy mask (moved out of ``update.py`` unchanged)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mmreason.rl.rollout_correction import importance_weights, mismatch_metrics, off_policy_mask, vision_distance
from mmreason.rollout.episode_stats import after_media
from mmreason.rollout.forward import pad_stack
from mmreason.train.setup import Run
from mmreason.types import Trajectory


def rollout_correction(
    run: Run,
    trajectories: Sequence[Trajectory],
    old: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    *,
    stats: dict[str, list[float]],
) -> torch.Tensor:
    """Log the sampler-trainer gap (``mismatch/*``, split by distance from the nearest vision token and by turn) of a
    sampler that returned its log-probs (vLLM, or HF with ``rollout.hf_sampler_logprobs``). Then, with
    ``rollout.vllm_importance_sampling_correction`` (HF: and ``rollout.hf_importance_sampling_correction``), weight each
    token's advantage by the truncated importance ratio (``rl.rollout_correction``; a clipped or plain surrogate times
    w >= 0 is the surrogate of the weighted advantage). Return the advantages."""
    if not trajectories or any(t.rollout_logprobs is None for t in trajectories):
        return advantages
    r = run.cfg.rollout
    width = old.shape[1]
    sampled = [t.rollout_logprobs for t in trajectories if t.rollout_logprobs is not None]  # every row's
    rollout = _to_width(pad_stack(sampled, 0.0, torch.float32), width)
    distance = _to_width(
        pad_stack(
            [
                vision_distance(
                    t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
                )
                for t in trajectories
            ],
            -1,
            torch.long,
        ),
        width,
    )
    turn = _to_width(pad_stack([_turn_index(t) for t in trajectories], 0, torch.long), width)
    rollout, distance, turn = rollout.to(old.device), distance.to(old.device), turn.to(old.device)
    shown = _to_width(pad_stack([after_media(t) for t in trajectories], False, torch.bool), width).to(old.device)
    cap = r.vllm_importance_sampling_cap
    for key, value in mismatch_metrics(old, rollout, mask, cap, distance, turn=turn, after_media=shown).items():
        stats.setdefault(key, []).append(value)
    if not r.vllm_importance_sampling_correction or not corrects_with_sampler(run):
        return advantages
    w = importance_weights(
        old,
        rollout,
        mask,
        r.vllm_importance_sampling_mode,
        r.vllm_importance_sampling_cap,
        floor=r.vllm_importance_sampling_min,
    )
    stats.setdefault("mismatch/is_weight_mean", []).append(float(w[mask.bool()].mean()) if mask.any() else 1.0)
    return (advantages[:, None] if advantages.ndim == 1 else advantages) * w  # [n, T]


def off_policy_masked(
    run: Run,
    trajectories: Sequence[Trajectory],
    logp: torch.Tensor,
    old: torch.Tensor,
    mask: torch.Tensor,
    *,
    advantages: torch.Tensor,
    stats: dict[str, list[float]],
) -> torch.Tensor:
    """Mask off-policy rows: with ``algorithm.off_policy_mask_threshold`` set, rows with A < 0 whose mean
    behaviour-to-current log-prob gap exceeds it get advantage 0 (``rl.rollout_correction.off_policy_mask``; the
    behaviour policy is the sampler's log-probs when it returned them, else the old policy, as TRL). Logs the masked
    share."""
    threshold = run.cfg.algorithm.off_policy_mask_threshold
    if threshold is None:
        return advantages
    behaviour = old
    if corrects_with_sampler(run) and trajectories and all(t.rollout_logprobs is not None for t in trajectories):
        rollout = pad_stack(
            [t.rollout_logprobs for t in trajectories if t.rollout_logprobs is not None], 0.0, torch.float32
        )
        behaviour = _to_width(rollout, old.shape[1]).to(old.device)
    keep = off_policy_mask(advantages, logp, behaviour, mask, threshold)  # [n]
    stats.setdefault("off_policy/masked_share", []).append(float(1 - keep.mean()) if keep.numel() else 0.0)
    return advantages * (keep if advantages.ndim == 1 else keep[:, None])


def corrects_with_sampler(run: Run) -> bool:
    """Tell whether the sampler's log-probs act on the update (importance weights, the off-policy mask's behaviour
    policy). They always do with a vLLM engine. With HF generation they do only when
    ``rollout.hf_importance_sampling_correction`` asks, or when they come from an older policy
    (``rollout.async_generation``: each token's behaviour policy is its version's); ``rollout.hf_sampler_logprobs``
    alone records them for the mismatch metrics."""
    r = run.cfg.rollout
    return run.rollout_backend is not None or r.hf_importance_sampling_correction or r.async_generation


def _to_width(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.shape[1] >= width:
        return x[:, :width]
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def _turn_index(t: Trajectory) -> torch.Tensor:
    """Return the 0-based assistant turn each token belongs to [T] (0 outside assistant turns)."""
    out = torch.zeros(t.token_ids.numel(), dtype=torch.long)
    for k, turn in enumerate([u for u in t.turns if u.role == "assistant"]):
        out[turn.start : turn.end] = k
    return out
