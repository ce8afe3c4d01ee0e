"""KL-Cov and Clip-Cov: the tokens whose log-prob and advantage co-vary most get a KL penalty or lose their gradient.

Source: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models" (arXiv
2505.22617, section 5); verl ``core_algos.compute_policy_loss_kl_cov`` / ``compute_policy_loss_clip_cov``;
docs/methods/losses.md#kl_cov. Over the active tokens of the call (D of them), with ``logp`` detached::

    cov_it = (A_it - mean(A)) (logp_it - mean(logp))                          [N, T]
    KL-Cov:   S = the top ``k = max(1, floor(kl_cov_ratio D))`` tokens by cov
              l_it = -r_it A_it + [it in S] kl_coef |logp_it - logp_old_it|     (no clip, as verl)
    Clip-Cov: C = tokens with clip_cov_lb < cov_it < clip_cov_ub that the PPO clip has not already cut;
              S = min(|C|, max(1, floor(clip_ratio D))) of them, drawn at random
              l_it = -min(r A, clip(r) A) for it not in S,   0 (no gradient) for it in S

A token's entropy change is driven by this covariance (the paper's Theorem), so acting on the few
largest-covariance tokens holds entropy up. Same selection as verl; the random draw of Clip-Cov uses a
generator seeded with ``seed + train_step`` (verl uses the global RNG), so a run repeats. verl uses the
absolute log-ratio for the penalty, as here. ``clip_region`` reports the share of tokens in S.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_range, clipped_term, finish, masked_mean, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def token_covariance(logprobs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """``[N, T]`` centred product of (detached) log-prob and advantage over the active tokens; 0 off the mask."""
    m = mask > 0
    if not m.any():
        return torch.zeros_like(logprobs)
    adv = advantages.expand_as(logprobs)
    lp = logprobs.detach()
    cov = (adv - adv[m].mean()) * (lp - lp[m].mean())
    return torch.where(m, cov, torch.zeros_like(cov))


@register_policy_loss("kl_cov", provenance="equations")
def kl_cov(x: LossInputs, *, kl_cov_ratio: float = 0.0002, kl_coef: float = 1.0) -> LossOutput:
    """KL-Cov (arXiv 2505.22617): -ratio * A, plus kl_coef |log-ratio| on the top kl_cov_ratio tokens by covariance.

    Args:
        kl_cov_ratio: share of the active tokens penalised (paper: 2e-4; at least one token).
        kl_coef: weight of the |log-ratio| penalty (verl's ``ppo_kl_coef``, 1).
    """
    if not 0 <= kl_cov_ratio <= 1:
        raise ValueError(f"kl_cov_ratio must be in [0, 1], got {kl_cov_ratio}")
    p = prepare(x)
    ratio = ratio_from_log(p.log_ratio)
    cov = token_covariance(p.logprobs, p.advantages, p.mask)
    active = int((p.mask > 0).sum())
    selected = torch.zeros_like(p.mask, dtype=torch.bool)
    if active and kl_cov_ratio > 0:
        k = max(1, int(active * kl_cov_ratio))
        scores = torch.where(p.mask > 0, cov, torch.full_like(cov, -torch.inf)).flatten()
        selected.view(-1)[torch.topk(scores, k).indices] = True
    per_token = -ratio * p.advantages + kl_coef * selected * p.log_ratio.abs()
    return finish(p, per_token, ratio, region=masked_mean(selected.float(), p.mask))


@register_policy_loss("clip_cov", reads=("epsilon", "epsilon_high", "train_step"), provenance="equations")
def clip_cov(
    x: LossInputs, *, clip_ratio: float = 0.0002, clip_cov_lb: float = 1.0, clip_cov_ub: float = 5.0, seed: int = 0
) -> LossOutput:
    """Clip-Cov (arXiv 2505.22617): the clipped surrogate with a few tokens of covariance in (lb, ub) cut from the gradient.

    Args:
        clip_ratio: share of the active tokens cut (paper: 2e-4; at least one when any qualifies).
        clip_cov_lb, clip_cov_ub: the covariance window a cut token lies in (paper: 1, 5).
        seed: seeds the random draw (with ``x.train_step``); the PPO clip is ``x.epsilon`` / ``x.epsilon_high``.
    """
    if not 0 <= clip_ratio <= 1:
        raise ValueError(f"clip_ratio must be in [0, 1], got {clip_ratio}")
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"clip_cov_lb must be below clip_cov_ub, got {clip_cov_lb}, {clip_cov_ub}")
    p = prepare(x)
    ratio = ratio_from_log(p.log_ratio)
    unclipped = -ratio * p.advantages
    per_token = clipped_term(ratio, p.advantages, *clip_range(x))
    cut_by_clip = (per_token > unclipped) & (p.mask > 0)
    cov = token_covariance(p.logprobs, p.advantages, p.mask)
    window = (cov > clip_cov_lb) & (cov < clip_cov_ub) & (p.mask > 0) & ~cut_by_clip
    selected = torch.zeros_like(window)
    candidates = torch.nonzero(window.flatten()).flatten()
    active = int((p.mask > 0).sum())
    if len(candidates) and clip_ratio > 0:
        k = min(len(candidates), max(1, int(clip_ratio * active)))
        gen = torch.Generator().manual_seed(int(seed) + int(x.train_step))
        pick = candidates[torch.randperm(len(candidates), generator=gen)[:k].to(candidates.device)]
        selected.view(-1)[pick] = True
    return finish(p, per_token * (~selected), ratio, region=masked_mean(selected.float(), p.mask))
