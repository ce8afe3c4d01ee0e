"""Log-probs and entropies straight from hidden states and the LM head's weight, chunk by chunk.

``logits = hidden @ weight.T`` for M tokens and a 151k vocabulary is the largest tensor of an update, and
autograd keeps it (and its fp32 copy) for backward. Here each chunk of rows computes its logits, their fp32
log-softmax, the picked log-prob and the entropy, and keeps nothing of them but their [c] logsumexp and mean:
backward recomputes the chunk's logits from its hidden states (one more LM-head matmul over the chunk) and
forms the logits' gradient in closed form (``_ChunkedLogprobs``), freeing it before the next chunk; the weight's
gradient sums over the chunks in fp32. Chunks are sized by device (``chunk_rows_for``): a share of free memory on
CUDA, 64 MiB of fp32 logits elsewhere. The values are those of ``logprobs_from_logits`` /
``entropy_from_logits`` on the full logits, to fp32 rounding (tests/rl).

The logits are made in the compute dtype and everything after them in fp32. The compute dtype is autocast's
when autocast is on for the hidden states' device (accelerate's ``mixed_precision``: the head then computes as
the model's own head would inside its autocast forward), else the weight's (bf16 matmuls for a bf16 model):
hidden states are cast to it once, before the chunks, the weight inside the function (forward and backward), and
their gradients come back in their own dtypes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

# fp32 logits elements per chunk on a CPU (the least on a GPU): 2**24 * 4 bytes = 64 MiB (110 rows of a 151,936-token
# vocabulary)
HIDDEN_CHUNK_ELEMENTS = 1 << 24
HEAD_CHUNK_FREE_SHARE = 1 / 8  # on CUDA: the share of free memory one chunk's working set may take
HEAD_CHUNK_MAX_BYTES = 4 << 30  # and at most this


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


class _ChunkedLogprobs(torch.autograd.Function):
    """Every chunk's log-probs and entropies with a hand-written backward that recomputes each chunk's logits:
    d log p_t / dz = onehot_t - p, d H / dz = -p (z - E_p[z]); a few passes over each [c, V] chunk instead of
    autograd's graph of elementwise ops (log-softmax and entropy over a 151k vocabulary are bandwidth-bound).

    One function for all chunks so the head weight's gradient sums in one fp32 accumulator (``_add_product``):
    as separate functions autograd summed the chunks' gradients in the compute dtype, a bf16 rounding of the
    running sum per chunk. The weight comes in its own dtype and is cast to the compute dtype here (in forward
    and again in backward, instead of keeping a cast copy between them); its gradient leaves in its own dtype."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        suppressed: Tensor | None,
        temperature: float,
        with_entropy: bool,
        step: int,
    ) -> tuple[Tensor, Tensor]:
        w, b = weight.to(hidden.dtype), None if bias is None else bias.to(hidden.dtype)
        picked, log_zs, mean_zs = [], [], []
        for s in range(0, hidden.shape[0], step):
            z = _fp32_logits(hidden[s : s + step], w, b, suppressed, temperature)
            top = z.amax(dim=-1)  # [c] as logsumexp takes it: top + log sum exp(z - top)
            e = torch.sub(z, top[:, None]).exp_()  # [c, V] unnormalised probabilities
            total = e.sum(-1)
            log_z = top + total.log()
            picked.append(z.gather(-1, targets[s : s + step, None]).squeeze(-1) - log_z)
            mean_z = torch.zeros_like(log_z)
            if with_entropy:
                if suppressed is not None:
                    z.index_fill_(-1, suppressed, 0.0)  # probability 0 there: keep p x z finite
                mean_z = _dot(e, z) / total  # E_p[z]
            del e, z
            log_zs.append(log_z)
            mean_zs.append(mean_z)
        log_z, mean_z = torch.cat(log_zs), torch.cat(mean_zs)
        ctx.save_for_backward(hidden, weight, bias, targets, suppressed, log_z, mean_z)
        ctx.temperature, ctx.step = temperature, step
        lp = torch.cat(picked)
        return lp, log_z - mean_z if with_entropy else lp.new_empty(0)

    @staticmethod
    def backward(ctx: Any, grad_lp: Tensor | None, grad_ent: Tensor | None) -> tuple[Tensor | None, ...]:
        hidden, weight, bias, targets, suppressed, log_z, mean_z = ctx.saved_tensors
        t, step = ctx.temperature, ctx.step
        w, b = weight.to(hidden.dtype), None if bias is None else bias.to(hidden.dtype)
        g_lp = grad_lp if grad_lp is not None else torch.zeros_like(log_z)
        g_ent = grad_ent if grad_ent is not None and grad_ent.numel() > 0 else None  # None: no entropy term
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        wants_weight = ctx.needs_input_grad[1]
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if wants_weight else None
        grad_bias = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device) if bias is not None else None
        for s in range(0, hidden.shape[0], step):
            h, rows = hidden[s : s + step], slice(s, s + step)
            z = _fp32_logits(h, w, b, suppressed, t)
            p = _probabilities(z, log_z[rows], suppressed)
            if g_ent is not None:
                # dz = -g_lp p - g_ent p (z - E) + g_lp onehot = p (a + b z) + g_lp onehot
                a, c = (-g_lp[rows] + g_ent[rows] * mean_z[rows]) / t, -g_ent[rows] / t
                dz = z.mul_(c[:, None]).add_(a[:, None]).mul_(p)
            else:
                dz = p.mul_((-g_lp[rows] / t)[:, None])
            dz.scatter_add_(-1, targets[rows, None], (g_lp[rows] / t)[:, None])
            if suppressed is not None:
                dz.index_fill_(-1, suppressed, 0.0)
            if grad_bias is not None:
                grad_bias += dz.sum(0)
            dz = dz.to(w.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = dz @ w
            if grad_weight is not None:
                _add_product(grad_weight, dz.T, h)
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)  # one rounding, at the end
        grad_bias = grad_bias.to(bias.dtype) if grad_bias is not None and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def _add_product(acc: Tensor, a: Tensor, b: Tensor) -> None:
    """``acc += a @ b`` into an fp32 ``acc``: a half-precision product leaves the matmul in fp32 where the
    device can (CUDA's ``out_dtype``), else rounded once to its own dtype (the chunk's share, not the running
    sum); an fp32 product adds in place."""
    if a.dtype == torch.float32:
        acc.addmm_(a, b)
    elif a.device.type == "cuda":
        acc += torch.mm(a, b, out_dtype=torch.float32)
    else:
        acc.add_(a @ b)  # promoted in place: no fp32 copy of the product


