"""Token aggregations: how a per-token loss ``[N, T]`` becomes one scalar
(docs/methods/aggregation-and-kl.md#token-aggregation).

| name                      | formula                                   | used by           | TRL loss_type |
|---------------------------|-------------------------------------------|-------------------|---------------|
| ``seq_mean_token_mean``   | ``1/S sum_i 1/|y_i| sum_t l_it``           | GRPO              | grpo          |
| ``token_mean``            | ``sum_it l_it / D``, ``D = sum_i |y_i|``   | DAPO / BNPO       | bnpo, dapo    |
| ``seq_mean_token_sum_norm`` | ``sum_it l_it / (S L_max)``             | Dr. GRPO          | dr_grpo       |
| ``seq_mean_token_sum``    | ``1/S sum_i sum_t l_it``                  | LUSPO             | luspo         |

Every aggregation takes the same three normalisers (``Normalisers``, defaults resolved by ``aggregate``), so a
caller never branches on the name:

- ``num_seqs`` (S): sequences in the normaliser; default N. Losses pass the count of kept rows so a row
  masked out by ``seq_mask`` (the MC-GRPO pivot) leaves the normalisation too.
- ``num_tokens`` (D): the token_mean denominator; default the active tokens of this call.
- ``max_len`` (L_max): the Dr. GRPO constant; default T (the padded width).

What TRL 1.16 does for each ``loss_type`` (``GRPOTrainer._compute_loss``) and how to get the same number:

- ``grpo``: ``((l * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()``; rows with no active token count in
  the mean. Same as ``seq_mean_token_mean`` with the default ``num_seqs``.
- ``bnpo``: ``(l * mask).sum() / mask.sum().clamp(min=1)`` over the local micro-batch: ``token_mean``.
- ``dapo``: ``(l * mask).sum() / (num_items_in_batch / num_processes * grad_accum / steps_per_generation)``,
  where ``num_items_in_batch`` counts the active tokens of the whole generation batch over all processes:
  a micro-batch with more tokens weighs more, and after DDP averaging the step is the global token mean.
  Pass that normaliser as ``num_tokens``; with one process and one micro-batch it is the default.
- ``dr_grpo``: ``(l * mask).sum() / (N * max_completion_length)``: ``seq_mean_token_sum_norm`` with
  ``max_len = max_completion_length`` (the default T equals it only when batches are padded to the max).
- ``luspo``: ``(l * mask).sum(-1).mean()``: ``seq_mean_token_sum``.
- All but ``dapo`` are further divided by the gradient-accumulation steps in TRL; that is the trainer's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from mmreason.registry import closest
from mmreason.rl.registries import AGGREGATIONS, register_aggregation


@dataclass(frozen=True)
class Normalisers:
    """The three normalisers of one call, defaults resolved by ``aggregate``: S, D and L_max."""

    num_seqs: float | Tensor
    num_tokens: float | Tensor
    max_len: int


@register_aggregation("seq_mean_token_mean", provenance="standard")
def seq_mean_token_mean(per_token_loss: Tensor, mask: Tensor, norm: Normalisers) -> Tensor:
    """GRPO: mean over sequences of each sequence's mean over its own tokens."""
    per_seq = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [N]
    return per_seq.sum() / norm.num_seqs


@register_aggregation("token_mean", provenance="standard")
def token_mean(per_token_loss: Tensor, mask: Tensor, norm: Normalisers) -> Tensor:
    """DAPO / BNPO: sum over all active tokens divided by their count (every token weighs the same)."""
    return (per_token_loss * mask).sum() / norm.num_tokens


@register_aggregation("seq_mean_token_sum_norm", provenance="standard")
def seq_mean_token_sum_norm(per_token_loss: Tensor, mask: Tensor, norm: Normalisers) -> Tensor:
    """Dr. GRPO: token sum divided by a constant S * L_max (no length bias)."""
    return (per_token_loss * mask).sum() / (norm.num_seqs * norm.max_len)


@register_aggregation("seq_mean_token_sum", provenance="standard")
def seq_mean_token_sum(per_token_loss: Tensor, mask: Tensor, norm: Normalisers) -> Tensor:
    """LUSPO: mean over sequences of each sequence's token sum."""
    return (per_token_loss * mask).sum() / norm.num_seqs


LOSS_TYPES = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "luspo": "seq_mean_token_sum",
}


def aggregation_for_loss_type(name: str) -> str:
    """The aggregation name that reproduces TRL's ``loss_type`` ``name`` (see the module table).

    TRL's ``cispo``, ``sapo`` and ``vespo`` change the policy term itself, not only its aggregation, and
    have no equivalent here.
    """
    try:
        return LOSS_TYPES[name]
    except KeyError:
        hint = closest(name, list(LOSS_TYPES))
        extra = f" (did you mean {hint!r}?)" if hint else ""
        raise KeyError(f"unknown TRL loss_type {name!r}{extra}; valid: {', '.join(sorted(LOSS_TYPES))}") from None


def aggregate(
    name: str,
    per_token_loss: Tensor,
    mask: Tensor,
    *,
    num_seqs: float | Tensor | None = None,
    num_tokens: float | Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """Apply the aggregation registered as ``name`` (see the module table)."""
    norm = Normalisers(
        num_seqs=per_token_loss.shape[0] if num_seqs is None else num_seqs,
        num_tokens=mask.sum().clamp(min=1.0) if num_tokens is None else num_tokens,
        max_len=per_token_loss.shape[-1] if max_len is None else max_len,
    )
    return AGGREGATIONS.get(name)(per_token_loss, mask, norm)
