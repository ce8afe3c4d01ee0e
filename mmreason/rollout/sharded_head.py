"""The chunked LM head on an FSDP2-sharded head: log-probs computed inside the head's own forward.

A sharded model's LM head holds a shard of its weight (a DTensor) outside the forward of the FSDP unit that owns
it (the root); inside that forward the weight is whole, gathered once with the rest of the unit. The chunked
head (``rl.lm_head``) reads the weight after the forward on an unsharded model; on a sharded one it runs inside
the head's forward instead: the head is handed the trained tokens' hidden states (``forward.lm_head_rows``) and
their targets, and returns ``[1, M, 1]`` log-probs (``[1, M, 2]`` with entropies) in place of ``[1, M, V]``
logits. So no ``[M, V]`` tensor is kept for backward here either, and the weight's gradient goes where FSDP2
expects it: into the gathered weight, reduce-scattered with the rest of the unit's after its backward. The
unit's output is the log-probs, so FSDP2's pre-backward hook on it gathers the unit again before the chunk's
backward recomputes its logits when the unit resharded after forward.

The values are those of ``rl.lm_head.logprobs_from_hidden`` (tests/parallel/test_sharded_update.py: equal to an
unsharded model's to fp32 rounding, gradients too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from mmreason.rl.lm_head import logprobs_from_hidden
from mmreason.rollout.head import chunkable_head, head_logprobs, lm_head_rows


def sharded_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """Return the model's LM head when it is a plain ``nn.Linear`` whose weight is an FSDP2 shard (the chunked head then
    runs inside its forward, ``logprobs_in_head``); None otherwise."""
    inner: Any = getattr(model, "module", model)
    head = inner.get_output_embeddings()
    if type(head) is not torch.nn.Linear or not hasattr(head.weight, "to_local"):
        return None
    return head


@dataclass
class HeadLogprobs:
    """What ``logprobs_in_head`` made the head return: read with ``split`` after the forward."""

    targets: torch.Tensor  # [M]
    suppressed: Sequence[int]
    with_entropy: bool

    def split(
        self, head_out: torch.Tensor, *, zero_suppressed: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Split ([M] fp32 log-probs, [M] entropies or None) from the head's ``[1, M, 1 or 2]`` output; a trained token
        that is suppressed gets log-prob 0 (with ``zero_suppressed``), as ``forward.head_logprobs``."""
        lp = head_out[0, :, 0]
        ent = head_out[0, :, 1] if self.with_entropy else None
        if self.suppressed and zero_suppressed:
            ids = torch.as_tensor(list(self.suppressed), device=lp.device)
            lp = lp.masked_fill(torch.isin(self.targets, ids), 0.0)
        return lp, ent


@contextmanager
def logprobs_in_head(
    model: torch.nn.Module,
    rows: torch.Tensor | None,
    targets: torch.Tensor,
    *,
    with_entropy: bool,
    temperature: float,
    suppressed: Sequence[int],
) -> Iterator[HeadLogprobs]:
    """Make the model's LM head (``sharded_head``), inside the block, take the hidden states where ``rows`` is true
    (``lm_head_rows``) and return their log-probs of ``targets`` ``[M]`` (and entropies), computed chunk by chunk with
    its gathered weight. Yields the ``HeadLogprobs`` that reads the output."""
    head = sharded_head(model)
    if head is None:
        raise ValueError("logprobs_in_head needs an FSDP2-sharded nn.Linear LM head")

    def forward(states: torch.Tensor) -> torch.Tensor:  # [1, M, d] -> [1, M, 1 or 2]
        lp, ent = logprobs_from_hidden(
            states[0],
            # inside the owning unit's forward: the whole, gathered weight
            head.weight,
            targets.to(states.device),
            bias=head.bias,
            temperature=temperature,
            suppressed=suppressed,
            with_entropy=with_entropy,
        )
        # a fresh tensor, not a view: FSDP2 hooks the unit's output for its backward
        return torch.stack([lp[None]] if ent is None else [lp[None], ent[None]], dim=-1)

    with lm_head_rows(model, rows):
        # an instance attribute: the module's __call__ (and its hooks) stay
        head.forward = forward  # type: ignore[method-assign,assignment]
        try:
            yield HeadLogprobs(targets, suppressed, with_entropy)
        finally:
            del head.forward


@contextmanager
def head_pass(
    model: torch.nn.Module,
    rows: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunked: bool,
    with_entropy: bool,
    temperature: float,
    suppressed: Sequence[int],
    entropy_grad: bool,
) -> Iterator[Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]]:
    """Narrow the LM head to ``rows`` for one forward, the one choice every log-prob pass makes: the chunked head
    (``chunkable_head``), an FSDP2-sharded head that computes them in its forward (``logprobs_in_head``), or whole
    logits. Yield the reader that turns the forward's ``logits`` output into [M] log-probs of ``targets`` (and
    entropies, detached unless ``entropy_grad``)."""
    head = chunkable_head(model) if chunked else None
    if chunked and head is None and sharded_head(model) is not None:
        with logprobs_in_head(
            model, rows, targets, with_entropy=with_entropy, temperature=temperature, suppressed=suppressed
        ) as read:

            def split(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
                lp, ent = read.split(logits)
                return lp, ent if ent is None or entropy_grad else ent.detach()

            yield split
        return
    with lm_head_rows(model, rows, hidden=head is not None):
        yield lambda logits: head_logprobs(
            logits[0],
            targets,
            head,
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
            temperature=temperature,
            suppressed=suppressed,
        )