def compute_dtype(hidden: Tensor, weight: Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's on ``hidden``'s device when it is on, else ``weight``'s."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return weight.dtype


def chunk_rows_for(hidden: Tensor, vocab: int) -> int:
    """Rows per chunk of the head: on CUDA as many as fit ``HEAD_CHUNK_FREE_SHARE`` of the free memory (three
    [c, V] fp32 tensors live in a chunk's backward; at most ``HEAD_CHUNK_MAX_BYTES``): at a 151k vocabulary and
    20 GB free, 1,371 rows, so 16k tokens read the head weight 12 times, not 150. Elsewhere
    ``HIDDEN_CHUNK_ELEMENTS`` fp32 logits (a CPU's caches gain nothing from larger chunks)."""
    vocab = max(1, vocab)
    if hidden.device.type != "cuda":
        return max(1, HIDDEN_CHUNK_ELEMENTS // vocab)
    free, _ = torch.cuda.mem_get_info(hidden.device)
    budget = min(HEAD_CHUNK_MAX_BYTES, max(4 * HIDDEN_CHUNK_ELEMENTS, int(free * HEAD_CHUNK_FREE_SHARE)))
    return max(1, budget // (3 * 4 * vocab))


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
    ``chunk_rows_for``, by device); the weight's gradient sums over chunks in fp32."""
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
    hidden = hidden.to(compute_dtype(hidden, weight))  # the weight is cast inside, its gradient kept in fp32
    step = max(1, chunk_rows or chunk_rows_for(hidden, weight.shape[0]))
    mask = torch.as_tensor(list(suppressed), dtype=torch.long, device=hidden.device) if suppressed else None
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty if with_entropy else None
    lp, ent = _ChunkedLogprobs.apply(hidden, weight, bias, targets.long(), mask, float(temperature), with_entropy, step)
    return lp, ent if with_entropy else None
