"""The LM head's part of a log-prob pass: its input narrowed to the trained positions (``lm_head_rows``), and the
log-probs (and entropies) of the targets from what it returned, chunk by chunk where the head allows it
(``chunkable_head``, ``rl.lm_head``) or from its logits. Shared by the padded pass (``rollout.forward``), the
packed one (``rollout.packing``), the shared prefix and the FSDP2-sharded head; docs/methods/trainer.md#log-probs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from mmreason.rl.lm_head import logprobs_from_hidden
from mmreason.rl.logits import entropy_from_logits, logprobs_from_logits


def sampling_logits(logits: torch.Tensor, temperature: float = 1.0, suppressed: Sequence[int] = ()) -> torch.Tensor:
    """Return the logits of the distribution rollouts are drawn from: suppressed tokens (vision specials, never sampled)
    at -inf. Dividing by the temperature happens in the log-prob and entropy functions."""
    if not suppressed:
        return logits
    index = torch.as_tensor(list(suppressed), device=logits.device)
    return logits.index_fill(-1, index, float("-inf"))


def head_logprobs(
    head_out: torch.Tensor,
    targets: torch.Tensor,
    head: torch.nn.Linear | None,
    *,
    with_entropy: bool,
    temperature: float,
    suppressed: Sequence[int],
    zero_suppressed: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute [M] fp32 log-probs (and entropies) of ``targets`` from what the narrowed LM head returned: its
    hidden-state input ``[M, d]`` when ``head`` is given (chunked, ``rl.lm_head``), else its logits ``[M, V]``. A
    trained token that is suppressed gets log-prob 0 (with ``zero_suppressed``). The entropies are differentiable only
    with ``entropy_grad``: on the logits path their graph keeps [M, V] fp32 tensors (the logits' copy, the
    probabilities) that no loss reads unless it differentiates the entropy."""
    # no [M, V] tensor outlives its chunk: a detached entropy saves only [M] floats
    if head is not None:
        lp, ent = logprobs_from_hidden(
            head_out,
            head.weight,
            targets,
            bias=head.bias,
            temperature=temperature,
            suppressed=suppressed,
            with_entropy=with_entropy,
        )
        ent = ent if ent is None or entropy_grad else ent.detach()
    else:
        logits = sampling_logits(head_out[None], temperature, suppressed)  # [1, M, V]
        lp = logprobs_from_logits(logits, targets[None], temperature=temperature)[0]
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):  # entropy shaping differentiates it
            ent = entropy_from_logits(logits, temperature=temperature)[0] if with_entropy else None
    if suppressed and zero_suppressed:
        lp = lp.masked_fill(torch.isin(targets, torch.as_tensor(list(suppressed), device=lp.device)), 0.0)
    return lp, ent


def chunkable_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """Return the model's LM head when log-probs can be taken from its input chunk by chunk after the forward: a plain
    ``nn.Linear`` with local weights (not a LoRA-wrapped head); None otherwise (the logits path, or for an FSDP2 shard
    the head's own forward: ``rollout.sharded_head``)."""
    inner: Any = getattr(model, "module", model)
    head = inner.get_output_embeddings()
    if type(head) is not torch.nn.Linear or hasattr(head.weight, "to_local"):
        return None
    return head


@contextmanager
def lm_head_rows(model: torch.nn.Module, rows: torch.Tensor | None, *, hidden: bool = False) -> Iterator[None]:
    """Narrow the model's LM head inside the block: it gets only the hidden states where ``rows`` is true (all when
    None) and returns their logits as ``[1, M, V]`` (M = ``rows.sum()``); with ``hidden`` it returns those hidden states
    ``[1, M, d]`` themselves and computes nothing (``head_logprobs`` takes them chunk by chunk). ``rows`` is ``[N, L]``
    over the positions whose logits the forward keeps (``logits_to_keep = L``). The forward still goes through the
    model's own ``__call__`` (DDP / FSDP hooks, LoRA layers); only the head's input is narrowed, by a forward
    pre-hook."""
    inner: Any = getattr(model, "module", model)  # DDP / accelerate wrappers
    head = inner.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(inner).__name__} has no output embeddings (LM head) to narrow")

    def keep(_module: torch.nn.Module, args: Any) -> tuple[Any, ...]:
        states = args[0]
        if rows is None:
            return (states.reshape(1, -1, states.shape[-1]), *args[1:])
        if states.shape[:2] != rows.shape:
            raise ValueError(f"LM head input {tuple(states.shape)} does not match the rows to keep {tuple(rows.shape)}")
        return (states[rows][None], *args[1:])

    handle = head.register_forward_pre_hook(keep)
    if hidden:
        # an instance attribute: the module's __call__ (and its hooks) stay
        head.forward = _identity
    try:
        yield
    finally:
        handle.remove()
        if hidden:
            del head.forward


def _identity(states: torch.Tensor) -> torch.Tensor:
    return states
