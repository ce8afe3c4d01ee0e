"""Per-token log-probs and entropies from logits, in fp32, chunked over T to bound peak memory.

A ``[N, T, V]`` fp32 copy of bf16 logits for a 150k vocabulary is the largest tensor of a step; computing
chunk by chunk keeps only one chunk's fp32 copy alive in the forward. (Backward still saves what each
chunk's ``logsumexp`` needs.)
"""

from __future__ import annotations

import torch
from torch import Tensor

# fp32 elements per chunk: 2**27 * 4 bytes = 512 MiB
CHUNK_ELEMENTS = 1 << 27


def _chunk(logits: Tensor, chunk_size: int | None) -> int:
    n, t, v = logits.shape
    if chunk_size is not None:
        return max(1, chunk_size)
    return max(1, min(t, CHUNK_ELEMENTS // max(1, n * v)))


def logprobs_from_logits(
    logits: Tensor, token_ids: Tensor, *, temperature: float = 1.0, chunk_size: int | None = None
) -> Tensor:
    """``log softmax(logits / temperature)`` at ``token_ids``: ``[N, T, V]``, ``[N, T]`` -> ``[N, T]`` fp32.

    ``logits[:, t]`` must already be the prediction for ``token_ids[:, t]`` (shift before calling).
    ``temperature`` must match the sampler's, as TRL does, or the ratio to the behaviour policy is off.
    """
    if logits.dim() != 3 or token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"need logits [N, T, V] and token_ids [N, T]; got {tuple(logits.shape)}, {tuple(token_ids.shape)}"
        )
    step = _chunk(logits, chunk_size)
    out = []
    for s in range(0, logits.shape[1], step):
        z = logits[:, s : s + step].float() / temperature  # [N, c, V]
        picked = z.gather(-1, token_ids[:, s : s + step, None].long()).squeeze(-1)  # [N, c]
        out.append(picked - torch.logsumexp(z, dim=-1))
    return torch.cat(out, dim=1) if out else logits.new_zeros(logits.shape[:2], dtype=torch.float32)


def entropy_from_logits(logits: Tensor, *, temperature: float = 1.0, chunk_size: int | None = None) -> Tensor:
    """Entropy in nats, ``[N, T, V]`` -> ``[N, T]`` fp32: ``H = logsumexp(z) - sum_v softmax(z)_v z_v``."""
    if logits.dim() != 3:
        raise ValueError(f"need logits [N, T, V], got {tuple(logits.shape)}")
    step = _chunk(logits, chunk_size)
    out = []
    for s in range(0, logits.shape[1], step):
        z = logits[:, s : s + step].float() / temperature  # [N, c, V]
        log_z = torch.logsumexp(z, dim=-1, keepdim=True)
        p = torch.exp(z - log_z)
        finite_z = torch.where(torch.isfinite(z), z, torch.zeros_like(z))  # -inf (masked vocab) has p = 0
        out.append(log_z.squeeze(-1) - (p * finite_z).sum(-1))
    return torch.cat(out, dim=1) if out else logits.new_zeros(logits.shape[:2], dtype=torch.float32)
