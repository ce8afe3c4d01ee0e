"""Log-probs and entropies straight from hidden states and the LM head's weight, chunk by chunk.

``logits = hidden @ weight.T`` for M tokens and a 151k vocabulary is the largest tensor of an update, and
autograd keeps it (and its fp32 copy) for backward. Here each chunk of rows computes its logits, their fp32
log-softmax, the picked log-prob and the entropy, and keeps nothing of them but their [c] logsumexp and mean:
backward recomputes the chunk's logits from its hidden states (one more LM-head matmul over the chunk) and
forms the logits' gradient in closed form (``_ChunkLogprobs``), freeing it before the next chunk. The values are those of
``logprobs_from_logits`` / ``entropy_from_logits`` on the full logits, to fp32 rounding (tests/rl).

The logits are made in the compute dtype and everything after them in fp32. The compute dtype is autocast's
when autocast is on for the hidden states' device (accelerate's ``mixed_precision``: the head then computes as
the model's own head would inside its autocast forward), else the weight's (bf16 matmuls for a bf16 model):
hidden states and weight are cast to it once, before the chunks, and their gradients come back in their own
dtypes through the casts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# fp32 logits elements per chunk: 2**24 * 4 bytes = 64 MiB (110 rows of a 151,936-token vocabulary)
HIDDEN_CHUNK_ELEMENTS = 1 << 24


def _fp32_logits(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, suppressed: Tensor | None, temperature: float
) -> Tensor:
    """[c, V] fp32 ``(hidden @ weight.T + bias) / temperature``, suppressed ids at -inf (a fresh tensor)."""
    logits = torch.nn.functional.linear(hidden, weight, bias)  # [c, V] in the weight's dtype
    z = logits.float() if logits.dtype != torch.float32 else logits
    if temperature != 1.0:
        z.div_(temperature)
    if suppressed is not None:
        z.index_fill_(-1, suppressed, float("-inf"))
    return z


def _probabilities(z: Tensor, log_z: Tensor, suppressed: Tensor | None) -> Tensor:
    """softmax(z) [c, V] from z and its logsumexp; z's suppressed (-inf) entries are set to 0 in place (their
    probability is 0), so that sums of p x z stay finite."""
    p = torch.sub(z, log_z[:, None]).exp_()
    if suppressed is not None:
        z.index_fill_(-1, suppressed, 0.0)
    return p


def _dot(p: Tensor, z: Tensor) -> Tensor:
    """[c] row-wise sum of p x z in one pass, no [c, V] product."""
    return torch.bmm(p[:, None, :], z[:, :, None]).view(-1)


class _ChunkLogprobs(torch.autograd.Function):
    """One chunk's log-probs and entropies with a hand-written backward that recomputes the chunk's logits:
    d log p_t / dz = onehot_t - p, d H / dz = -p (z - E_p[z]); a few passes over the [c, V] chunk instead of
    autograd's graph of elementwise ops (log-softmax and entropy over a 151k vocabulary are bandwidth-bound)."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, suppressed, temperature, with_entropy):
        z = _fp32_logits(hidden, weight, bias, suppressed, temperature)
        top = z.amax(dim=-1)  # [c] as logsumexp takes it: top + log sum exp(z - top)
        e = torch.sub(z, top[:, None]).exp_()  # [c, V] unnormalised probabilities
        total = e.sum(-1)
        log_z = top + total.log()
        picked = z.gather(-1, targets[:, None]).squeeze(-1) - log_z
        mean_z = torch.zeros_like(log_z)
        if with_entropy:
            if suppressed is not None:
                z.index_fill_(-1, suppressed, 0.0)  # probability 0 there: keep p x z finite
            mean_z = _dot(e, z) / total  # E_p[z]
        del e, z
        ctx.save_for_backward(hidden, weight, bias, targets, suppressed, log_z, mean_z)
        ctx.temperature = temperature
        return picked, log_z - mean_z if with_entropy else picked.new_empty(0)

    @staticmethod
    def backward(ctx, grad_lp, grad_ent):
        hidden, weight, bias, targets, suppressed, log_z, mean_z = ctx.saved_tensors
        t = ctx.temperature
        z = _fp32_logits(hidden, weight, bias, suppressed, t)
        p = _probabilities(z, log_z, suppressed)
        g_lp = grad_lp if grad_lp is not None else torch.zeros_like(log_z)
        if grad_ent is not None and grad_ent.numel():
            # dz = -g_lp p - g_ent p (z - E) + g_lp onehot = p (a + b z) + g_lp onehot
            a, b = (-g_lp + grad_ent * mean_z) / t, -grad_ent / t
            dz = z.mul_(b[:, None]).add_(a[:, None]).mul_(p)
        else:
            dz = p.mul_((-g_lp / t)[:, None])
        dz.scatter_add_(-1, targets[:, None], (g_lp / t)[:, None])
        if suppressed is not None:
            dz.index_fill_(-1, suppressed, 0.0)
        dz = dz.to(weight.dtype)
        grad_hidden = dz @ weight if ctx.needs_input_grad[0] else None
        grad_weight = dz.T @ hidden if ctx.needs_input_grad[1] else None
        grad_bias = dz.sum(0) if bias is not None and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def compute_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's on ``hidden``'s device when it is on, else ``weight``'s."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return weight.dtype


def _in_compute_dtype(hidden: Tensor, weight: Tensor, bias: Tensor | None):
    dtype = compute_dtype(hidden, weight)
    return hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype)


def logprobs_from_hidden(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    temperature: float = 1.0,
    suppressed: Sequence[int] = (),
    with_entropy: bool = False,
    chunk_rows: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``log softmax((hidden @ weight.T + bias) / temperature)`` at ``targets``: ``[M, d]``, ``[V, d]``, ``[M]``
    -> ``[M]`` fp32 log-probs and, with ``with_entropy``, ``[M]`` fp32 entropies (nats). ``suppressed`` vocabulary
    ids get logit -inf (probability 0). No ``[M, V]`` tensor outlives its chunk of ``chunk_rows`` rows (default:
    ``HIDDEN_CHUNK_ELEMENTS // V``)."""
    if (
        hidden.dim() != 2
        or targets.shape != hidden.shape[:1]
        or weight.dim() != 2
        or weight.shape[1] != hidden.shape[1]
    ):
        raise ValueError(
            f"need hidden [M, d], weight [V, d] and targets [M]; got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    hidden, weight, bias = _in_compute_dtype(hidden, weight, bias)
    step = max(1, chunk_rows or HIDDEN_CHUNK_ELEMENTS // max(1, weight.shape[0]))
    mask = torch.as_tensor(list(suppressed), dtype=torch.long, device=hidden.device) if suppressed else None
    targets = targets.long()
    lps, ents = [], []
    for s in range(0, hidden.shape[0], step):
        lp, ent = _ChunkLogprobs.apply(
            hidden[s : s + step], weight, bias, targets[s : s + step], mask, float(temperature), with_entropy
        )
        lps.append(lp)
        ents.append(ent)
    if not lps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    return torch.cat(lps), torch.cat(ents) if with_entropy else None
