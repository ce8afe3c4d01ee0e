"""GRPO-VPS: the trajectory advantage refined per segment by the progress of the answer's probability.

Source: "Verifiable Process Supervision" (GRPO-VPS; Wang et al., arXiv 2604.20659); our reading of its abstract,
docs/methods/losses.md#vps. The trainer cuts each completion into segments (``segments``), and at each boundary
``b_0 = 0 < b_1 < ... < b_S = |y|`` appends the reference answer and reads ``q_k = log P_old(answer | prompt, y_<b_k)``
(one extra forward per boundary, no Monte Carlo rollouts, no reward model). With ``seg(t)`` the segment of token t::

    progress_k  = q_k - q_{k-1}                          segment k's change of the answer's log-probability
    A_it        = A_i + progress_weight * tanh(progress_seg(t))           [N, T]   (``segment_progress`` = progress)
    l_it        = -min(r_it A_it, clip(r_it, 1 - epsilon, 1 + epsilon_high) A_it)

What is the paper's: segments, the correct answer appended at each boundary, the conditional probability of it,
its change across segments as the segment's progress, progress refining the GRPO advantage per segment. What is
ours: the cut (``segmenter: newline``, at most ``max_segments`` segments, evenly merged; ``fixed``: every
``segment_tokens`` tokens), the probe (the answer text as the pack writes SFT targets, right after the prefix),
progress in log-probability squashed by ``tanh``, the additive combination and ``progress_weight`` (0.5). The
probes use the policy that sampled (before the update); single-turn completions only (an episode gets progress 0).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import clip_range, prepare, surrogate
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def segment_bounds(newline: list[bool], *, segmenter: str, segment_tokens: int, max_segments: int) -> list[int]:
    """Segment ends ``b_1 < ... < b_S = L`` of a completion of ``L = len(newline)`` tokens (``newline[t]``: token t
    holds a line break; a segment ends after it). More than ``max_segments`` ends are thinned evenly."""
    n = len(newline)
    if n == 0:
        return []
    if segmenter == "fixed":
        ends = list(range(segment_tokens, n, segment_tokens))
    else:
        ends = [t + 1 for t, nl in enumerate(newline[:-1]) if nl]
    ends = sorted(set(ends)) + [n]
    if len(ends) > max_segments:
        step = len(ends) / max_segments
        ends = sorted({ends[min(len(ends) - 1, round((k + 1) * step) - 1)] for k in range(max_segments)} | {n})
    return ends


def progress_per_token(answer_logprobs: list[float], ends: list[int], length: int) -> Tensor:
    """``[length]`` each token's segment progress ``q_k - q_{k-1}`` from ``answer_logprobs = [q_0, ..., q_S]``."""
    out = torch.zeros(length)
    start = 0
    for k, end in enumerate(ends):
        out[start:end] = answer_logprobs[k + 1] - answer_logprobs[k]
        start = end
    return out


@register_policy_loss("vps", reads=("epsilon", "epsilon_high", "segment_progress"), provenance="abstract only")
def vps(
    x: LossInputs,
    *,
    progress_weight: float = 0.5,
    segmenter: Literal["newline", "fixed"] = "newline",
    segment_tokens: int = 16,
    max_segments: int = 8,
) -> LossOutput:
    """GRPO-VPS (Verifiable Process Supervision, arXiv 2604.20659, reading): A + w tanh(segment progress of the answer).

    Reads ``x.segment_progress`` ``[N, T]`` (the trainer's probes; without it: GRPO).

    Args:
        progress_weight: weight of the squashed segment progress (>= 0).
        segmenter, segment_tokens, max_segments: how the trainer cuts completions (read by the trainer's probes).
    """
    if segment_tokens < 1 or max_segments < 1 or progress_weight < 0:
        raise ValueError("need segment_tokens >= 1, max_segments >= 1, progress_weight >= 0")
    p = prepare(x)
    adv = p.advantages
    if x.segment_progress is not None:
        adv = adv + progress_weight * torch.tanh(x.segment_progress.to(adv)) * p.mask
    return surrogate(p, adv, *clip_range(x))
