"""ERPO: entropy-gated, position-bucket-normalised token advantages anchored to the outcome advantage's sign.

Source: "Token-Level Entropy-Regulated Policy Optimization" (Yu et al., arXiv 2603.28204); our reading of its
abstract, docs/methods/losses.md#erpo. Over the call's active tokens, with ``H_it`` the current policy's token entropy
(detached), ``|y_i|`` the row's length and ``B`` buckets::

    gate:      g_it = 1 + gate_strength * sigmoid((H_it - mean H) / (std H + 1e-6))         [N, T], in (1, 1 + gs)
    bucket:    b_it = floor(B * t / |y_i|)       (relative position in the response, t = 0 .. |y_i| - 1)
    normalise: w_it = g_it / mean_{tokens of bucket b_it} g                              mean 1 in every bucket
    anchor:    A_it = A_i * w_it                 (w > 0: the token signal keeps the outcome's sign)
    l_it = -min(r_it A_it, clip(r_it, 1 - epsilon, 1 + epsilon_high) A_it)

What is the paper's: the three parts, (1) entropy-aware gating that amplifies high-entropy "pivot" tokens,
(2) bucket-based implicit normalisation by relative position, (3) the token signal re-weighted and anchored to
the sign of the outcome advantage. What is ours: the gate (a sigmoid of the standardised entropy, strength
``gate_strength``), the bucket count, normalising the gate to mean 1 inside each bucket over the whole call (so
the per-bucket mass of the advantage is unchanged and only its spread over tokens moves), and combining the
parts as one product. Without ``entropy`` (not passed) every gate is 1 and ERPO is the clipped surrogate.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_range, prepare, surrogate
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def position_buckets(mask: Tensor, buckets: int) -> Tensor:
    """``[N, T]`` bucket of each active token by its relative position in the row (-1 off the mask)."""
    m = mask > 0
    pos = torch.cumsum(m.long(), dim=-1) - 1  # [N, T] index among the row's active tokens
    length = m.sum(-1, keepdim=True).clamp(min=1)
    b = torch.div(pos * buckets, length, rounding_mode="floor").clamp(max=buckets - 1)
    return torch.where(m, b, torch.full_like(b, -1))


def erpo_weights(entropy: Tensor | None, mask: Tensor, *, gate_strength: float, buckets: int) -> Tensor:
    """``[N, T]`` ERPO token weights: the entropy gate, normalised to mean 1 within each position bucket."""
    m = mask > 0
    if entropy is None or not m.any():
        return torch.ones_like(mask)
    h = entropy.float()
    active = h[m]
    gate = 1 + gate_strength * torch.sigmoid((h - active.mean()) / (active.std(unbiased=False) + 1e-6))
    b = position_buckets(mask, buckets)
    flat_b, flat_g = b[m], gate[m]
    total = gate.new_zeros(buckets).index_add(0, flat_b, flat_g)
    count = gate.new_zeros(buckets).index_add(0, flat_b, torch.ones_like(flat_g))
    bucket_mean = total / count.clamp(min=1)
    w = gate / bucket_mean[b.clamp(min=0)]
    return torch.where(m, w, torch.ones_like(w))


@register_policy_loss("erpo", reads=("epsilon", "epsilon_high", "entropy"), provenance="abstract only")
def erpo(
    x: LossInputs,
    *,
    gate_strength: float = 1.0,
    buckets: int = 4,
) -> LossOutput:
    """ERPO (Entropy-Regulated PO, arXiv 2603.28204, reading): entropy-gated, bucket-normalised token advantages.

    Args:
        gate_strength: how much a high-entropy token (``x.entropy``) is amplified (its gate is at most
            ``1 + gate_strength``).
        buckets: relative-position buckets the gate is normalised in (>= 1).
    """
    if buckets < 1 or gate_strength < 0:
        raise ValueError(f"buckets must be >= 1 and gate_strength >= 0, got {buckets}, {gate_strength}")
    p = prepare(x)
    adv = p.advantages * erpo_weights(x.entropy, p.mask, gate_strength=gate_strength, buckets=buckets)  # [N, T]
    return surrogate(p, adv, *clip_range(x))
