"""LLDS: the clipped surrogate plus a likelihood-preserving term for tool-integrated RL (the likelihood-
displacement guard).

Source: "On GRPO Collapse in Search-R1: The Lazy Likelihood-Displacement Death Spiral" (Deng et al., arXiv
2512.04220), Eq. 5 with its gates as public re-implementations state them; docs/methods/losses.md#llds names them
and the choices::

    d_it    = logp_old_it - logp_theta_it                      displacement (> 0: the token's likelihood fell)
    Y_pre   = { i : A_i >= 0 }                                 responses whose likelihood should not fall
    g_i     = 1[ sum_t d_it > 0 ]                              response gate ("response"), or per action
    g_is    = 1[ sum_{t in s} d_it > 0 ]                       ("action": s = a contiguous run of trained tokens,
                                                                the stretches between tool observations)
    L_LLDS  = 1 / sum_i |y_i|  *  sum_{i in Y_pre} sum_t g · max(0, d_it)
    loss    = clipped(...) + llds_coef · L_LLDS

The gates are computed without gradient; the gradient flows through ``max(0, d_it)`` only, raising the
likelihood of exactly the tokens whose likelihood fell in a response (or action) whose total fell. On-policy
(``logp_theta == logp_old``) every gate is closed and the loss is the clipped surrogate's. Shapes: logprobs,
old_logprobs, mask ``[N, T]``; advantages ``[N]`` or ``[N, T]`` (a row's first trained token decides Y_pre).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.clipped import clipped
from mmreason.rl.losses.common import prepare
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss

Gate = Literal["response", "action"]
GATES = get_args(Gate)


def action_segments(mask: Tensor) -> Tensor:
    """``[N, T]`` long: 1, 2, ... numbering each contiguous run of ``mask > 0`` in a row, 0 elsewhere."""
    on = (mask > 0).long()
    prev = torch.cat([torch.zeros_like(on[:, :1]), on[:, :-1]], dim=1)
    starts = (on - prev).clamp(min=0)
    return starts.cumsum(dim=1) * on


def llds_term(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    gate: Gate = "response",
    *,
    seq_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """(L_LLDS scalar, fraction of Y_pre responses with an open gate) for ``[N, T]`` inputs."""
    if gate not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {gate!r}")
    x = prepare(LossInputs(logprobs, old_logprobs, advantages, mask, seq_mask=seq_mask))
    disp = -x.log_ratio  # [N, T], 0 at masked positions
    with torch.no_grad():
        first = (x.mask > 0).float().argmax(dim=1, keepdim=True)  # first trained token of each row
        adv_row = x.advantages.gather(1, first.clamp(max=x.advantages.shape[1] - 1))[:, 0]  # [N]
        rows = x.mask.sum(1) > 0
        preserve = (adv_row >= 0) & rows  # Y_pre
        d = disp.detach()
        if gate == "response":
            open_tok = ((d * x.mask).sum(1, keepdim=True) > 0).expand_as(d)
        else:
            seg = action_segments(x.mask)  # [N, T]
            n_seg = int(seg.max().item()) + 1
            sums = torch.zeros(d.shape[0], n_seg, dtype=d.dtype, device=d.device).scatter_add_(1, seg, d * x.mask)
            open_tok = (sums.gather(1, seg) > 0) & (seg > 0)
        active = open_tok.float() * x.mask * preserve[:, None].float()  # [N, T]
        opened = ((active.sum(1) > 0) & preserve).float().sum() / preserve.float().sum().clamp(min=1.0)
    total = x.mask.sum().clamp(min=1.0)  # sum_i |y_i| over the batch's trained tokens
    return (disp.clamp(min=0.0) * active).sum() / total, opened


@register_policy_loss(
    "llds",
    reads=("epsilon", "epsilon_high", "importance_sampling_level"),
    provenance="re-implementations",
)
def llds(x: LossInputs, *, llds_coef: float = 0.1, gate: Gate = "response") -> LossOutput:
    """LLDS (Lazy Likelihood Displacement guard, arXiv 2512.04220): clipped surrogate + llds_coef * L_LLDS.

    Args:
        llds_coef: weight of the likelihood-preserving term (>= 0; 0 gives the clipped surrogate).
        gate: ``response`` (Eq. 5: one gate per response) or ``action`` (one per contiguous run of trained
            tokens, i.e. per tool-calling turn when tool observations are masked out).
    The clip and ratio fields are read as in ``clipped`` (the surrogate the term is added to).
    """
    if llds_coef < 0:
        raise ValueError(f"llds_coef must be >= 0, got {llds_coef}")
    base = clipped(x)
    term, _ = llds_term(x.logprobs, x.old_logprobs, x.advantages, x.mask, gate, seq_mask=x.seq_mask)
    return LossOutput(base.loss + llds_coef * term, base.metrics)
