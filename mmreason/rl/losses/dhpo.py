"""DHPO: the token-level (GRPO) and sequence-level (GSPO) clipped surrogates, each clipped in its own range, mixed.

Source: "Orchestrating Tokens and Sequences: Dynamic Hybrid Policy Optimization" (Min et al., arXiv 2601.05607); our
reading of its abstract, docs/methods/losses.md#dhpo. With ``r_it = exp(logp_theta_it - logp_old_it)`` and
``s_i = exp(mean_t log r_it)`` (GSPO's ratio, gradient to every token as in ``clipped``)::

    token branch:     u_it = min(r_it A_i, clip(r_it, 1 - epsilon, 1 + epsilon_high) A_i)          [N, T]
    sequence branch:  v_i  = min(s_i A_i, clip(s_i, 1 - seq_epsilon, 1 + seq_epsilon_high) A_i)   [N, 1]
    l_it = -(w_it u_it + (1 - w_it) v_i)
    mixing "average": w_it = 1/2
    mixing "entropy": w_it = sigmoid(entropy_sharpness * (H_it - mean H) / (std H + 1e-6))  over the call's tokens

What is the paper's: one objective mixing the token and the sequence ratio; branch-specific clipping (each ratio
clipped before the mix); two mixings, a plain average and an entropy-guided weight. What is ours: the
entropy-to-weight map (a sigmoid of the token entropy standardised over the call's active tokens, so a
high-entropy token, a fork, leans on its own token ratio and a low-entropy one on its sequence's), its
sharpness, and the sequence branch's default range (GSPO's 3e-4 / 4e-4). ``entropy`` is the current policy's
token entropy (detached), passed by the trainer; without it the entropy mixing falls back to 1/2.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import (
    clip_fractions,
    clip_range,
    clipped_term,
    finish,
    importance_log_ratio,
    prepare,
    ratio_from_log,
)
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def entropy_weight(entropy: Tensor | None, mask: Tensor, sharpness: float) -> Tensor:
    """``[N, T]`` token-branch weight: a sigmoid of the entropy standardised over the active tokens (1/2 without)."""
    if entropy is None or not (mask > 0).any():
        return torch.full_like(mask, 0.5)
    h = entropy.float()
    active = h[mask > 0]
    z = (h - active.mean()) / (active.std(unbiased=False) + 1e-6)
    return torch.where(mask > 0, torch.sigmoid(sharpness * z), torch.full_like(h, 0.5))


@register_policy_loss("dhpo", reads=("epsilon", "epsilon_high", "entropy"), provenance="abstract only")
def dhpo(
    x: LossInputs,
    *,
    seq_epsilon: float = 3e-4,
    seq_epsilon_high: float = 4e-4,
    mixing: Literal["average", "entropy"] = "average",
    entropy_sharpness: float = 1.0,
) -> LossOutput:
    """DHPO (Dynamic Hybrid PO, arXiv 2601.05607, reading): token and sequence surrogates, each clipped, then mixed.

    Args:
        seq_epsilon, seq_epsilon_high: the sequence branch's clip range (GSPO's 3e-4 / 4e-4).
        mixing: ``average`` (w = 1/2) or ``entropy`` (w from the token entropies ``x.entropy``).
        entropy_sharpness: slope of the entropy-to-weight sigmoid.
    """
    low, high = clip_range(x)  # the token branch's clip: x.epsilon / x.epsilon_high
    p = prepare(x)
    ratio = ratio_from_log(p.log_ratio)  # [N, T]
    token = clipped_term(ratio, p.advantages, low, high)
    length = p.mask.sum(-1, keepdim=True).clamp(min=1.0)
    seq_ratio = ratio_from_log(importance_log_ratio(p, "sequence"))  # [N, 1]
    adv_row = p.advantages if p.advantages.shape[1] == 1 else (p.advantages * p.mask).sum(-1, keepdim=True) / length
    seq = clipped_term(seq_ratio, adv_row, 1 - seq_epsilon, 1 + seq_epsilon_high)
    w = torch.full_like(p.mask, 0.5) if mixing == "average" else entropy_weight(x.entropy, p.mask, entropy_sharpness)
    per_token = w * token + (1 - w) * seq
    return finish(p, per_token, ratio, clipped=clip_fractions(ratio, p.advantages, low, high))
