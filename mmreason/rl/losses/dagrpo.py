"""DaGRPO's sequence-level gradient rectification: near-duplicate rollouts of a group with opposite advantages
leave the loss, so their gradients do not cancel.

Source: "Distinctiveness-Aware GRPO" (Xie et al., arXiv 2512.06337); our reading of its abstract,
docs/methods/losses.md#dagrpo. With ``U_i`` the set of token n-grams of row i's trained tokens (``token_ids``
``[N, T]`` under ``mask``)::

    sim_ij  = |U_i ∩ U_j| / |U_i ∪ U_j|                                 (judge-free; 1 - sim is the distinctiveness)
    pair    = i, j in one group, sim_ij >= similarity_threshold and A_i A_j < 0
    masked  = both rows of every pair (``mask_rows: both``) or only the negative one (``negative``)
    l_it    = clipped surrogate with A_i = 0 on masked rows (they stay in the normaliser)

What is the paper's: masking pairs of samples in a group whose distinctiveness is low, so their gradients do not
conflict (sequence-level gradient rectification); off-policy anchor responses for hard prompts with no positive.
What is ours: the distinctiveness score (token n-gram Jaccard in place of the paper's fine-grained judge scoring),
the threshold (0.8), n = 2, masking only pairs of opposite sign, and which members are masked. The anchors are not
built (docs/methods/losses.md#dagrpo). ``token_ids`` are the mini-batch's token ids, passed by the trainer.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_range, prepare, sequence_advantages, surrogate
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def ngram_sets(token_ids: Tensor, mask: Tensor, n: int) -> list[set[tuple[int, ...]]]:
    """Each row's set of n-grams of its trained tokens (in order, the mask's gaps skipped)."""
    out = []
    for ids, m in zip(token_ids.tolist(), (mask > 0).tolist()):
        seq = [t for t, keep in zip(ids, m) if keep]
        out.append({tuple(seq[k : k + n]) for k in range(max(0, len(seq) - n + 1))} if len(seq) >= n else {tuple(seq)})
    return out


def conflict_mask(
    token_ids: Tensor,
    mask: Tensor,
    advantages: Tensor,
    group_ids: Tensor | None,
    *,
    similarity_threshold: float,
    ngram: int,
    mask_rows: str,
) -> Tensor:
    """``[N]`` bool: rows of a near-duplicate pair (n-gram Jaccard >= threshold) of opposite advantage sign."""
    n = advantages.shape[0]
    groups = [0] * n if group_ids is None else group_ids.tolist()
    sets = ngram_sets(token_ids, mask, ngram)
    sign = torch.sign(advantages).tolist()
    out = [False] * n
    for i in range(n):
        for j in range(i + 1, n):
            if groups[i] != groups[j] or sign[i] * sign[j] >= 0 or not sets[i] or not sets[j]:
                continue
            sim = len(sets[i] & sets[j]) / len(sets[i] | sets[j])
            if sim >= similarity_threshold:
                for k in (i, j):
                    if mask_rows == "both" or sign[k] < 0:
                        out[k] = True
    return torch.tensor(out, dtype=torch.bool, device=advantages.device)


@register_policy_loss("dagrpo", reads=("epsilon", "epsilon_high", "token_ids"), provenance="abstract only")
def dagrpo(
    x: LossInputs, *, similarity_threshold: float = 0.8, ngram: int = 2, mask_rows: Literal["both", "negative"] = "both"
) -> LossOutput:
    """DaGRPO (Distinctiveness-Aware GRPO, arXiv 2512.06337, reading): near-duplicate opposite-sign pairs leave the loss.

    Reads ``x.token_ids`` ``[N, T]`` (without them nothing is masked) and ``x.group_ids``.

    Args:
        similarity_threshold: n-gram Jaccard at or above which two rollouts count as near-duplicates (0-1].
        ngram: n of the n-grams (>= 1).
        mask_rows: ``both`` rows of a pair, or only its ``negative`` one.
    """
    if not 0 < similarity_threshold <= 1 or ngram < 1:
        raise ValueError(f"need 0 < similarity_threshold <= 1 and ngram >= 1, got {similarity_threshold}, {ngram}")
    p = prepare(x)
    adv = sequence_advantages(p, "dagrpo")
    if x.token_ids is not None:
        masked = conflict_mask(
            x.token_ids,
            p.mask,
            adv,
            x.group_ids,
            similarity_threshold=similarity_threshold,
            ngram=ngram,
            mask_rows=mask_rows,
        )
        adv = torch.where(masked, torch.zeros_like(adv), adv)
    return surrogate(p, adv[:, None], *clip_range(x))
