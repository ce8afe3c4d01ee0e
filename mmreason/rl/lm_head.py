"""Log-probs and entropies straight from hidden states and the LM head's weight, chunk by chunk.

``logits = hidden @ weight.T`` for M tokens and a 151k vocabulary is the largest tensor of an update, and
autograd keeps it (and its fp32 copy) for backward. Here each chunk of rows computes its logits, their fp32
log-softmax, the picked log-prob and the entropy, and keeps nothing of them: under autograd the chunk runs
inside ``torch.utils.checkpoint``, so backward recomputes the chunk's logits from its hidden states (one
more LM-head matmul over the chunk) and frees them before the next chunk. The values are those of
``logprobs_from_logits`` / ``entropy_from_logits`` on the full logits, to fp32 rounding (tests/rl).

The logits are made in the weight's dtype (bf16 matmuls for a bf16 model) and everything after them in fp32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

# fp32 logits elements per chunk: 2**24 * 4 bytes = 64 MiB (110 rows of a 151,936-token vocabulary)
HIDDEN_CHUNK_ELEMENTS = 1 << 24


def _chunk_values(hidden: Tensor, weight: Tensor, bias: Tensor | None, targets: Tensor, suppressed: Tensor | None,
                  temperature: float, with_entropy: bool) -> tuple[Tensor, Tensor]:
    """One chunk: [c, d] hidden -> ([c] log-probs, [c] entropies or an empty tensor), fp32."""
    logits = torch.nn.functional.linear(hidden, weight, bias)  # [c, V] in the weight's dtype
    if suppressed is not None:
        logits = logits.index_fill(-1, suppressed, float("-inf"))
    z = logits.float() / temperature
    log_z = torch.logsumexp(z, dim=-1)  # [c]
    picked = z.gather(-1, targets[:, None]).squeeze(-1) - log_z
    if not with_entropy:
        return picked, picked.new_empty(0)
    p = torch.exp(z - log_z[:, None])
    finite_z = torch.where(torch.isfinite(z), z, torch.zeros_like(z))  # -inf (masked vocab) has p = 0
    return picked, log_z - (p * finite_z).sum(-1)


def logprobs_from_hidden(hidden: Tensor, weight: Tensor, targets: Tensor, *, bias: Tensor | None = None,
                         temperature: float = 1.0, suppressed: Sequence[int] = (), with_entropy: bool = False,
                         chunk_rows: int | None = None) -> tuple[Tensor, Tensor | None]:
    """``log softmax((hidden @ weight.T + bias) / temperature)`` at ``targets``: ``[M, d]``, ``[V, d]``, ``[M]``
    -> ``[M]`` fp32 log-probs and, with ``with_entropy``, ``[M]`` fp32 entropies (nats). ``suppressed`` vocabulary
    ids get logit -inf (probability 0). No ``[M, V]`` tensor outlives its chunk of ``chunk_rows`` rows (default:
    ``HIDDEN_CHUNK_ELEMENTS // V``)."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1] or weight.dim() != 2 or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"need hidden [M, d], weight [V, d] and targets [M]; got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(targets.shape)}")
    step = max(1, chunk_rows or HIDDEN_CHUNK_ELEMENTS // max(1, weight.shape[0]))
    mask = torch.as_tensor(list(suppressed), dtype=torch.long, device=hidden.device) if suppressed else None
    targets = targets.long()
    grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    lps, ents = [], []
    for s in range(0, hidden.shape[0], step):
        args = (hidden[s : s + step], weight, bias, targets[s : s + step], mask, temperature, with_entropy)
        lp, ent = checkpoint(_chunk_values, *args, use_reentrant=False) if grad else _chunk_values(*args)
        lps.append(lp)
        ents.append(ent)
    if not lps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    return torch.cat(lps), torch.cat(ents) if with_entropy else None
